// HostExec's recording and replay (exec/exec.h): a recorded step replays as the calls would
// have run, reading what changes between replays from its buffers; the calls that a GPU graph
// cannot hold fail the executor inside a capture; the counters tell launches from replays.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "exec/exec.h"
#include "exec/staging.h"
#include "util/random.h"
#include "util/thread_pool.h"

namespace ctrbox {
namespace {

// A step whose kernels read their minibatch from a cursor in device memory: y[i] += w * x[b
// rows], then a GEMM, a copy and the cursor's advance.
struct Step {
  HostExec::Buffer<float> x, y, w, out, copy;
  HostExec::Buffer<uint32_t> cursor;

  void Issue(HostExec& e, uint32_t rows, uint32_t cols) {
    const float* xp = x.data();
    float *yp = y.data(), *op = out.data(), *cp = copy.data();
    uint32_t* cur = cursor.data();
    e.ForEach(size_t{rows} * cols,
              [=](size_t i) { yp[i] = 0.5f * yp[i] + xp[size_t{*cur} * rows * cols + i]; });
    e.Gemm(false, true, rows, rows, cols, yp, cols, yp, cols, op, rows);
    e.Copy(cp, op, size_t{rows} * rows);
    e.ForEach(1, [=](size_t) { ++*cur; });
  }
};

TEST(HostExecReplayTest, ReplaysEqualTheCallsRunOneByOne) {
  ThreadPool pool(2);
  constexpr uint32_t kRows = 7, kCols = 5, kBatches = 6;
  std::vector<float> x(kBatches * kRows * kCols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>((i * 37) % 101) - 0.5f;
  HostExec direct(&pool), replayed(&pool);
  Step a, b;
  for (auto [e, s] : {std::pair{&direct, &a}, std::pair{&replayed, &b}}) {
    e->Upload(&s->x, x.data(), x.size());
    e->Reserve(&s->y, kRows * kCols);
    e->Fill(s->y.data(), 0.0f, kRows * kCols);
    e->Reserve(&s->out, kRows * kRows);
    e->Reserve(&s->copy, kRows * kRows);
    e->Reserve(&s->cursor, 1);
    e->Fill(s->cursor.data(), uint32_t{0}, 1);
  }
  HostExec::Graph g;
  const ExecCounters before = replayed.counters();
  replayed.BeginCapture();
  b.Issue(replayed, kRows, kCols);
  replayed.EndCapture(&g);
  ASSERT_TRUE(replayed.status().ok()) << replayed.status().ToString();
  // Recording runs nothing and launches nothing.
  EXPECT_EQ(b.cursor.data()[0], 0u);
  EXPECT_EQ(replayed.counters().launches, before.launches);
  EXPECT_EQ(g.counted().launches, 3u);
  EXPECT_EQ(g.counted().gemm_calls, 1u);
  EXPECT_EQ(g.counted().copies, 1u);
  for (uint32_t m = 0; m < kBatches; ++m) {
    a.Issue(direct, kRows, kCols);
    replayed.Replay(g);
    ASSERT_EQ(std::vector<float>(a.copy.data(), a.copy.data() + kRows * kRows),
              std::vector<float>(b.copy.data(), b.copy.data() + kRows * kRows))
        << "minibatch " << m;
  }
  EXPECT_EQ(b.cursor.data()[0], kBatches);
  const ExecCounters d = replayed.counters().Since(before);
  EXPECT_EQ(d.replays, kBatches);
  EXPECT_EQ(d.replayed_ops, 4u * kBatches);
  EXPECT_EQ(d.launches, 0u);
  EXPECT_EQ(d.copies, 0u);
  EXPECT_EQ(direct.counters().launches - 2, 3u * kBatches);  // two Fills before
}

TEST(HostExecReplayTest, ShapedSegmentSumsEqualTheHostShapedOnes) {
  // 9 occurrences of 4 segments, 3 columns; the shape read from "device" memory.
  const std::vector<uint32_t> offsets = {100, 103, 103, 104, 109};
  std::vector<float> vals(3 * 9);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = 0.1f * static_cast<float>(i) - 1.0f;
  HostExec e;
  HostExec::Buffer<uint32_t> off;
  HostExec::Buffer<SegmentShape> shape;
  const std::vector<uint32_t> padded = {7, 7, 100, 103, 103, 104, 109};  // the offsets from 2
  e.Upload(&off, padded.data(), padded.size());
  const SegmentShape sh{2, 100, 4, 9};
  e.Upload(&shape, &sh, 1);
  std::vector<float> want(6 * 3, -7.0f), got(6 * 3, -7.0f);
  e.SegmentSums(vals.data(), 9, offsets.data(), 100, 4, 3, want.data());
  e.SegmentSums(vals.data(), shape.data(), off.data(), 6, 3, got.data());
  EXPECT_EQ(got, want);  // the segments past the shape's count untouched
}

TEST(HostExecReplayTest, WhatAGraphCannotHoldFailsTheExecutor) {
  const char* const kWhat[] = {"Upload", "Download", "Synchronize", "Recycle", "Reserve", "Mark"};
  for (int k = 0; k < 6; ++k) {
    HostExec e;
    HostExec::Buffer<float> b;
    e.Reserve(&b, 4);
    float host[8] = {};
    e.BeginCapture();
    e.Reserve(&b, 4);  // no growth: allowed
    switch (k) {
      case 0:
        e.Upload(&b, host, 4);
        break;
      case 1:
        e.Download(host, b.data(), 4);
        break;
      case 2:
        e.Synchronize();
        break;
      case 3:
        e.Recycle();
        break;
      case 4:
        e.Reserve(&b, 8);
        break;
      case 5:
        (void)e.Mark();
        break;
    }
    HostExec::Graph g;
    e.EndCapture(&g);
    ASSERT_FALSE(e.status().ok()) << kWhat[k];
    EXPECT_NE(e.status().message().find(kWhat[k]), std::string::npos) << e.status().ToString();
    EXPECT_NE(e.status().message().find("inside a capture"), std::string::npos);
  }
  HostExec e;
  e.Replay(HostExec::Graph());  // an empty graph replays nothing
  EXPECT_TRUE(e.status().ok());
  HostExec::Graph g;
  e.EndCapture(&g);
  EXPECT_FALSE(e.status().ok());  // no capture begun
}

TEST(HostExecReplayTest, ReserveCountsAllocations) {
  HostExec e;
  HostExec::Buffer<float> b;
  e.Reserve(&b, 10);
  e.Reserve(&b, 5);
  e.Reserve(&b, 20);
  EXPECT_EQ(e.counters().allocations, 2u);
}

// CudaExec's pinned staging (exec/staging.h), against a byte map of every block: random copy
// sizes (most small, some larger than a block, none a multiple of 256 bytes) never overlap
// and never end past their block, and each starts on a 256-byte boundary.
TEST(StagingBlockTest, CopiesNeverOverlapNorPassTheirBlock) {
  constexpr size_t kMin = StagingBlock::kMinBlock;
  Random rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<StagingBlock> blocks;
    std::vector<std::vector<std::pair<size_t, size_t>>> taken;  // per block: [at, at + n)
    for (int copy = 0; copy < 200; ++copy) {
      const uint64_t kind = rng.Below(10);
      const size_t n = kind == 0   ? kMin + 1 + rng.Below(kMin)  // a pass's rows: a block alone
                       : kind == 1 ? kMin - rng.Below(300)       // nearly a block
                                   : 1 + rng.Below(1 << 20);
      size_t b = 0;
      while (b < blocks.size() && !blocks[b].Fits(n)) ++b;
      if (b == blocks.size()) {
        blocks.push_back(StagingBlock{StagingBlock::SizeFor(n), 0});
        taken.emplace_back();
      }
      ASSERT_TRUE(blocks[b].Fits(n));
      const size_t at = blocks[b].Take(n);
      ASSERT_EQ(at % StagingBlock::kAlign, 0u);
      ASSERT_LE(at + n, blocks[b].size) << "copy " << copy << " of " << n << " bytes";
      for (const auto& [lo, hi] : taken[b]) ASSERT_TRUE(at + n <= lo || at >= hi);
      taken[b].push_back({at, at + n});
    }
  }
  // The case that wrote past a block: a copy larger than the minimum, not a multiple of 256.
  StagingBlock big{StagingBlock::SizeFor(kMin + 100), 0};
  big.Take(kMin + 100);
  EXPECT_GT(big.used, big.size);
  EXPECT_FALSE(big.Fits(1));
}

}  // namespace
}  // namespace ctrbox
