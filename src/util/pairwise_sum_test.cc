#include "util/pairwise_sum.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <map>
#include <vector>

#include "util/random.h"

namespace ctrbox {
namespace {

// The reference: the dyadic tree written out, node [lo, lo + 2^h) = left half + right half,
// an empty half skipped.
bool TreeSum(const std::map<uint64_t, float>& leaves, uint64_t lo, int h, float* out) {
  if (h == 0) {
    auto it = leaves.find(lo);
    if (it == leaves.end()) return false;
    *out = it->second;
    return true;
  }
  const uint64_t half = uint64_t{1} << (h - 1);
  float a = 0, b = 0;
  const bool has_a = TreeSum(leaves, lo, h - 1, &a), has_b = TreeSum(leaves, lo + half, h - 1, &b);
  if (has_a && has_b) *out = a + b;
  if (has_a != has_b) *out = has_a ? a : b;
  return has_a || has_b;
}

// The stack's sum of leaves (position, value) in increasing position.
float StackSum(const std::vector<std::pair<uint64_t, float>>& leaves) {
  PairwiseStack stack;
  float slot[PairwiseStack::kMaxSlots];
  auto merge = [&](int into, int from) { slot[into] += slot[from]; };
  for (const auto& [pos, v] : leaves) slot[stack.Push(pos, merge)] = v;
  stack.Finish(merge);
  return slot[0];
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Values of many magnitudes, so that any other order of the additions shows in the bits.
float Value(Random* rng) {
  return static_cast<float>((rng->Uniform() - 0.5) *
                            std::ldexp(1.0, static_cast<int>(rng->Below(40)) - 20));
}

// HighBit (the tree's link level, plain arithmetic so that device code computes it too) is
// 63 - std::countl_zero on the host, for every single bit, every bit below it set, and
// random values.
TEST(PairwiseSumTest, HighBitIsTheHostsCountLeadingZeros) {
  Random rng(7);
  std::vector<uint64_t> xs;
  for (int b = 0; b < 64; ++b) {
    xs.push_back(uint64_t{1} << b);
    xs.push_back((uint64_t{1} << b) | ((uint64_t{1} << b) - 1));
  }
  for (int i = 0; i < 10000; ++i) xs.push_back(rng.Next() | 1);
  for (const uint64_t x : xs) EXPECT_EQ(HighBit(x), 63 - std::countl_zero(x)) << x;
}

TEST(PairwiseSumTest, EqualsTheDyadicTreeForAnySetOfLeaves) {
  Random rng(1);
  for (int trial = 0; trial < 2000; ++trial) {
    const int bits = 1 + static_cast<int>(rng.Below(7));
    std::map<uint64_t, float> leaves;
    for (uint64_t p = 0; p < (uint64_t{1} << bits); ++p) {
      if (rng.Below(3) != 0) leaves[p] = Value(&rng);
    }
    if (leaves.empty()) continue;
    float want = 0;
    ASSERT_TRUE(TreeSum(leaves, 0, bits, &want));
    const float got = StackSum({leaves.begin(), leaves.end()});
    ASSERT_EQ(Bits(got), Bits(want)) << "trial " << trial;
  }
}

// Cut the positions into 2^k dyadic parts (ranks), sum each part on its own, then sum the
// parts' results at the parts' indices: the bits of the one-pass sum, for every k.
TEST(PairwiseSumTest, PartsSummedAloneThenTogetherGiveTheOnePassBits) {
  Random rng(2);
  int differs_in_rank_order = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const int bits = 4;  // 16 blocks
    std::vector<std::pair<uint64_t, float>> leaves;
    for (uint64_t p = 0; p < 16; ++p) {
      if (rng.Below(4) != 0) leaves.push_back({p, Value(&rng)});
    }
    if (leaves.empty()) continue;
    const float whole = StackSum(leaves);
    for (int k = 0; k <= bits; ++k) {
      const uint64_t per = uint64_t{1} << (bits - k);  // positions per part
      std::vector<std::pair<uint64_t, float>> parts;
      float in_rank_order = 0;
      bool first = true;
      for (uint64_t part = 0; part < (uint64_t{1} << k); ++part) {
        std::vector<std::pair<uint64_t, float>> mine;
        for (const auto& l : leaves) {
          if (l.first / per == part) mine.push_back(l);
        }
        if (mine.empty()) continue;  // a part with no leaf sends nothing
        const float s = StackSum(mine);
        parts.push_back({part, s});
        in_rank_order = first ? s : in_rank_order + s;
        first = false;
      }
      ASSERT_EQ(Bits(StackSum(parts)), Bits(whole)) << "trial " << trial << ", " << k;
      differs_in_rank_order += Bits(in_rank_order) != Bits(whole);
    }
  }
  // (Summing the parts in rank order, as before, would not do.)
  EXPECT_GT(differs_in_rank_order, 100);
}

}  // namespace
}  // namespace ctrbox
