#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "stagehand/cli/cli.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::cli {
namespace {

using ::stagehand::testing::IsOk;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

struct Outcome {
  int exit_code;
  std::vector<std::string> lines;
  std::string err;
};

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

Outcome RunCli(const std::vector<std::string>& args) {
  std::vector<std::string> command_line;
  command_line.reserve(args.size() + 1);
  command_line.emplace_back("stagehand");
  for (const std::string& arg : args) {
    command_line.push_back(arg);
  }
  std::ostringstream out;
  std::ostringstream err;
  int exit_code = Run(command_line, out, err);
  return {exit_code, SplitLines(out.str()), err.str()};
}

TEST(CronNextCommandTest, PrintsSixFieldFireTimesInUtc) {
  Outcome outcome = RunCli({"cron", "next", "*/10 * * * * *", "--count", "3", "--from",
                            "2026-03-07T12:00:00Z", "--tz", "UTC"});
  EXPECT_EQ(outcome.exit_code, kExitOk);
  EXPECT_THAT(outcome.lines,
              ElementsAre("2026-03-07T12:00:10.000+00:00", "2026-03-07T12:00:20.000+00:00",
                          "2026-03-07T12:00:30.000+00:00"));
  EXPECT_THAT(outcome.err, IsEmpty());
}

TEST(CronNextCommandTest, FromIsExclusiveAndFractionalSecondsRoundUp) {
  Outcome on_boundary = RunCli({"cron", "next", "* * * * * *", "--count", "1", "--from",
                                "2026-03-07T12:00:00Z", "--tz", "UTC"});
  EXPECT_THAT(on_boundary.lines, ElementsAre("2026-03-07T12:00:01.000+00:00"));
  Outcome fractional = RunCli({"cron", "next", "* * * * * *", "--count", "1", "--from",
                               "2026-03-07T12:00:00.250Z", "--tz", "UTC"});
  EXPECT_THAT(fractional.lines, ElementsAre("2026-03-07T12:00:01.000+00:00"));
}

TEST(CronNextCommandTest, SkippedLocalTimeFiresAtTheDstJump) {
  Outcome outcome = RunCli({"cron", "next", "30 2 * * *", "--tz", "America/New_York", "--from",
                            "2026-03-07T12:00:00Z", "--count", "3"});
  EXPECT_EQ(outcome.exit_code, kExitOk);
  EXPECT_THAT(outcome.lines,
              ElementsAre("2026-03-08T03:00:00.000-04:00", "2026-03-09T02:30:00.000-04:00",
                          "2026-03-10T02:30:00.000-04:00"));
}

TEST(CronNextCommandTest, RepeatedLocalHourFiresOnce) {
  Outcome outcome = RunCli({"cron", "next", "30 1 * * *", "--tz", "America/New_York", "--from",
                            "2026-10-31T12:00:00Z", "--count", "2"});
  EXPECT_EQ(outcome.exit_code, kExitOk);
  EXPECT_THAT(outcome.lines,
              ElementsAre("2026-11-01T01:30:00.000-04:00", "2026-11-02T01:30:00.000-05:00"));
}

TEST(CronNextCommandTest, PrintsInTheGivenZoneWithItsOffset) {
  Outcome outcome = RunCli({"cron", "next", "0 9 * * mon-fri", "--tz", "Europe/Berlin", "--from",
                            "2026-03-27T12:00:00Z", "--count", "2"});
  EXPECT_EQ(outcome.exit_code, kExitOk);
  EXPECT_THAT(outcome.lines,
              ElementsAre("2026-03-30T09:00:00.000+02:00", "2026-03-31T09:00:00.000+02:00"));
}

TEST(CronNextCommandTest, AcceptsPresets) {
  Outcome outcome = RunCli({"cron", "next", "@weekends", "--tz", "UTC", "--from",
                            "2026-03-02T00:00:00Z", "--count", "2"});
  EXPECT_EQ(outcome.exit_code, kExitOk);
  EXPECT_THAT(outcome.lines,
              ElementsAre("2026-03-07T00:00:00.000+00:00", "2026-03-08T00:00:00.000+00:00"));
}

TEST(CronNextCommandTest, DefaultsToFiveTimesFromTheClockInTheDefaultZone) {
  testing::ManualClock clock(testing::ManualClock::DefaultStart());
  Result<TimeZone> tokyo = TimeZone::Locate("Asia/Tokyo");
  ASSERT_THAT(tokyo, IsOk());
  std::ostringstream out;
  std::ostringstream err;
  int exit_code =
      RunWithContext({"stagehand", "cron", "next", "0 0 * * *"}, Context{out, err, clock, &*tokyo});
  EXPECT_EQ(exit_code, kExitOk) << err.str();
  EXPECT_THAT(SplitLines(out.str()),
              ElementsAre("2026-01-02T00:00:00.000+09:00", "2026-01-03T00:00:00.000+09:00",
                          "2026-01-04T00:00:00.000+09:00", "2026-01-05T00:00:00.000+09:00",
                          "2026-01-06T00:00:00.000+09:00"));
}

TEST(CronNextCommandTest, InvalidExpressionIsAUsageErrorNamingTheField) {
  Outcome step = RunCli({"cron", "next", "*/0 * * * *", "--tz", "UTC"});
  EXPECT_EQ(step.exit_code, kExitUsage);
  EXPECT_THAT(step.lines, IsEmpty());
  EXPECT_THAT(step.err, StartsWith("stagehand: "));
  EXPECT_THAT(step.err, HasSubstr("Field (minute) has a step of zero"));

  Outcome unknown = RunCli({"cron", "next", "0 0 ? * *", "--tz", "UTC"});
  EXPECT_EQ(unknown.exit_code, kExitUsage);
  EXPECT_THAT(unknown.err, HasSubstr("dayOfMonth"));

  Outcome few = RunCli({"cron", "next", "* * * *", "--tz", "UTC"});
  EXPECT_EQ(few.exit_code, kExitUsage);
  EXPECT_THAT(few.err, HasSubstr("Too few fields"));
}

TEST(CronNextCommandTest, ExpressionThatNeverFiresIsAUsageError) {
  Outcome outcome = RunCli({"cron", "next", "0 0 30 2 *", "--tz", "UTC"});
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_THAT(outcome.lines, IsEmpty());
  EXPECT_THAT(outcome.err, HasSubstr("No execution date was found in the next 8 years"));
}

TEST(CronNextCommandTest, UnknownZoneIsAUsageError) {
  Outcome outcome = RunCli({"cron", "next", "* * * * *", "--tz", "Mars/Olympus_Mons"});
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_THAT(outcome.lines, IsEmpty());
  EXPECT_THAT(outcome.err, StartsWith("stagehand: "));
  EXPECT_THAT(outcome.err, HasSubstr("Mars/Olympus_Mons"));
}

TEST(CronNextCommandTest, MalformedFromIsAUsageError) {
  for (const char* from : {"yesterday", "2026-03-07", "2026-13-07T12:00:00Z", ""}) {
    SCOPED_TRACE(from);
    Outcome outcome = RunCli({"cron", "next", "* * * * *", "--tz", "UTC", "--from", from});
    EXPECT_EQ(outcome.exit_code, kExitUsage);
    EXPECT_THAT(outcome.lines, IsEmpty());
    EXPECT_THAT(outcome.err, StartsWith("stagehand: "));
    EXPECT_THAT(outcome.err, HasSubstr("--from"));
  }
}

TEST(CronNextCommandTest, CountBelowOneIsRejected) {
  for (const char* count : {"0", "-3"}) {
    SCOPED_TRACE(count);
    Outcome outcome =
        RunCli({"cron", "next", "* * * * *", "--tz", "UTC", "--count=" + std::string(count)});
    EXPECT_EQ(outcome.exit_code, kExitUsage);
    EXPECT_THAT(outcome.lines, IsEmpty());
    EXPECT_THAT(outcome.err, HasSubstr("--count"));
  }
}

TEST(CronNextCommandTest, NonNumericCountIsAUsageError) {
  Outcome outcome = RunCli({"cron", "next", "* * * * *", "--count", "many"});
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_THAT(outcome.lines, IsEmpty());
  EXPECT_THAT(outcome.err, StartsWith("stagehand: "));
}

TEST(CronNextCommandTest, MissingExpressionIsAUsageError) {
  Outcome outcome = RunCli({"cron", "next"});
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_THAT(outcome.err, HasSubstr("expression"));
}

TEST(CronNextCommandTest, HelpShowsFlagsAndAnExample) {
  Outcome outcome = RunCli({"cron", "next", "--help"});
  EXPECT_EQ(outcome.exit_code, kExitOk);
  std::string help;
  for (const std::string& line : outcome.lines) {
    help += line + "\n";
  }
  EXPECT_THAT(help, HasSubstr("--count"));
  EXPECT_THAT(help, HasSubstr("--from"));
  EXPECT_THAT(help, HasSubstr("--tz"));
  EXPECT_THAT(help, HasSubstr("Example:"));
  EXPECT_THAT(help, HasSubstr("2026-03-08T03:00:00.000-04:00"));
}

}  // namespace
}  // namespace stagehand::cli
