#include "util/parse.h"

#include <gtest/gtest.h>

namespace ctrbox {
namespace {

TEST(ParseTest, Integers) {
  int64_t i;
  EXPECT_TRUE(ParseInt64("-12", &i));
  EXPECT_EQ(i, -12);
  EXPECT_TRUE(ParseInt64("+7", &i));
  EXPECT_EQ(i, 7);
  EXPECT_FALSE(ParseInt64("", &i));
  EXPECT_FALSE(ParseInt64("1x", &i));
  EXPECT_FALSE(ParseInt64("99999999999999999999", &i));
  uint64_t u;
  EXPECT_TRUE(ParseUint64("18446744073709551615", &u));
  EXPECT_EQ(u, 18446744073709551615ULL);
  EXPECT_FALSE(ParseUint64("-1", &u));
}

TEST(ParseTest, Doubles) {
  double d;
  EXPECT_TRUE(ParseDouble("1e-3", &d));
  EXPECT_DOUBLE_EQ(d, 1e-3);
  EXPECT_TRUE(ParseDouble("+2.5", &d));
  EXPECT_DOUBLE_EQ(d, 2.5);
  EXPECT_FALSE(ParseDouble("nan", &d));
  EXPECT_FALSE(ParseDouble("inf", &d));
  EXPECT_FALSE(ParseDouble("1.0.0", &d));
  EXPECT_FALSE(ParseDouble(" 1", &d));
  float f;
  EXPECT_FALSE(ParseFloat("1e39", &f));
}

TEST(ParseTest, Bytes) {
  uint64_t b;
  EXPECT_TRUE(ParseBytes("512MB", &b));
  EXPECT_EQ(b, 512ull << 20);
  EXPECT_TRUE(ParseBytes("1.5 GiB", &b));
  EXPECT_EQ(b, 3ull << 29);
  EXPECT_TRUE(ParseBytes("4096", &b));
  EXPECT_EQ(b, 4096u);
  EXPECT_FALSE(ParseBytes("12 parsecs", &b));
  EXPECT_FALSE(ParseBytes("MB", &b));
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
}

TEST(ParseTest, SplitKeepsEmptyFields) {
  auto p = Split("a\t\tb\t", '\t');
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0], "a");
  EXPECT_EQ(p[1], "");
  EXPECT_EQ(p[3], "");
}

}  // namespace
}  // namespace ctrbox
