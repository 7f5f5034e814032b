// The pieces every RunHistory shares: page cursors, the output bound, ticket to run id, and the
// names of triggers and outcomes that the stores write and read.
#include "store/run_history_support.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

#include "stagehand/model/task_run.h"
#include "stagehand/store/task_store.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::store_internal {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::Not;

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RunCursorTest, RoundTripsStartAndRunId) {
  const WallTime started = WallTime(std::chrono::microseconds(1'767'225'600'123'456));
  const std::string cursor = EncodeRunCursor(started, "6f1c2e4a-0000-4000-8000-000000000001");
  EXPECT_EQ(cursor, "1767225600123456.6f1c2e4a-0000-4000-8000-000000000001");
  std::optional<RunCursor> decoded = DecodeRunCursor(cursor);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->started_at, started);
  EXPECT_EQ(decoded->run_id, "6f1c2e4a-0000-4000-8000-000000000001");

  // A run id with dots of its own keeps them; a time before 1970 is negative.
  decoded = DecodeRunCursor(EncodeRunCursor(WallTime(seconds(-5)), "a.b.c"));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->started_at, WallTime(seconds(-5)));
  EXPECT_EQ(decoded->run_id, "a.b.c");
}

TEST(RunCursorTest, RunIdsAndGarbageAreNotCursors) {
  EXPECT_FALSE(DecodeRunCursor("6f1c2e4a-0000-4000-8000-000000000001").has_value());
  EXPECT_FALSE(DecodeRunCursor("run-1").has_value());
  EXPECT_FALSE(DecodeRunCursor("").has_value());
  EXPECT_FALSE(DecodeRunCursor(".run").has_value());
  EXPECT_FALSE(DecodeRunCursor("123.").has_value());
  EXPECT_FALSE(DecodeRunCursor("12x.run").has_value());
  EXPECT_FALSE(DecodeRunCursor("99999999999999999999999.run").has_value());
}

TEST(OutputTailTest, KeepsTheLastBytes) {
  EXPECT_EQ(OutputTail("0123456789", 4), "6789");
  EXPECT_EQ(OutputTail("0123", 4), "0123");
  EXPECT_EQ(OutputTail("01", 4), "01");
  EXPECT_EQ(OutputTail("0123", 0), "");
  const std::string binary("a\0b\xff", 4);
  EXPECT_EQ(OutputTail(binary, 3), std::string("\0b\xff", 3));
}

TEST(RunIdOfTicketTest, StripsACancelsMark) {
  EXPECT_EQ(RunIdOfTicket("abc"), "abc");
  EXPECT_EQ(RunIdOfTicket(CancelRequestedTicket("abc")), "abc");
}

TEST(RunNamesTest, EveryTriggerAndOutcomeRoundTripsByItsRestName) {
  for (const RunTrigger trigger :
       {RunTrigger::kSchedule, RunTrigger::kManual, RunTrigger::kRetry, RunTrigger::kCatchUp}) {
    EXPECT_EQ(ParseRunTrigger(RunTriggerName(trigger)), trigger);
  }
  EXPECT_EQ(RunTriggerName(RunTrigger::kCatchUp), "catch_up");
  EXPECT_EQ(RunTriggerName(RunTrigger::kSchedule), "schedule");
  for (const RunOutcome outcome :
       {RunOutcome::kRunning, RunOutcome::kSucceeded, RunOutcome::kFailed, RunOutcome::kTimedOut,
        RunOutcome::kCancelled, RunOutcome::kLost, RunOutcome::kFenced}) {
    EXPECT_EQ(ParseRunOutcome(RunOutcomeName(outcome)), outcome);
  }
  EXPECT_EQ(RunOutcomeName(RunOutcome::kTimedOut), "timed_out");
  EXPECT_EQ(RunOutcomeName(RunOutcome::kCancelled), "cancelled");
  EXPECT_FALSE(ParseRunOutcome("Timed_Out").has_value());
  EXPECT_FALSE(ParseRunOutcome("").has_value());
  EXPECT_FALSE(ParseRunTrigger("cron").has_value());
}

TEST(TaskRunTest, StartLagAndDurationComeFromItsTimes) {
  TaskRun run;
  run.started_at = WallTime(seconds(100));
  EXPECT_FALSE(run.start_lag().has_value());
  EXPECT_FALSE(run.duration().has_value());
  run.origin.slot = WallTime(seconds(100)) - milliseconds(250);
  EXPECT_EQ(run.start_lag(), milliseconds(250));
  run.origin.slot = WallTime(seconds(101));
  EXPECT_EQ(run.start_lag(), milliseconds(0)) << "a run started early has no lag";
  run.ended_at = WallTime(seconds(103)) + milliseconds(5);
  EXPECT_EQ(run.duration(), milliseconds(3005));
}

TEST(ValidationTest, RejectsEmptyIdsRunningEndsAndPagesOutOfRange) {
  EXPECT_THAT(ValidateStarts(std::vector<RunStart>{RunStart{"r", "t"}}), IsOk());
  EXPECT_THAT(ValidateStarts(std::vector<RunStart>{RunStart{"r", ""}}),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateEnds(std::vector<RunEnd>{RunEnd{"", RunFinish{}}}),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateEnds(std::vector<RunEnd>{RunEnd{"r", RunFinish{RunOutcome::kRunning}}}),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidatePageSize(1), IsOk());
  EXPECT_THAT(ValidatePageSize(kMaxRunPageSize), IsOk());
  EXPECT_THAT(ValidatePageSize(0), Not(IsOk()));
  EXPECT_THAT(ValidatePageSize(kMaxRunPageSize + 1), Not(IsOk()));
}

}  // namespace
}  // namespace stagehand::store_internal
