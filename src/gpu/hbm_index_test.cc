// The HBM working table's index and pass plan against host references. The index functions
// run here on CPU threads with the same atomics the kernels use; the CUDA backend's own test
// (gpu/trainer_test.cc) compares the device table against these on a GPU.
#include "gpu/hbm_index.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "gpu/hbm_plan.h"
#include "io/test_util.h"
#include "util/random.h"
#include "util/thread_pool.h"

namespace ctrbox {
namespace {

struct HostIndex {
  explicit HostIndex(size_t n)
      : keys(HbmCapacity(n), kEmptyKey), rows(keys.size(), kNoRow), special(kNoRow) {}
  HbmIndex view() { return HbmIndex{keys.data(), rows.data(), &special, keys.size() - 1}; }
  std::vector<uint64_t> keys;
  std::vector<uint32_t> rows;
  uint32_t special;
};

TEST(HbmIndexTest, ConcurrentInsertsThenGetAndAccumulateMatchAMap) {
  ThreadPool pool(4);
  for (uint64_t seed : {1, 2, 3}) {
    Random rng(seed);
    // Keys that collide in their probe start and the sentinel value itself.
    std::vector<uint64_t> keys;
    std::unordered_map<uint64_t, uint32_t> ref;
    while (keys.size() < 20000) {
      uint64_t k = rng.Below(4) == 0 ? rng.Below(64) : rng.Next();
      if (keys.size() == 777) k = kEmptyKey;
      if (ref.emplace(k, static_cast<uint32_t>(keys.size())).second) keys.push_back(k);
    }
    HostIndex t(keys.size());
    HbmIndex idx = t.view();
    std::vector<int> inserted(keys.size());
    RunParallel(&pool, keys.size(), [&](size_t i, int) { inserted[i] = idx.Insert(keys[i], i); });
    for (size_t i = 0; i < keys.size(); ++i) ASSERT_TRUE(inserted[i]) << i;
    // A second insert of a present key changes nothing.
    EXPECT_FALSE(idx.Insert(keys[5], 12345));
    EXPECT_FALSE(idx.Insert(kEmptyKey, 12345));
    for (const auto& [k, row] : ref) ASSERT_EQ(idx.Find(k), row) << k;
    for (int i = 0; i < 2000; ++i) {
      const uint64_t k = rng.Next();
      if (!ref.count(k)) {
        ASSERT_EQ(idx.Find(k), kNoRow);
      }
    }
    // Accumulate: many threads add into the same rows; small integers sum exactly.
    constexpr uint32_t kWidth = 3;
    std::vector<float> acc(keys.size() * kWidth, 0.0f);
    std::vector<double> expect(acc.size(), 0.0);
    std::vector<uint64_t> stream(100000);
    for (auto& k : stream) k = keys[rng.Below(keys.size())];
    RunParallel(&pool, stream.size(), [&](size_t i, int) {
      const float g[kWidth] = {1.0f, static_cast<float>(i % 7), -2.0f};
      EXPECT_TRUE(idx.Accumulate(stream[i], g, kWidth, acc.data(), kWidth));
    });
    for (size_t i = 0; i < stream.size(); ++i) {
      const uint32_t row = ref[stream[i]];
      expect[row * kWidth] += 1;
      expect[row * kWidth + 1] += static_cast<double>(i % 7);
      expect[row * kWidth + 2] -= 2;
    }
    for (size_t j = 0; j < acc.size(); ++j) ASSERT_EQ(acc[j], expect[j]) << j;
    const float g[kWidth] = {1, 1, 1};
    EXPECT_FALSE(idx.Accumulate(0xABCDEF0123ULL, g, kWidth, acc.data(), kWidth));
  }
}

TEST(HbmIndexTest, FillsToCapacityWithoutLosingKeys) {
  HostIndex t(8);  // 16 buckets
  HbmIndex idx = t.view();
  for (uint64_t k = 0; k < 16; ++k) ASSERT_TRUE(idx.Insert(k * 16, static_cast<uint32_t>(k)));
  EXPECT_FALSE(idx.Insert(999, 16));  // full: refused, not looping
  for (uint64_t k = 0; k < 16; ++k) EXPECT_EQ(idx.Find(k * 16), k);
  EXPECT_EQ(idx.Find(999), kNoRow);
}

bool SamePlan(const HbmPlan& a, const HbmPlan& b) {
  if (a.slices.size() != b.slices.size()) return false;
  for (size_t i = 0; i < a.slices.size(); ++i) {
    const HbmSlice &x = a.slices[i], &y = b.slices[i];
    if (x.row_begin != y.row_begin || x.row_end != y.row_end || x.occ_begin != y.occ_begin ||
        x.occ_end != y.occ_end || x.uniq_begin != y.uniq_begin || x.seg != y.seg) {
      return false;
    }
  }
  return a.gpus == b.gpus && a.row_of == b.row_of && a.locals == b.locals &&
         a.fetch_pos == b.fetch_pos && a.uniq_local == b.uniq_local &&
         a.uniq_occ_begin == b.uniq_occ_begin && a.uniq_occ == b.uniq_occ &&
         a.touched == b.touched && a.touched_begin == b.touched_begin &&
         a.touched_src == b.touched_src;
}

// The canonical sums' plan (gpu/step_canonical.h): slices cut where HbmPlanOptions::cut says
// (some empty), and per touched row its place in each GPU's segment of its owner, against a
// search of the segments; the same on a pool.
TEST(HbmPlanTest, CutSlicesAndTheTouchedRowsSourcesMatchAReference) {
  Batch pass = testing::RandomBatch(Schema{5, 1}, 1200, 11, /*multi_hot=*/true, false);
  WorkingSet ws;
  BuildWorkingSet(pass, 200, nullptr, &ws);
  HbmPlanOptions options;
  options.cut = [](uint32_t rows, std::vector<uint32_t>* starts) {
    // GPU 0: a quarter; GPU 1: none; GPU 2: the rest but 7 rows; GPU 3: those.
    *starts = {0, rows / 4, rows / 4, rows > 7 ? rows - 7 : rows, rows};
  };
  options.sources = true;
  const uint32_t gpus = 4;
  HbmPlan plan, pooled;
  BuildHbmPlan(pass, ws, gpus, nullptr, &plan, options);
  ThreadPool pool(3);
  BuildHbmPlan(pass, ws, gpus, &pool, &pooled, options);
  EXPECT_TRUE(SamePlan(plan, pooled));
  size_t present = 0;
  for (size_t b = 0; b < plan.minibatches(); ++b) {
    const Minibatch& mb = ws.batches[b];
    std::vector<uint32_t> starts;
    options.cut(mb.rows(), &starts);
    for (uint32_t g = 0; g < gpus; ++g) {
      ASSERT_EQ(plan.slice(b, g).row_begin, mb.row_begin + starts[g]);
      ASSERT_EQ(plan.slice(b, g).row_end, mb.row_begin + starts[g + 1]);
    }
    for (uint32_t o = 0; o < gpus; ++o) {
      for (uint32_t t = plan.touched_begin[o][b]; t < plan.touched_begin[o][b + 1]; ++t) {
        const uint32_t row = plan.touched[o][t];
        for (uint32_t g = 0; g < gpus; ++g) {
          const HbmSlice& s = plan.slice(b, g);
          uint32_t want = HbmPlan::kNoSource;
          for (uint32_t u = s.seg[o]; u < s.seg[o + 1]; ++u) {
            if (plan.row_of[plan.uniq_local[s.uniq_begin + u]] == row) want = u - s.seg[o];
          }
          ASSERT_EQ(plan.touched_src[o][size_t{t} * gpus + g], want) << b << " " << o << " " << g;
          present += want != HbmPlan::kNoSource;
        }
      }
    }
  }
  EXPECT_GT(present, 0u);
}

// The plan built on a pool (minibatches planned apart, then joined) equals the one-thread
// plan, for every thread count; and building into a used plan leaves nothing of the old one.
TEST(HbmPlanTest, APlanBuiltOnAPoolEqualsTheOneThreadPlan) {
  Batch pass = testing::RandomBatch(Schema{5, 2}, 3000, 9, /*multi_hot=*/true, /*weights=*/false);
  WorkingSet ws;
  BuildWorkingSet(pass, 100, nullptr, &ws);
  Batch small = testing::RandomBatch(Schema{5, 2}, 300, 10, /*multi_hot=*/true, false);
  WorkingSet small_ws;
  BuildWorkingSet(small, 64, nullptr, &small_ws);
  for (uint32_t gpus : {1u, 2u, 3u}) {
    HbmPlan serial;
    BuildHbmPlan(pass, ws, gpus, nullptr, &serial);
    for (int threads : {1, 2, 3, 5}) {
      SCOPED_TRACE(::testing::Message() << gpus << " GPUs, " << threads << " threads");
      ThreadPool pool(threads);
      HbmPlan plan;
      BuildHbmPlan(small, small_ws, gpus, &pool, &plan);  // then reused
      BuildHbmPlan(pass, ws, gpus, &pool, &plan);
      EXPECT_TRUE(SamePlan(serial, plan));
    }
  }
}

TEST(HbmPlanTest, PartitionsSlicesAndExchangeListsMatchAReference) {
  Batch pass = testing::RandomBatch(Schema{6, 0}, 1500, 7, /*multi_hot=*/true, /*weights=*/false);
  WorkingSet ws;
  BuildWorkingSet(pass, 256, nullptr, &ws);
  for (uint32_t gpus : {1u, 2u, 3u, 8u}) {
    SCOPED_TRACE(gpus);
    HbmPlan plan;
    BuildHbmPlan(pass, ws, gpus, nullptr, &plan);
    // Rows: each key on its owner, owners' rows in ascending local id.
    ASSERT_EQ(plan.locals.size(), gpus);
    size_t total = 0;
    for (uint32_t o = 0; o < gpus; ++o) {
      for (size_t r = 0; r < plan.locals[o].size(); ++r) {
        const uint32_t l = plan.locals[o][r];
        ASSERT_EQ(OwnerOf(ws.keys[l], gpus), o);
        ASSERT_EQ(plan.row_of[l], r);
        if (r > 0) {
          ASSERT_LT(plan.locals[o][r - 1], l);
        }
      }
      total += plan.locals[o].size();
    }
    ASSERT_EQ(total, ws.keys.size());
    ASSERT_EQ(plan.minibatches(), ws.batches.size());
    for (size_t b = 0; b < ws.batches.size(); ++b) {
      const Minibatch& mb = ws.batches[b];
      std::vector<std::set<uint32_t>> expect_touched(gpus);
      uint32_t row = mb.row_begin;
      for (uint32_t g = 0; g < gpus; ++g) {
        const size_t si = b * gpus + g;
        const HbmSlice& s = plan.slices[si];
        ASSERT_EQ(s.row_begin, row);  // contiguous slices covering the minibatch
        row = s.row_end;
        const uint32_t* off = plan.occ_offsets(si);
        // The reference: the slice's distinct keys and their occurrences, in order.
        std::map<uint32_t, std::vector<uint32_t>> occ_of;  // local id -> occurrences
        for (uint32_t p = s.occ_begin; p < s.occ_end; ++p) occ_of[ws.local[p]].push_back(p);
        ASSERT_EQ(s.uniq(), occ_of.size());
        for (uint32_t u = 0; u < s.uniq(); ++u) {
          const uint32_t l = plan.uniq_local[s.uniq_begin + u];
          // Segment o holds owner o's keys.
          const uint32_t o = OwnerOf(ws.keys[l], gpus);
          ASSERT_GE(u, s.seg[o]);
          ASSERT_LT(u, s.seg[o + 1]);
          std::vector<uint32_t> got(plan.uniq_occ.begin() + off[u],
                                    plan.uniq_occ.begin() + off[u + 1]);
          ASSERT_EQ(got, occ_of[l]);
          for (uint32_t p : got) ASSERT_EQ(plan.fetch_pos[p], u);
          expect_touched[o].insert(plan.row_of[l]);
        }
        if (gpus == 1) {  // the CPU model's order: first occurrence, occurrence lists alike
          ASSERT_EQ(std::vector<uint32_t>(plan.uniq_local.begin() + s.uniq_begin,
                                          plan.uniq_local.begin() + s.uniq_begin + s.uniq()),
                    mb.uniq);
          for (uint32_t u = 0; u < s.uniq(); ++u) {
            for (uint32_t q = mb.occ_begin[u]; q < mb.occ_begin[u + 1]; ++q) {
              ASSERT_EQ(plan.uniq_occ[off[u] + q - mb.occ_begin[u]], mb.key_begin + mb.occ[q]);
            }
          }
        }
      }
      ASSERT_EQ(row, mb.row_end);
      for (uint32_t o = 0; o < gpus; ++o) {
        const auto& t = plan.touched[o];
        std::vector<uint32_t> got(t.begin() + plan.touched_begin[o][b],
                                  t.begin() + plan.touched_begin[o][b + 1]);
        ASSERT_EQ(std::set<uint32_t>(got.begin(), got.end()).size(), got.size());
        ASSERT_EQ(std::set<uint32_t>(got.begin(), got.end()), expect_touched[o]);
      }
    }
  }
}

}  // namespace
}  // namespace ctrbox
