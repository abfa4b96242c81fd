#include "metrics/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

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

}  // namespace
}  // namespace ctrbox
