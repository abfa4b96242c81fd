#include "util/hash.h"

#include <gtest/gtest.h>

#include <unordered_set>

#include "util/random.h"

namespace ctrbox {
namespace {

TEST(HashTest, FeatureKeysDependOnSlotAndValue) {
  EXPECT_EQ(FeatureKey(3, std::string_view("68fd1e64")),
            FeatureKey(3, std::string_view("68fd1e64")));
  EXPECT_NE(FeatureKey(3, std::string_view("68fd1e64")),
            FeatureKey(4, std::string_view("68fd1e64")));
  EXPECT_NE(FeatureKey(0, uint64_t{1}), FeatureKey(1, uint64_t{1}));
  // Pinned values: keys are part of the shard and model formats and must never change.
  EXPECT_EQ(FeatureKey(0, uint64_t{0}), 0x21469cf2aff815e1ULL)
      << std::hex << FeatureKey(0, uint64_t{0});
}

TEST(HashTest, NoCollisionsAmongManyKeys) {
  std::unordered_set<uint64_t> seen;
  for (uint32_t slot = 0; slot < 26; ++slot) {
    for (uint64_t v = 0; v < 20000; ++v) ASSERT_TRUE(seen.insert(FeatureKey(slot, v)).second);
  }
}

TEST(RandomTest, DeterministicAndInRange) {
  Random a(42), b(42);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(a.Next(), b.Next());
    double u = a.Uniform();
    b.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  float x = HashUniform(1, 99, 3, 0.01f);
  EXPECT_EQ(x, HashUniform(1, 99, 3, 0.01f));
  EXPECT_LE(std::abs(x), 0.01f);
}

}  // namespace
}  // namespace ctrbox
