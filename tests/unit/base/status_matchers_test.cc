#include "stagehand/testing/status_matchers.h"

#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stagehand/base/status.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::IsOkAndHolds;
using ::stagehand::testing::StatusIs;
using ::testing::DescribeMatcher;
using ::testing::Gt;
using ::testing::HasSubstr;
using ::testing::Matcher;
using ::testing::Not;
using ::testing::SizeIs;

// Returns the explanation `matcher` gives for `value`, or "matches" when it matches.
template <typename T, typename M>
std::string Explain(const M& matcher, const T& value) {
  ::testing::StringMatchResultListener listener;
  if (::testing::ExplainMatchResult(matcher, value, &listener)) return "matches";
  return listener.str();
}

Result<int> Answer() { return 42; }
Result<int> Missing() { return NotFoundError("task 'nightly' does not exist"); }

TEST(IsOkTest, MatchesOkStatusesAndResultsWithValues) {
  EXPECT_THAT(Status::Ok(), IsOk());
  EXPECT_THAT(Answer(), IsOk());
  EXPECT_THAT(NotFoundError("gone"), Not(IsOk()));
  EXPECT_THAT(Missing(), Not(IsOk()));
}

TEST(IsOkTest, DescribesItself) {
  EXPECT_EQ(DescribeMatcher<Status>(IsOk()), "is OK");
  EXPECT_EQ(DescribeMatcher<Status>(IsOk(), /*negation=*/true), "is not OK");
}

TEST(IsOkTest, FailurePrintsTheStatus) {
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(ConflictError("task is running"), IsOk()),
                          "Actual: CONFLICT: task is running");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(Missing(), IsOk()),
                          "Actual: NOT_FOUND: task 'nightly' does not exist");
  EXPECT_FATAL_FAILURE(ASSERT_THAT(Missing(), IsOk()), "Expected: is OK");
}

TEST(StatusIsTest, MatchesCodeAndMessagePart) {
  EXPECT_THAT(Missing(), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(Missing(), StatusIs(StatusCode::kNotFound, "'nightly'"));
  EXPECT_THAT(NotFoundError("gone"), StatusIs(StatusCode::kNotFound, "gone"));
  EXPECT_THAT(Status::Ok(), StatusIs(StatusCode::kOk));
  EXPECT_THAT(Answer(), StatusIs(StatusCode::kOk));
  EXPECT_THAT(Missing(), Not(StatusIs(StatusCode::kConflict)));
  EXPECT_THAT(Missing(), Not(StatusIs(StatusCode::kNotFound, "hourly")));
  EXPECT_THAT(Answer(), Not(StatusIs(StatusCode::kNotFound)));
}

TEST(StatusIsTest, ExplainsWhichPartDiffers) {
  EXPECT_EQ(Explain(StatusIs(StatusCode::kConflict), Missing()), "whose status code is NOT_FOUND");
  EXPECT_EQ(Explain(StatusIs(StatusCode::kNotFound, "hourly"), Missing()),
            "whose message does not contain \"hourly\"");
  EXPECT_EQ(Explain(StatusIs(StatusCode::kNotFound), Answer()), "whose status code is OK");
  EXPECT_EQ(Explain(StatusIs(StatusCode::kNotFound, "nightly"), Missing()), "matches");
}

TEST(StatusIsTest, DescribesItself) {
  EXPECT_EQ(DescribeMatcher<Status>(StatusIs(StatusCode::kNotFound)), "has status code NOT_FOUND");
  EXPECT_EQ(DescribeMatcher<Status>(StatusIs(StatusCode::kNotFound, "gone")),
            "has status code NOT_FOUND and a message that contains \"gone\"");
  EXPECT_EQ(DescribeMatcher<Status>(StatusIs(StatusCode::kNotFound, "gone"), /*negation=*/true),
            "does not have status code NOT_FOUND or has a message that does not contain \"gone\"");
}

TEST(StatusIsTest, FailurePrintsTheStatusAndWhatDiffers) {
  EXPECT_NONFATAL_FAILURE(
      EXPECT_THAT(Missing(), StatusIs(StatusCode::kConflict, "running")),
      "Actual: NOT_FOUND: task 'nightly' does not exist, whose status code is NOT_FOUND");
}

TEST(IsOkAndHoldsTest, MatchesTheValue) {
  EXPECT_THAT(Answer(), IsOkAndHolds(42));
  EXPECT_THAT(Answer(), IsOkAndHolds(Gt(40)));
  EXPECT_THAT(Answer(), Not(IsOkAndHolds(41)));
  EXPECT_THAT(Missing(), Not(IsOkAndHolds(42)));
  EXPECT_THAT(Result<std::string>("nightly"), IsOkAndHolds(HasSubstr("night")));
}

TEST(IsOkAndHoldsTest, ExplainsAndDescribes) {
  const Matcher<Result<int>> holds_more = IsOkAndHolds(Gt(50));
  EXPECT_EQ(DescribeMatcher<Result<int>>(holds_more), "is OK and has a value that is > 50");
  EXPECT_EQ(Explain(IsOkAndHolds(SizeIs(3)), Result<std::vector<int>>({1, 2})),
            "whose size 2 doesn't match");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(Missing(), IsOkAndHolds(42)),
                          "Actual: NOT_FOUND: task 'nightly' does not exist");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(Answer(), IsOkAndHolds(41)), "Actual: value 42");
}

}  // namespace
}  // namespace stagehand
