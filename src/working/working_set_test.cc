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

// The working set built the plain way: local ids numbered per key range in first-occurrence
// order, the key ranges one after another; each minibatch's uniq and occurrence lists from
// ordered maps.
WorkingSet Reference(const Batch& pass, size_t batch_size) {
  WorkingSet ws;
  std::vector<std::vector<uint64_t>> by_part(kKeyRanges);
  std::map<uint64_t, size_t> seen;  // key -> its place in its key range
  for (uint64_t key : pass.keys) {
    if (seen.count(key)) continue;
    std::vector<uint64_t>& part = by_part[KeyRangeOf(key)];
    seen[key] = part.size();
    part.push_back(key);
  }
  std::vector<uint32_t> base(kKeyRanges + 1, 0);
  for (size_t q = 0; q < kKeyRanges; ++q) {
    base[q + 1] = base[q] + static_cast<uint32_t>(by_part[q].size());
    ws.keys.insert(ws.keys.end(), by_part[q].begin(), by_part[q].end());
  }
  for (uint64_t key : pass.keys) {
    ws.local.push_back(base[KeyRangeOf(key)] + static_cast<uint32_t>(seen[key]));
  }
  const uint32_t S = pass.schema.num_slots;
  ws.cell.resize(pass.keys.size());
  for (size_t begin = 0; begin < pass.rows(); begin += batch_size) {
    Minibatch mb;
    mb.row_begin = static_cast<uint32_t>(begin);
    mb.row_end = static_cast<uint32_t>(std::min(pass.rows(), begin + batch_size));
    mb.key_begin = pass.offsets[mb.row_begin * S];
    mb.key_end = pass.offsets[mb.row_end * S];
    std::map<uint32_t, std::vector<uint32_t>> occ;
    for (uint32_t p = mb.key_begin; p < mb.key_end; ++p) {
      const uint32_t l = ws.local[p];
      if (!occ.count(l)) mb.uniq.push_back(l);
      occ[l].push_back(p - mb.key_begin);
    }
    mb.occ_begin.push_back(0);
    for (uint32_t l : mb.uniq) {
      mb.occ.insert(mb.occ.end(), occ[l].begin(), occ[l].end());
      mb.occ_begin.push_back(static_cast<uint32_t>(mb.occ.size()));
    }
    for (uint32_t r = mb.row_begin; r < mb.row_end; ++r) {
      for (uint32_t s = 0; s < S; ++s) {
        for (uint32_t p = pass.offsets[r * S + s]; p < pass.offsets[r * S + s + 1]; ++p) {
          ws.cell[p] = (r - mb.row_begin) * S + s;
        }
      }
    }
    ws.batches.push_back(std::move(mb));
  }
  return ws;
}

void ExpectSame(const WorkingSet& got, const WorkingSet& want) {
  ASSERT_EQ(got.keys, want.keys);
  ASSERT_EQ(got.local, want.local);
  ASSERT_EQ(got.cell, want.cell);
  ASSERT_EQ(got.batches.size(), want.batches.size());
  for (size_t b = 0; b < got.batches.size(); ++b) {
    const Minibatch &g = got.batches[b], &w = want.batches[b];
    ASSERT_EQ(g.row_begin, w.row_begin);
    ASSERT_EQ(g.row_end, w.row_end);
    ASSERT_EQ(g.key_begin, w.key_begin);
    ASSERT_EQ(g.key_end, w.key_end);
    ASSERT_EQ(g.uniq, w.uniq) << "minibatch " << b;
    ASSERT_EQ(g.occ_begin, w.occ_begin) << "minibatch " << b;
    ASSERT_EQ(g.occ, w.occ) << "minibatch " << b;
  }
}

// Minibatches of one piece and of several (over 65 536 key uses), empty ones, and one
// scratch reused over passes of other shapes (its tables' stamps), on 1 to 4 threads.
TEST(WorkingSetTest, EqualsThePlainBuildForEveryPieceCutAndThreadCount) {
  struct Case {
    size_t rows;
    uint32_t slots;
    size_t batch;
  };
  const std::vector<Case> cases = {{1000, 5, 64}, {30000, 9, 30000}, {30000, 9, 9000},
                                   {40, 3, 7},    {0, 4, 16},        {5000, 6, 1}};
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    WorkingSetScratch scratch;
    for (size_t c = 0; c < cases.size(); ++c) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", case " + std::to_string(c));
      const Batch pass = MakePass(cases[c].rows, cases[c].slots, 100 + c);
      WorkingSet ws;
      BuildWorkingSet(pass, cases[c].batch, threads == 1 ? nullptr : &pool, &ws, &scratch);
      ExpectSame(ws, Reference(pass, cases[c].batch));
    }
  }
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
