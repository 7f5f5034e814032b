#include "stagehand/trace/trace_context.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kExample[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceparentTest, ParsesTheSpecsExampleAndFormatsItBack) {
  Result<TraceContext> context = ParseTraceparent(kExample, "congo=t61rcWkgMzE");
  ASSERT_THAT(context, IsOk());
  EXPECT_TRUE(context->valid());
  EXPECT_TRUE(context->sampled());
  EXPECT_EQ(HexOf(context->trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(HexOf(context->span_id), "00f067aa0ba902b7");
  EXPECT_EQ(context->trace_state, "congo=t61rcWkgMzE");
  EXPECT_EQ(FormatTraceparent(*context), kExample);
}

TEST(TraceparentTest, AnUnsampledParentKeepsItsFlags) {
  Result<TraceContext> context =
      ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_THAT(context, IsOk());
  EXPECT_FALSE(context->sampled());
  EXPECT_EQ(FormatTraceparent(*context), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
}

TEST(TraceparentTest, RejectsWhatTheSpecRejectsSayingWhy) {
  const struct {
    const char* header;
    const char* why;
  } cases[] = {
      {"", "0 characters"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "not 55"},
      {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version ff"},
      {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "trace id"},
      {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "trace id is all zeros"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "parent id is all zeros"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01", "parent id"},
      {"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "separated"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", "flags"},
  };
  for (const auto& c : cases) {
    Result<TraceContext> context = ParseTraceparent(c.header);
    ASSERT_THAT(context, StatusIs(StatusCode::kInvalidArgument)) << c.header;
    EXPECT_THAT(context.status().message(), HasSubstr(c.why)) << c.header;
  }
}

TEST(TraceparentTest, ALaterVersionIsReadByItsFirstFields) {
  Result<TraceContext> context =
      ParseTraceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future");
  ASSERT_THAT(context, IsOk());
  EXPECT_EQ(HexOf(context->span_id), "00f067aa0ba902b7");
  EXPECT_THAT(ParseTraceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"),
              Not(IsOk()));
}

TEST(TraceparentTest, ATraceStateLongerThanTheLimitIsDropped) {
  Result<TraceContext> context = ParseTraceparent(kExample, std::string(513, 'a'));
  ASSERT_THAT(context, IsOk());
  EXPECT_EQ(context->trace_state, "");
}

TEST(TraceIdsTest, NewIdsAreValidAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    TraceContext context{NewTraceId(), NewSpanId(), 1, ""};
    EXPECT_TRUE(context.valid());
    EXPECT_TRUE(seen.insert(HexOf(context.trace_id)).second);
  }
  EXPECT_FALSE(TraceContext{}.valid());
}

}  // namespace
}  // namespace stagehand
