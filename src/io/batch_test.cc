#include "io/batch.h"

#include <gtest/gtest.h>

namespace ctrbox {
namespace {

TEST(BatchTest, BuilderGroupsKeysBySlotStably) {
  Batch b;
  b.Reset(Schema{3, 1});
  BatchBuilder builder(&b);
  builder.BeginRow(1);
  builder.SetDense(0, 2.5f);
  builder.AddKey(2, 20);
  builder.AddKey(0, 1);
  builder.AddKey(2, 21);
  builder.EndRow();
  builder.BeginRow(0);
  builder.AddKey(1, 99);
  builder.AbortRow();
  builder.BeginRow(0);
  builder.EndRow();  // all slots empty
  ASSERT_EQ(b.rows(), 2u);
  EXPECT_EQ(b.labels, (std::vector<float>{1, 0}));
  EXPECT_EQ(b.dense, (std::vector<float>{2.5f, 0}));
  EXPECT_EQ(b.keys, (std::vector<uint64_t>{1, 20, 21}));
  EXPECT_EQ(b.offsets, (std::vector<uint32_t>{0, 1, 1, 3, 3, 3, 3}));
  EXPECT_FALSE(b.has_weights());
}

TEST(BatchTest, WeightsAreBackfilledWithOnes) {
  Batch b;
  b.Reset(Schema{1, 0});
  BatchBuilder builder(&b);
  builder.BeginRow(0);
  builder.AddKey(0, 5);
  builder.EndRow();
  builder.BeginRow(1);
  builder.AddKey(0, 6, 0.5f);
  builder.EndRow();
  EXPECT_EQ(b.weights, (std::vector<float>{1.0f, 0.5f}));
}

TEST(BatchTest, AppendRowsRebasesOffsets) {
  Batch src;
  src.Reset(Schema{2, 0});
  BatchBuilder builder(&src);
  for (uint64_t r = 0; r < 4; ++r) {
    builder.BeginRow(static_cast<float>(r % 2));
    for (uint64_t k = 0; k <= r; ++k) builder.AddKey(static_cast<uint32_t>(k % 2), r * 10 + k);
    builder.EndRow();
  }
  Batch dst;
  dst.Reset(Schema{2, 0});
  dst.AppendRows(src, 2, 4);
  dst.AppendRows(src, 0, 1);
  ASSERT_EQ(dst.rows(), 3u);
  EXPECT_EQ(dst.keys, (std::vector<uint64_t>{20, 22, 21, 30, 32, 31, 33, 0}));
  EXPECT_EQ(dst.offsets, (std::vector<uint32_t>{0, 2, 3, 5, 7, 8, 8}));
  EXPECT_EQ(dst.labels, (std::vector<float>{0, 1, 0}));
}

}  // namespace
}  // namespace ctrbox
