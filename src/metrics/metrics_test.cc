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

}  // namespace
}  // namespace ctrbox
