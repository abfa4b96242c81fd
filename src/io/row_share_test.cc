#include "io/row_share.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace ctrbox {
namespace {

// A batch of `rows` rows numbered from `first` (label = row mod 2, dense = the row number,
// 0..3 keys per slot that name the row; weights when `weighted`).
Batch Numbered(uint64_t first, size_t rows, const Schema& schema, bool weighted,
               std::mt19937_64* rng) {
  Batch b;
  b.Reset(schema);
  BatchBuilder builder(&b);
  for (size_t r = 0; r < rows; ++r) {
    const uint64_t g = first + r;
    builder.BeginRow(static_cast<float>(g % 2));
    for (uint32_t j = 0; j < schema.num_dense; ++j) builder.SetDense(j, static_cast<float>(g + j));
    for (uint32_t s = 0; s < schema.num_slots; ++s) {
      const uint64_t n = (*rng)() % 4;
      for (uint64_t k = 0; k < n; ++k) {
        builder.AddKey(s, g * 100 + s * 10 + k, weighted ? 0.25f * static_cast<float>(k + 1) : 1);
      }
    }
    builder.EndRow();
  }
  return b;
}

// The reference: the share's rows appended one by one into a new batch.
Batch Reference(const RowShare& share, uint64_t first, const Batch& b) {
  Batch out;
  out.Reset(b.schema);
  for (size_t r = 0; r < b.rows(); ++r) {
    if ((first + r) / share.unit % share.count == share.index) out.AppendRows(b, r, r + 1);
  }
  return out;
}

void ExpectSame(const Batch& got, const Batch& want) {
  EXPECT_EQ(got.labels, want.labels);
  EXPECT_EQ(got.dense, want.dense);
  EXPECT_EQ(got.offsets, want.offsets);
  EXPECT_EQ(got.keys, want.keys);
  EXPECT_EQ(got.weights, want.weights);
}

TEST(RowShareTest, KeepsTheShareInPlaceAsTheRowByRowReference) {
  std::mt19937_64 rng(7);
  for (const Schema schema : {Schema{3, 2}, Schema{1, 0}, Schema{0, 4}}) {
    for (bool weighted : {false, true}) {
      for (const RowShare share : {RowShare{0, 2, 5}, RowShare{1, 2, 5}, RowShare{2, 3, 1},
                                   RowShare{1, 4, 64}, RowShare{3, 4, 7}, RowShare{0, 1, 9}}) {
        for (uint64_t first : {uint64_t{0}, uint64_t{3}, uint64_t{130}, uint64_t{1} << 40}) {
          for (size_t rows : {size_t{0}, size_t{1}, size_t{6}, size_t{200}}) {
            SCOPED_TRACE(::testing::Message()
                         << "slots " << schema.num_slots << " dense " << schema.num_dense
                         << " weighted " << weighted << " share " << share.index << "/"
                         << share.count << " unit " << share.unit << " first " << first << " rows "
                         << rows);
            Batch b = Numbered(first, rows, schema, weighted, &rng);
            const Batch want = Reference(share, first, b);
            EXPECT_EQ(KeepRowShare(share, first, &b), want.rows());
            ExpectSame(b, want);
          }
        }
      }
    }
  }
}

TEST(RowShareTest, TheSharesOfAllRanksPartitionTheStream) {
  std::mt19937_64 rng(8);
  const Schema schema{2, 1};
  for (uint32_t count : {2u, 3u, 5u}) {
    // The stream comes in batches of uneven sizes; every row lands in exactly one share.
    std::vector<uint64_t> seen;
    for (uint32_t index = 0; index < count; ++index) {
      uint64_t first = 0;
      for (size_t rows : {7, 1, 30, 0, 64, 11}) {
        Batch b = Numbered(first, rows, schema, false, &rng);
        KeepRowShare(RowShare{index, count, 6}, first, &b);
        for (float d : b.dense) seen.push_back(static_cast<uint64_t>(d));
        first += rows;
      }
    }
    std::sort(seen.begin(), seen.end());
    ASSERT_EQ(seen.size(), 113u) << count;
    for (uint64_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i);
  }
}

}  // namespace
}  // namespace ctrbox
