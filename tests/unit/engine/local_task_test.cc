// Local tasks: per process, no database, never overlapping themselves (Backstage's
// LocalTaskWorker).
#include <gtest/gtest.h>

#include "engine_harness.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(EngineTest, LocalTaskRunsAfterItsInitialDelayThenEveryCadence) {
  TaskEngine& engine = StartEngine(nullptr, Options());
  Probe& probe = MakeProbe();
  ASSERT_TRUE(
      engine
          .Register(Task("l", Schedule("PT0.2S", "PT1M", "PT0.2S"), probe.Fn(), TaskScope::kLocal))
          .ok());
  AdvanceBy(milliseconds(100));
  EXPECT_EQ(probe.calls(), 0);
  AdvanceBy(milliseconds(100));
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 1));
  AdvanceBy(milliseconds(200));
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 2));
  Settle();
  EXPECT_EQ(probe.calls(), 2);
}

TEST_F(EngineTest, LocalCronTaskRunsAtOnceThenAtTheNextSlot) {
  TaskEngine& engine = StartEngine(nullptr, Options());
  Probe& probe = MakeProbe();
  clock_.SetWallTime(testing::ManualClock::DefaultStart() + milliseconds(300));
  ASSERT_THAT(engine.Register(Task("l", Schedule("* * * * * *"), probe.Fn(), TaskScope::kLocal)),
              IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 1));
  AdvanceBy(milliseconds(699));
  EXPECT_EQ(probe.calls(), 1);
  AdvanceBy(milliseconds(1));
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 2));
}

TEST_F(EngineTest, LocalSpacingIsStartToStart) {
  TaskEngine& engine = StartEngine(nullptr, Options());
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("l", Schedule("PT10S", "PT1H"), probe.Fn(), TaskScope::kLocal)),
              IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  AdvanceBy(seconds(4));
  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 1));
  probe.Hold();
  AdvanceBy(seconds(5));
  EXPECT_EQ(probe.calls(), 1);
  AdvanceBy(seconds(1));
  ASSERT_TRUE(probe.WaitCalls(2));
  probe.Release();
}

TEST_F(EngineTest, LocalManualTaskRunsOnlyWhenTriggered) {
  TaskEngine& engine = StartEngine(nullptr, Options());
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("l", Schedule("manual"), probe.Fn(), TaskScope::kLocal)),
              IsOk());
  AdvanceBy(seconds(30));
  EXPECT_EQ(probe.calls(), 0);
  ASSERT_THAT(engine.Trigger("l"), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 1));
  AdvanceBy(seconds(30));
  EXPECT_EQ(probe.calls(), 1);
}

TEST_F(EngineTest, LocalTriggerDuringTheWaitRunsAtOnce) {
  TaskEngine& engine = StartEngine(nullptr, Options());
  Probe& probe = MakeProbe();
  ASSERT_TRUE(
      engine.Register(Task("l", Schedule("PT1H", "PT1M", "PT1H"), probe.Fn(), TaskScope::kLocal))
          .ok());
  Settle();
  EXPECT_EQ(engine.WorkerState("l"), WorkerStatus::kInitialWait);
  ASSERT_THAT(engine.Trigger("l"), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 1));
}

TEST_F(EngineTest, LocalTriggerAndCancelConflicts) {
  TaskEngine& engine = StartEngine(nullptr, Options());
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("l", Schedule("manual"), probe.Fn(), TaskScope::kLocal)),
              IsOk());
  EXPECT_EQ(engine.Cancel("l"), ConflictError("Task l is not running"));
  ASSERT_THAT(engine.Trigger("l"), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  EXPECT_EQ(engine.Trigger("l"), ConflictError("Task l is currently running"));
  ASSERT_THAT(engine.Cancel("l"), IsOk());
  ASSERT_TRUE(probe.WaitInactive());
  EXPECT_EQ(probe.stopped_by_token(), 1);
  // Without a database, an unknown id is simply not found.
  EXPECT_EQ(engine.Trigger("other"), NotFoundError("Task other does not exist"));
}

TEST_F(EngineTest, LocalTaskStatesFollowBackstage) {
  TaskEngine& engine = StartEngine(nullptr, Options());
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_TRUE(
      engine.Register(Task("l", Schedule("PT1M", "PT30S", "PT10S"), probe.Fn(), TaskScope::kLocal))
          .ok());
  Settle();
  std::optional<TaskState> state = engine.LocalTaskState("l");
  ASSERT_TRUE(state);
  EXPECT_EQ(state->ToJson(), R"({"status":"idle","startsAt":"2026-01-01T00:00:10.000Z"})");
  EXPECT_EQ(engine.WorkerState("l"), WorkerStatus::kInitialWait);

  AdvanceBy(seconds(10));
  ASSERT_TRUE(probe.WaitCalls(1));
  Settle();
  state = engine.LocalTaskState("l");
  EXPECT_EQ(state->ToJson(), R"({"status":"running","startedAt":"2026-01-01T00:00:10.000Z",)"
                             R"("timesOutAt":"2026-01-01T00:00:40.000Z"})");
  EXPECT_EQ(engine.WorkerState("l"), WorkerStatus::kRunning);

  probe.FailWith(InternalError("nope"));
  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("failed", "l", 1));
  Settle();
  state = engine.LocalTaskState("l");
  EXPECT_EQ(state->status, TaskState::Status::kIdle);
  EXPECT_EQ(state->last_run_ended_at, "2026-01-01T00:00:10.000Z");
  EXPECT_EQ(state->last_run_error, R"({"name":"Error","message":"nope"})");
  // The next start after a run is in the scheduler's zone (EngineContext::default_zone, UTC here),
  // written with an offset as Backstage's DateTime.now().toISO() does.
  EXPECT_EQ(state->starts_at, "2026-01-01T00:01:10.000+00:00");
  EXPECT_EQ(engine.WorkerState("l"), WorkerStatus::kIdle);

  probe.FailWith(Status::Ok());
  AdvanceBy(seconds(60));
  ASSERT_TRUE(probe.WaitCalls(2));
  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 1));
  Settle();
  state = engine.LocalTaskState("l");
  EXPECT_EQ(state->last_run_error, std::nullopt);
  EXPECT_EQ(state->last_run_ended_at, "2026-01-01T00:01:10.000Z");
}

TEST_F(EngineTest, GlobalTaskNeedsADatabase) {
  TaskEngine& engine = StartEngine(nullptr, Options());
  Probe& probe = MakeProbe();
  EXPECT_THAT(engine.Register(Task("g", Schedule("PT1M"), probe.Fn())),
              StatusIs(StatusCode::kUnavailable));
}

}  // namespace
}  // namespace stagehand::engine_internal
