#include "common/status.h"

#include <gtest/gtest.h>

namespace uroce {
namespace {

Status FailsWhenNegative(int x) {
  if (x < 0) return InvalidArgument("x is negative");
  return Status::Ok();
}

Status Chain(int x) {
  UROCE_RETURN_IF_ERROR(FailsWhenNegative(x));
  return NotFound("reached the end");
}

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(s.ToErrno(), 0);
}

TEST(StatusTest, CodeMessageAndErrno) {
  Status s = InvalidArgument("bad mtu 17");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: bad mtu 17");
  EXPECT_EQ(s.ToErrno(), EINVAL);
  EXPECT_EQ(NotSupported("x").ToErrno(), EOPNOTSUPP);
  EXPECT_EQ(ResourceExhausted("x").ToErrno(), ENOMEM);
}

TEST(StatusTest, ReturnIfErrorStopsAtFirstError) {
  EXPECT_EQ(Chain(-1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Chain(1).code(), StatusCode::kNotFound);
}

TEST(StatusTest, StatusOrHoldsValueOrError) {
  StatusOr<int> v = 7;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  StatusOr<int> e = Unavailable("later");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
  StatusOr<int> wrong = Status::Ok();
  EXPECT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace uroce
