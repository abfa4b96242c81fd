// The replayed GPU step (gpu.replay; docs/gpu.md, "A replayed step"), in the host emulation on
// every machine: a minibatch recorded once and replayed for every minibatch of its shape gives
// the same bits as the step launched call by call, for every model shape and optimizer of the
// backend's cases, and a minibatch costs the host one replay and nothing else (no launch, copy,
// synchronization or allocation), as the executor counts them.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "gpu/trainer.h"
#include "gpu/trainer_test_util.h"

namespace ctrbox {
namespace {

using namespace gpu_testing;  // NOLINT: the shared cases

TEST(GpuReplayTest, ReplayedStepEqualsTheStepLaunchedCallByCall) {
  for (const Case& s : Cases()) {
    SCOPED_TRACE(CaseName(s));
    Trained cpu(s), direct(s), replayed(s);
    cpu.TrainOnCpu(2);
    GpuOptions o;
    o.emulate = true;
    o.replay = false;
    ASSERT_TRUE(direct.TrainOnGpu(o, 2).ok());
    o.replay = true;
    GpuStepStats stats;
    ASSERT_TRUE(replayed.TrainOnGpu(o, 2, nullptr, nullptr, &stats).ok());
    ASSERT_GT(stats.train.replays, 0u);  // the replayed path ran
    for (const Trained* t : {&direct, &cpu}) {
      EXPECT_EQ(FirstDifference(replayed.rows, t->rows), "");
      EXPECT_EQ(replayed.model.dense_params(), t->model.dense_params());
      EXPECT_EQ(replayed.model.dense_optimizer().m(), t->model.dense_optimizer().m());
      EXPECT_EQ(replayed.model.dense_optimizer().v(), t->model.dense_optimizer().v());
      EXPECT_EQ(replayed.model.dense_optimizer().step(), t->model.dense_optimizer().step());
      EXPECT_EQ(replayed.predictions, t->predictions);
    }
  }
}

// Per minibatch, as the executor counts the minibatch loop: launched call by call, every
// kernel and GEMM is a launch; replayed, one replay and nothing else.
TEST(GpuReplayTest, AMinibatchIsOneReplayAndNothingElse) {
  for (const Case& s : {Cases()[0], Cases()[16]}) {  // the default job; towers with everything
    SCOPED_TRACE(CaseName(s));
    GpuOptions o;
    o.emulate = true;
    GpuStepStats before, after;
    o.replay = false;
    Trained direct(s), replayed(s);
    ASSERT_TRUE(direct.TrainOnGpu(o, 2, nullptr, nullptr, &before).ok());
    o.replay = true;
    ASSERT_TRUE(replayed.TrainOnGpu(o, 2, nullptr, nullptr, &after).ok());
    const uint64_t mb = after.minibatches;
    ASSERT_EQ(mb, 2 * direct.ws.batches.size());
    ASSERT_EQ(before.minibatches, mb);
    const ExecCounters& d = before.minibatch_calls;
    const ExecCounters& r = after.minibatch_calls;
    std::printf(
        "per minibatch (%s): call by call %.1f launches (%.1f GEMMs), %.1f copies, %.1f syncs, "
        "%.1f allocations; replayed %.1f replays of %.1f operations, %.1f launches, %.1f copies, "
        "%.1f syncs, %.1f allocations; %llu steps recorded in 2 passes\n",
        CaseName(s).c_str(), double(d.launches) / mb, double(d.gemm_calls) / mb,
        double(d.copies) / mb, double(d.syncs) / mb, double(d.allocations) / mb,
        double(r.replays) / mb, double(r.replayed_ops) / mb, double(r.launches) / mb,
        double(r.copies) / mb, double(r.syncs) / mb, double(r.allocations) / mb,
        static_cast<unsigned long long>(after.captures));
    EXPECT_GT(d.launches, 10 * mb);
    EXPECT_EQ(d.replays, 0u);
    EXPECT_EQ(r.replays, mb);
    EXPECT_EQ(r.replayed_ops, d.launches + d.copies);  // the same calls, recorded
    EXPECT_EQ(r.launches, 0u);
    EXPECT_EQ(r.copies, 0u);
    EXPECT_EQ(r.syncs, 0u);
    EXPECT_EQ(r.allocations, 0u);
    EXPECT_EQ(d.syncs, 0u);
    EXPECT_EQ(d.allocations, 0u);
    // 700 rows in minibatches of 128: five full and a last one of 60, two shapes a pass.
    EXPECT_EQ(after.captures, 4u);
    // A pass waits for its GPU twice: at its start, and once for all its results.
    EXPECT_EQ(after.passes, 2u);
    EXPECT_EQ(after.train.syncs, 2 * after.passes);
    EXPECT_EQ(before.train.syncs, 2 * before.passes);
  }
}

// On a GPU (skipped elsewhere, saying why): the CUDA graphs replay the kernels the step
// launches call by call, in the same order, so the two give the same bits; a minibatch is one
// graph launch and nothing else.
void ExpectGraphsEqualCalls(const Case& s, bool canonical) {
  Trained direct(s), replayed(s);
  if (canonical) {
    for (Trained* t : {&direct, &replayed}) t->model.set_sum_order({true, 128, 0, 16, 0});
  }
  GpuOptions o;
  o.replay = false;
  ASSERT_TRUE(direct.TrainOnGpu(o, 2).ok());
  o.replay = true;
  GpuStepStats stats;
  Status st = replayed.TrainOnGpu(o, 2, nullptr, nullptr, &stats);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(FirstDifference(replayed.rows, direct.rows), "");
  EXPECT_EQ(replayed.model.dense_params(), direct.model.dense_params());
  EXPECT_EQ(replayed.model.dense_optimizer().m(), direct.model.dense_optimizer().m());
  EXPECT_EQ(replayed.model.dense_optimizer().v(), direct.model.dense_optimizer().v());
  EXPECT_EQ(replayed.predictions, direct.predictions);
  const ExecCounters& r = stats.minibatch_calls;
  EXPECT_EQ(r.replays, stats.minibatches);
  EXPECT_EQ(r.launches + r.copies + r.syncs + r.allocations, 0u);
}

// Every case of Cases(), skipped without a GPU.
void ExpectGraphsEqualCallsOnEveryCase(bool canonical) {
  std::string why;
  if (CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no GPU: " << why;
  for (const Case& s : Cases()) {
    SCOPED_TRACE(CaseName(s));
    ExpectGraphsEqualCalls(s, canonical);
  }
}

TEST(CudaReplayTest, GraphsEqualTheStepLaunchedCallByCall) {
  ExpectGraphsEqualCallsOnEveryCase(false);
}

// With train.deterministic's canonical sums (the order of
// GpuEmulationTest.CanonicalSumsAreTheCpuModelsCanonicalSums): their step also copies on the
// device and moves the slice's first row between its sum blocks.
TEST(CudaReplayTest, CanonicalSumsGraphsEqualTheStepLaunchedCallByCall) {
  ExpectGraphsEqualCallsOnEveryCase(true);
}

}  // namespace
}  // namespace ctrbox
