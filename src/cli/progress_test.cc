#include "cli/progress.h"

#include <gtest/gtest.h>

namespace ctrbox {
namespace {

TEST(ProgressTest, ABarTheShareAndTheTimeLeftWhenKnown) {
  TrainProgress p;
  p.examples = 123456;
  p.examples_per_s = 40000;
  p.fraction = 0.5;
  p.eta_seconds = 185;
  const std::string tty = ProgressLine(p, /*bar=*/true);
  EXPECT_EQ(
      tty.rfind("[############............]  50.0%  ETA 3m05s  123456 examples  40000 ex/s", 0), 0u)
      << tty;
  const std::string log = ProgressLine(p, /*bar=*/false);
  EXPECT_EQ(log.rfind(" 50.0%  ETA 3m05s  123456 examples", 0), 0u) << log;
  p.fraction = -1;
  p.eta_seconds = -1;
  const std::string unknown = ProgressLine(p, true);
  EXPECT_EQ(unknown.rfind("123456 examples  40000 ex/s", 0), 0u) << unknown;
  EXPECT_EQ(unknown.find("ETA"), std::string::npos);
}

TEST(ProgressTest, DurationsReadAsSecondsMinutesOrHours) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(59.4), "59s");
  EXPECT_EQ(FormatDuration(60), "1m00s");
  EXPECT_EQ(FormatDuration(3599), "59m59s");
  EXPECT_EQ(FormatDuration(7620), "2h07m");
  EXPECT_EQ(FormatDuration(-3), "0s");
}

}  // namespace
}  // namespace ctrbox
