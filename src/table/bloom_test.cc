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

// The false positive rate stays near 2 % at 8 bits a key from 8 blocks to 62 500 of them
// (the block a key sets is chosen from its hash: a bias would show at one size or another).
TEST(BloomTest, FalsePositivesStayNearTwoPercentAtEverySize) {
  Random rng(3);
  for (size_t n : {500, 20000, 4000000}) {
    BloomFilter f(n, 8);
    for (size_t i = 0; i < n; ++i) f.Add(rng.Next());
    int fp = 0;
    const int probes = 200000;
    for (int i = 0; i < probes; ++i) fp += f.MayContain(rng.Next());
    const double rate = static_cast<double>(fp) / probes;
    EXPECT_LT(rate, 0.04) << n << " keys";
    EXPECT_GT(rate, 0.005) << n << " keys";
  }
}

// AddAll (the keys' blocks fetched ahead, then set) sets the bits Add sets one key at a time,
// for batches shorter and longer than its look-ahead, and into a filter with words already set.
TEST(BloomTest, AddAllSetsTheBitsOfAddOneByOne) {
  Random rng(2);
  for (size_t n : {0, 1, 7, 8, 9, 100, 5000}) {
    BloomFilter one(4096, 8), all(4096, 8);
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<uint64_t> keys(n);
      for (uint64_t& k : keys) k = rng.Next();
      for (uint64_t k : keys) one.Add(k);
      all.AddAll(keys.data(), keys.size());
      ASSERT_EQ(all.words(), one.words()) << n << " keys, pass " << pass;
    }
  }
  BloomFilter none(0, 0);  // no filter: nothing to set, every key may be there
  const uint64_t key = 42;
  none.AddAll(&key, 1);
  EXPECT_TRUE(none.MayContain(7));
}

}  // namespace
}  // namespace ctrbox
