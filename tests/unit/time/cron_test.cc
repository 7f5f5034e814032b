#include "stagehand/time/cron.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::Not;

WallTime At(const std::string& iso) {
  Result<WallTime> parsed = ParseIsoInstant(iso);
  EXPECT_THAT(parsed, IsOk()) << iso;
  return parsed.ok() ? *parsed : WallTime{};
}

TimeZone Zone(const std::string& name) {
  Result<TimeZone> zone = TimeZone::Locate(name);
  EXPECT_THAT(zone, IsOk());
  return zone.ok() ? *zone : TimeZone::Utc();
}

// Returns the first `count` fire times after `from` as UTC ISO strings without milliseconds.
std::vector<std::string> Next(const std::string& expression, const std::string& from, int count,
                              const TimeZone& zone = TimeZone::Utc()) {
  Result<CronExpression> cron = CronExpression::Parse(expression);
  EXPECT_THAT(cron, IsOk()) << expression;
  if (!cron.ok()) {
    return {};
  }
  std::vector<std::string> times;
  WallTime instant = At(from);
  for (int i = 0; i < count; ++i) {
    Result<WallTime> next = cron->NextAfter(instant, zone);
    EXPECT_THAT(next, IsOk());
    if (!next.ok()) {
      break;
    }
    instant = *next;
    times.push_back(FormatIsoInstantUtc(instant).substr(0, 19));
  }
  return times;
}

std::string ParseError(const std::string& expression) {
  Result<CronExpression> cron = CronExpression::Parse(expression);
  if (cron.ok()) {
    return "<valid>";
  }
  EXPECT_THAT(cron, StatusIs(StatusCode::kInvalidArgument));
  return cron.status().message();
}

TEST(CronExpressionTest, AcceptsTheValidExamplesOfTheSpec) {
  for (const char* expression : {"* * * * *",       "* * * * * *",
                                 "*/2 * * * * *",   "0 30 * * * *",
                                 "1 * * * *",       "0 0 * * MON-FRI",
                                 "0 0 1 JAN *",     "0 0 * * 7",
                                 "0 0 * * 0-7",     "@daily",
                                 "@DAILY",          "5/15 * * * *",
                                 "1-5/2 * * * *",   "1,2,3 * * * *",
                                 "0\t0\t*\t*\t*",   "  0 0 * * *  ",
                                 "@yearly",         "@monthly",
                                 "@weekly",         "@hourly",
                                 "@minutely",       "@secondly",
                                 "@weekdays",       "@Weekends",
                                 "0 0 * * sun,SAT", "0 0 * jan-MAR,dec *",
                                 "0 0 1 * mon"}) {
    SCOPED_TRACE(expression);
    Result<CronExpression> cron = CronExpression::Parse(expression);
    ASSERT_THAT(cron, IsOk());
    EXPECT_EQ(cron->source(), expression);
  }
}

TEST(CronExpressionTest, RejectsTheInvalidExamplesOfTheSpecWithTheCronPackagesMessages) {
  struct Case {
    const char* expression;
    const char* message;
  };
  const Case cases[] = {
      {"@reboot", "Unknown alias: reb"},
      {"@midnight", "Unknown alias: mid"},
      {"@annually", "Unknown alias: ann"},
      {"manual", "Unknown alias: man"},
      {"0 0 ? * *", "Field (dayOfMonth) cannot be parsed"},
      {"0 0 L * *", "Unknown alias: l"},
      {"0 0 * * 1#2", "Field (dayOfWeek) cannot be parsed"},
      {"0 0 * * 5L", "Unknown alias: l"},
      {"0 0 1W * *", "Unknown alias: w"},
      {"60 * * * * *", "Field value (60) is out of range"},
      {"* * * * * * *", "Too many fields"},
      {"* * * *", "Too few fields"},
      {"", "Too few fields"},
      {"*/0 * * * *", "Field (minute) has a step of zero"},
      {"*/00 * * * *", "Field (minute) has a step of zero"},
      {"5-1 * * * *", "Field (minute) has an invalid range"},
      {"0 0 * * MONDAY", "Unknown alias: day"},
      {"1.5 * * * *", "Field (minute) cannot be parsed"},
      {"-1 * * * *", "Field (minute) cannot be parsed"},
      {"0 24 * * *", "Field value (24) is out of range"},
      {"0 0 0 * *", "Field value (0) is out of range"},
      {"0 0 * 0 *", "Field value (0) is out of range"},
      {"0 0 * 13 *", "Field value (13) is out of range"},
      {"0 0 * * 8", "Field value (8) is out of range"},
      {"0 0 * * 7-0", "Field (dayOfWeek) has an invalid range"},
      {"H * * * *", "Unknown alias: h"},
      {"1-* * * * *", "Field (1-*) has an invalid wildcard expression"},
      {"1,2-* * * * *", "Field (2-*) has an invalid wildcard expression"},
      {"*/* * * * *", "Field (minute) cannot be parsed"},
      {"1,,2 * * * *", "Field (minute) cannot be parsed"},
      {"1-2-3 * * * *", "Field (minute) cannot be parsed"},
      {" @daily", "Unknown alias: dai"},
      // The whole field, with '*' spelled out, is quoted, as the cron package does.
      {"*,60 * * * *", "Field value (0-59,60) is out of range"},
      {"1,2,60-61/2 * * * *", "Field value (1,2,60-61/2) is out of range"},
      {"99999999999999999999 * * * *", "Field value (99999999999999999999) is out of range"},
      {"0 0 30 2 *", "Something went wrong. No execution date was found in the next 8 years."},
      {"0 0 31 4 *", "Something went wrong. No execution date was found in the next 8 years."},
      {"0 0 30,31 2 1-7", "Something went wrong. No execution date was found in the next 8 years."},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expression);
    EXPECT_EQ(ParseError(c.expression), c.message);
  }
}

TEST(CronExpressionTest, ReportsTheFirstBadFieldFromSecondsToWeekday) {
  EXPECT_EQ(ParseError("? ? * * * *"), "Field (second) cannot be parsed");
  EXPECT_EQ(ParseError("0 ? 99 * * *"), "Field (minute) cannot be parsed");
  EXPECT_EQ(ParseError("0 0 */0 ? * *"), "Field (hour) has a step of zero");
  // Unknown names are found before any field is looked at.
  EXPECT_EQ(ParseError("? ? * * * xyz"), "Unknown alias: xyz");
}

TEST(CronExpressionTest, FiveFieldsFireOnSecondZero) {
  EXPECT_THAT(Next("*/20 * * * *", "2026-03-07T12:05:30Z", 3),
              ElementsAre("2026-03-07T12:20:00", "2026-03-07T12:40:00", "2026-03-07T13:00:00"));
}

TEST(CronExpressionTest, SixFieldsStartWithSeconds) {
  EXPECT_THAT(Next("*/15 * * * * *", "2026-03-07T12:00:00Z", 3),
              ElementsAre("2026-03-07T12:00:15", "2026-03-07T12:00:30", "2026-03-07T12:00:45"));
}

TEST(CronExpressionTest, NextIsStrictlyAfterAndRoundsUpFractionalSeconds) {
  EXPECT_THAT(Next("* * * * * *", "2026-03-07T12:00:00Z", 1), ElementsAre("2026-03-07T12:00:01"));
  EXPECT_THAT(Next("* * * * * *", "2026-03-07T12:00:00.500Z", 1),
              ElementsAre("2026-03-07T12:00:01"));
  EXPECT_THAT(Next("0 0 * * *", "2026-03-07T00:00:00Z", 1), ElementsAre("2026-03-08T00:00:00"));
}

TEST(CronExpressionTest, StepFromAValueRunsToTheEndOfTheRange) {
  EXPECT_THAT(Next("5/15 * * * *", "2026-03-07T12:00:00Z", 5),
              ElementsAre("2026-03-07T12:05:00", "2026-03-07T12:20:00", "2026-03-07T12:35:00",
                          "2026-03-07T12:50:00", "2026-03-07T13:05:00"));
  EXPECT_THAT(Next("1-5/2 * * * *", "2026-03-07T12:00:00Z", 4),
              ElementsAre("2026-03-07T12:01:00", "2026-03-07T12:03:00", "2026-03-07T12:05:00",
                          "2026-03-07T13:01:00"));
}

TEST(CronExpressionTest, NamesWorkInAnyCaseAndSevenIsSunday) {
  // 2026-03-07 is a Saturday.
  EXPECT_THAT(Next("0 9 * * MON-FRI", "2026-03-07T12:00:00Z", 2),
              ElementsAre("2026-03-09T09:00:00", "2026-03-10T09:00:00"));
  EXPECT_THAT(Next("0 0 * * 7", "2026-03-07T12:00:00Z", 2),
              ElementsAre("2026-03-08T00:00:00", "2026-03-15T00:00:00"));
  EXPECT_THAT(Next("0 0 * * sun", "2026-03-07T12:00:00Z", 1), ElementsAre("2026-03-08T00:00:00"));
  EXPECT_THAT(Next("0 0 1 Jan *", "2026-03-07T12:00:00Z", 1), ElementsAre("2027-01-01T00:00:00"));
  EXPECT_THAT(Next("@weekends", "2026-03-02T00:00:00Z", 2),
              ElementsAre("2026-03-07T00:00:00", "2026-03-08T00:00:00"));
}

TEST(CronExpressionTest, NamesAreReplacedInTheTextItself) {
  // "1jan" becomes "11", as in the cron package.
  EXPECT_THAT(Next("0 0 1jan * *", "2026-03-07T12:00:00Z", 2),
              ElementsAre("2026-03-11T00:00:00", "2026-04-11T00:00:00"));
}

TEST(CronExpressionTest, DayOfMonthOrDayOfWeekWhenBothAreRestricted) {
  EXPECT_THAT(Next("0 0 1,15 * MON", "2026-03-07T12:00:00Z", 4),
              ElementsAre("2026-03-09T00:00:00", "2026-03-15T00:00:00", "2026-03-16T00:00:00",
                          "2026-03-23T00:00:00"));
  EXPECT_THAT(Next("0 0 13 * 5", "2026-03-07T12:00:00Z", 3),
              ElementsAre("2026-03-13T00:00:00", "2026-03-20T00:00:00", "2026-03-27T00:00:00"));
  // 1-7 covers every weekday, so the day of week is not restricted and only the 13th counts.
  EXPECT_THAT(Next("0 0 13 * 1-7", "2026-03-07T12:00:00Z", 2),
              ElementsAre("2026-03-13T00:00:00", "2026-04-13T00:00:00"));
}

TEST(CronExpressionTest, LeapDayIsFoundAcrossTheSkippedLeapYear2100) {
  EXPECT_THAT(Next("0 0 29 2 *", "2026-03-07T12:00:00Z", 2),
              ElementsAre("2028-02-29T00:00:00", "2032-02-29T00:00:00"));
  EXPECT_THAT(Next("0 0 29 2 *", "2096-03-01T00:00:00Z", 1), ElementsAre("2104-02-29T00:00:00"));
}

TEST(CronExpressionTest, AcceptsUnicodeSpacesBetweenFields) {
  Result<CronExpression> cron = CronExpression::Parse("0\u00a00 * *\u3000*");
  ASSERT_THAT(cron, IsOk());
  EXPECT_THAT(Next("0\u00a00 * *\u3000*", "2026-03-07T12:00:00Z", 1),
              ElementsAre("2026-03-08T00:00:00"));
}

TEST(CronExpressionTest, EvaluatesInTheGivenZone) {
  EXPECT_THAT(Next("0 9 * * *", "2026-06-30T23:00:00Z", 2, Zone("Asia/Tokyo")),
              ElementsAre("2026-07-01T00:00:00", "2026-07-02T00:00:00"));
  EXPECT_THAT(Next("0 9 * * *", "2026-07-01T00:00:00Z", 1, Zone("America/New_York")),
              ElementsAre("2026-07-01T13:00:00"));
}

TEST(CronExpressionTest, SkipsDstGapByFiringAtTheJump) {
  const TimeZone new_york = Zone("America/New_York");
  // 2026-03-08 02:00 EST jumps to 03:00 EDT (07:00Z).
  EXPECT_THAT(Next("30 2 * * *", "2026-03-07T12:00:00Z", 3, new_york),
              ElementsAre("2026-03-08T07:00:00", "2026-03-09T06:30:00", "2026-03-10T06:30:00"));
  EXPECT_THAT(Next("* * * * * *", "2026-03-08T06:59:59Z", 2, new_york),
              ElementsAre("2026-03-08T07:00:00", "2026-03-08T07:00:01"));
  EXPECT_THAT(Next("30 2 * * *", "2026-03-28T12:00:00Z", 2, Zone("Europe/Berlin")),
              ElementsAre("2026-03-29T01:00:00", "2026-03-30T00:30:00"));
}

TEST(CronExpressionTest, DstGapFiresOnlyUnderTheCronPackagesConditions) {
  const TimeZone new_york = Zone("America/New_York");
  // The day after the jump must match both day fields: 2026-03-08 is a Sunday but not the 21st.
  EXPECT_THAT(Next("0 2 21 * 0", "2026-03-08T05:00:00Z", 2, new_york),
              ElementsAre("2026-03-15T06:00:00", "2026-03-21T06:00:00"));
  EXPECT_THAT(Next("0 2 * * 0", "2026-03-08T05:00:00Z", 2, new_york),
              ElementsAre("2026-03-08T07:00:00", "2026-03-15T06:00:00"));
  // The month after the jump's month must be selected too.
  EXPECT_THAT(Next("0 2 * 3 *", "2026-03-08T05:00:00Z", 2, new_york),
              ElementsAre("2026-03-09T06:00:00", "2026-03-10T06:00:00"));
  EXPECT_THAT(Next("0 2 * 3,4 *", "2026-03-07T12:00:00Z", 2, new_york),
              ElementsAre("2026-03-08T07:00:00", "2026-03-09T06:00:00"));
}

TEST(CronExpressionTest, RepeatedHourFiresOnceAtItsFirstOccurrence) {
  const TimeZone new_york = Zone("America/New_York");
  // 2026-11-01 02:00 EDT falls back to 01:00 EST (06:00Z): 01:00-01:59 happens twice.
  EXPECT_THAT(Next("30 1 * * *", "2026-10-31T12:00:00Z", 2, new_york),
              ElementsAre("2026-11-01T05:30:00", "2026-11-02T06:30:00"));
  EXPECT_THAT(Next("*/30 * * * *", "2026-11-01T04:10:00Z", 5, new_york),
              ElementsAre("2026-11-01T04:30:00", "2026-11-01T05:00:00", "2026-11-01T05:30:00",
                          "2026-11-01T07:00:00", "2026-11-01T07:30:00"));
  EXPECT_THAT(Next("30 2 * * *", "2026-10-24T12:00:00Z", 2, Zone("Europe/Berlin")),
              ElementsAre("2026-10-25T00:30:00", "2026-10-26T01:30:00"));
}

TEST(CronExpressionTest, SearchFromInsideTheRepeatedHourContinuesThere) {
  // As in the cron package: the rest of the second occurrence still counts.
  EXPECT_THAT(Next("*/30 * * * *", "2026-11-01T06:10:00Z", 3, Zone("America/New_York")),
              ElementsAre("2026-11-01T06:30:00", "2026-11-01T07:00:00", "2026-11-01T07:30:00"));
}

TEST(CronExpressionTest, KeepsDaylightSavingTimeAfter2037) {
  EXPECT_THAT(Next("0 9 * * *", "2045-07-01T00:00:00Z", 1, Zone("America/New_York")),
              ElementsAre("2045-07-01T13:00:00"));
  // 2040-03-25 is the last Sunday of March: Berlin jumps from 02:00 to 03:00 (01:00Z).
  EXPECT_THAT(Next("30 2 * * *", "2040-03-24T12:00:00Z", 2, Zone("Europe/Berlin")),
              ElementsAre("2040-03-25T01:00:00", "2040-03-26T00:30:00"));
}

TEST(CronExpressionTest, MatchesFollowsTheFireTimes) {
  const TimeZone new_york = Zone("America/New_York");
  Result<CronExpression> cron = CronExpression::Parse("30 2 * * *");
  ASSERT_THAT(cron, IsOk());
  EXPECT_TRUE(cron->Matches(At("2026-03-08T07:00:00Z"), new_york));      // the jump
  EXPECT_TRUE(cron->Matches(At("2026-03-08T07:00:00.999Z"), new_york));  // same second
  EXPECT_FALSE(cron->Matches(At("2026-03-08T07:00:01Z"), new_york));
  EXPECT_TRUE(cron->Matches(At("2026-03-09T06:30:00Z"), new_york));
  EXPECT_FALSE(cron->Matches(At("2026-03-09T06:30:00Z"), TimeZone::Utc()));
  EXPECT_TRUE(cron->Matches(At("2026-03-09T02:30:00Z"), TimeZone::Utc()));

  Result<CronExpression> half_hourly = CronExpression::Parse("*/30 * * * *");
  ASSERT_THAT(half_hourly, IsOk());
  EXPECT_TRUE(half_hourly->Matches(At("2026-11-01T05:30:00Z"), new_york));   // 01:30 EDT
  EXPECT_FALSE(half_hourly->Matches(At("2026-11-01T06:30:00Z"), new_york));  // 01:30 EST again
  EXPECT_TRUE(half_hourly->Matches(At("2026-11-01T07:00:00Z"), new_york));   // 02:00 EST
}

TEST(CronExpressionTest, FindsRareDatesWithinTheHorizon) {
  EXPECT_THAT(Next("59 59 23 29 2 *", "2028-02-29T23:59:59Z", 1),
              ElementsAre("2032-02-29T23:59:59"));
}

TEST(CronExpressionTest, NextAfterFailsBeyondRepresentableTime) {
  Result<CronExpression> cron = CronExpression::Parse("0 0 1 1 *");
  ASSERT_THAT(cron, IsOk());
  const WallTime late = WallTime::max() - std::chrono::hours(24 * 30);
  EXPECT_THAT(cron->NextAfter(late, TimeZone::Utc()), Not(IsOk()));
}

}  // namespace
}  // namespace stagehand
