#include "table/mem_table.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>
#include <unordered_map>

#include "util/random.h"

namespace ctrbox {
namespace {

// The reference: a plain map from key to the row's canonical encoding.
using Reference = std::unordered_map<uint64_t, std::string>;

std::string Encode(const RowBlock& rows, size_t i) {
  std::string e;
  rows.EncodeRow(i, &e);
  return e;
}

void ExpectSame(const MemTable& table, const Reference& ref) {
  std::map<uint64_t, std::string> got;
  RowBlock rows(table.layout());
  for (size_t s = 0; s < table.num_shards(); ++s) {
    table.ExportShard(s, &rows);
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_TRUE(got.emplace(rows.key(i), Encode(rows, i)).second) << "duplicate key";
    }
  }
  ASSERT_EQ(got.size(), ref.size());
  for (const auto& [k, v] : got) {
    auto it = ref.find(k);
    ASSERT_NE(it, ref.end()) << k;
    ASSERT_EQ(it->second, v) << k;
  }
  EXPECT_EQ(table.Stats().keys, ref.size());
}

TEST(MemTableTest, DifferentialAgainstAMap) {
  ValueLayout l{4, 4, 1};
  AccessorOptions ao;
  ao.embedx_threshold = 0.25f;  // some keys without embeddings
  ao.delete_threshold = 0.3f;
  ao.decay = 0.9f;
  CtrAccessor acc(l, ao);
  for (uint32_t shard_bits : {0u, 3u}) {
    MemTable table(MemTableOptions{l, shard_bits});
    Reference ref;
    ThreadPool pool(3);
    Random rng(11 + shard_bits);
    for (int step = 0; step < 300; ++step) {
      int op = static_cast<int>(rng.Below(10));
      if (op < 8) {
        // Pull a random key set (with duplicates-free keys drawn from a small space so they
        // repeat across steps), modify, push.
        std::vector<uint64_t> keys;
        std::map<uint64_t, bool> seen;
        size_t n = rng.Below(400);
        while (keys.size() < n) {
          uint64_t k = rng.Below(3000);
          if (!seen[k]) {
            seen[k] = true;
            keys.push_back(k);
          }
        }
        RowBlock rows(l);
        table.Pull(keys.data(), keys.size(), &acc, &rows, rng.Below(2) ? &pool : nullptr);
        for (size_t i = 0; i < keys.size(); ++i) {
          ASSERT_EQ(rows.key(i), keys[i]);
          auto it = ref.find(keys[i]);
          if (it != ref.end()) {
            ASSERT_EQ(Encode(rows, i), it->second);
          } else {
            RowBlock fresh(l);
            fresh.Resize(1);
            acc.InitRow(&fresh, 0, keys[i]);
            ASSERT_EQ(Encode(rows, i), Encode(fresh, 0));
          }
          rows.show(i) += static_cast<float>(rng.Below(3));
          rows.click(i) += static_cast<float>(rng.Below(2));
          rows.unseen(i) = 0;
          rows.wide(i) += 0.5f;
          acc.MaybeCreateEmbedding(&rows, i);
          if (rows.has_emb(i)) rows.emb(i)[rng.Below(4)] += 1.0f;
          ref[keys[i]] = Encode(rows, i);
        }
        if (rng.Below(2) == 0) {
          table.Push(rows, &pool);
        } else {
          table.Push(rows, nullptr);
        }
      } else if (op == 8) {
        table.Shrink(acc, &pool);
        for (auto it = ref.begin(); it != ref.end();) {
          RowBlock r(l);
          r.Resize(1);
          r.DecodeRow(it->second.data(), it->second.size(), 0);
          bool keep = acc.ShrinkRow(&r.show(0), &r.click(0), &r.unseen(0));
          if (keep) {
            it->second = Encode(r, 0);
            ++it;
          } else {
            it = ref.erase(it);
          }
        }
      } else {
        ExpectSame(table, ref);
      }
    }
    ExpectSame(table, ref);
    // Lookup mode: absent keys come back cleared, without an embedding.
    uint64_t absent = 1ull << 40;
    RowBlock rows(l);
    table.Pull(&absent, 1, nullptr, &rows, nullptr);
    EXPECT_FALSE(rows.has_emb(0));
    EXPECT_EQ(rows.wide(0), 0.0f);
  }
}

TEST(MemTableTest, ConcurrentPullsAndPushes) {
  ValueLayout l{8, 8, 1};
  CtrAccessor acc(l, AccessorOptions{});
  MemTable table(MemTableOptions{l, 4});
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Random rng(t);
      RowBlock rows(l);
      for (int round = 0; round < kRounds; ++round) {
        // Each thread owns keys = t mod kThreads, so its counts are exact; reads of others'
        // keys race benignly through the shard locks.
        std::vector<uint64_t> keys;
        for (int i = 0; i < 50; ++i) keys.push_back(rng.Below(500) * kThreads + t);
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        table.Pull(keys.data(), keys.size(), &acc, &rows, nullptr);
        for (size_t i = 0; i < keys.size(); ++i) rows.show(i) += 1;
        table.Push(rows, nullptr);
        uint64_t other = rng.Below(2000);
        table.Pull(&other, 1, nullptr, &rows, nullptr);
      }
    });
  }
  for (auto& th : threads) th.join();
  TableStats st = table.Stats();
  EXPECT_LE(st.keys, 2000u);
  // Total show equals the number of (round, distinct key) pulls of each thread.
  double total_show = 0;
  RowBlock rows(l);
  for (size_t s = 0; s < table.num_shards(); ++s) {
    table.ExportShard(s, &rows);
    for (size_t i = 0; i < rows.size(); ++i) total_show += rows.show(i);
  }
  EXPECT_GT(total_show, kThreads * kRounds * 40.0);
}

TEST(MemTableTest, MemoryOverheadWithinOneAndAHalfTimesTheValues) {
  ValueLayout l{16, 16, 1};  // the default model's layout
  CtrAccessor acc(l, AccessorOptions{});
  MemTable table(MemTableOptions{l, 6});
  ThreadPool pool(2);
  constexpr size_t kKeys = (1 << 20) + 12345, kBatch = 1 << 16;
  std::vector<uint64_t> keys;
  RowBlock rows(l);
  for (size_t b = 0; b < kKeys; b += kBatch) {
    keys.clear();
    for (size_t i = b; i < std::min(kKeys, b + kBatch); ++i) keys.push_back(Mix64(i));
    table.Pull(keys.data(), keys.size(), &acc, &rows, &pool);
    table.Push(rows, &pool);
  }
  TableStats st = table.Stats();
  EXPECT_EQ(st.keys, kKeys);
  EXPECT_EQ(st.keys_with_emb, kKeys);
  EXPECT_EQ(st.value_bytes, kKeys * 148);
  double ratio = static_cast<double>(st.memory_bytes) / static_cast<double>(st.value_bytes);
  RecordProperty("overhead_ratio", std::to_string(ratio));
  EXPECT_LE(ratio, 1.5) << st.memory_bytes << " bytes for " << st.value_bytes << " value bytes";
  EXPECT_GE(ratio, 1.0);
}

}  // namespace
}  // namespace ctrbox
