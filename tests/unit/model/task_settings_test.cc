#include "stagehand/model/task_settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "fixtures/task_schedules.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::Settings;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(TaskSettingsToJsonTest, MatchesJsonStringifyByteForByte) {
  EXPECT_EQ(
      (Settings("*/2 * * * * *", "PT3S", "PT1M").ToJson()),
      R"({"version":2,"cadence":"*/2 * * * * *","initialDelayDuration":"PT3S","timeoutAfterDuration":"PT1M"})");
  EXPECT_EQ((Settings("manual", std::nullopt, "PT1M").ToJson()),
            R"({"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"})");
  EXPECT_EQ((Settings("PT10M", std::nullopt, "PT3600S").ToJson()),
            R"({"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT3600S"})");
  EXPECT_EQ(
      (Settings("P1D", "PT0S", "PT0.1S").ToJson()),
      R"({"version":2,"cadence":"P1D","initialDelayDuration":"PT0S","timeoutAfterDuration":"PT0.1S"})");
  EXPECT_EQ((Settings("", "", "").ToJson()),
            R"({"version":2,"cadence":"","initialDelayDuration":"","timeoutAfterDuration":""})");
}

TEST(TaskSettingsToJsonTest, EscapesLikeJsonStringify) {
  const TaskSettingsV2 settings =
      Settings("manual", "a\"b\\c\nd\te\rf\bg\fh\x01i\x1fj\x7f", "\xc3\xa9\xe2\x80\xa8");
  EXPECT_EQ(settings.ToJson(),
            "{\"version\":2,\"cadence\":\"manual\",\"initialDelayDuration\":"
            "\"a\\\"b\\\\c\\nd\\te\\rf\\bg\\fh\\u0001i\\u001fj\x7f\","
            "\"timeoutAfterDuration\":\"\xc3\xa9\xe2\x80\xa8\"}");
}

TEST(TaskSettingsToJsonTest, RoundTripsThroughFromJson) {
  for (const TaskSettingsV2& settings : {
           Settings("*/2 * * * * *", "PT3S", "PT1M"),
           Settings("manual", std::nullopt, "PT1M"),
           Settings("P1Y2M3W4DT5H6M7.8S", "", ""),
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
  EXPECT_EQ(*cron, (Settings("*/2 * * * * *", "PT3S", "PT1M")));
  EXPECT_TRUE(cron->cadence.is_cron());

  auto manual =
      TaskSettingsV2::FromJson(R"({"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"})");
  ASSERT_THAT(manual, IsOk());
  EXPECT_EQ(*manual, (Settings("manual", std::nullopt, "PT1M")));

  auto duration = TaskSettingsV2::FromJson(
      R"({"version":2,"cadence":"PT5M","initialDelayDuration":"PT0S","timeoutAfterDuration":"PT3600S"})");
  ASSERT_THAT(duration, IsOk());
  EXPECT_EQ(*duration, (Settings("PT5M", "PT0S", "PT3600S")));
  EXPECT_TRUE(duration->cadence.is_duration());
}

TEST(TaskSettingsFromJsonTest, AcceptsWhitespaceReorderedKeysAndFloatVersion) {
  auto settings = TaskSettingsV2::FromJson(
      " {\"timeoutAfterDuration\": \"PT1M\", \"cadence\": \"0 * * * *\", \"version\": 2.0}\n");
  ASSERT_THAT(settings, IsOk());
  EXPECT_EQ(*settings, (Settings("0 * * * *", std::nullopt, "PT1M")));
}

TEST(TaskSettingsFromJsonTest, IgnoresUnknownKeys) {
  auto settings = TaskSettingsV2::FromJson(
      R"({"version":2,"cadence":"PT1H","timeoutAfterDuration":"PT1M","extra":{"x":[1]},"note":"hi"})");
  ASSERT_THAT(settings, IsOk());
  EXPECT_EQ(*settings, (Settings("PT1H", std::nullopt, "PT1M")));
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

TEST(TaskSettingsValidateTest, UsesTheSchemaRulesForTheDurations) {
  EXPECT_TRUE((Settings("*/5 * * * *", std::nullopt, "PT1M").Validate().ok()));
  EXPECT_TRUE((Settings("0 0 * * * *", "PT10S", "PT1M").Validate().ok()));
  EXPECT_TRUE((Settings("manual", std::nullopt, "").Validate().ok()));
  EXPECT_TRUE((Settings("P1W", "", "PT1M").Validate().ok()));
  EXPECT_EQ((Settings("manual", "soon", "PT1M").Validate()),
            InvalidArgumentError(
                "Invalid settings: initialDelayDuration: Invalid duration, expecting ISO Period"));
  EXPECT_EQ((Settings("manual", std::nullopt, "PT1m").Validate()),
            InvalidArgumentError(
                "Invalid settings: timeoutAfterDuration: Invalid duration, expecting ISO Period"));
  EXPECT_THAT(Settings("manual", "p1d", "x").Validate().message(),
              StartsWith("Invalid settings: initialDelayDuration: "));
}

TEST(TaskSettingsFromJsonTest, NamesEveryKeyAtFault) {
  auto all_bad = TaskSettingsV2::FromJson(
      R"({"version":2,"cadence":"P1X","initialDelayDuration":"p1d","timeoutAfterDuration":"x"})");
  EXPECT_THAT(all_bad.status().message(),
              StartsWith("Invalid settings: cadence: Invalid duration, expecting ISO Period; "
                         "initialDelayDuration: "));
  EXPECT_THAT(all_bad.status().message(),
              HasSubstr("; timeoutAfterDuration: Invalid duration, expecting ISO Period"));
  EXPECT_THAT(TaskSettingsV2::FromJson(
                  R"({"version":2,"cadence":"every minute","timeoutAfterDuration":"PT1M"})"),
              StatusIs(StatusCode::kInvalidArgument, "Invalid settings: cadence: Invalid cron"));
}

}  // namespace
}  // namespace stagehand
