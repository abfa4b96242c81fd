#include "util/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "util/random.h"

namespace ctrbox {
namespace {

// The bfloat16 values just below and above x (x's own if it is one): the reference brackets.
void Bracket(float x, float* lo, float* hi) {
  const uint32_t b = FloatBits(x);
  *lo = BitsFloat(b & 0xFFFF0000u);
  *hi = (b & 0xFFFFu) == 0 ? *lo : BitsFloat((b & 0xFFFF0000u) + 0x10000u);
}

TEST(Bf16Test, RoundsToANeighbourUnbiasedAndKeepsSpecialValues) {
  Random rng(7);
  for (float x : {0.0f, 1.0f, 3.14159f, 1e-10f, 2.5e-7f, 123456.7f, 1e30f, -0.3f, 7.0e-39f}) {
    SCOPED_TRACE(x);
    float lo = 0, hi = 0;
    Bracket(x, &lo, &hi);
    double sum = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      const float r = RoundBf16(x, static_cast<uint32_t>(rng.Next()));
      ASSERT_TRUE(r == lo || r == hi) << r;
      ASSERT_EQ(FloatBits(r) & 0xFFFFu, 0u);
      ASSERT_EQ(FloatOfBf16(Bf16Of(r)), r);  // stored in 16 bits exactly
      sum += r;
    }
    // Unbiased: the mean is x within a few standard errors of the two-point draw.
    const double spread = std::abs(double(hi) - double(lo));
    EXPECT_NEAR(sum / n, double(x), 5 * spread / std::sqrt(double(n)) + 1e-45);
  }
  // A value on the grid stays; the draw 0 truncates, the draw 0xFFFF rounds up unless exact.
  EXPECT_EQ(RoundBf16(1.5f, 0xFFFF), 1.5f);
  EXPECT_EQ(RoundBf16(BitsFloat(0x3F800001u), 0), 1.0f);
  EXPECT_EQ(RoundBf16(BitsFloat(0x3F800001u), 0xFFFF), BitsFloat(0x3F810000u));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(RoundBf16(inf, 0xFFFF), inf);
  EXPECT_EQ(RoundBf16(-inf, 0xFFFF), -inf);
  // A NaN whose payload lies in the low half stays a NaN (truncation would make infinity).
  EXPECT_TRUE(std::isnan(RoundBf16(BitsFloat(0x7F800001u), 0)));
  EXPECT_TRUE(std::isnan(FloatOfBf16(Bf16Of(RoundBf16(BitsFloat(0x7F800001u), 0)))));
}

}  // namespace
}  // namespace ctrbox
