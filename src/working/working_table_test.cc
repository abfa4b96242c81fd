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

}  // namespace
}  // namespace ctrbox
