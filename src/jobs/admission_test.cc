#include "jobs/admission.h"

#include <gtest/gtest.h>

#include <unordered_map>

#include "util/random.h"

namespace ctrbox {
namespace {

// Against an exact reference (a filter large enough to count these keys exactly): each
// occurrence is kept once its key has been seen min_count times, in row order; offsets and
// weights follow.
TEST(AdmissionTest, KeepsAnOccurrenceOnceItsKeyWasSeenMinCountTimes) {
  Random rng(3);
  Batch b;
  b.Reset(Schema{3, 0});
  for (int r = 0; r < 400; ++r) {
    b.labels.push_back(static_cast<float>(r % 2));
    for (int s = 0; s < 3; ++s) {
      const int n = static_cast<int>(rng.Below(3));  // 0 to 2 keys: empty slots too
      for (int k = 0; k < n; ++k) {
        b.keys.push_back(s * 1000 + rng.Below(s == 0 ? 20 : 300));
        b.weights.push_back(static_cast<float>(b.keys.size()));
      }
      b.offsets.push_back(static_cast<uint32_t>(b.keys.size()));
    }
  }
  for (uint32_t min_count : {1u, 2u, 4u}) {
    Batch got = b;
    Admission admission(min_count, 20);
    admission.Filter(&got);
    std::unordered_map<uint64_t, uint32_t> seen;
    Batch want = b;
    want.keys.clear();
    want.weights.clear();
    for (size_t l = 0; l + 1 < b.offsets.size(); ++l) {
      for (uint32_t i = b.offsets[l]; i < b.offsets[l + 1]; ++i) {
        if (++seen[b.keys[i]] >= min_count) {
          want.keys.push_back(b.keys[i]);
          want.weights.push_back(b.weights[i]);
        }
      }
      want.offsets[l + 1] = static_cast<uint32_t>(want.keys.size());
    }
    EXPECT_EQ(got.keys, want.keys) << "min_count " << min_count;
    EXPECT_EQ(got.weights, want.weights);
    EXPECT_EQ(got.offsets, want.offsets);
    EXPECT_EQ(admission.counts().occurrences, b.keys.size());
    EXPECT_EQ(admission.counts().dropped, b.keys.size() - want.keys.size());
    if (min_count > 1) EXPECT_LT(got.keys.size(), b.keys.size());
  }
}

}  // namespace
}  // namespace ctrbox
