#include "util/status.h"

#include <gtest/gtest.h>

namespace ctrbox {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

Status UseHalf(int x, int* out) {
  ASSIGN_OR_RETURN(*out, Half(x));
  RETURN_IF_ERROR(Status::OK());
  return Status::OK();
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::OK().ok());
  EXPECT_EQ(Status::OK().ToString(), "OK");
  Status s = IOError("disk on fire");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.ToString(), "io_error: disk on fire");
  EXPECT_EQ(s.WithContext("saving model").message(), "saving model: disk on fire");
  EXPECT_TRUE(Status::OK().WithContext("x").ok());
}

TEST(StatusTest, StatusOrPropagates) {
  int out = 0;
  EXPECT_TRUE(UseHalf(8, &out).ok());
  EXPECT_EQ(out, 4);
  Status s = UseHalf(7, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd: 7");
}

}  // namespace
}  // namespace ctrbox
