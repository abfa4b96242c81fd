#include "working/working_table.h"

#include <gtest/gtest.h>

#include <map>
#include <unordered_map>

#include "util/random.h"

namespace ctrbox {
namespace {

// The distinct keys of a random pass, numbered as BuildWorkingSet numbers them.
std::vector<uint64_t> PassKeys(size_t rows, uint64_t universe, uint64_t seed) {
  Random rng(seed);
  Batch b;
  b.Reset(Schema{4, 0});
  BatchBuilder builder(&b);
  for (size_t r = 0; r < rows; ++r) {
    builder.BeginRow(0);
    for (uint32_t s = 0; s < 4; ++s) builder.AddKey(s, rng.Below(universe));
    builder.EndRow();
  }
  WorkingSet ws;
  BuildWorkingSet(b, 128, nullptr, &ws);
  return ws.keys;
}

TEST(WorkingTableTest, FindMatchesAMapReference) {
  ThreadPool pool(3);
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<uint64_t> keys = PassKeys(2000, 5000, seed);
    WorkingTable t(ValueLayout{4, 1, 1});
    t.Build(keys, seed == 2 ? nullptr : &pool);
    ASSERT_EQ(t.size(), keys.size());
    std::unordered_map<uint64_t, uint32_t> ref;
    for (uint32_t i = 0; i < keys.size(); ++i) ref[keys[i]] = i;
    for (uint64_t k = 0; k < 6000; ++k) {
      auto it = ref.find(k);
      ASSERT_EQ(t.Find(k), it == ref.end() ? WorkingTable::kNotFound : it->second) << k;
    }
    // Key ranges: contiguous local-id ranges of keys of that key range.
    for (size_t p = 0; p < kKeyRanges; ++p) {
      for (uint32_t i = t.key_range_begin(p); i < t.key_range_begin(p + 1); ++i)
        ASSERT_EQ(KeyRangeOf(t.key(i)), p);
    }
    EXPECT_EQ(t.key_range_begin(kKeyRanges), keys.size());
  }
  WorkingTable empty;
  empty.Build({}, nullptr);
  EXPECT_EQ(empty.Find(7), WorkingTable::kNotFound);
}

TEST(WorkingTableTest, SharedKeysAndRowCopiesMatchAReference) {
  ThreadPool pool(2);
  const ValueLayout layout{4, 1, 1};
  WorkingTable older(layout), newer(layout);
  // Both orders of key range size (this side smaller, the other side smaller) occur.
  older.Build(PassKeys(3000, 4000, 7), &pool);
  newer.Build(PassKeys(500, 6000, 8), &pool);
  for (uint32_t i = 0; i < older.size(); ++i) {
    older.rows().ClearRow(i, older.key(i));
    older.rows().show(i) = static_cast<float>(i) + 0.5f;
    older.rows().emb(i)[3] = static_cast<float>(i);
  }
  for (uint32_t i = 0; i < newer.size(); ++i) newer.rows().ClearRow(i, newer.key(i));

  std::map<uint32_t, uint32_t> ref;  // newer local -> older local
  for (uint32_t i = 0; i < newer.size(); ++i) {
    for (uint32_t j = 0; j < older.size(); ++j) {
      if (older.key(j) == newer.key(i)) ref[i] = j;
    }
  }
  ASSERT_GT(ref.size(), 100u);
  SharedRows shared, shared_serial;
  newer.FindShared(older, &shared, &pool);
  newer.FindShared(older, &shared_serial, nullptr);
  EXPECT_EQ(shared, shared_serial);  // the order does not depend on threads
  std::map<uint32_t, uint32_t> got(shared.begin(), shared.end());
  EXPECT_EQ(got, ref);
  EXPECT_EQ(got.size(), shared.size());  // no duplicates

  // Skipped local ids are left out, both ways of looking up (this side's key ranges are
  // smaller in some, the other's in others), and the order of the rest is kept.
  std::vector<uint8_t> skip(newer.size(), 0);
  for (uint32_t i = 0; i < newer.size(); i += 3) skip[i] = 1;
  SharedRows kept, kept_serial, filtered;
  newer.FindShared(older, &kept, &pool, skip.data());
  newer.FindShared(older, &kept_serial, nullptr, skip.data());
  for (const auto& pair : shared) {
    if (skip[pair.first] == 0) filtered.push_back(pair);
  }
  EXPECT_EQ(kept, filtered);
  EXPECT_EQ(kept_serial, filtered);
  EXPECT_LT(kept.size(), shared.size());
  EXPECT_GT(kept.size(), shared.size() / 2);

  newer.CopyRows(older, shared, &pool);
  for (uint32_t i = 0; i < newer.size(); ++i) {
    auto it = ref.find(i);
    ASSERT_EQ(newer.rows().key(i), newer.key(i));
    if (it == ref.end()) {
      EXPECT_EQ(newer.rows().show(i), 0.0f);
    } else {
      EXPECT_EQ(newer.rows().show(i), older.rows().show(it->second));
      EXPECT_EQ(newer.rows().emb(i)[3], static_cast<float>(it->second));
    }
  }
}

// Against the rule it stands for: copying every shared row from each table ahead in
// ascending order (the newest wins) leaves the rows that copying each row once, from the
// newest table holding it, leaves.
TEST(WorkingTableTest, RowsTakenFromTheNewestEqualCopiesFromEveryTableInOrder) {
  ThreadPool pool(2);
  const ValueLayout layout{4, 1, 1};
  std::vector<WorkingTable> ahead;
  for (uint64_t t = 0; t < 4; ++t) {
    ahead.emplace_back(layout);
    ahead.back().Build(PassKeys(400 + 700 * t, 3000, 30 + t), &pool);
    for (uint32_t i = 0; i < ahead.back().size(); ++i) {
      ahead.back().rows().ClearRow(i, ahead.back().key(i));
      ahead.back().rows().show(i) = static_cast<float>(100000 * (t + 1) + i);
    }
  }
  WorkingTable every(layout), newest(layout);
  every.Build(PassKeys(900, 3000, 40), &pool);
  newest.Build(PassKeys(900, 3000, 40), &pool);
  for (uint32_t i = 0; i < every.size(); ++i) {
    every.rows().ClearRow(i, every.key(i));
    newest.rows().ClearRow(i, newest.key(i));
  }
  size_t copies = 0;
  for (const WorkingTable& t : ahead) {  // the reference: each table, ascending
    SharedRows shared;
    every.FindShared(t, &shared, &pool);
    every.CopyRows(t, shared, &pool);
    copies += shared.size();
  }
  std::vector<const WorkingTable*> tables;
  for (const WorkingTable& t : ahead) tables.push_back(&t);
  std::vector<SharedRows> taken;
  std::vector<uint8_t> claimed;
  SharedWithNewest(newest, tables, &taken, &claimed, &pool);
  ASSERT_EQ(taken.size(), ahead.size());
  ASSERT_EQ(claimed.size(), newest.size());
  size_t once = 0;
  std::vector<int> times(newest.size(), 0);
  for (size_t t = 0; t < ahead.size(); ++t) {
    newest.CopyRows(ahead[t], taken[t], &pool);
    once += taken[t].size();
    for (const auto& pair : taken[t]) ++times[pair.first];
  }
  for (uint32_t i = 0; i < newest.size(); ++i) {
    ASSERT_EQ(newest.rows().show(i), every.rows().show(i)) << i;
    ASSERT_LE(times[i], 1) << i;
    ASSERT_EQ(claimed[i], times[i]) << i;
  }
  EXPECT_GT(once, 300u);
  EXPECT_LT(once, copies);                         // rows in several tables were copied once
  EXPECT_TRUE(taken[0].size() < taken[3].size());  // the older lose their rows to the newer

  // With a pool or without, the same pairs.
  std::vector<SharedRows> serial;
  SharedWithNewest(newest, tables, &serial, &claimed, nullptr);
  EXPECT_EQ(serial, taken);
}

}  // namespace
}  // namespace ctrbox
