#include "cli/run_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "stagehand/cli/cli.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::cli {
namespace {

using ::stagehand::testing::IsOk;
using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::Not;

WallTime At(const char* iso) { return ParseIsoInstant(iso).value(); }

// Two runs as the REST API lists them: a failed manual run and a scheduled one that succeeded.
constexpr const char* kPage = R"({"runs":[
 {"runId":"6c1f0e2a-1111-4aaa-8bbb-000000000001","taskId":"backup","pluginId":"jobs",
  "host":"web-1","pid":4242,"trigger":"manual","attempt":1,"slot":null,
  "startedAt":"2026-12-01T15:00:00.000Z","endedAt":"2026-12-01T15:00:02.010Z",
  "durationMs":2010,"startLagMs":null,"outcome":"failed",
  "error":{"name":"Error","message":"command '/bin/sh' exited with code 1; stderr:\nno space"},
  "exitCode":1,"signal":null,"httpStatus":null},
 {"runId":"0b9d77c4-2222-4aaa-8bbb-000000000002","taskId":"backup","pluginId":"jobs",
  "host":"web-2","pid":77,"trigger":"schedule","attempt":1,"slot":"2026-12-01T03:00:00.000Z",
  "startedAt":"2026-12-01T03:00:00.012Z","endedAt":"2026-12-01T03:00:02.016Z",
  "durationMs":2004,"startLagMs":12,"outcome":"succeeded","error":null,
  "exitCode":0,"signal":null,"httpStatus":null}],
 "nextCursor":"MjAyNi0xMi0wMVQwMzowMDowMC4wMTJafDBiOWQ"})";

TEST(ParseRunPageTest, ReadsEveryField) {
  Result<RunPage> page = ParseRunPage(kPage, "the runs of jobs/backup");
  ASSERT_THAT(page, IsOk());
  ASSERT_EQ(page->runs.size(), 2U);
  EXPECT_EQ(page->next_cursor, "MjAyNi0xMi0wMVQwMzowMDowMC4wMTJafDBiOWQ");
  const RunRecord& failed = page->runs[0];
  EXPECT_EQ(failed.run_id, "6c1f0e2a-1111-4aaa-8bbb-000000000001");
  EXPECT_EQ(failed.task_id, "backup");
  EXPECT_EQ(failed.plugin_id, "jobs");
  EXPECT_EQ(failed.host, "web-1");
  EXPECT_EQ(failed.pid, 4242);
  EXPECT_EQ(failed.trigger, "manual");
  EXPECT_EQ(failed.attempt, 1);
  EXPECT_FALSE(failed.slot.has_value());
  EXPECT_EQ(failed.started_at, At("2026-12-01T15:00:00Z"));
  EXPECT_EQ(failed.ended_at, At("2026-12-01T15:00:02.010Z"));
  EXPECT_EQ(failed.duration, milliseconds(2010));
  EXPECT_FALSE(failed.start_lag.has_value());
  EXPECT_EQ(failed.outcome, "failed");
  EXPECT_EQ(failed.error_name, "Error");
  EXPECT_EQ(failed.error_message, "command '/bin/sh' exited with code 1; stderr:\nno space");
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_FALSE(failed.signal.has_value());
  EXPECT_FALSE(failed.http_status.has_value());
  const RunRecord& scheduled = page->runs[1];
  EXPECT_EQ(scheduled.slot, At("2026-12-01T03:00:00Z"));
  EXPECT_EQ(scheduled.start_lag, milliseconds(12));
  EXPECT_EQ(scheduled.error_name, "");
  EXPECT_EQ(scheduled.exit_code, 0);
}

TEST(ParseRunPageTest, LastPageHasNoCursor) {
  Result<RunPage> page = ParseRunPage(R"({"runs":[],"nextCursor":null})", "the runs");
  ASSERT_THAT(page, IsOk());
  EXPECT_TRUE(page->runs.empty());
  EXPECT_FALSE(page->next_cursor.has_value());
}

TEST(ParseRunPageTest, NamesWhatIsMissing) {
  EXPECT_EQ(ParseRunPage("<html>", "the runs of jobs/backup").status().message(),
            "the runs of jobs/backup are not a JSON object");
  EXPECT_EQ(ParseRunPage(R"({"tasks":[]})", "the runs of jobs/backup").status().message(),
            "the runs of jobs/backup have no \"runs\" array");
}

TEST(ParseRunDetailTest, ReadsTheOutputAndWhetherItIsLive) {
  Result<RunDetail> detail = ParseRunDetail(
      R"({"runId":"r1","taskId":"backup","pluginId":"jobs","outcome":"running",
          "startedAt":"2026-12-01T15:00:00.000Z","endedAt":null,"durationMs":null,
          "output":"backing up\n","outputBytes":70011,"live":true})",
      "run r1");
  ASSERT_THAT(detail, IsOk());
  EXPECT_EQ(detail->run.run_id, "r1");
  EXPECT_EQ(detail->run.outcome, "running");
  EXPECT_FALSE(detail->run.ended_at.has_value());
  EXPECT_EQ(detail->output, "backing up\n");
  EXPECT_EQ(detail->output_bytes, 70011U);
  EXPECT_TRUE(detail->live);
  EXPECT_FALSE(HasEnded(detail->run.outcome));
}

TEST(ParseRunDetailTest, NeedsARunId) {
  EXPECT_EQ(ParseRunDetail(R"({"output":""})", "run r1 of plugin 'jobs'").status().message(),
            "run r1 of plugin 'jobs' has no \"runId\"");
  EXPECT_THAT(ParseRunDetail("[]", "run r1"), Not(IsOk()));
}

TEST(FormatExitTest, ExitCodeSignalOrHttpStatus) {
  RunRecord run;
  EXPECT_EQ(FormatExit(run), "-");
  run.http_status = 503;
  EXPECT_EQ(FormatExit(run), "HTTP 503");
  run.signal = 9;
  EXPECT_EQ(FormatExit(run), "SIGKILL");
  run.signal = 200;
  EXPECT_EQ(FormatExit(run), "signal 200");
  run.exit_code = 0;
  EXPECT_EQ(FormatExit(run), "0");
}

TEST(ExitCodeForOutcomeTest, EachOutcomeHasItsCode) {
  EXPECT_EQ(ExitCodeForOutcome("succeeded"), kExitOk);
  EXPECT_EQ(ExitCodeForOutcome("failed"), kExitRunFailed);
  EXPECT_EQ(ExitCodeForOutcome("timed_out"), kExitRunTimedOut);
  EXPECT_EQ(ExitCodeForOutcome("cancelled"), kExitRunCancelled);
  EXPECT_EQ(ExitCodeForOutcome("lost"), kExitRunLost);
  EXPECT_EQ(ExitCodeForOutcome("fenced"), kExitRunLost);
  EXPECT_EQ(ExitCodeForOutcome("exploded"), kExitFailure);
  // Distinct from each other and from the codes of the other client failures.
  const std::vector<int> codes = {
      kExitFailure,     kExitUsage,        kExitNotFound,  kExitConflict,    kExitUnauthenticated,
      kExitServerError, kExitUnreachable,  kExitRunFailed, kExitRunTimedOut, kExitRunCancelled,
      kExitRunLost,     kExitStillRunning, kExitNotOffered};
  for (std::size_t i = 0; i < codes.size(); ++i) {
    for (std::size_t j = i + 1; j < codes.size(); ++j) {
      EXPECT_NE(codes[i], codes[j]);
    }
  }
}

TEST(RenderRunTableTest, AlignsEveryColumnInTheViewersZone) {
  const std::vector<RunRecord> runs = ParseRunPage(kPage, "runs").value().runs;
  Result<TimeZone> berlin = TimeZone::Locate("Europe/Berlin");
  ASSERT_THAT(berlin, IsOk());
  EXPECT_EQ(RenderRunTable(runs, At("2026-12-01T15:01:00Z"), *berlin, /*colour=*/false),
            "STARTED             HOST   TRIGGER   OUTCOME    DURATION  LAG   EXIT  RUN ID        "
            "                        ERROR\n"
            "1m ago (16:00:00)   web-1  manual    failed     2.01s     -     1     "
            "6c1f0e2a-1111-4aaa-8bbb-000000000001  command '/bin/sh' exited with code 1; stderr:; "
            "no…\n"
            "12h ago (04:00:00)  web-2  schedule  succeeded  2.004s    12ms  0     "
            "0b9d77c4-2222-4aaa-8bbb-000000000002  -\n");
}

TEST(RenderRunTableTest, ColoursTheOutcomeAndTheError) {
  std::vector<RunRecord> runs = ParseRunPage(kPage, "runs").value().runs;
  runs.push_back(runs[1]);
  runs.back().outcome = "cancelled";
  const WallTime now = At("2026-12-01T15:01:00Z");
  const std::string plain = RenderRunTable(runs, now, TimeZone::Utc(), false);
  const std::string coloured = RenderRunTable(runs, now, TimeZone::Utc(), true);
  EXPECT_THAT(plain, Not(HasSubstr("\033[")));
  EXPECT_THAT(coloured, HasSubstr("\033[31mfailed\033[0m"));
  EXPECT_THAT(coloured, HasSubstr("\033[32msucceeded\033[0m"));
  EXPECT_THAT(coloured, HasSubstr("\033[33mcancelled\033[0m"));
  EXPECT_THAT(coloured, HasSubstr("\033[31mcommand '/bin/sh'"));
  EXPECT_EQ(std::regex_replace(coloured, std::regex("\033\\[[0-9;]*m"), ""), plain);
}

TEST(DescribeRunEndTest, SaysHowLongWhereAndHow) {
  const std::vector<RunRecord> runs = ParseRunPage(kPage, "runs").value().runs;
  EXPECT_EQ(DescribeRunEnd(runs[0]),
            "Run 6c1f0e2a-1111-4aaa-8bbb-000000000001 of jobs/backup failed after 2.01s on web-1 "
            "(exit 1): command '/bin/sh' exited with code 1; stderr:; no space");
  EXPECT_EQ(DescribeRunEnd(runs[1]),
            "Run 0b9d77c4-2222-4aaa-8bbb-000000000002 of jobs/backup succeeded in 2.004s on "
            "web-2 (exit 0)");
  RunRecord killed = runs[1];
  killed.outcome = "timed_out";
  killed.exit_code.reset();
  killed.signal = 15;
  EXPECT_THAT(DescribeRunEnd(killed), HasSubstr(" timed out after 2.004s on web-2 (SIGTERM)"));
}

TEST(OverlapTest, LongestPrefixOfTheTextThatEndsTheSeenBytes) {
  EXPECT_EQ(OverlapOfSuffixAndPrefix("abcdef", "defgh"), 3U);
  EXPECT_EQ(OverlapOfSuffixAndPrefix("abcdef", "xyz"), 0U);
  EXPECT_EQ(OverlapOfSuffixAndPrefix("", "abc"), 0U);
  EXPECT_EQ(OverlapOfSuffixAndPrefix("abc", ""), 0U);
  EXPECT_EQ(OverlapOfSuffixAndPrefix("abc", "abc"), 3U);
  EXPECT_EQ(OverlapOfSuffixAndPrefix("xxabab", "ababab"), 4U);
  EXPECT_EQ(OverlapOfSuffixAndPrefix("aaaa", "aaaaaaa"), 4U);
  EXPECT_EQ(OverlapOfSuffixAndPrefix("abcabcabd", "abd"), 3U);
}

RunDetail Live(std::string output, std::uint64_t bytes) {
  RunDetail detail;
  detail.run.run_id = "r1";
  detail.run.outcome = "running";
  detail.output = std::move(output);
  detail.output_bytes = bytes;
  detail.live = true;
  return detail;
}

RunDetail Ended(std::string output) {
  RunDetail detail;
  detail.run.run_id = "r1";
  detail.run.outcome = "succeeded";
  detail.output_bytes = output.size();
  detail.output = std::move(output);
  return detail;
}

TEST(OutputFollowerTest, PrintsOnlyTheNewBytesOfALiveRun) {
  OutputFollower follower;
  EXPECT_EQ(follower.Next(Live("one\n", 4)).bytes, "one\n");
  EXPECT_EQ(follower.Next(Live("one\n", 4)).bytes, "");
  OutputFollower::Step step = follower.Next(Live("one\ntwo\n", 8));
  EXPECT_EQ(step.bytes, "two\n");
  EXPECT_EQ(step.note, "");
  EXPECT_EQ(follower.Next(Ended("one\ntwo\nthree\n")).bytes, "three\n");
}

TEST(OutputFollowerTest, ANewerTailThatSkipsBytesSaysSo) {
  OutputFollower follower;
  // A tail of 4 bytes: the first answer holds bytes 6..10 of 10.
  OutputFollower::Step first = follower.Next(Live("6789", 10));
  EXPECT_EQ(first.bytes, "6789");
  EXPECT_EQ(first.note, "the first 6 bytes of the output were not kept");
  OutputFollower::Step next = follower.Next(Live("CDEF", 16));
  EXPECT_EQ(next.bytes, "CDEF");
  EXPECT_EQ(next.note, "2 bytes of the output were not kept");
  EXPECT_EQ(follower.Next(Live("EFGH", 18)).bytes, "GH");
}

TEST(OutputFollowerTest, TheFinalTailIsLinedUpWithWhatWasShown) {
  OutputFollower follower;
  EXPECT_EQ(follower.Next(Live("line 7\nline 8\n", 1000)).bytes, "line 7\nline 8\n");
  // The run printed more before it ended; the stored tail starts inside what was shown.
  OutputFollower::Step step = follower.Next(Ended("8\nline 9\n"));
  EXPECT_EQ(step.bytes, "line 9\n");
  EXPECT_EQ(step.note, "");
}

TEST(OutputFollowerTest, AFinalTailWithNothingInCommonIsShownWhole) {
  OutputFollower follower;
  follower.Next(Live("aaaa", 1000));
  OutputFollower::Step step = follower.Next(Ended("zzzz"));
  EXPECT_EQ(step.bytes, "zzzz");
  EXPECT_EQ(step.note, "some of the output was not kept");
}

TEST(OutputFollowerTest, AnEndedRunIsShownWhole) {
  OutputFollower follower;
  OutputFollower::Step step = follower.Next(Ended("all of it\n"));
  EXPECT_EQ(step.bytes, "all of it\n");
  EXPECT_EQ(step.note, "");
}

}  // namespace
}  // namespace stagehand::cli
