#include "working/working_set.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "util/random.h"

namespace ctrbox {
namespace {

Batch MakePass(size_t rows, uint32_t slots, uint64_t seed) {
  Random rng(seed);
  Batch b;
  b.Reset(Schema{slots, 0});
  BatchBuilder builder(&b);
  for (size_t r = 0; r < rows; ++r) {
    builder.BeginRow(0);
    for (uint32_t s = 0; s < slots; ++s) {
      uint64_t n = rng.Below(3);  // 0..2 keys: missing and multi-hot slots
      for (uint64_t k = 0; k < n; ++k)
        builder.AddKey(s, rng.Below(5) ? rng.Below(200) : rng.Next());
    }
    builder.EndRow();
  }
  return b;
}

TEST(WorkingSetTest, MatchesAReferenceAndIgnoresThreadCount) {
  Batch pass = MakePass(1000, 5, 3);
  WorkingSet ref_ws;
  BuildWorkingSet(pass, 64, nullptr, &ref_ws);

  // Local ids: a bijection onto the distinct keys.
  std::set<uint64_t> distinct(pass.keys.begin(), pass.keys.end());
  ASSERT_EQ(ref_ws.keys.size(), distinct.size());
  ASSERT_EQ(std::set<uint64_t>(ref_ws.keys.begin(), ref_ws.keys.end()), distinct);
  for (size_t p = 0; p < pass.keys.size(); ++p)
    ASSERT_EQ(ref_ws.keys[ref_ws.local[p]], pass.keys[p]);

  ASSERT_EQ(ref_ws.batches.size(), 16u);  // 15 of 64 rows + one of 40
  EXPECT_EQ(ref_ws.batches.back().rows(), 40u);
  for (const Minibatch& mb : ref_ws.batches) {
    // uniq: distinct local ids in first-occurrence order; occ: their positions, ascending.
    std::vector<uint32_t> expect_uniq;
    std::map<uint32_t, std::vector<uint32_t>> expect_occ;
    for (uint32_t p = mb.key_begin; p < mb.key_end; ++p) {
      uint32_t l = ref_ws.local[p];
      if (expect_occ.find(l) == expect_occ.end()) expect_uniq.push_back(l);
      expect_occ[l].push_back(p - mb.key_begin);
    }
    ASSERT_EQ(mb.uniq, expect_uniq);
    for (size_t u = 0; u < mb.uniq.size(); ++u) {
      std::vector<uint32_t> got(mb.occ.begin() + mb.occ_begin[u],
                                mb.occ.begin() + mb.occ_begin[u + 1]);
      ASSERT_EQ(got, expect_occ[mb.uniq[u]]);
    }
    for (uint32_t r = mb.row_begin; r < mb.row_end; ++r) {
      for (uint32_t s = 0; s < 5; ++s) {
        for (uint32_t p = pass.offsets[r * 5 + s]; p < pass.offsets[r * 5 + s + 1]; ++p) {
          ASSERT_EQ(ref_ws.cell[p], (r - mb.row_begin) * 5 + s);
        }
      }
    }
  }
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    WorkingSet ws;
    BuildWorkingSet(pass, 64, &pool, &ws);
    EXPECT_EQ(ws.keys, ref_ws.keys);
    EXPECT_EQ(ws.local, ref_ws.local);
    EXPECT_EQ(ws.cell, ref_ws.cell);
    for (size_t b = 0; b < ws.batches.size(); ++b) {
      EXPECT_EQ(ws.batches[b].uniq, ref_ws.batches[b].uniq);
      EXPECT_EQ(ws.batches[b].occ, ref_ws.batches[b].occ);
    }
  }
}

}  // namespace
}  // namespace ctrbox
