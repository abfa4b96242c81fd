// The GPU backend against the CPU model (docs/gpu.md). On every machine: the host emulation
// of the GPU step (the same kernel bodies, exchange and update order) must equal the CPU
// model bit for bit with one GPU, and stay within a float tolerance with several GPUs or
// atomic scatter. On a machine with a GPU: the CUDA backend against the CPU model and the
// device hash index against a host map; without one these tests skip, saying why.
#include "gpu/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "gpu/hbm_index.h"
#include "gpu/trainer_test_util.h"
#include "io/test_util.h"
#include "util/random.h"

#if defined(CTRBOX_WITH_CUDA)
#include "gpu/cuda_backend.h"
#endif

namespace ctrbox {
namespace {

using namespace gpu_testing;  // NOLINT: the shared cases

TEST(GpuEmulationTest, OneGpuIsBitIdenticalToTheCpuModel) {
  for (const Case& s : Cases()) {
    Trained cpu(s), gpu(s);
    cpu.TrainOnCpu(2);
    GpuOptions o;
    o.emulate = true;
    uint64_t created = 0;
    ASSERT_TRUE(gpu.TrainOnGpu(o, 2, &created).ok());
    SCOPED_TRACE(CaseName(s));
    EXPECT_EQ(FirstDifference(gpu.rows, cpu.rows), "");
    EXPECT_EQ(gpu.model.dense_params(), cpu.model.dense_params());
    EXPECT_EQ(gpu.model.dense_optimizer().m(), cpu.model.dense_optimizer().m());
    EXPECT_EQ(gpu.model.dense_optimizer().v(), cpu.model.dense_optimizer().v());
    EXPECT_EQ(gpu.predictions, cpu.predictions);
    if (s.embedx_threshold > 0) {
      EXPECT_GT(created, 0u);
    }
  }
}

// train.deterministic's canonical sums (CtrModel::SumOrder): each GPU runs the CPU model's
// sum blocks one by one and adds their gradients up its tree, dense and per key, and several
// GPUs (whole blocks each) add their nodes up the same tree: the CPU model's canonical step
// bit for bit, on one GPU replayed or launched call by call and on 2, 3 and 8 GPUs, for every
// model shape (128-row minibatches in 8 sum blocks of 16 rows; the pass's last, of 60 rows,
// in 4: 8 GPUs leave some without a block). The default order's step is another (in some
// shape at least), so the test tells.
TEST(GpuEmulationTest, CanonicalSumsAreTheCpuModelsCanonicalSums) {
  const CtrModel::SumOrder order{true, 128, 0, 16, 0};
  int other = 0;
  for (const Case& s : Cases()) {
    SCOPED_TRACE(CaseName(s));
    Trained cpu(s), direct(s), replayed(s), plain(s), two(s), three(s), eight(s);
    for (Trained* t : {&cpu, &direct, &replayed, &two, &three, &eight}) {
      t->model.set_sum_order(order);
    }
    cpu.TrainOnCpu(2);
    GpuOptions o;
    o.emulate = true;
    o.replay = false;
    ASSERT_TRUE(direct.TrainOnGpu(o, 2).ok());
    ASSERT_TRUE(plain.TrainOnGpu(o, 2).ok());
    for (Trained* t : {&two, &three, &eight}) {
      GpuOptions m = o;
      m.gpus = t == &two ? 2 : t == &three ? 3 : 8;
      ASSERT_TRUE(t->TrainOnGpu(m, 2).ok());
    }
    o.replay = true;
    GpuStepStats stats;
    ASSERT_TRUE(replayed.TrainOnGpu(o, 2, nullptr, nullptr, &stats).ok());
    ASSERT_GT(stats.train.replays, 0u);
    for (const Trained* t : {&direct, &replayed, &two, &three, &eight}) {
      SCOPED_TRACE(t == &direct ? "one GPU" : t == &replayed ? "replayed" : "several GPUs");
      EXPECT_EQ(FirstDifference(t->rows, cpu.rows), "");
      EXPECT_EQ(t->model.dense_params(), cpu.model.dense_params());
      EXPECT_EQ(t->model.dense_optimizer().m(), cpu.model.dense_optimizer().m());
      EXPECT_EQ(t->model.dense_optimizer().v(), cpu.model.dense_optimizer().v());
      EXPECT_EQ(t->predictions, cpu.predictions);
    }
    if (plain.model.dense_params() != cpu.model.dense_params() ||
        !FirstDifference(plain.rows, cpu.rows).empty()) {
      ++other;
    }
  }
  EXPECT_GT(other, 0);
}

// gpu.staged_memory sizes passes by GpuPassBytesBound: it must bound what a staged pass's GPU
// buffers take (one staged pass: StagedBytes), on one GPU and several, with canonical sums
// (train.deterministic: per-node records) and without, and not loosely.
TEST(GpuEmulationTest, GpuPassBytesBoundBoundsWhatAStagedPassTakes) {
  for (const Case& s : Cases()) {
    // Sum blocks of 16 rows cut a minibatch of 128 into few nodes per GPU; of 4 rows, into up
    // to 4 (3 GPUs), each with its own gradient records.
    for (const uint32_t block : {0u, 16u, 4u})
      for (uint32_t gpus : {1u, 2u, 3u}) {
        SCOPED_TRACE(CaseName(s) + " gpus " + std::to_string(gpus) +
                     (block > 0 ? " canonical, blocks of " + std::to_string(block) : ""));
        Trained t(s);
        if (block > 0) t.model.set_sum_order(CtrModel::SumOrder{true, 128, 0, block, 0});
        GpuOptions o;
        o.emulate = true;
        o.gpus = gpus;
        uint64_t staged = 0;
        ASSERT_TRUE(t.TrainOnGpu(o, 1, nullptr, &staged).ok());
        const GpuSumNodes nodes = MostSumNodes(t.model.sum_order(), gpus);
        EXPECT_EQ(nodes.canonical, block > 0);
        const uint64_t bound = GpuPassBytesBound(t.Shape(), t.model.value_layout(), gpus, nodes);
        EXPECT_LE(staged, bound);
        EXPECT_GE(staged, bound / 2);
      }
  }
}

// The tree's nodes that make up the positions [a, b): a node [lo, hi) inside counts one,
// one that overlaps them is split in halves (a reference independent of CutNodes' walk).
uint32_t NodesOf(uint32_t lo, uint32_t hi, uint32_t a, uint32_t b) {
  if (b <= lo || hi <= a) return 0;
  if (a <= lo && hi <= b) return 1;
  const uint32_t mid = lo + (hi - lo) / 2;
  return NodesOf(lo, mid, a, b) + NodesOf(mid, hi, a, b);
}

// MostSumNodes against that reference over a model's cut: every rank's share of the jobs'
// minibatches (1536 rows: 12 blocks of 128 in triples; 2048: 16), every minibatch length a
// pass may end with, the GPUs taking blocks [c g / G, c (g + 1) / G) of its c blocks
// (HbmPlanOptions::cut). Without canonical sums, or on more than 16 GPUs: one node.
TEST(GpuEmulationTest, MostSumNodesAreTheGpusCutsOfEveryMinibatch) {
  Trained t(Cases()[0]);
  int several = 0;
  for (const uint32_t batch : {1536u, 2048u}) {
    for (const uint32_t ranks : {1u, 2u, 4u}) {
      const uint32_t share = batch / ranks;
      for (uint32_t r = 0; r < ranks; ++r) {
        const CtrModel::SumOrder o{true, batch, r * share, CtrModel::kSumBlockRows, share};
        t.model.set_sum_order(o);
        const uint32_t rank_nodes = static_cast<uint32_t>(t.model.sum_nodes().size());
        for (const uint32_t gpus : {1u, 2u, 3u, 4u}) {
          SCOPED_TRACE(std::to_string(batch) + " rows, rank " + std::to_string(r) + " of " +
                       std::to_string(ranks) + ", " + std::to_string(gpus) + " GPUs");
          uint32_t want = gpus == 1 ? rank_nodes : 1;
          for (uint32_t rows = 1; gpus > 1 && rows <= share; ++rows) {
            std::vector<uint32_t> blocks, leaves;
            t.model.SumBlocks(rows, &blocks, &leaves);
            const uint32_t c = static_cast<uint32_t>(leaves.size());
            for (uint32_t g = 0; g < gpus; ++g) {
              const uint32_t lo = c * g / gpus, hi = c * (g + 1) / gpus;
              if (lo < hi) want = std::max(want, NodesOf(0, 32, leaves[lo], leaves[hi - 1] + 1));
            }
          }
          const GpuSumNodes got = MostSumNodes(o, gpus);
          EXPECT_TRUE(got.canonical);
          EXPECT_EQ(got.rank, rank_nodes);
          EXPECT_EQ(got.gpu, want);
          several += want > 1;
        }
      }
    }
  }
  EXPECT_GT(several, 0);
  EXPECT_FALSE(MostSumNodes(CtrModel::SumOrder{}, 3).canonical);
  const GpuSumNodes many =
      MostSumNodes(CtrModel::SumOrder{true, 1536, 0, CtrModel::kSumBlockRows, 1536}, 17);
  EXPECT_EQ(std::vector<uint32_t>({many.canonical, many.gpu, many.rank}),
            (std::vector<uint32_t>{0, 1, 1}));
}

TEST(GpuEmulationTest, SeveralGpusAndAtomicScatterMatchOneGpuWithinFloatTolerance) {
  for (const Case& s : Cases()) {
    Trained one(s);
    GpuOptions o;
    o.emulate = true;
    ASSERT_TRUE(one.TrainOnGpu(o, 2).ok());
    for (uint32_t gpus : {2u, 3u, 8u}) {
      for (ScatterMode scatter : {ScatterMode::kSegment, ScatterMode::kAtomic}) {
        Trained many(s);
        GpuOptions m = o;
        m.gpus = gpus;
        m.scatter = scatter;
        ASSERT_TRUE(many.TrainOnGpu(m, 2).ok());
        // Sums over GPUs run in another order: float rounding only. A quantized value may
        // land on the neighbouring grid point (Δ = 2w / 255 at 8 bits).
        const double tol = s.quant.bits == 8 || s.sparse.state_bits == 16 ? 2.5e-3 : 2e-4;
        ExpectClose(one, many, tol,
                    std::to_string(gpus) + " GPUs, " + std::string(ScatterModeName(scatter)) +
                        ", " + CaseName(s));
      }
    }
  }
}

TEST(GpuEmulationTest, RowsChangedAfterStagingAreTrainedFromTheirNewValues) {
  Case s = Cases()[0];
  Trained cpu(s), gpu(s);
  GpuOptions o;
  o.emulate = true;
  o.gpus = 2;
  ThreadPool pool(2);
  auto trainer = GpuTrainer::Create(&gpu.model, gpu.accessor, o, &pool);
  ASSERT_TRUE(trainer.ok());
  ASSERT_TRUE((*trainer)->Stage(0, gpu.pass, gpu.ws, gpu.rows, nullptr).ok());
  // After staging, a pass in flight hands over newer values of some rows (the pipeline's
  // patch): the GPU must train from those.
  std::vector<uint32_t> patched;
  for (uint32_t l = 0; l < gpu.rows.size(); l += 3) {
    patched.push_back(l);
    if (l % 2 == 0) patched.push_back(l);  // a row handed over by two passes in flight
    for (RowBlock* r : {&cpu.rows, &gpu.rows}) {
      r->wide(l) += 0.5f;
      r->show(l) += 2.0f;
      if (r->has_emb(l)) r->emb(l)[0] = -r->emb(l)[0];
    }
  }
  cpu.TrainOnCpu(1);
  uint64_t created = 0;
  ASSERT_TRUE((*trainer)
                  ->Train(0, gpu.pass, gpu.ws, patched, &gpu.rows, gpu.predictions.data(), &created,
                          nullptr, &pool)
                  .ok());
  ExpectClose(cpu, gpu, 2e-4, "patched rows");
  // Training a pass that was not staged is an error, not a crash.
  Status st = (*trainer)->Train(7, gpu.pass, gpu.ws, {}, &gpu.rows, gpu.predictions.data(),
                                &created, nullptr, nullptr);
  EXPECT_FALSE(st.ok());
}

TEST(GpuBackendTest, WithoutCudaDeviceGpuFailsClearly) {
  std::string why;
  if (CudaDeviceCount(&why) > 0) GTEST_SKIP() << "a GPU is present; the CUDA tests run instead";
  Trained r(Cases()[0]);
  GpuOptions o;  // not emulated
  auto t = GpuTrainer::Create(&r.model, r.accessor, o, nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("gpu"), std::string::npos) << t.status().ToString();
}

// ---- on a GPU ------------------------------------------------------------------------------

// GTEST_SKIP returns from the function it is in: a macro, so that is the test.
#define SKIP_WITHOUT_GPU()                                             \
  do {                                                                 \
    std::string why;                                                   \
    if (CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

TEST(CudaBackendTest, MatchesTheCpuModelAfterTwoPasses) {
  SKIP_WITHOUT_GPU();
  for (const Case& s : Cases()) {
    Trained cpu(s);
    cpu.TrainOnCpu(2);
    for (uint32_t gpus : {1u, 2u}) {
      for (ScatterMode scatter : {ScatterMode::kSegment, ScatterMode::kAtomic}) {
        Trained gpu(s);
        GpuOptions o;
        o.gpus = gpus;
        o.scatter = scatter;
        Status st = gpu.TrainOnGpu(o, 2);
        ASSERT_TRUE(st.ok()) << st.ToString();
        const double tol = s.quant.bits == 8 || s.sparse.state_bits == 16 ? 2.5e-3 : 5e-4;
        ExpectClose(cpu, gpu, tol,
                    "CUDA, " + std::to_string(gpus) + " GPUs, " +
                        std::string(ScatterModeName(scatter)) + ", " + CaseName(s));
      }
    }
  }
}

TEST(CudaBackendTest, TensorCoreGemmsStayCloseToFloat32) {
  SKIP_WITHOUT_GPU();
  Case s = Cases()[0];
  Trained cpu(s);
  cpu.TrainOnCpu(1);
  for (GemmPrecision p : {GemmPrecision::kTf32, GemmPrecision::kBf16}) {
    Trained gpu(s);
    GpuOptions o;
    o.precision = p;
    ASSERT_TRUE(gpu.TrainOnGpu(o, 1).ok());
    ExpectClose(cpu, gpu, p == GemmPrecision::kTf32 ? 5e-3 : 3e-2,
                std::string(GemmPrecisionName(p)));
  }
}

#if defined(CTRBOX_WITH_CUDA)
TEST(CudaBackendTest, DeviceHashIndexMatchesAHostMap) {
  SKIP_WITHOUT_GPU();
  Random rng(4);
  std::vector<uint64_t> keys;
  std::unordered_map<uint64_t, uint32_t> ref;
  while (keys.size() < 300000) {
    uint64_t k = rng.Below(8) == 0 ? rng.Below(1000) : rng.Next();
    if (keys.size() == 1234) k = kEmptyKey;
    if (ref.emplace(k, static_cast<uint32_t>(keys.size())).second) keys.push_back(k);
  }
  std::vector<uint64_t> probes = keys;
  for (int i = 0; i < 100000; ++i) probes.push_back(rng.Next());
  std::vector<uint32_t> found;
  std::vector<float> acc;
  Status st = CudaIndexCheck(keys, probes, &found, &acc);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(found.size(), probes.size());
  for (size_t i = 0; i < probes.size(); ++i) {
    auto it = ref.find(probes[i]);
    ASSERT_EQ(found[i], it == ref.end() ? kNoRow : it->second) << i;
  }
  // Every probe of a present key accumulated 1 into its row (keys probed once: 1 each).
  for (size_t r = 0; r < keys.size(); ++r) ASSERT_EQ(acc[r], 1.0f) << r;
}
#endif

}  // namespace
}  // namespace ctrbox
