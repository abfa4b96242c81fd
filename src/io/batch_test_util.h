// Tests' check that two batches hold the same rows, column by column (a failure names the
// column).
#ifndef CTRBOX_IO_BATCH_TEST_UTIL_H_
#define CTRBOX_IO_BATCH_TEST_UTIL_H_

#include <gtest/gtest.h>

#include "io/batch.h"

namespace ctrbox {

inline void ExpectSameBatch(const Batch& got, const Batch& want) {
  EXPECT_EQ(got.schema, want.schema);
  EXPECT_EQ(got.labels, want.labels);
  EXPECT_EQ(got.dense, want.dense);
  EXPECT_EQ(got.offsets, want.offsets);
  EXPECT_EQ(got.keys, want.keys);
  EXPECT_EQ(got.weights, want.weights);
}

}  // namespace ctrbox

#endif  // CTRBOX_IO_BATCH_TEST_UTIL_H_
