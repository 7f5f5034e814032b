#include "cli/task_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::cli {
namespace {

using ::stagehand::testing::IsOk;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

WallTime At(const char* iso) { return ParseIsoInstant(iso).value(); }

TEST(FormatSpanTest, ShowsTheLargestUnitsFirst) {
  EXPECT_EQ(FormatSpan(milliseconds(0), 2), "0s");
  EXPECT_EQ(FormatSpan(seconds(4), 2), "4s");
  EXPECT_EQ(FormatSpan(minutes(2) + seconds(58), 2), "2m58s");
  EXPECT_EQ(FormatSpan(minutes(2) + seconds(58), 1), "2m");
  EXPECT_EQ(FormatSpan(minutes(90), 5), "1h30m");
  EXPECT_EQ(FormatSpan(hours(51), 2), "2d3h");
  EXPECT_EQ(FormatSpan(milliseconds(500), 2), "500ms");
}

TEST(FormatSpanTest, UnitsAreConsecutive) {
  EXPECT_EQ(FormatSpan(hours(1) + seconds(5), 2), "1h");
  EXPECT_EQ(FormatSpan(hours(1) + seconds(5), 5), "1h5s");
}

TEST(FormatCadenceTest, IsoDurationsReadAsEvery) {
  EXPECT_EQ(FormatCadence("PT1M"), "every 1m");
  EXPECT_EQ(FormatCadence("PT90M"), "every 1h30m");
  EXPECT_EQ(FormatCadence("PT3600S"), "every 1h");
  EXPECT_EQ(FormatCadence("P1D"), "every 1d");
  EXPECT_EQ(FormatCadence("PT0.5S"), "every 500ms");
  EXPECT_EQ(FormatCadence("PT1H30M10S"), "every 1h30m10s");
}

TEST(FormatCadenceTest, CronManualAndOddValuesStayAsListed) {
  EXPECT_EQ(FormatCadence("*/10 * * * * *"), "*/10 * * * * *");
  EXPECT_EQ(FormatCadence("manual"), "manual");
  EXPECT_EQ(FormatCadence("@daily"), "@daily");
  EXPECT_EQ(FormatCadence("PT0S"), "PT0S");
  EXPECT_EQ(FormatCadence("PT-5M"), "PT-5M");
  EXPECT_EQ(FormatCadence(""), "-");
}

TEST(FormatCadenceTest, ACronCadenceIsFollowedByItsZone) {
  EXPECT_EQ(FormatCadence("0 3 * * *", "Europe/Berlin"), "0 3 * * * (Europe/Berlin)");
  EXPECT_EQ(FormatCadence("0 3 * * *", ""), "0 3 * * *");
  EXPECT_EQ(FormatCadence("manual", "UTC"), "manual");
  EXPECT_EQ(FormatCadence("PT1M", "UTC"), "every 1m");
}

TEST(FormatWhenTest, FutureAndPastAreRelativeAndAbsolute) {
  const WallTime now = At("2026-03-07T12:00:01Z");
  const TimeZone utc = TimeZone::Utc();
  EXPECT_EQ(FormatWhen(At("2026-03-07T12:00:05Z"), now, utc), "in 4s (12:00:05)");
  EXPECT_EQ(FormatWhen(At("2026-03-07T11:57:03Z"), now, utc), "2m58s ago (11:57:03)");
  EXPECT_EQ(FormatWhen(At("2026-03-07T12:00:01.400Z"), now, utc), "now (12:00:01)");
  EXPECT_EQ(FormatWhen(At("2026-03-07T12:00:05.900Z"), now, utc), "in 4s (12:00:05)");
}

TEST(FormatWhenTest, ShowsTheDateWhenItIsNotTodayInTheZone) {
  const WallTime now = At("2026-03-07T12:00:00Z");
  EXPECT_EQ(FormatWhen(At("2026-03-08T00:00:00Z"), now, TimeZone::Utc()),
            "in 12h (2026-03-08 00:00:00)");
  // 23:30 UTC is already the next day in Tokyo (+09:00), and "now" is 21:00 there.
  const TimeZone tokyo = TimeZone::Locate("Asia/Tokyo").value();
  EXPECT_EQ(FormatWhen(At("2026-03-07T14:30:00Z"), now, tokyo), "in 2h30m (23:30:00)");
  EXPECT_EQ(FormatWhen(At("2026-03-07T15:30:00Z"), now, tokyo), "in 3h30m (2026-03-08 00:30:00)");
}

TEST(FormatWhenTest, UsesTheZoneOffsetOfTheInstant) {
  const TimeZone berlin = TimeZone::Locate("Europe/Berlin").value();
  // Berlin moves from +01:00 to +02:00 on 2026-03-29 at 01:00 UTC.
  const WallTime now = At("2026-03-29T00:59:00Z");
  EXPECT_EQ(FormatWhen(At("2026-03-29T00:59:30Z"), now, berlin), "in 30s (01:59:30)");
  EXPECT_EQ(FormatWhen(At("2026-03-29T01:00:30Z"), now, berlin), "in 1m30s (03:00:30)");
}

TEST(DisplayStateTest, RunningWinsThenWorkerThenTask) {
  TaskRow row;
  EXPECT_EQ(DisplayState(row), "-");
  row.task_status = "idle";
  EXPECT_EQ(DisplayState(row), "idle");
  row.worker_status = "initial-wait";
  EXPECT_EQ(DisplayState(row), "initial-wait");
  row.task_status = "running";
  EXPECT_EQ(DisplayState(row), "running");
  row.task_status = "idle";
  row.worker_status = "running";
  EXPECT_EQ(DisplayState(row), "running");
}

TEST(ShortErrorTest, ShowsTheMessageOfTheSerialisedError) {
  EXPECT_EQ(ShortError(R"({"name":"Error","message":"Task was cancelled"})", 60),
            "Task was cancelled");
  EXPECT_EQ(ShortError(R"({"name":"TimeoutError"})", 60), "TimeoutError");
  EXPECT_EQ(ShortError("plain text", 60), "plain text");
}

TEST(ShortErrorTest, CutsLongAndMultiLineMessages) {
  EXPECT_EQ(ShortError(R"({"name":"Error","message":"first line\nsecond line"})", 60),
            "first line; second line");
  EXPECT_EQ(ShortError(R"({"name":"Error","message":"abcdefghij"})", 5), "abcd…");
  // Code points, not bytes: "é" is two bytes.
  EXPECT_EQ(ShortError(R"({"name":"Error","message":"ééééééé"})", 4), "ééé…");
  EXPECT_EQ(ShortError(R"({"name":"Error","message":"éééé"})", 4), "éééé");
}

// The example listing of the scheduler spec (§8.3), with a running task added.
constexpr const char* kListing = R"({"tasks":[
 {"taskId":"g1","pluginId":"myplugin","scope":"global",
  "settings":{"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT1M"},
  "taskState":{"status":"idle","startsAt":"2026-11-30T04:18:13.000+00:00",
               "lastRunEndedAt":"2026-11-30T04:13:13.000+00:00",
               "lastRunError":"{\"name\":\"Error\",\"message\":\"Task was cancelled\"}"},
  "workerState":{"status":"idle"}},
 {"taskId":"l1","pluginId":"myplugin","scope":"local",
  "settings":{"version":2,"cadence":"PT10M","initialDelayDuration":"PT1H","timeoutAfterDuration":"PT1M"},
  "taskState":{"status":"idle","startsAt":"2026-11-30T05:13:13.010Z"},
  "workerState":{"status":"initial-wait"}},
 {"taskId":"man","pluginId":"myplugin","scope":"global",
  "settings":{"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"},
  "taskState":null,"workerState":null},
 {"taskId":"busy","pluginId":"myplugin","scope":"global",
  "settings":{"version":2,"cadence":"0 * * * *","timeoutAfterDuration":"PT1M"},
  "taskState":{"status":"running","startedAt":"2026-11-30T04:14:03.000Z",
               "timesOutAt":"2026-11-30T04:15:03.000Z"},
  "workerState":{"status":"running"}}]})";

TEST(ParseTaskListingTest, ReadsEveryField) {
  Result<std::vector<TaskRow>> rows = ParseTaskListing("myplugin", kListing);
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->size(), 4U);
  const TaskRow& g1 = (*rows)[0];
  EXPECT_EQ(g1.plugin_id, "myplugin");
  EXPECT_EQ(g1.task_id, "g1");
  EXPECT_EQ(g1.scope, "global");
  EXPECT_EQ(g1.cadence, "PT10M");
  EXPECT_EQ(g1.task_status, "idle");
  EXPECT_EQ(g1.worker_status, "idle");
  EXPECT_EQ(g1.starts_at, At("2026-11-30T04:18:13Z"));
  EXPECT_EQ(g1.last_run_ended_at, At("2026-11-30T04:13:13Z"));
  EXPECT_EQ(g1.last_run_error, R"({"name":"Error","message":"Task was cancelled"})");
  EXPECT_EQ((*rows)[1].starts_at, At("2026-11-30T05:13:13.010Z"));
  EXPECT_EQ((*rows)[2].task_status, "");
  EXPECT_EQ((*rows)[2].worker_status, "");
  EXPECT_FALSE((*rows)[2].starts_at.has_value());
  EXPECT_EQ((*rows)[3].started_at, At("2026-11-30T04:14:03Z"));
}

TEST(ParseTaskListingTest, RejectsBodiesThatAreNotAListing) {
  EXPECT_THAT(ParseTaskListing("jobs", "not json"), Not(IsOk()));
  EXPECT_THAT(ParseTaskListing("jobs", "[]"), Not(IsOk()));
  EXPECT_THAT(ParseTaskListing("jobs", R"({"tasks":{}})"), Not(IsOk()));
  Result<std::vector<TaskRow>> empty = ParseTaskListing("jobs", R"({"tasks":[]})");
  ASSERT_THAT(empty, IsOk());
  EXPECT_TRUE(empty->empty());
}

TEST(RenderTaskTableTest, AlignsEveryColumn) {
  const WallTime now = At("2026-11-30T04:14:13Z");
  std::vector<TaskRow> rows = ParseTaskListing("myplugin", kListing).value();
  rows[0].last_outcome = "cancelled";
  rows[0].last_duration = std::chrono::milliseconds(1500);
  EXPECT_EQ(RenderTaskTable(rows, now, TimeZone::Utc(), /*colour=*/false),
            "PLUGIN    TASK  SCOPE   CADENCE    STATE         NEXT RUN                    "
            "LAST RUN ENDED     OUTCOME    DURATION  LAST ERROR\n"
            "myplugin  g1    global  every 10m  idle          in 4m (04:18:13)            "
            "1m ago (04:13:13)  cancelled  1.5s      Task was cancelled\n"
            "myplugin  l1    local   every 10m  initial-wait  in 59m (05:13:13)           "
            "-                  -          -         -\n"
            "myplugin  man   global  manual     -             -                           "
            "-                  -          -         -\n"
            "myplugin  busy  global  0 * * * *  running       started 10s ago (04:14:03)  "
            "-                  -          -         -\n");
}

TEST(RenderTaskTableTest, ColourAddsEscapesWithoutMovingColumns) {
  const WallTime now = At("2026-11-30T04:14:13Z");
  std::vector<TaskRow> rows = ParseTaskListing("myplugin", kListing).value();
  rows[1].last_outcome = "succeeded";
  rows[2].last_outcome = "timed_out";
  const std::string plain = RenderTaskTable(rows, now, TimeZone::Utc(), false);
  const std::string coloured = RenderTaskTable(rows, now, TimeZone::Utc(), true);
  EXPECT_THAT(plain, Not(HasSubstr("\033[")));
  EXPECT_THAT(coloured, HasSubstr("\033[1mPLUGIN\033[0m"));
  EXPECT_THAT(coloured, HasSubstr("\033[32mrunning\033[0m"));
  EXPECT_THAT(coloured, HasSubstr("\033[33minitial-wait\033[0m"));
  EXPECT_THAT(coloured, HasSubstr("\033[31mTask was cancelled\033[0m"));
  EXPECT_THAT(coloured, HasSubstr("\033[32msucceeded\033[0m"));
  EXPECT_THAT(coloured, HasSubstr("\033[31mtimed_out\033[0m"));
  EXPECT_EQ(std::regex_replace(coloured, std::regex("\033\\[[0-9;]*m"), ""), plain);
}

}  // namespace
}  // namespace stagehand::cli
