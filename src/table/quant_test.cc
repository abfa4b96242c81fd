#include "table/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "table/accessor.h"
#include "table/value.h"
#include "util/random.h"

namespace ctrbox {
namespace {

// The paper's definitions written out plainly (long double, no clamping tricks): the
// reference the quantizer is checked against.
long double RefDelta(uint32_t bits, float w) {
  return 2.0L * w / (std::ldexp(1.0L, static_cast<int>(bits)) - 1.0L);
}
long long RefCode(uint32_t bits, float w, float x, float u) {
  const long long m = (1LL << (bits - 1)) - 1;
  // x stored as the float of grid point c stays c.
  for (long long c = static_cast<long long>(std::floor(x / RefDelta(bits, w))) - 1, e = c + 3;
       c < e; ++c) {
    if (c >= -m && c <= m && static_cast<float>(c * static_cast<double>(RefDelta(bits, w))) == x) {
      return c;
    }
  }
  const long double clipped = std::fmin(std::fmax(static_cast<long double>(x), -w), w);
  long long i = static_cast<long long>(std::floor(clipped / RefDelta(bits, w) + u));
  return i < -m ? -m : (i > m ? m : i);
}

TEST(QuantizerTest, GridAndCodeRange) {
  for (uint32_t bits : {2u, 4u, 8u, 12u, 16u}) {
    for (float w : {0.01f, 1.0f, 100.0f}) {
      Quantizer q(bits, w);
      SCOPED_TRACE(testing::Message() << "bits " << bits << " w " << w);
      EXPECT_EQ(q.max_code(), (1 << (bits - 1)) - 1);
      EXPECT_EQ(q.code_bytes(), bits <= 8 ? 1u : 2u);
      EXPECT_NEAR(q.delta(), static_cast<double>(RefDelta(bits, w)), 1e-12 * w);
      // Every code's value is inside [-w, w] and maps back to itself (exact grid).
      for (int32_t c = -q.max_code(); c <= q.max_code(); c += bits > 12 ? 7 : 1) {
        const float v = q.Value(c);
        ASSERT_LE(std::fabs(v), w);
        ASSERT_EQ(q.Code(v, 0.5f), c) << "code " << c;
        // Stochastic rounding of a value on the grid never moves it.
        ASSERT_EQ(q.Code(v, 0.0f), c);
        ASSERT_EQ(q.Code(v, 0.999999f), c);
      }
    }
  }
}

TEST(QuantizerTest, NearestAndStochasticMatchTheReference) {
  Random rng(7);
  for (uint32_t bits : {4u, 8u, 12u, 16u}) {
    for (float w : {0.1f, 1.0f, 10.0f}) {
      Quantizer q(bits, w);
      for (int i = 0; i < 20000; ++i) {
        const float x = static_cast<float>((rng.Uniform() * 2.4 - 1.2) * w);
        const float u = rng.UniformFloat();
        ASSERT_EQ(q.Code(x, 0.5f), RefCode(bits, w, x, 0.5f)) << bits << " " << w << " " << x;
        ASSERT_EQ(q.Code(x, u), RefCode(bits, w, x, u)) << bits << " " << w << " " << x << " " << u;
      }
    }
  }
}

TEST(QuantizerTest, NearestIsWithinHalfAStep) {
  Quantizer q(8, 1.0f);
  Random rng(3);
  for (int i = 0; i < 10000; ++i) {
    const float x = static_cast<float>(rng.Uniform() * 1.98 - 0.99);
    EXPECT_LE(std::fabs(q.Value(q.Code(x, 0.5f)) - x), q.delta() / 2 + 1e-7);
  }
}

TEST(QuantizerTest, ClipsOutsideTheRange) {
  for (uint32_t bits : {8u, 16u}) {
    Quantizer q(bits, 1.0f);
    for (float x : {1.0f, 1.5f, 1e30f, INFINITY}) {
      EXPECT_EQ(q.Code(x, 0.5f), q.max_code());
      EXPECT_EQ(q.Code(x, 0.99f), q.max_code());
      EXPECT_EQ(q.Code(-x, 0.5f), -q.max_code());
      EXPECT_EQ(q.Code(-x, 0.0f), -q.max_code());
    }
    EXPECT_EQ(q.Code(NAN, 0.5f), 0);
  }
}

TEST(QuantizerTest, StochasticRoundingIsUnbiased) {
  // The mean of many stochastic roundings of x is x (within a few standard errors), for
  // values between grid points; nearest rounding of the same x is biased by up to Δ/2.
  for (uint32_t bits : {4u, 8u, 16u}) {
    Quantizer q(bits, 1.0f);
    const double step = q.delta();
    for (double frac : {0.1, 0.25, 0.5, 0.9}) {
      const float x = static_cast<float>((3 + frac) * step);
      const int n = 200000;
      double sum = 0;
      for (int i = 0; i < n; ++i) {
        float v = x;
        q.Round(&v, 1, QuantRounding::kStochastic, 11, static_cast<uint64_t>(i));
        sum += v;
      }
      const double mean = sum / n;
      // Each rounding is x's floor or ceiling: standard deviation ≤ Δ/2 per draw.
      const double se = step * std::sqrt(frac * (1 - frac) / n);
      EXPECT_NEAR(mean, x, 5 * se + 1e-6 * step) << "bits " << bits << " frac " << frac;
      float nearest = x;
      q.Round(&nearest, 1, QuantRounding::kNearest, 0, 0);
      if (frac != 0.5) {
        EXPECT_GT(std::fabs(nearest - x), 0.09 * step);
      }
    }
  }
}

TEST(QuantizerTest, StochasticIsDeterministicUnderASeed) {
  Quantizer q(8, 1.0f);
  std::vector<float> base(33);
  Random rng(5);
  for (float& v : base) v = static_cast<float>(rng.Uniform() - 0.5);
  auto round = [&](uint64_t seed, uint64_t stream) {
    std::vector<float> v = base;
    q.Round(v.data(), static_cast<uint32_t>(v.size()), QuantRounding::kStochastic, seed, stream);
    return v;
  };
  EXPECT_EQ(round(1, 42), round(1, 42));
  EXPECT_NE(round(1, 42), round(2, 42));
  EXPECT_NE(round(1, 42), round(1, 43));
  // Element d's draw depends on d, not on how many elements are rounded in the call.
  std::vector<float> prefix(base.begin(), base.begin() + 10);
  q.Round(prefix.data(), 10, QuantRounding::kStochastic, 1, 42);
  const std::vector<float> full = round(1, 42);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), full.begin()));
}

TEST(QuantizerTest, EncodeDecodeKeepsCodes) {
  for (uint32_t bits : {3u, 8u, 9u, 16u}) {
    Quantizer q(bits, 0.5f);
    std::vector<float> x;
    for (int32_t c = -q.max_code(); c <= q.max_code(); c += bits > 9 ? 97 : 1) {
      x.push_back(q.Value(c));
    }
    x.push_back(q.Value(q.max_code()));
    std::string bytes(q.StoredBytes(static_cast<uint32_t>(x.size())), '\0');
    q.Encode(x.data(), static_cast<uint32_t>(x.size()), bytes.data());
    std::vector<float> back(x.size());
    q.Decode(bytes.data(), static_cast<uint32_t>(x.size()), back.data());
    EXPECT_EQ(back, x) << "bits " << bits;
  }
}

TEST(QuantizerTest, OptionsValidation) {
  EXPECT_EQ(QuantOptionsError(QuantOptions{}), "");
  EXPECT_EQ(QuantOptionsError(QuantOptions{8, 1.0f}), "");
  EXPECT_NE(QuantOptionsError(QuantOptions{1, 1.0f}), "");
  EXPECT_NE(QuantOptionsError(QuantOptions{17, 1.0f}), "");
  EXPECT_NE(QuantOptionsError(QuantOptions{8, 0.0f}), "");
  EXPECT_NE(QuantOptionsError(QuantOptions{8, INFINITY}), "");
  QuantRounding r;
  EXPECT_TRUE(ParseQuantRounding("nearest", &r));
  EXPECT_EQ(r, QuantRounding::kNearest);
  EXPECT_TRUE(ParseQuantRounding("stochastic", &r));
  EXPECT_EQ(r, QuantRounding::kStochastic);
  EXPECT_FALSE(ParseQuantRounding("fix", &r));
}

TEST(QuantizedRowTest, EncodingStoresCodesAndShrinksTheRow) {
  ValueLayout f{16, 16, 1};
  ValueLayout q8 = f, q16 = f;
  q8.quant_bits = 8;
  q16.quant_bits = 16;
  EXPECT_EQ(f.EncodedBytes(true) - q16.EncodedBytes(true), 32u);
  EXPECT_EQ(f.EncodedBytes(true) - q8.EncodedBytes(true), 48u);
  EXPECT_EQ(f.EncodedBytes(false), q8.EncodedBytes(false));

  // A created embedding is on the grid, so the canonical encoding round-trips it exactly.
  for (const ValueLayout& l : {q8, q16}) {
    CtrAccessor acc(l, AccessorOptions{});
    RowBlock a(l), b(l);
    a.Resize(1);
    b.Resize(1);
    acc.InitRow(&a, 0, 12345);
    ASSERT_TRUE(a.has_emb(0));
    const Quantizer quant = l.quantizer();
    for (uint32_t d = 0; d < l.dim; ++d) {
      EXPECT_EQ(quant.Value(quant.Code(a.emb(0)[d], 0.5f)), a.emb(0)[d]);
      EXPECT_LE(std::fabs(a.emb(0)[d]), 0.01f + quant.delta());
    }
    std::string enc;
    a.EncodeRow(0, &enc);
    ASSERT_EQ(enc.size(), l.EncodedBytes(true));
    ASSERT_EQ(b.DecodeRow(enc.data(), enc.size(), 0), enc.size());
    for (uint32_t d = 0; d < l.dim; ++d) EXPECT_EQ(b.emb(0)[d], a.emb(0)[d]);
  }
}

}  // namespace
}  // namespace ctrbox
