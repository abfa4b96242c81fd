#include "io/row_gather.h"

#include <gtest/gtest.h>

#include "io/batch_test_util.h"
#include "util/random.h"

namespace ctrbox {
namespace {

std::shared_ptr<Batch> MakeBlock(size_t rows, bool weighted, Random* rng) {
  auto b = std::make_shared<Batch>();
  b->Reset(Schema{4, 2});
  BatchBuilder builder(b.get());
  for (size_t r = 0; r < rows; ++r) {
    builder.BeginRow(static_cast<float>(rng->Below(2)));
    builder.SetDense(0, static_cast<float>(rng->Below(100)));
    builder.SetDense(1, static_cast<float>(r));
    for (uint32_t s = 0; s < 4; ++s) {
      for (uint64_t k = rng->Below(3); k > 0; --k) {
        if (weighted) {
          builder.AddKey(s, rng->Next(), 0.25f * static_cast<float>(1 + rng->Below(8)));
        } else {
          builder.AddKey(s, rng->Next());
        }
      }
    }
    builder.EndRow();
  }
  return b;
}

// Differential against Batch::AppendRows: ranges of blocks with and without weights, empty
// ranges, ranges of one block one after another, more blocks than a flush holds, into a
// batch that held a larger pass (its old contents must not show), on 1 to 3 threads.
TEST(RowGatherTest, GathersWhatAppendRowsAppends) {
  Random rng(7);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    Batch out = *MakeBlock(30000, true, &rng);  // stale contents, larger than any gather
    for (int trial = 0; trial < 12; ++trial) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", trial " + std::to_string(trial));
      Batch want;
      want.Reset(Schema{4, 2});
      RowGather gather;
      gather.Begin(Schema{4, 2}, &out);
      const int blocks = 1 + static_cast<int>(rng.Below(12));
      for (int b = 0; b < blocks; ++b) {
        // Weights in some blocks of some trials only: the others' keys weigh 1.
        const bool weighted = trial % 3 == 1 && rng.Below(2) == 0;
        std::shared_ptr<const Batch> block = MakeBlock(rng.Below(20000), weighted, &rng);
        for (size_t at = 0; at < block->rows();) {
          const size_t end = std::min(block->rows(), at + rng.Below(9000));
          want.AppendRows(*block, at, end);
          gather.Add({block, at, end}, threads == 1 ? nullptr : &pool);
          ASSERT_EQ(gather.rows(), want.rows());
          at = end;
        }
      }
      gather.Finish(threads == 1 ? nullptr : &pool);
      ExpectSameBatch(out, want);
    }
  }
}

TEST(RowGatherTest, ARangeKnowsItsKeysAndContentBytes) {
  Random rng(3);
  std::shared_ptr<const Batch> block = MakeBlock(500, true, &rng);
  const RowRange r{block, 100, 250};
  Batch alone;
  alone.Reset(block->schema);
  alone.AppendRows(*block, 100, 250);
  EXPECT_EQ(r.rows(), 150u);
  ASSERT_EQ(r.num_keys(), alone.keys.size());
  EXPECT_TRUE(std::equal(alone.keys.begin(), alone.keys.end(), r.keys()));
  EXPECT_EQ(r.ContentBytes(), alone.ContentBytes());
}

}  // namespace
}  // namespace ctrbox
