#include "model/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace ctrbox {
namespace {

TEST(SparseOptimizerTest, AdagradSgdAdamMatchTheirFormulas) {
  const float g[3] = {0.5f, -1.0f, 0.0f};
  {
    OptimizerOptions o;  // adagrad, lr 0.05, eps 1e-10
    SparseOptimizer opt(o);
    ASSERT_EQ(opt.StateFloats(3), 3u);
    // Room for any kind's state: GCC cannot see that Adam's indexes are not taken here.
    float w[3] = {1, 2, 3};
    std::vector<float> s(8, 0.0f);
    for (int step = 1; step <= 3; ++step) {
      double expect[3];
      for (int i = 0; i < 3; ++i) {
        double state = step * double(g[i]) * g[i];
        expect[i] = w[i] - 0.05 * g[i] / (std::sqrt(state) + 1e-10);
      }
      opt.Update(w, s.data(), g, 3);
      for (int i = 0; i < 3; ++i) EXPECT_NEAR(w[i], expect[i], 1e-6);
    }
  }
  {
    OptimizerOptions o;
    o.kind = OptimizerKind::kSgd;
    o.lr = 0.1f;
    SparseOptimizer opt(o);
    EXPECT_EQ(opt.StateFloats(3), 0u);
    float w[3] = {1, 2, 3};
    std::vector<float> unused(8);  // SGD keeps no state
    opt.Update(w, unused.data(), g, 3);
    EXPECT_FLOAT_EQ(w[0], 0.95f);
    EXPECT_FLOAT_EQ(w[1], 2.1f);
  }
  {
    OptimizerOptions o;
    o.kind = OptimizerKind::kAdam;
    o.lr = 0.01f;
    o.epsilon = 1e-8f;
    SparseOptimizer opt(o);
    ASSERT_EQ(opt.StateFloats(3), 8u);
    float w[3] = {1, 2, 3}, s[8] = {};
    double m[3] = {}, v[3] = {}, ref[3] = {1, 2, 3};
    for (int t = 1; t <= 5; ++t) {
      opt.Update(w, s, g, 3);
      for (int i = 0; i < 3; ++i) {
        m[i] = 0.9 * m[i] + 0.1 * g[i];
        v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
        double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
        ref[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
        EXPECT_NEAR(w[i], ref[i], 1e-5) << t << " " << i;
      }
    }
  }
}

TEST(SparseOptimizerTest, RowwiseAdagradMatchesItsFormula) {
  // FBGEMM's rowwise_adagrad: one state value per row, s += mean_i g_i^2, then every element
  // steps by lr * g_i / (sqrt(s) + eps). Reference in double, gradients varying per step.
  OptimizerOptions o;
  o.kind = OptimizerKind::kRowwiseAdagrad;
  o.lr = 0.05f;
  o.epsilon = 1e-10f;
  SparseOptimizer opt(o);
  ASSERT_EQ(opt.StateFloats(4), 1u);
  ASSERT_EQ(opt.StateFloats(1), 1u);  // the wide weight: one value, plain Adagrad
  // Room for any kind's state: GCC cannot see that Adam's indexes are not taken here.
  float w[4] = {1, -2, 0.5f, 0};
  std::vector<float> s(16, 0.0f), s1(8, 0.0f), s2(8, 0.0f);
  double ref[4] = {1, -2, 0.5, 0}, state = 0;
  for (int t = 1; t <= 6; ++t) {
    const float g[4] = {0.5f / t, -1.0f, 0.0f, 0.25f * t};
    double mean_sq = 0;
    for (float gi : g) mean_sq += double(gi) * gi / 4;
    state += mean_sq;
    for (int i = 0; i < 4; ++i) ref[i] -= 0.05 * g[i] / (std::sqrt(state) + 1e-10);
    opt.Update(w, s.data(), g, 4);
    EXPECT_NEAR(s[0], state, 1e-6 * state) << t;
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(w[i], ref[i], 1e-6) << t << " " << i;
    for (int i = 1; i < 8; ++i) EXPECT_EQ(s[i], 0.0f);  // touches its one value only
  }
  // On one element it is per-element Adagrad.
  OptimizerOptions a;
  SparseOptimizer adagrad(a);
  float w1 = 0.3f, w2 = 0.3f;
  for (float g : {0.2f, -0.7f, 1.5f}) {
    opt.Update(&w1, s1.data(), &g, 1);
    adagrad.Update(&w2, s2.data(), &g, 1);
    EXPECT_FLOAT_EQ(w1, w2);
  }
  OptimizerKind k;
  ASSERT_TRUE(ParseOptimizerKind("rowwise_adagrad", &k));
  EXPECT_EQ(k, OptimizerKind::kRowwiseAdagrad);
  EXPECT_EQ(OptimizerKindName(k), "rowwise_adagrad");
}

// optimizer.sparse.state_bits: 16: RoundState puts the state on the bfloat16 grid, draws from
// (seed, stream) only, and is unbiased, so Adagrad's sum of squares keeps growing by
// increments far below one bfloat16 step (round-to-nearest would drop every one of them).
TEST(SparseOptimizerTest, Bf16StateIsRoundedStochasticallyAndKeepsSmallIncrements) {
  OptimizerOptions o;
  o.state_bits = 16;
  SparseOptimizer opt(o);
  float a[6] = {1.0f, 0.3f, 2.5e-6f, 7.7f, 1e-12f, 0.0f}, b[6];
  std::copy(a, a + 6, b);
  opt.RoundState(a, 6, 11, 99);
  opt.RoundState(b, 6, 11, 99);
  for (int d = 0; d < 6; ++d) {
    EXPECT_EQ(a[d], b[d]) << d;                     // the same draws
    EXPECT_EQ(FloatBits(a[d]) & 0xFFFFu, 0u) << d;  // on the grid
  }
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(a[5], 0.0f);
  // 4000 steps of g = 0.01 on a sum that starts at 1: each increment (1e-4) is under a
  // fortieth of a bfloat16 step at 1 (2^-7) and the exact sum ends at 1.4.
  float w = 0, s = 1.0f;
  for (int t = 0; t < 4000; ++t) {
    const float g = 0.01f;
    opt.Update(&w, &s, &g, 1);
    opt.RoundState(&s, 1, 3, t);
    ASSERT_EQ(FloatBits(s) & 0xFFFFu, 0u);
  }
  EXPECT_NEAR(s, 1.4f, 0.03f);
  // With state_bits 0 the state is left as it is.
  SparseOptimizer plain{OptimizerOptions{}};
  float c = 0.3f;
  plain.RoundState(&c, 1, 1, 1);
  EXPECT_EQ(c, 0.3f);
}

TEST(DenseOptimizerTest, AdamMatchesPyTorchFormula) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.lr = 1e-3f;
  o.epsilon = 1e-8f;
  DenseOptimizer opt(o, 4);
  float p[4] = {0.1f, -0.2f, 0.3f, 0.0f};
  double ref[4] = {0.1, -0.2, 0.3, 0.0}, m[4] = {}, v[4] = {};
  for (int t = 1; t <= 10; ++t) {
    float g[4] = {0.01f * t, -0.5f, 1.0f / t, 0.0f};
    opt.BeginStep();
    opt.Update(p, g, 0, 2);  // in two ranges, as tiles do
    opt.Update(p, g, 2, 2);
    for (int i = 0; i < 4; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * double(g[i]) * g[i];
      double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8;
      ref[i] -= 1e-3 / (1 - std::pow(0.9, t)) * m[i] / denom;
      EXPECT_NEAR(p[i], ref[i], 1e-6) << t << " " << i;
    }
  }
  EXPECT_EQ(opt.step(), 10u);
}

}  // namespace
}  // namespace ctrbox
