#include "stagehand/model/schedule.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "fixtures/task_schedules.h"
#include "stagehand/base/hash.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::IsOkAndHolds;
using ::stagehand::testing::Settings;
using ::stagehand::testing::StatusIs;

using std::chrono::milliseconds;

HumanDuration Minutes(double m) {
  HumanDuration d;
  d.minutes = m;
  return d;
}

TEST(ScheduleTest, TaskScopeNames) {
  EXPECT_EQ(TaskScopeName(TaskScope::kGlobal), "global");
  EXPECT_EQ(TaskScopeName(TaskScope::kLocal), "local");
}

TEST(ScheduleTest, FormatsDurationSpecs) {
  EXPECT_EQ(FormatDurationSpec(Minutes(90)), "PT90M");
  HumanDuration ms;
  ms.milliseconds = 5000;
  EXPECT_EQ(FormatDurationSpec(ms), "PT5S");
  EXPECT_EQ(FormatDurationSpec(milliseconds(5000)), "PT5S");
  EXPECT_EQ(FormatDurationSpec(milliseconds(3'600'000)), "PT3600S");
  EXPECT_EQ(FormatDurationSpec(milliseconds(100)), "PT0.1S");
  EXPECT_EQ(FormatDurationSpec(HumanDuration{}), "PT0S");
}

TEST(ScheduleTest, ConvertsDurationSpecsToMilliseconds) {
  EXPECT_EQ(ToMilliseconds(Minutes(1.5)), milliseconds(90'000));
  HumanDuration month;
  month.months = 1;
  EXPECT_EQ(ToMilliseconds(month), milliseconds(2'592'000'000));
  EXPECT_EQ(ToMilliseconds(milliseconds(1234)), milliseconds(1234));
}

TEST(BuildTaskSettingsTest, CronIsVerbatimAndInitialDelayOnlyWhenGiven) {
  ScheduleDefinition schedule;
  schedule.frequency = CronFrequency{"*/2 * * * * *", "Europe/Berlin"};
  schedule.timeout = Minutes(1);
  HumanDuration three_seconds;
  three_seconds.seconds = 3;
  schedule.initial_delay = three_seconds;
  const Result<TaskSettingsV2> built = BuildTaskSettings(schedule);
  ASSERT_THAT(built, IsOk());
  const TaskSettingsV2& settings = *built;
  EXPECT_EQ(settings, Settings("*/2 * * * * *", "PT3S", "PT1M"));
  ASSERT_NE(settings.cadence.cron(), nullptr);
  EXPECT_EQ(
      settings.ToJson(),
      R"({"version":2,"cadence":"*/2 * * * * *","initialDelayDuration":"PT3S","timeoutAfterDuration":"PT1M"})");
}

TEST(BuildTaskSettingsTest, ManualAndDurationCadences) {
  ScheduleDefinition manual;
  manual.frequency = ManualFrequency{};
  manual.timeout = Minutes(1);
  EXPECT_EQ(BuildTaskSettings(manual)->ToJson(),
            R"({"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"})");

  ScheduleDefinition every;
  every.frequency = Minutes(90);
  every.timeout = milliseconds(3'600'000);
  every.initial_delay = HumanDuration{};
  EXPECT_EQ(
      BuildTaskSettings(every)->ToJson(),
      R"({"version":2,"cadence":"PT90M","initialDelayDuration":"PT0S","timeoutAfterDuration":"PT3600S"})");

  ScheduleDefinition chrono;
  chrono.frequency = milliseconds(5500);
  chrono.timeout = milliseconds(0);
  EXPECT_THAT(BuildTaskSettings(chrono), IsOkAndHolds(Settings("PT5.5S", std::nullopt, "PT0S")));
  EXPECT_EQ(BuildTaskSettings(chrono)->cadence.period(), milliseconds(5500));
}

TEST(BuildTaskSettingsTest, ParsesACronOnceAndKeepsAReadersProgram) {
  ScheduleDefinition schedule;
  schedule.frequency = CronFrequency{"0 * * * *", ""};
  schedule.timeout = Minutes(1);
  std::uint64_t parses = CronExpression::ParseCount();
  ASSERT_THAT(BuildTaskSettings(schedule), IsOk());
  EXPECT_EQ(CronExpression::ParseCount(), parses + 1);

  Result<CronExpression> program = CronExpression::Parse("0 * * * *");
  ASSERT_THAT(program, IsOk());
  auto shared = std::make_shared<const CronExpression>(*program);
  schedule.frequency = CronFrequency{"0 * * * *", "", shared};
  parses = CronExpression::ParseCount();
  const Result<TaskSettingsV2> built = BuildTaskSettings(schedule);
  ASSERT_THAT(built, IsOk());
  EXPECT_EQ(built->cadence.cron(), shared.get());
  EXPECT_EQ(CronExpression::ParseCount(), parses);

  schedule.frequency = CronFrequency{"0 * * *", ""};
  EXPECT_THAT(BuildTaskSettings(schedule),
              StatusIs(StatusCode::kInvalidArgument, "Too few fields"));
}

TEST(ValidateScheduleDurationsTest, NamesEachFieldThatCannotWork) {
  ScheduleDefinition schedule;
  schedule.frequency = milliseconds(0);
  schedule.timeout = milliseconds(-1000);
  HumanDuration minus_five;
  minus_five.seconds = -5;
  schedule.initial_delay = minus_five;
  const Status status = ValidateScheduleDurations(schedule);
  EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(status.message(),
            "frequency must be longer than zero, got PT0S; timeout must be longer than zero, got "
            "PT-1S; initialDelay cannot be negative, got PT-5S");
}

TEST(ValidateScheduleDurationsTest, AcceptsWorkableSchedules) {
  ScheduleDefinition cron;
  cron.frequency = CronFrequency{"* * * * *", ""};
  cron.timeout = milliseconds(1);
  cron.initial_delay = milliseconds(0);
  EXPECT_THAT(ValidateScheduleDurations(cron), IsOk());
  ScheduleDefinition manual;
  manual.timeout = Minutes(1);
  EXPECT_THAT(ValidateScheduleDurations(manual), IsOk());
  ScheduleDefinition every;
  every.frequency = Minutes(0.5);
  every.timeout = Minutes(1);
  EXPECT_THAT(ValidateScheduleDurations(every), IsOk());
  // The timeout is required: its default (zero) is refused.
  EXPECT_EQ(ValidateScheduleDurations(ScheduleDefinition{}),
            InvalidArgumentError("timeout must be longer than zero, got PT0S"));
}

TEST(JitterOffsetTest, IsStableBelowTheJitterAndZeroWithout) {
  const auto jitter = std::chrono::minutes(5);
  const std::chrono::milliseconds offset = JitterOffset("refresh-catalog", jitter);
  EXPECT_GE(offset, std::chrono::milliseconds(0));
  EXPECT_LT(offset, jitter);
  // FNV-1a of the id: the same on every host and build (a regression here moves every fleet).
  EXPECT_EQ(offset.count(), static_cast<std::int64_t>(Fnv1a64("refresh-catalog") % 300000));
  EXPECT_NE(JitterOffset("refresh-catalog", jitter), JitterOffset("refresh-users", jitter));
  EXPECT_EQ(JitterOffset("refresh-catalog", std::chrono::milliseconds(0)),
            std::chrono::milliseconds(0));
}

TEST(ValidateScheduleDurationsTest, JitterMustBeShorterThanADurationFrequency) {
  ScheduleDefinition schedule;
  schedule.frequency = std::chrono::milliseconds(60000);
  schedule.timeout = std::chrono::milliseconds(1000);
  schedule.jitter = std::chrono::milliseconds(60000);
  EXPECT_EQ(ValidateScheduleDurations(schedule).message(),
            "jitter must be shorter than the frequency PT60S, got PT60S");
  schedule.jitter = std::chrono::milliseconds(59999);
  EXPECT_THAT(ValidateScheduleDurations(schedule), IsOk());
  schedule.catchup_window = std::chrono::milliseconds(-1);
  EXPECT_EQ(ValidateScheduleDurations(schedule).message(),
            "catchupWindow cannot be negative, got PT-0.001S");
}

}  // namespace
}  // namespace stagehand
