#include "stagehand/base/status.h"

#include <gtest/gtest.h>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

Result<int> Half(int value) {
  if (value % 2 != 0) return InvalidArgumentError("odd value");
  return value / 2;
}

Status Chain(int value, int* out) {
  Result<int> half = Half(value);
  STAGEHAND_RETURN_IF_ERROR(half);
  *out = *half;
  return Status::Ok();
}

Result<int> Quarter(int value) {
  STAGEHAND_ASSIGN_OR_RETURN(const int half, Half(value));
  STAGEHAND_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

Result<std::string> Named(int value) {
  std::string name = "none";
  STAGEHAND_ASSIGN_OR_RETURN(const int quarter, Quarter(value));
  name = "q" + std::to_string(quarter);
  return name;
}

TEST(StatusTest, CarriesCodeAndMessage) {
  const Status status = NotFoundError("Task x does not exist");
  EXPECT_THAT(status, StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(status.message(), "Task x does not exist");
  EXPECT_EQ(status.ToString(), "NOT_FOUND: Task x does not exist");
  EXPECT_EQ(Status::Ok().ToString(), "OK");
}

TEST(StatusTest, WithPrefixKeepsTheCode) {
  const Status status = UnavailableError("down").WithPrefix("plugin 'p': ");
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable));
  EXPECT_EQ(status.message(), "plugin 'p': down");
}

TEST(ResultTest, HoldsValueOrStatus) {
  EXPECT_EQ(*Half(8), 4);
  EXPECT_THAT(Half(3), StatusIs(StatusCode::kInvalidArgument));
}

TEST(ResultTest, ReturnIfErrorPropagates) {
  int out = 0;
  EXPECT_THAT(Chain(10, &out), IsOk());
  EXPECT_EQ(out, 5);
  EXPECT_EQ(Chain(7, &out).message(), "odd value");
}

TEST(ResultTest, AssignOrReturnMovesTheValueOrPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status(), InvalidArgumentError("odd value"));
  EXPECT_EQ(*Named(12), "q3");
  EXPECT_THAT(Named(2), StatusIs(StatusCode::kInvalidArgument));
}

TEST(ResultDeathTest, ValueOfErrorIsABug) { EXPECT_DEATH((void)Half(3).value(), "check failed"); }

}  // namespace
}  // namespace stagehand
