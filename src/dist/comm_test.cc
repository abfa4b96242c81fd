#include "dist/comm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dist/collectives.h"
#include "dist/dist_test_util.h"

namespace ctrbox {
namespace {

std::string Message(int from, int to, int round) {
  // Sizes 0.. and distinct contents per (from, to, round).
  return std::string(static_cast<size_t>((from * 7 + to * 3 + round) % 11), char('a' + from)) +
         std::to_string(to) + "/" + std::to_string(round);
}

TEST(LocalGroupTest, AllToAllDeliversEachMessageToItsRank) {
  for (int n : {1, 2, 3, 5}) {
    auto status = RunRanks(n, [&](Comm* comm) -> Status {
      EXPECT_EQ(comm->size(), n);
      for (int round = 0; round < 20; ++round) {
        std::vector<std::string> send(n), recv;
        for (int to = 0; to < n; ++to) send[to] = Message(comm->rank(), to, round);
        RETURN_IF_ERROR(comm->AllToAll(send, &recv));
        for (int from = 0; from < n; ++from) {
          EXPECT_EQ(recv[from], Message(from, comm->rank(), round));
        }
        std::vector<std::string> all;
        RETURN_IF_ERROR(comm->AllGather(std::to_string(comm->rank() * round), &all));
        for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], std::to_string(r * round));
      }
      return Status::OK();
    });
    for (const Status& s : status) EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// Each rank's channels exchange at once from different threads (the pipeline's stages), and
// a message never crosses to another channel.
TEST(LocalGroupTest, ChannelsExchangeConcurrentlyWithoutMixing) {
  constexpr int kRanks = 3;
  LocalGroup group(kRanks);
  std::vector<std::thread> threads;
  std::vector<int> errors(kRanks * Comm::kChannels, 0);
  for (int r = 0; r < kRanks; ++r) {
    for (int c = 0; c < Comm::kChannels; ++c) {
      threads.emplace_back([&, r, c] {
        Comm* comm = group.rank(r)->channel(c);
        for (int round = 0; round < 200; ++round) {
          std::vector<std::string> send(kRanks), recv;
          for (int to = 0; to < kRanks; ++to) {
            send[to] = std::to_string(c) + ":" + Message(r, to, round);
          }
          if (!comm->AllToAll(send, &recv).ok()) {
            ++errors[r * Comm::kChannels + c];
            return;
          }
          for (int from = 0; from < kRanks; ++from) {
            if (recv[from] != std::to_string(c) + ":" + Message(from, r, round)) {
              ++errors[r * Comm::kChannels + c];
            }
          }
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  for (int e : errors) EXPECT_EQ(e, 0);
  EXPECT_EQ(group.rank(1)->channel(0), group.rank(1));
  EXPECT_EQ(group.rank(1)->channel(3)->rank(), 1);
}

TEST(LocalGroupTest, ARankThatAbortsStopsTheOthersWithItsError) {
  auto status = RunRanks(3, [&](Comm* comm) -> Status {
    if (comm->rank() == 1) return IOError("rank 1: disk full");
    std::vector<std::string> recv;
    for (int round = 0; round < 3; ++round) {
      RETURN_IF_ERROR(comm->AllToAll(std::vector<std::string>(3, "x"), &recv));
    }
    return Status::OK();
  });
  for (const Status& s : status) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.ToString().find("rank 1: disk full"), std::string::npos) << s.ToString();
  }
}

// A rank that stops answering: the others' exchange fails within the timeout, saying so.
TEST(LocalGroupTest, AnExchangeWaitingPastTheTimeoutFailsNamingTheWait) {
  LocalGroup group(3, /*timeout_seconds=*/0.3);
  std::vector<Status> status(3);
  std::vector<double> seconds(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      if (r == 2) std::this_thread::sleep_for(std::chrono::seconds(2));  // hangs
      const auto start = std::chrono::steady_clock::now();
      std::vector<std::string> recv;
      status[r] = group.rank(r)->AllToAll(std::vector<std::string>(3, "x"), &recv);
      seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(status[r].ok());
    EXPECT_NE(status[r].ToString().find("no answer from 1 of the other ranks"), std::string::npos)
        << status[r].ToString();
    EXPECT_LT(seconds[r], 1.5);
  }
  EXPECT_FALSE(status[2].ok());  // the late rank finds the group stopped
}

// Sums in rank order, as AllReduceSum promises.
TEST(CollectivesTest, AllReduceSumAddsInRankOrderOnEveryRank) {
  for (int n : {1, 2, 3, 4}) {
    for (size_t len : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}}) {
      std::vector<std::vector<float>> x(n, std::vector<float>(len));
      std::mt19937 rng(static_cast<uint32_t>(n * 1000 + len));
      std::uniform_real_distribution<float> u(-1e3f, 1e3f);
      for (auto& v : x) {
        for (float& f : v) f = u(rng) * (u(rng) > 0 ? 1e-4f : 1.0f);
      }
      std::vector<float> want(len);
      for (size_t i = 0; i < len; ++i) {
        float s = x[0][i];
        for (int r = 1; r < n; ++r) s += x[r][i];
        want[i] = s;
      }
      std::vector<std::vector<float>> got = x;
      auto status = RunRanks(
          n, [&](Comm* comm) { return AllReduceSum(comm, got[comm->rank()].data(), len); });
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(status[r].ok()) << status[r].ToString();
        ASSERT_EQ(got[r], want) << "rank " << r << " of " << n << ", " << len << " elements";
      }
    }
  }
}

// Canonical sums: 12 leaves (some empty) shared by 1, 2, 3, 4 or 6 ranks, each giving the sums
// of the tree's nodes its leaves make, sum to the bits of one process's tree over all leaves.
TEST(CollectivesTest, PairwiseNodeSumsOnAnyRanksAreOneProcessTree) {
  constexpr uint32_t kLeaves = 12;
  for (size_t len : {size_t{1}, size_t{7}, size_t{1000}}) {
    std::mt19937 rng(static_cast<uint32_t>(len));
    std::uniform_real_distribution<float> u(-1e3f, 1e3f);
    std::vector<std::optional<std::vector<float>>> leaves(kLeaves);
    std::vector<LeafValue> all;
    for (uint32_t l = 0; l < kLeaves; ++l) {
      if (l == 5 || l >= 10) continue;  // empty leaves (a short last minibatch)
      leaves[l].emplace(len);
      for (float& f : *leaves[l]) f = u(rng) * (u(rng) > 0 ? 1e-4f : 1.0f);
      all.push_back({l, *leaves[l]});
    }
    const std::vector<float> want = TreeSum(all);
    int differs_in_rank_order = 0;
    for (int n : {1, 2, 3, 4, 6}) {
      std::vector<std::vector<float>> got(n, std::vector<float>(len, -1.0f));
      auto status = RunRanks(n, [&](Comm* comm) {
        const uint32_t r = comm->rank();
        const auto nodes = NodeSums(leaves, r * kLeaves / n, (r + 1) * kLeaves / n);
        std::vector<TreeNodeSum> mine;
        for (const LeafValue& node : nodes) mine.push_back({node.first, node.second.data()});
        return AllReduceSumPairwise(comm, mine, len, got[r].data());
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(status[r].ok()) << status[r].ToString();
        ASSERT_EQ(got[r], want) << "rank " << r << " of " << n << ", " << len << " elements";
      }
      // (The ranks' shares added in rank order instead are another sum.)
      std::vector<float> rank_order(len, 0.0f);
      for (int r = 0; r < n; ++r) {
        const auto nodes = NodeSums(leaves, r * kLeaves / n, (r + 1) * kLeaves / n);
        const std::vector<float> s = TreeSum(nodes);  // (empty: no rows)
        for (size_t i = 0; i < s.size(); ++i) rank_order[i] += s[i];
      }
      differs_in_rank_order += rank_order != want;
    }
    if (len == 1000) {
      EXPECT_GT(differs_in_rank_order, 0);
    }
  }
  // Leaves that do not increase over the ranks are refused.
  std::vector<float> x(4, 1.0f), out(4);
  auto status = RunRanks(2, [&](Comm* comm) {
    const uint32_t leaf = comm->rank() == 0 ? 4 : 2;
    return AllReduceSumPairwise(comm, {{leaf, x.data()}}, x.size(), out.data());
  });
  bool named = false;
  for (const Status& s : status) {
    named |= s.ToString().find("sent leaf 2 after leaf 4") != std::string::npos;
  }
  EXPECT_TRUE(named) << status[0].ToString() << " / " << status[1].ToString();
}

TEST(CollectivesTest, AllReduceOfCountsAndMaxima) {
  std::vector<std::vector<uint64_t>> v(3);
  auto status = RunRanks(3, [&](Comm* comm) -> Status {
    const uint64_t r = static_cast<uint64_t>(comm->rank());
    std::vector<uint64_t> sum = {r, 10 * r, 1}, max = {r, 5 - r};
    RETURN_IF_ERROR(AllReduceSum(comm, sum.data(), sum.size()));
    RETURN_IF_ERROR(AllReduceMax(comm, max.data(), max.size()));
    EXPECT_EQ(sum, (std::vector<uint64_t>{3, 30, 3}));
    EXPECT_EQ(max, (std::vector<uint64_t>{2, 5}));
    return Status::OK();
  });
  for (const Status& s : status) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(CollectivesTest, OwnersSpreadKeysEvenlyAndStay) {
  for (int n : {1, 2, 3, 8}) {
    std::vector<int> count(n, 0);
    for (uint64_t k = 0; k < 80000; ++k) {
      const int o = OwnerOf(k * 0x9E37 + 11, n);
      ASSERT_GE(o, 0);
      ASSERT_LT(o, n);
      ++count[o];
    }
    for (int c : count) EXPECT_NEAR(c, 80000.0 / n, 80000.0 / n * 0.05);
  }
  EXPECT_EQ(OwnerOf(12345, 4), OwnerOf(12345, 4));
  EXPECT_EQ(OwnerOf(12345, 1), 0);
}

}  // namespace
}  // namespace ctrbox
