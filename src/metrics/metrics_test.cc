#include "metrics/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

namespace ctrbox {
namespace {

TEST(MetricsTest, LoglossCopcAndCtr) {
  MetricAccumulator m(1024);
  m.Add(1, 0.8);
  m.Add(0, 0.2);
  m.Add(0, 0.4);
  m.Add(1, 1.0);  // clipped in logloss
  MetricSummary s = m.Summary();
  EXPECT_EQ(s.examples, 4u);
  double expect_ll = -(std::log(0.8) + std::log(0.8) + std::log(0.6) + std::log(1 - 1e-7)) / 4;
  EXPECT_NEAR(s.logloss, expect_ll, 1e-12);
  EXPECT_NEAR(s.copc, 2.0 / 2.4, 1e-12);
  EXPECT_NEAR(s.ctr, 0.5, 1e-12);
  EXPECT_EQ(s.auc, 1.0);
  MetricAccumulator other(1024);
  other.Add(1, 0.1);
  m.Merge(other);
  EXPECT_EQ(m.Summary().examples, 5u);
  EXPECT_LT(m.Summary().auc, 1.0);
}

TEST(MetricsTest, LogWritesJsonLines) {
  char tmpl[] = "/tmp/ctrbox_metrics_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string path = dir + "/sub/m.jsonl";
  {
    auto log = MetricsLog::Open(Env::Posix(), path);
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE((*log)->Write({{"pass", 1}, {"auc", 0.7}}).ok());
    ASSERT_TRUE((*log)->Write({{"pass", 2}}).ok());
    ASSERT_TRUE((*log)->Close().ok());
  }
  std::string data;
  ASSERT_TRUE(ReadFileToString(Env::Posix(), path, &data).ok());
  EXPECT_EQ(data, "{\"auc\":0.7,\"pass\":1}\n{\"pass\":2}\n");
  (void)std::system(("rm -rf " + dir).c_str());
}

// What ranks of a distributed job do: encode their accumulators, merge them in one. Equal
// to merging the accumulators themselves, in both AUC modes (kept ids, dense counts).
TEST(MetricsTest, EncodedAccumulatorsMergeAsTheAccumulatorsDo) {
  for (int rows : {50, 200000}) {  // below and above the kept-ids limit of 2^20 / 16
    MetricAccumulator a, b, direct, via_bytes;
    for (int i = 0; i < rows; ++i) {
      const float y = (i * 7 % 11) < 3 ? 1.0f : 0.0f;
      const double p = ((i * 7919) % 1000) / 1000.0 * 0.5 + y * 0.3;
      (i % 3 ? a : b).Add(y, p);
    }
    direct.Merge(a);
    direct.Merge(b);
    ASSERT_TRUE(via_bytes.MergeEncoded(a.Encode()));
    ASSERT_TRUE(via_bytes.MergeEncoded(b.Encode()));
    const MetricSummary x = direct.Summary(), y = via_bytes.Summary();
    EXPECT_EQ(x.examples, y.examples);
    EXPECT_EQ(x.auc, y.auc);
    EXPECT_EQ(x.logloss, y.logloss);
    EXPECT_EQ(x.copc, y.copc);
    // Damaged or foreign bytes merge nothing.
    std::string bytes = a.Encode();
    EXPECT_FALSE(via_bytes.MergeEncoded(bytes.substr(0, bytes.size() - 1)));
    EXPECT_FALSE(via_bytes.MergeEncoded(bytes + "x"));
    MetricAccumulator other_buckets(1024);
    EXPECT_FALSE(other_buckets.MergeEncoded(bytes));
    EXPECT_EQ(via_bytes.Summary().examples, x.examples);
  }
}

// The metrics of the same (label, prediction) pairs are the same bits however the pairs were
// split over accumulators and merged (ranks, threads): the sums are exact. A plain double sum
// of the same terms in another order differs in its last bits.
TEST(MetricsTest, TheSamePairsSplitAnyWayGiveTheSameBits) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(1e-6, 1.0 - 1e-6);
  std::vector<std::pair<float, double>> pairs(100000);
  for (auto& [y, p] : pairs) {
    p = u(rng);
    y = u(rng) < p ? 1.0f : 0.0f;
  }
  MetricAccumulator one;
  double naive = 0;
  for (const auto& [y, p] : pairs) {
    one.Add(y, p);
    naive += p;
  }
  const MetricSummary want = one.Summary();
  int naive_differs = 0;
  for (int parts : {2, 3, 7}) {
    std::shuffle(pairs.begin(), pairs.end(), rng);
    std::vector<MetricAccumulator> split(parts);
    double shuffled = 0;
    for (size_t i = 0; i < pairs.size(); ++i) {
      split[i % parts].Add(pairs[i].first, pairs[i].second);
      shuffled += pairs[i].second;
    }
    naive_differs += shuffled != naive;
    MetricAccumulator merged;
    for (int k = parts - 1; k >= 0; --k) ASSERT_TRUE(merged.MergeEncoded(split[k].Encode()));
    const MetricSummary got = merged.Summary();
    EXPECT_EQ(got.auc, want.auc) << parts;
    EXPECT_EQ(got.logloss, want.logloss) << parts;
    EXPECT_EQ(got.copc, want.copc) << parts;
    EXPECT_EQ(got.mean_prediction, want.mean_prediction) << parts;
  }
  EXPECT_GT(naive_differs, 0);
  EXPECT_NEAR(want.mean_prediction, naive / pairs.size(), 1e-12);
}

TEST(MetricsTest, ExactSumsAreExactAndSayWhenATermIsNotFinite) {
  ExactSum s;
  for (double x : {1e-3, 0.5, -0.25, 3.0}) s.Add(x);
  EXPECT_EQ(s.value(), 1e-3 + 0.5 - 0.25 + 3.0);
  ExactSum big;
  big.Add(1e15);
  big.Add(1e-10);
  big.Add(-1e15);
  EXPECT_NEAR(big.value(), 1e-10, 1e-18);  // (a double sum gives 0 here)
  ExactSum bad = s;
  bad.Add(std::nan(""));
  EXPECT_TRUE(std::isnan(bad.value()));
  std::string bytes;
  bad.Encode(&bytes);
  s.Encode(&bytes);
  std::string_view in = bytes;
  ExactSum a, b;
  ASSERT_TRUE(a.Decode(&in));
  ASSERT_TRUE(b.Decode(&in));
  EXPECT_TRUE(in.empty());
  EXPECT_TRUE(std::isnan(a.value()));
  EXPECT_EQ(b.value(), s.value());
}

}  // namespace
}  // namespace ctrbox
