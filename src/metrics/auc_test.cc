#include "metrics/auc.h"

#include <gtest/gtest.h>

#include <cmath>

#include "util/random.h"

namespace ctrbox {
namespace {

// The definition, pair by pair.
double BruteForceAuc(const std::vector<float>& y, const std::vector<double>& s) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] < 0.5f) continue;
    for (size_t j = 0; j < y.size(); ++j) {
      if (y[j] > 0.5f) continue;
      pairs += 1;
      wins += s[i] > s[j] ? 1.0 : (s[i] == s[j] ? 0.5 : 0.0);
    }
  }
  return pairs == 0 ? 0.5 : wins / pairs;
}

TEST(AucTest, ExactMatchesBruteForceWithTies) {
  Random rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    size_t n = 1 + rng.Below(300);
    std::vector<float> y(n);
    std::vector<double> s(n);
    for (size_t i = 0; i < n; ++i) {
      y[i] = rng.Uniform() < 0.3 ? 1.0f : 0.0f;
      // Coarse scores make many ties; shift positives up a little.
      s[i] = std::floor((rng.Uniform() + 0.2 * y[i]) * (trial % 2 ? 10 : 1000)) / 1000;
    }
    EXPECT_NEAR(ExactAuc(y, s), BruteForceAuc(y, s), 1e-12) << trial;
  }
}

TEST(AucTest, DegenerateCases) {
  EXPECT_EQ(ExactAuc({}, {}), 0.5);
  EXPECT_EQ(ExactAuc({1, 1}, {0.2, 0.3}), 0.5);
  EXPECT_EQ(ExactAuc({0, 1}, {0.2, 0.3}), 1.0);
  EXPECT_EQ(ExactAuc({1, 0}, {0.2, 0.3}), 0.0);
  BucketAuc b(16);
  EXPECT_EQ(b.Auc(), 0.5);
}

TEST(AucTest, BucketedIsCloseToExactAndMerges) {
  Random rng(2);
  std::vector<float> y;
  std::vector<double> s;
  BucketAuc whole, a, b;
  for (int i = 0; i < 200000; ++i) {
    double z = rng.Gaussian() - 1.5;
    double p = 1.0 / (1.0 + std::exp(-z));
    float label = rng.Uniform() < p ? 1.0f : 0.0f;
    double pred = 1.0 / (1.0 + std::exp(-(z + 0.8 * rng.Gaussian())));
    y.push_back(label);
    s.push_back(pred);
    whole.Add(label, pred);
    (i % 2 ? a : b).Add(label, pred);
  }
  double exact = ExactAuc(y, s);
  EXPECT_NEAR(whole.Auc(), exact, 1e-5);
  a.Merge(b);
  EXPECT_EQ(a.Auc(), whole.Auc());
  EXPECT_NEAR(exact,
              BruteForceAuc(std::vector<float>(y.begin(), y.begin() + 2000),
                            std::vector<double>(s.begin(), s.begin() + 2000)),
              0.05);
}

// The plain dense-count estimator BucketAuc was before it kept ids while small.
double DenseReference(const std::vector<float>& y, const std::vector<double>& s, size_t n) {
  std::vector<uint64_t> pos(n, 0), neg(n, 0);
  for (size_t i = 0; i < y.size(); ++i) {
    const double x = s[i] * static_cast<double>(n);
    const size_t b = x <= 0 ? 0 : (x >= static_cast<double>(n) ? n - 1 : static_cast<size_t>(x));
    ++(y[i] > 0.5f ? pos : neg)[b];
  }
  double area = 0, neg_below = 0, total_pos = 0;
  for (size_t i = 0; i < n; ++i) {
    const double p = static_cast<double>(pos[i]), q = static_cast<double>(neg[i]);
    area += p * (neg_below + 0.5 * q);
    neg_below += q;
    total_pos += p;
  }
  if (total_pos == 0 || neg_below == 0) return 0.5;
  return area / (total_pos * neg_below);
}

TEST(AucTest, KeptIdsAndCountsGiveTheSameBitsAsDenseCounts) {
  // 4096 buckets: ids are kept up to 256 examples, then counted. Coarse predictions make
  // many ties; every prefix, and merges of kept with counted halves, match the reference.
  constexpr size_t kBuckets = 4096;
  Random rng(7);
  std::vector<float> y;
  std::vector<double> s;
  BucketAuc whole(kBuckets);
  for (int i = 0; i < 1200; ++i) {
    const double pred = std::floor(rng.Uniform() * 300.0) / 300.0;
    const float label = rng.Uniform() < pred ? 1.0f : 0.0f;
    y.push_back(label);
    s.push_back(pred);
    whole.Add(label, pred);
    ASSERT_EQ(whole.Auc(), DenseReference(y, s, kBuckets)) << i;
  }
  for (size_t split : {size_t{10}, size_t{200}, size_t{700}, size_t{1190}}) {
    BucketAuc a(kBuckets), b(kBuckets);
    for (size_t i = 0; i < y.size(); ++i) (i < split ? a : b).Add(y[i], s[i]);
    BucketAuc ab = a, ba = b;
    ab.Merge(b);
    ba.Merge(a);
    EXPECT_EQ(ab.Auc(), whole.Auc()) << split;
    EXPECT_EQ(ba.Auc(), whole.Auc()) << split;
  }
  whole.Reset();
  EXPECT_EQ(whole.Auc(), 0.5);
  whole.Add(1.0f, 0.9);
  whole.Add(0.0f, 0.1);
  EXPECT_EQ(whole.Auc(), 1.0);
}

}  // namespace
}  // namespace ctrbox
