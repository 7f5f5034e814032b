// Retries with backoff (docs/adr/0015-retries.md), through the engine with the manual clock: a
// failed or timed-out run is retried after a growing, jittered delay, up to its attempts, on
// whichever host claims the row, and a cancelled run is not.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

#include "engine_harness.h"
#include "stagehand/model/run_error.h"
#include "stagehand/model/schedule.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

// The attempt a row's last_run_error_json records as retried (0: none, or no error).
int RetriedAttempt(const std::optional<std::string>& error_json) {
  return error_json ? RunError::Decode(*error_json).retried_attempt() : 0;
}

EngineTask WithRetry(EngineTask task, int attempts, milliseconds backoff) {
  RetryPolicy policy;
  policy.attempts = attempts;
  policy.backoff = backoff;
  task.retry = policy;
  return task;
}

// The acceptance case of issue 17: a task that fails with `retry: {attempts: 2, backoff: 1s}` runs
// three times in a few seconds, then waits for its slot.
TEST_F(EngineTest, AFailingGlobalTaskRunsThreeTimesThenWaitsForItsSlot) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.FailWith(InternalError("disk full"));
  ASSERT_THAT(engine.Register(WithRetry(Task("r", Schedule("PT1H"), probe.Fn()), 2, seconds(1))),
              IsOk());
  ASSERT_TRUE(recorder_->WaitFor("failed", "r", 1));
  Settle();
  EXPECT_EQ(recorder_->Count("retry", "r"), 1);
  std::optional<TaskRow> row = Row("r");
  ASSERT_TRUE(row && row->next_run_start_at && row->last_run_error_json && row->last_run_ended_at);
  EXPECT_GE(*row->next_run_start_at, *row->last_run_ended_at + milliseconds(500))
      << "the first retry's delay";
  EXPECT_LE(*row->next_run_start_at, *row->last_run_ended_at + seconds(1));
  EXPECT_EQ(RetriedAttempt(row->last_run_error_json), 1) << *row->last_run_error_json;

  AdvanceBy(seconds(1));
  ASSERT_TRUE(recorder_->WaitFor("failed", "r", 2));
  Settle();
  row = Row("r");
  EXPECT_EQ(RetriedAttempt(row->last_run_error_json), 2);
  EXPECT_GE(*row->next_run_start_at, *row->last_run_ended_at + seconds(1)) << "the delay doubles";
  EXPECT_LE(*row->next_run_start_at, *row->last_run_ended_at + seconds(2));

  AdvanceBy(seconds(2));
  ASSERT_TRUE(recorder_->WaitFor("failed", "r", 3));
  Settle();
  EXPECT_EQ(probe.calls(), 3);
  EXPECT_EQ(recorder_->Count("retry", "r"), 2) << "retries are used up";
  row = Row("r");
  EXPECT_EQ(RetriedAttempt(row->last_run_error_json), 0) << *row->last_run_error_json;
  EXPECT_GT(*row->next_run_start_at, clock_.Now() + minutes(50)) << "back to its cadence";

  AdvanceBy(minutes(10));
  EXPECT_EQ(probe.calls(), 3);
}

TEST_F(EngineTest, TheHistoryRecordsEachRetryWithItsAttempt) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.FailWith(InternalError("disk full"));
  ASSERT_THAT(engine.Register(WithRetry(Task("r", Schedule("PT1H"), probe.Fn()), 2, seconds(1))),
              IsOk());
  ASSERT_TRUE(recorder_->WaitFor("failed", "r", 1));
  AdvanceBy(seconds(1));
  ASSERT_TRUE(recorder_->WaitFor("failed", "r", 2));
  AdvanceBy(seconds(2));
  ASSERT_TRUE(recorder_->WaitFor("failed", "r", 3));
  probe.FailWith(Status::Ok());
  AdvanceBy(minutes(60));
  ASSERT_TRUE(recorder_->WaitFor("completed", "r", 1));
  Settle();
  Result<RunPage> page = store_->history()->ListRuns("r", 10, std::nullopt);
  ASSERT_THAT(page, IsOk());
  ASSERT_EQ(page->runs.size(), 4U);
  // Newest first: the next regular slot, the two retries, the first run.
  EXPECT_EQ(page->runs[0].origin.trigger, RunTrigger::kSchedule) << "not a retry any more";
  EXPECT_EQ(page->runs[0].origin.attempt, 1);
  EXPECT_EQ(page->runs[1].origin.trigger, RunTrigger::kRetry);
  EXPECT_EQ(page->runs[1].origin.attempt, 3);
  EXPECT_FALSE(page->runs[1].origin.slot.has_value()) << "a retry is not a slot";
  EXPECT_EQ(page->runs[2].origin.trigger, RunTrigger::kRetry);
  EXPECT_EQ(page->runs[2].origin.attempt, 2);
  EXPECT_EQ(page->runs[3].origin.trigger, RunTrigger::kSchedule);
  EXPECT_EQ(page->runs[3].origin.attempt, 1);
  EXPECT_EQ(page->runs[2].finish.error_json,
            std::optional<std::string>(R"({"name":"Error","message":"disk full","attempt":2})"));
}

TEST_F(EngineTest, ASuccessEndsTheRetriesAndTheNextFailureStartsCountingAgain) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.FailWith(InternalError("flaky"));
  ASSERT_THAT(engine.Register(WithRetry(Task("r", Schedule("PT1M"), probe.Fn()), 3, seconds(1))),
              IsOk());
  ASSERT_TRUE(recorder_->WaitFor("failed", "r", 1));
  probe.FailWith(Status::Ok());
  AdvanceBy(seconds(1));
  ASSERT_TRUE(recorder_->WaitFor("completed", "r", 1));
  Settle();
  EXPECT_FALSE(Row("r")->last_run_error_json.has_value());
  probe.FailWith(InternalError("flaky"));
  AdvanceBy(minutes(1));
  ASSERT_TRUE(recorder_->WaitFor("failed", "r", 2));
  Settle();
  EXPECT_EQ(RetriedAttempt(Row("r")->last_run_error_json), 1) << "a fresh first attempt";
}

TEST_F(EngineTest, AnotherHostRunsTheRetryAndKeepsCounting) {
  TaskEngine& a = StartEngine();
  Probe& probe = MakeProbe();
  probe.FailWith(InternalError("boom"));
  ASSERT_THAT(a.Register(WithRetry(Task("r", Schedule("PT1H"), probe.Fn()), 1, seconds(1))),
              IsOk());
  ASSERT_TRUE(recorder_->WaitFor("failed", "r", 1));
  Settle();
  a.Shutdown();  // the host that scheduled the retry dies
  TaskEngine& b = StartEngine(OtherHostStore(), Options());
  ASSERT_THAT(b.Register(WithRetry(Task("r", Schedule("PT1H"), probe.Fn()), 1, seconds(1))),
              IsOk());
  AdvanceBy(seconds(1));
  ASSERT_TRUE(recorder_->WaitFor("failed", "r", 2));
  Settle();
  EXPECT_EQ(probe.calls(), 2) << "the retry is durable";
  EXPECT_EQ(recorder_->Count("retry", "r"), 1) << "the second host counted the first attempt";
  EXPECT_GT(*Row("r")->next_run_start_at, clock_.Now() + minutes(50));
}

TEST_F(EngineTest, ACancelledRunIsNotRetried) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  probe.FailWith(InternalError("stopped"));
  ASSERT_THAT(engine.Register(WithRetry(Task("r", Schedule("PT1H"), probe.Fn()), 2, seconds(1))),
              IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  ASSERT_THAT(engine.Cancel("r"), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("failed", "r", 1));
  Settle();
  EXPECT_EQ(recorder_->Count("retry", "r"), 0);
  EXPECT_GT(*Row("r")->next_run_start_at, clock_.Now() + minutes(50));
}

TEST_F(EngineTest, AFailingLocalTaskIsRetriedThenWaitsForItsSlot) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.FailWith(InternalError("no network"));
  ASSERT_TRUE(engine
                  .Register(WithRetry(Task("l", Schedule("PT1H"), probe.Fn(), TaskScope::kLocal), 2,
                                      seconds(1)))
                  .ok());
  ASSERT_TRUE(recorder_->WaitFor("failed", "l", 1));
  AdvanceBy(seconds(1));
  ASSERT_TRUE(recorder_->WaitFor("failed", "l", 2));
  AdvanceBy(seconds(2));
  ASSERT_TRUE(recorder_->WaitFor("failed", "l", 3));
  AdvanceBy(minutes(10));
  EXPECT_EQ(probe.calls(), 3);
  // A local run reports its retry after its end, on its own thread.
  ASSERT_TRUE(recorder_->WaitFor("retry", "l", 2));
  EXPECT_EQ(recorder_->Count("retry", "l"), 2);
}

TEST(RetryPolicyTest, DelaysDoubleWithinTheirJitteredRangeUpToTheMaximum) {
  RetryPolicy policy;
  policy.attempts = 10;
  policy.backoff = seconds(1);
  policy.max_backoff = seconds(5);
  EXPECT_EQ(RetryDelay(policy, 1, 0), milliseconds(500));
  EXPECT_EQ(RetryDelay(policy, 1, 500), milliseconds(1000));
  EXPECT_EQ(RetryDelay(policy, 2, 0), milliseconds(1000));
  EXPECT_EQ(RetryDelay(policy, 3, 2000), milliseconds(4000));
  EXPECT_EQ(RetryDelay(policy, 9, 2500), milliseconds(5000)) << "capped";
  EXPECT_EQ(RetryAfter(policy, StopReason::kTimeout, 10, 0), milliseconds(2500));
  EXPECT_EQ(RetryAfter(policy, StopReason::kNone, 11, 0), std::nullopt) << "used up";
  EXPECT_EQ(RetryAfter(policy, StopReason::kCancel, 1, 0), std::nullopt);
  EXPECT_EQ(RetryAfter(policy, StopReason::kShutdown, 1, 0), std::nullopt);
  EXPECT_EQ(RetryAfter(std::nullopt, StopReason::kNone, 1, 0), std::nullopt);
}

}  // namespace
}  // namespace stagehand::engine_internal
