#include "stagehand/model/task_settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(ClassifyCadenceTest, FollowsBackstageRule) {
  EXPECT_EQ(ClassifyCadence("manual"), CadenceKind::kManual);
  EXPECT_EQ(ClassifyCadence("PT1M"), CadenceKind::kDuration);
  EXPECT_EQ(ClassifyCadence("P"), CadenceKind::kDuration);
  EXPECT_EQ(ClassifyCadence("Pnot-a-duration"), CadenceKind::kDuration);
  EXPECT_EQ(ClassifyCadence("pt1m"), CadenceKind::kCron);
  EXPECT_EQ(ClassifyCadence("*/5 * * * *"), CadenceKind::kCron);
  EXPECT_EQ(ClassifyCadence("Manual"), CadenceKind::kCron);
  EXPECT_EQ(ClassifyCadence(""), CadenceKind::kCron);
  EXPECT_EQ((TaskSettingsV2{"manual", std::nullopt, "PT1M"}.cadence_kind()), CadenceKind::kManual);
}

TEST(TaskSettingsToJsonTest, MatchesJsonStringifyByteForByte) {
  EXPECT_EQ(
      (TaskSettingsV2{"*/2 * * * * *", "PT3S", "PT1M"}.ToJson()),
      R"({"version":2,"cadence":"*/2 * * * * *","initialDelayDuration":"PT3S","timeoutAfterDuration":"PT1M"})");
  EXPECT_EQ((TaskSettingsV2{"manual", std::nullopt, "PT1M"}.ToJson()),
            R"({"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"})");
  EXPECT_EQ((TaskSettingsV2{"PT10M", std::nullopt, "PT3600S"}.ToJson()),
            R"({"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT3600S"})");
  EXPECT_EQ(
      (TaskSettingsV2{"P1D", "PT0S", "PT0.1S"}.ToJson()),
      R"({"version":2,"cadence":"P1D","initialDelayDuration":"PT0S","timeoutAfterDuration":"PT0.1S"})");
  EXPECT_EQ((TaskSettingsV2{"", "", ""}.ToJson()),
            R"({"version":2,"cadence":"","initialDelayDuration":"","timeoutAfterDuration":""})");
}

TEST(TaskSettingsToJsonTest, EscapesLikeJsonStringify) {
  const TaskSettingsV2 settings{"a\"b\\c\nd\te\rf\bg\fh\x01i\x1fj\x7f", std::nullopt,
                                "\xc3\xa9\xe2\x80\xa8"};
  EXPECT_EQ(settings.ToJson(),
            "{\"version\":2,\"cadence\":\"a\\\"b\\\\c\\nd\\te\\rf\\bg\\fh\\u0001i\\u001fj\x7f\","
            "\"timeoutAfterDuration\":\"\xc3\xa9\xe2\x80\xa8\"}");
}

TEST(TaskSettingsToJsonTest, RoundTripsThroughFromJson) {
  for (const TaskSettingsV2& settings : {
           TaskSettingsV2{"*/2 * * * * *", "PT3S", "PT1M"},
           TaskSettingsV2{"manual", std::nullopt, "PT1M"},
           TaskSettingsV2{"P1Y2M3W4DT5H6M7.8S", "", ""},
       }) {
    auto parsed = TaskSettingsV2::FromJson(settings.ToJson());
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, settings);
  }
}

TEST(TaskSettingsFromJsonTest, ReadsRowsBackstageWrites) {
  auto cron = TaskSettingsV2::FromJson(
      R"({"version":2,"cadence":"*/2 * * * * *","initialDelayDuration":"PT3S","timeoutAfterDuration":"PT1M"})");
  ASSERT_THAT(cron, IsOk());
  EXPECT_EQ(*cron, (TaskSettingsV2{"*/2 * * * * *", "PT3S", "PT1M"}));
  EXPECT_EQ(cron->cadence_kind(), CadenceKind::kCron);

  auto manual =
      TaskSettingsV2::FromJson(R"({"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"})");
  ASSERT_THAT(manual, IsOk());
  EXPECT_EQ(*manual, (TaskSettingsV2{"manual", std::nullopt, "PT1M"}));

  auto duration = TaskSettingsV2::FromJson(
      R"({"version":2,"cadence":"PT5M","initialDelayDuration":"PT0S","timeoutAfterDuration":"PT3600S"})");
  ASSERT_THAT(duration, IsOk());
  EXPECT_EQ(*duration, (TaskSettingsV2{"PT5M", "PT0S", "PT3600S"}));
  EXPECT_EQ(duration->cadence_kind(), CadenceKind::kDuration);
}

TEST(TaskSettingsFromJsonTest, AcceptsWhitespaceReorderedKeysAndFloatVersion) {
  auto settings = TaskSettingsV2::FromJson(
      " {\"timeoutAfterDuration\": \"PT1M\", \"cadence\": \"0 * * * *\", \"version\": 2.0}\n");
  ASSERT_THAT(settings, IsOk());
  EXPECT_EQ(*settings, (TaskSettingsV2{"0 * * * *", std::nullopt, "PT1M"}));
}

TEST(TaskSettingsFromJsonTest, IgnoresUnknownKeys) {
  auto settings = TaskSettingsV2::FromJson(
      R"({"version":2,"cadence":"PT1H","timeoutAfterDuration":"PT1M","extra":{"x":[1]},"note":"hi"})");
  ASSERT_THAT(settings, IsOk());
  EXPECT_EQ(*settings, (TaskSettingsV2{"PT1H", std::nullopt, "PT1M"}));
}

TEST(TaskSettingsFromJsonTest, AcceptsSchemaQuirks) {
  // zod's union lets an empty cadence and empty durations through.
  auto empty = TaskSettingsV2::FromJson(
      R"({"version":2,"cadence":"","initialDelayDuration":"","timeoutAfterDuration":""})");
  ASSERT_THAT(empty, IsOk());
  auto bare_p = TaskSettingsV2::FromJson(
      R"({"version":2,"cadence":"P","initialDelayDuration":"PT","timeoutAfterDuration":"-PT5M"})");
  ASSERT_THAT(bare_p, IsOk());
}

TEST(TaskSettingsFromJsonTest, RejectsVersionOne) {
  auto v1 = TaskSettingsV2::FromJson(
      R"({"version":1,"recurringAtMostEveryDuration":"PT1M","timeoutAfterDuration":"PT1M"})");
  ASSERT_THAT(v1, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(v1.status().message(),
            "Invalid settings: version: Invalid input: expected 2; cadence: Invalid input: "
            "expected string, received undefined");
}

struct BadSettings {
  const char* json;
  const char* message;
};

TEST(TaskSettingsFromJsonTest, RejectsInvalidSettingsNamingTheKey) {
  const BadSettings cases[] = {
      {R"({"version":"2","cadence":"manual","timeoutAfterDuration":"PT1M"})",
       "Invalid settings: version: Invalid input: expected 2"},
      {R"({"cadence":"manual","timeoutAfterDuration":"PT1M"})",
       "Invalid settings: version: Invalid input: expected 2"},
      {R"({"version":2,"cadence":"not a cron","timeoutAfterDuration":"PT1M"})",
       "Invalid settings: cadence: Invalid cron"},
      {R"({"version":2,"cadence":"* * * *","timeoutAfterDuration":"PT1M"})",
       "Invalid settings: cadence: Invalid cron"},
      {R"({"version":2,"cadence":"MANUAL","timeoutAfterDuration":"PT1M"})",
       "Invalid settings: cadence: Invalid cron"},
      {R"({"version":2,"cadence":"PT5s","timeoutAfterDuration":"PT1M"})",
       "Invalid settings: cadence: Invalid duration, expecting ISO Period"},
      {R"({"version":2,"cadence":5,"timeoutAfterDuration":"PT1M"})",
       "Invalid settings: cadence: Invalid input: expected string, received number"},
      {R"({"version":2,"cadence":"manual","initialDelayDuration":"3s","timeoutAfterDuration":"PT1M"})",
       "Invalid settings: initialDelayDuration: Invalid duration, expecting ISO Period"},
      {R"({"version":2,"cadence":"manual","initialDelayDuration":null,"timeoutAfterDuration":"PT1M"})",
       "Invalid settings: initialDelayDuration: Invalid input: expected string, received null"},
      {R"({"version":2,"cadence":"manual"})",
       "Invalid settings: timeoutAfterDuration: Invalid input: expected string, received "
       "undefined"},
      {R"({"version":2,"cadence":"manual","timeoutAfterDuration":"1m"})",
       "Invalid settings: timeoutAfterDuration: Invalid duration, expecting ISO Period"},
      {R"({"version":2,"cadence":"manual","timeoutAfterDuration":{"minutes":1}})",
       "Invalid settings: timeoutAfterDuration: Invalid input: expected string, received object"},
      {R"({"version":3,"cadence":"bad","initialDelayDuration":"x","timeoutAfterDuration":[]})",
       "Invalid settings: version: Invalid input: expected 2; cadence: Invalid cron; "
       "initialDelayDuration: Invalid duration, expecting ISO Period; timeoutAfterDuration: "
       "Invalid input: expected string, received array"},
      {R"([1,2])", "Invalid settings: Invalid input: expected object, received array"},
      {R"("manual")", "Invalid settings: Invalid input: expected object, received string"},
      {R"({"version":2,)", "Invalid settings: malformed JSON"},
      {"", "Invalid settings: malformed JSON"},
      {"garbage", "Invalid settings: malformed JSON"},
  };
  for (const BadSettings& c : cases) {
    auto result = TaskSettingsV2::FromJson(c.json);
    ASSERT_THAT(result, Not(IsOk())) << c.json;
    EXPECT_THAT(result, StatusIs(StatusCode::kInvalidArgument)) << c.json;
    EXPECT_EQ(result.status().message(), c.message) << c.json;
  }
}

TEST(TaskSettingsFromJsonTest, RejectsCronThatNeverFires) {
  auto never = TaskSettingsV2::FromJson(
      R"({"version":2,"cadence":"0 0 30 2 *","timeoutAfterDuration":"PT1M"})");
  ASSERT_THAT(never, Not(IsOk()));
  EXPECT_EQ(never.status().message(), "Invalid settings: cadence: Invalid cron");
}

TEST(TaskSettingsValidateTest, ValidateDurationsLeavesTheCadenceToItsParser) {
  EXPECT_TRUE((TaskSettingsV2{"not checked here", "PT10S", "PT1M"}.ValidateDurations().ok()));
  EXPECT_EQ((TaskSettingsV2{"*/5 * * * *", "soon", "PT1m"}.ValidateDurations()),
            (TaskSettingsV2{"*/5 * * * *", "soon", "PT1m"}.Validate()));
  EXPECT_EQ((TaskSettingsV2{"*/5 * * * *", std::nullopt, "PT1m"}.ValidateDurations()),
            InvalidArgumentError(
                "Invalid settings: timeoutAfterDuration: Invalid duration, expecting ISO Period"));
}

TEST(TaskSettingsValidateTest, UsesTheSchemaRules) {
  EXPECT_TRUE((TaskSettingsV2{"*/5 * * * *", std::nullopt, "PT1M"}.Validate().ok()));
  EXPECT_TRUE((TaskSettingsV2{"0 0 * * * *", "PT10S", "PT1M"}.Validate().ok()));
  EXPECT_TRUE((TaskSettingsV2{"@daily", std::nullopt, "PT1M"}.Validate().ok()));
  EXPECT_TRUE((TaskSettingsV2{"manual", std::nullopt, ""}.Validate().ok()));
  EXPECT_TRUE((TaskSettingsV2{"P1W", "", "PT1M"}.Validate().ok()));
  EXPECT_EQ((TaskSettingsV2{"every minute", std::nullopt, "PT1M"}.Validate()),
            InvalidArgumentError("Invalid settings: cadence: Invalid cron"));
  EXPECT_EQ((TaskSettingsV2{"manual", "soon", "PT1M"}.Validate()),
            InvalidArgumentError(
                "Invalid settings: initialDelayDuration: Invalid duration, expecting ISO Period"));
  EXPECT_EQ((TaskSettingsV2{"manual", std::nullopt, "PT1m"}.Validate()),
            InvalidArgumentError(
                "Invalid settings: timeoutAfterDuration: Invalid duration, expecting ISO Period"));
  const TaskSettingsV2 all_bad{"P1X", "p1d", "x"};
  EXPECT_THAT(all_bad.Validate().message(),
              StartsWith("Invalid settings: cadence: Invalid duration, expecting ISO Period; "
                         "initialDelayDuration: "));
  EXPECT_THAT(all_bad.Validate().message(),
              HasSubstr("; timeoutAfterDuration: Invalid duration, expecting ISO Period"));
}

}  // namespace
}  // namespace stagehand
