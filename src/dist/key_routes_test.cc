#include "dist/key_routes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "dist/collectives.h"
#include "dist/dist_test_util.h"

namespace ctrbox {
namespace {

// Each rank's distinct keys, overlapping across ranks.
std::vector<std::vector<uint64_t>> RankKeys(int n, size_t per_rank, uint32_t seed) {
  std::vector<std::vector<uint64_t>> keys(n);
  std::mt19937_64 rng(seed);
  for (int r = 0; r < n; ++r) {
    std::set<uint64_t> seen;
    while (seen.size() < per_rank) {
      const uint64_t k = rng() % (per_rank * 2);  // shared with other ranks often
      if (seen.insert(k).second) keys[r].push_back(k);
    }
  }
  return keys;
}

TEST(KeyRoutesTest, OwnersServeTheUnionAndReturnEachRequesterItsRows) {
  for (int n : {1, 2, 3, 4}) {
    auto keys = RankKeys(n, 500, 7 + n);
    auto status = RunRanks(n, [&](Comm* comm) -> Status {
      const int me = comm->rank();
      ASSIGN_OR_RETURN(KeyRoutes routes, RouteKeys(comm, keys[me].data(), keys[me].size()));
      std::set<uint64_t> want;
      for (const auto& ks : keys) {
        for (uint64_t k : ks) {
          if (OwnerOf(k, n) == me) want.insert(k);
        }
      }
      EXPECT_EQ(routes.served, std::vector<uint64_t>(want.begin(), want.end()));
      // The row of a key: its value times 3, as 8 bytes.
      std::vector<uint64_t> got(keys[me].size(), 0);
      RETURN_IF_ERROR(SendToHolders(
          comm, &routes,
          [&](uint32_t s, std::string* out) {
            const uint64_t v = routes.served[s] * 3;
            out->append(reinterpret_cast<const char*>(&v), 8);
          },
          [&](uint32_t i, const char* p, size_t left) -> size_t {
            if (left < 8) return 0;
            std::memcpy(&got[i], p, 8);
            return 8;
          }));
      for (size_t i = 0; i < keys[me].size(); ++i) EXPECT_EQ(got[i], keys[me][i] * 3);
      if (n > 1) {
        EXPECT_GT(routes.bytes_sent, 0u);
      }
      return Status::OK();
    });
    for (const Status& s : status) EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// Some served keys' records to their holders only: each rank gets exactly the keys of the
// subsets that it holds, and nothing else changes.
TEST(KeyRoutesTest, SendSomeToHoldersReachesEveryHolderOfTheSubsetOnly) {
  for (int n : {1, 2, 3}) {
    auto keys = RankKeys(n, 400, 50 + n);
    auto status = RunRanks(n, [&](Comm* comm) -> Status {
      const int me = comm->rank();
      ASSIGN_OR_RETURN(KeyRoutes routes, RouteKeys(comm, keys[me].data(), keys[me].size()));
      // Each owner patches the served keys whose value is divisible by 3.
      std::vector<uint32_t> subset;
      for (uint32_t s = 0; s < routes.served.size(); ++s) {
        if (routes.served[s] % 3 == 0) subset.push_back(s);
      }
      std::vector<uint64_t> got(keys[me].size(), 0);
      RETURN_IF_ERROR(SendSomeToHolders(
          comm, &routes, subset,
          [&](uint32_t s, std::string* out) {
            const uint64_t v = routes.served[s] + 7;
            out->append(reinterpret_cast<const char*>(&v), 8);
          },
          [&](uint32_t i, const char* p, size_t left) -> size_t {
            if (left < 8) return 0;
            std::memcpy(&got[i], p, 8);
            return 8;
          }));
      for (size_t i = 0; i < keys[me].size(); ++i) {
        EXPECT_EQ(got[i], keys[me][i] % 3 == 0 ? keys[me][i] + 7 : 0) << keys[me][i];
      }
      return Status::OK();
    });
    for (const Status& s : status) EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// Against a plain reference: every holder of a touched key gets the rank-order sum of the
// records for it, bit for bit; the owner gets it for its served copy; nobody gets untouched keys.
TEST(KeyRoutesTest, ReduceToHoldersSumsInRankOrderForEveryHolder) {
  constexpr uint32_t kWidth = 5;
  for (int n : {1, 2, 3, 4}) {
    auto keys = RankKeys(n, 300, 100 + n);
    // Records per rank: a random subset of its keys, random values.
    std::vector<std::vector<uint32_t>> touched(n);
    std::vector<std::vector<float>> records(n);
    std::mt19937 rng(n);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int r = 0; r < n; ++r) {
      for (uint32_t i = 0; i < keys[r].size(); ++i) {
        if (rng() % 3 == 0) continue;
        touched[r].push_back(i);
        for (uint32_t d = 0; d < kWidth; ++d) records[r].push_back(u(rng) * float(d + 1));
      }
    }
    std::map<uint64_t, std::vector<float>> want;  // key -> rank-order sum
    for (int r = 0; r < n; ++r) {
      for (size_t t = 0; t < touched[r].size(); ++t) {
        const uint64_t k = keys[r][touched[r][t]];
        const float* rec = records[r].data() + t * kWidth;
        auto [it, fresh] = want.emplace(k, std::vector<float>(rec, rec + kWidth));
        if (!fresh) {
          for (uint32_t d = 0; d < kWidth; ++d) it->second[d] += rec[d];
        }
      }
    }
    auto status = RunRanks(n, [&](Comm* comm) -> Status {
      const int me = comm->rank();
      ASSIGN_OR_RETURN(KeyRoutes routes, RouteKeys(comm, keys[me].data(), keys[me].size()));
      for (int round = 0; round < 2; ++round) {  // the scratch resets between calls
        ReducedRecords out;
        RETURN_IF_ERROR(ReduceToHolders(comm, &routes, touched[me].data(), records[me].data(),
                                        touched[me].size(), kWidth, &out));
        size_t held = 0;
        for (uint64_t k : keys[me]) held += want.count(k);
        EXPECT_EQ(out.keys.size(), held);
        for (size_t i = 0; i < out.keys.size(); ++i) {
          const auto it = want.find(keys[me][out.keys[i]]);
          if (it == want.end()) {
            ADD_FAILURE() << "an untouched key came back";
            continue;
          }
          EXPECT_EQ(0, std::memcmp(out.records.data() + i * kWidth, it->second.data(),
                                   kWidth * sizeof(float)));
        }
        size_t served = 0;
        for (const auto& [k, sum] : want) served += OwnerOf(k, n) == me;
        EXPECT_EQ(out.served.size(), served);
        for (size_t i = 0; i < out.served.size(); ++i) {
          const auto& sum = want.at(routes.served[out.served[i]]);
          EXPECT_EQ(0, std::memcmp(out.served_records.data() + i * kWidth, sum.data(),
                                   kWidth * sizeof(float)));
        }
      }
      return Status::OK();
    });
    for (const Status& s : status) EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// Canonical sums: each rank's share of 12 leaves is made of tree nodes; a key's records are the
// sums of its leaves in each node (zeros for a node without it). Every holder and the owner get,
// from ReduceToHolders as from ReduceToOwners, the bits of one process's tree over the key's
// leaves, for 1, 2, 3 and 4 ranks.
TEST(KeyRoutesTest, PairwiseReductionsSumTheNodesAsOneProcessTree) {
  constexpr uint32_t kWidth = 4, kLeaves = 12;
  for (int n : {1, 2, 3, 4}) {
    auto keys = RankKeys(n, 200, 300 + n);
    std::mt19937 rng(n);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    // Per rank: the touched keys, their records (node-major within a key), the nodes' leaves.
    std::vector<std::vector<uint32_t>> touched(n), leaves(n);
    std::vector<std::vector<float>> records(n);
    std::map<uint64_t, std::vector<LeafValue>> occurs;  // key -> its (leaf, value)s, all ranks
    for (int r = 0; r < n; ++r) {
      const auto nodes = DyadicNodes(r * kLeaves / n, (r + 1) * kLeaves / n);
      for (auto [first, size] : nodes) leaves[r].push_back(first);
      for (uint32_t i = 0; i < keys[r].size(); ++i) {
        std::vector<std::optional<std::vector<float>>> mine(kLeaves);
        for (uint32_t l = r * kLeaves / n; l < (r + 1) * kLeaves / n; ++l) {
          if (rng() % 2 != 0) continue;
          mine[l].emplace(kWidth);
          for (float& f : *mine[l]) f = u(rng) * 1e3f;
          occurs[keys[r][i]].push_back({l, *mine[l]});
        }
        const std::vector<LeafValue> sums = NodeSums(mine, r * kLeaves / n, (r + 1) * kLeaves / n);
        if (sums.empty()) continue;
        touched[r].push_back(i);
        for (auto [first, size] : nodes) {
          std::vector<float> rec(kWidth, 0.0f);
          for (const LeafValue& s : sums) {
            if (s.first == first) rec = s.second;
          }
          records[r].insert(records[r].end(), rec.begin(), rec.end());
        }
      }
    }
    std::map<uint64_t, std::vector<float>> want;
    for (auto& [k, lv] : occurs) {
      std::sort(lv.begin(), lv.end(), [](auto& a, auto& b) { return a.first < b.first; });
      want[k] = TreeSum(lv);
    }
    auto status = RunRanks(n, [&](Comm* comm) -> Status {
      const int me = comm->rank();
      ASSIGN_OR_RETURN(KeyRoutes routes, RouteKeys(comm, keys[me].data(), keys[me].size()));
      routes.pairwise = true;
      routes.leaves = leaves[me];
      ReducedRecords out;
      RETURN_IF_ERROR(ReduceToHolders(comm, &routes, touched[me].data(), records[me].data(),
                                      touched[me].size(), kWidth, &out));
      for (size_t i = 0; i < out.keys.size(); ++i) {
        const std::vector<float>& sum = want.at(keys[me][out.keys[i]]);
        EXPECT_EQ(0,
                  std::memcmp(out.records.data() + i * kWidth, sum.data(), sizeof(float) * kWidth));
      }
      for (int round = 0; round < 2; ++round) {
        for (size_t i = 0; i < out.served.size(); ++i) {
          const std::vector<float>& sum = want.at(routes.served[out.served[i]]);
          EXPECT_EQ(0, std::memcmp(out.served_records.data() + i * kWidth, sum.data(),
                                   sizeof(float) * kWidth));
        }
        size_t served = 0;
        for (const auto& [k, sum] : want) served += OwnerOf(k, n) == me;
        EXPECT_EQ(out.served.size(), served);
        RETURN_IF_ERROR(ReduceToOwners(comm, &routes, touched[me].data(), records[me].data(),
                                       touched[me].size(), kWidth, nullptr, 0, &out));
      }
      return Status::OK();
    });
    for (const Status& s : status) EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// Owner updates over several minibatches: ReduceToOwners sums each key's records in rank order
// as ReduceToHolders does, and RefreshHolders sends each rank exactly the rows of the keys it
// uses next that changed since it last had them; then every key a rank uses next holds the
// owner's current row. (A row here: how many minibatches touched the key, as 8 bytes.)
TEST(KeyRoutesTest, RefreshHoldersSendsExactlyTheChangedRowsEachRankUsesNext) {
  constexpr uint32_t kWidth = 3;
  constexpr int kRounds = 6;
  for (int n : {1, 2, 3, 4}) {
    auto keys = RankKeys(n, 200, 300 + n);
    // Per round and rank: the keys touched and the keys used next (indices into keys[r]).
    std::vector<std::vector<std::vector<uint32_t>>> touched(kRounds), next(kRounds);
    std::mt19937 rng(n);
    for (int t = 0; t < kRounds; ++t) {
      touched[t].resize(n);
      next[t].resize(n);
      for (int r = 0; r < n; ++r) {
        for (uint32_t i = 0; i < keys[r].size(); ++i) {
          if (rng() % 4 == 0) touched[t][r].push_back(i);
          if (rng() % 3 == 0) next[t][r].push_back(i);
        }
      }
    }
    auto status = RunRanks(n, [&](Comm* comm) -> Status {
      const int me = comm->rank();
      ASSIGN_OR_RETURN(KeyRoutes routes, RouteKeys(comm, keys[me].data(), keys[me].size()));
      std::vector<uint64_t> served_value(routes.served.size(), 0);  // the owner's rows
      std::vector<uint64_t> mine(keys[me].size(), 0);               // this rank's copies
      std::map<uint64_t, uint64_t> truth;                           // key -> rounds touched
      for (int t = 0; t < kRounds; ++t) {
        // Record of key k in round t from rank r: (k % 7 + r, 1, t): its sum is known.
        std::vector<float> records;
        for (uint32_t i : touched[t][me]) {
          records.insert(records.end(), {float(keys[me][i] % 7 + me), 1.0f, float(t)});
        }
        ReducedRecords out;
        RETURN_IF_ERROR(ReduceToOwners(comm, &routes, touched[t][me].data(), records.data(),
                                       touched[t][me].size(), kWidth, next[t][me].data(),
                                       next[t][me].size(), &out));
        std::map<uint64_t, std::vector<float>> sums;  // key -> rank-order sum
        for (int r = 0; r < n; ++r) {
          for (uint32_t i : touched[t][r]) {
            const uint64_t k = keys[r][i];
            const std::vector<float> rec = {float(k % 7 + r), 1.0f, float(t)};
            auto [it, fresh] = sums.emplace(k, rec);
            if (!fresh) {
              for (uint32_t d = 0; d < kWidth; ++d) it->second[d] += rec[d];
            }
          }
        }
        for (const auto& [k, sum] : sums) ++truth[k];
        size_t served = 0;
        for (const auto& [k, sum] : sums) served += OwnerOf(k, n) == me;
        EXPECT_EQ(out.served.size(), served);
        EXPECT_TRUE(out.keys.empty());
        for (size_t i = 0; i < out.served.size(); ++i) {
          const auto& sum = sums.at(routes.served[out.served[i]]);
          EXPECT_EQ(0, std::memcmp(out.served_records.data() + i * kWidth, sum.data(),
                                   kWidth * sizeof(float)));
          ++served_value[out.served[i]];  // the owner applies the sum
        }
        const std::vector<uint64_t> before = mine;
        std::set<uint32_t> refreshed;
        RETURN_IF_ERROR(RefreshHolders(
            comm, &routes, out.next,
            [&](uint32_t s, std::string* bytes) {
              bytes->append(reinterpret_cast<const char*>(&served_value[s]), 8);
            },
            [&](uint32_t i, const char* p, size_t left) -> size_t {
              if (left < 8 || !refreshed.insert(i).second) return 0;
              std::memcpy(&mine[i], p, 8);
              return 8;
            }));
        // Exactly the keys used next whose row changed since this rank had it came.
        std::set<uint32_t> want;
        for (uint32_t i : next[t][me]) {
          const uint64_t now = truth.count(keys[me][i]) ? truth[keys[me][i]] : 0;
          if (before[i] != now) want.insert(i);
          EXPECT_EQ(mine[i], now) << "key " << keys[me][i] << " round " << t;
        }
        EXPECT_EQ(refreshed, want) << "round " << t;
      }
      return Status::OK();
    });
    for (const Status& s : status) EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

}  // namespace
}  // namespace ctrbox
