#include "table/bloom.h"

#include <gtest/gtest.h>

#include "util/random.h"

namespace ctrbox {
namespace {

TEST(BloomTest, NoFalseNegativesAndAboutTwoPercentFalsePositives) {
  BloomFilter f(100000, 8);
  Random rng(1);
  std::vector<uint64_t> keys(100000);
  for (uint64_t& k : keys) {
    k = rng.Next();
    f.Add(k);
  }
  for (uint64_t k : keys) ASSERT_TRUE(f.MayContain(k));
  int fp = 0;
  const int probes = 200000;
  for (int i = 0; i < probes; ++i) fp += f.MayContain(rng.Next());
  const double rate = static_cast<double>(fp) / probes;
  RecordProperty("false_positive_rate", std::to_string(rate));
  EXPECT_LT(rate, 0.04);
  EXPECT_GT(rate, 0.005);  // a filter that says no to everything would be wrong elsewhere
  // Round trip through words().
  BloomFilter g(f.words(), f.hashes());
  for (uint64_t k : keys) ASSERT_TRUE(g.MayContain(k));
  EXPECT_EQ(g.num_bits(), f.num_bits());
}

}  // namespace
}  // namespace ctrbox
