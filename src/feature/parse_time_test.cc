// parse_time (feature/ops/parse_time.h): strptime formats into unix seconds, against gmtime.
#include "feature/ops/parse_time.h"

#include <gtest/gtest.h>

#include <ctime>

namespace ctrbox {
namespace {

// Issue 44: Avazu's hour is YYMMDDHH (14102100); nothing parsed it, and time_part decoded it
// silently as unix seconds (1970-06-13). parse_time reads strptime formats, whole values only.
TEST(ParseTimeTest, ReadsStrptimeFormatsIntoUnixSecondsWholeValuesOnly) {
  using ops::ParseTimeText;
  int64_t t = 0;
  ASSERT_TRUE(ParseTimeText("14102100", "%y%m%d%H", &t));
  EXPECT_EQ(t, 1413849600);  // 2014-10-21 00:00:00 UTC
  ASSERT_TRUE(ParseTimeText("14102123", "%y%m%d%H", &t));
  EXPECT_EQ(t, 1413849600 + 23 * 3600);
  ASSERT_TRUE(ParseTimeText("2024-02-29 12:30:05", "%Y-%m-%d %H:%M:%S", &t));
  EXPECT_EQ(t, 1709209805);
  ASSERT_TRUE(ParseTimeText("2024-03", "%Y-%m", &t));  // the day defaults to the 1st
  EXPECT_EQ(t, 1709251200);
  EXPECT_FALSE(ParseTimeText("14102100x", "%y%m%d%H", &t));  // trailing text
  EXPECT_FALSE(ParseTimeText("141021", "%y%m%d%H", &t));     // short of the format
  EXPECT_FALSE(ParseTimeText("2014-13-01", "%Y-%m-%d", &t));
  EXPECT_FALSE(ParseTimeText("", "%Y", &t));
  // Differentially against gmtime over a span of hours.
  for (int64_t s = 1400000000; s < 1400000000 + 400 * 86400; s += 3607) {
    const time_t tt = static_cast<time_t>(s);
    struct tm tm;
    gmtime_r(&tt, &tm);
    char buf[32];
    strftime(buf, sizeof(buf), "%Y%m%d%H%M%S", &tm);
    ASSERT_TRUE(ParseTimeText(buf, "%Y%m%d%H%M%S", &t)) << buf;
    EXPECT_EQ(t, s) << buf;
  }
}

}  // namespace
}  // namespace ctrbox
