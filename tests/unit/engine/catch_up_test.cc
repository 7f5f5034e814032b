// The catch-up window and jitter (ADR 0014), through the engine with the manual clock: a slot
// missed beyond the window is skipped (logged, counted, the task waits for its next slot), a
// trigger is never skipped, and a jittered task starts at its offset on every host.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>

#include "engine_harness.h"
#include "stagehand/model/schedule.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

EngineTask WithWindow(EngineTask task, milliseconds window) {
  task.catchup_window = window;
  return task;
}

// The acceptance case of issue 17: a `catchupWindow: 0s` task restarted after missing slots does
// not run until its next slot.
TEST_F(EngineTest, ARestartedTaskWithAZeroWindowSkipsItsMissedSlotsAndRunsAtItsNextOne) {
  {
    TaskEngine& first = StartEngine();
    Probe& probe = MakeProbe();
    ASSERT_THAT(first.Register(Task("c", Schedule("* * * * *"), probe.Fn())), IsOk());
    Settle();
    first.Shutdown();  // every host is down
  }
  const std::optional<WallTime> missed = Row("c")->next_run_start_at;
  ASSERT_TRUE(missed.has_value());
  clock_.Advance(minutes(3) + seconds(20));  // three slots missed
  TaskEngine& second = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_TRUE(
      second.Register(WithWindow(Task("c", Schedule("* * * * *"), probe.Fn()), milliseconds(0)))
          .ok());
  Settle();
  EXPECT_EQ(probe.calls(), 0) << "a missed slot ran";
  EXPECT_EQ(recorder_->Count("skipped", "c"), 1);
  const WallTime next = *Row("c")->next_run_start_at;
  EXPECT_GT(next, clock_.Now());
  EXPECT_LE(next, clock_.Now() + minutes(1));
  EXPECT_FALSE(Row("c")->last_run_ended_at.has_value()) << "a skip is not a run";

  AdvanceBy(next - clock_.Now());
  ASSERT_TRUE(recorder_->WaitFor("completed", "c", 1));
  Settle();
  EXPECT_EQ(probe.calls(), 1);
  EXPECT_EQ(recorder_->Count("skipped", "c"), 1) << "an on-time slot was skipped";
}

TEST_F(EngineTest, WithoutAWindowAMissedSlotRunsOnceAtOnceAsInBackstage) {
  {
    TaskEngine& first = StartEngine();
    Probe& probe = MakeProbe();
    ASSERT_THAT(first.Register(Task("c", Schedule("* * * * *"), probe.Fn())), IsOk());
    Settle();
    first.Shutdown();
  }
  clock_.Advance(minutes(3) + seconds(20));
  TaskEngine& second = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(second.Register(Task("c", Schedule("* * * * *"), probe.Fn())), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "c", 1));
  Settle();
  EXPECT_EQ(probe.calls(), 1);
  EXPECT_EQ(recorder_->Count("skipped", "c"), 0);
}

TEST_F(EngineTest, ASlotLateByLessThanTheWindowRuns) {
  {
    TaskEngine& first = StartEngine();
    Probe& probe = MakeProbe();
    ASSERT_THAT(first.Register(Task("c", Schedule("* * * * *"), probe.Fn())), IsOk());
    Settle();
    first.Shutdown();
  }
  clock_.Advance(minutes(1) + seconds(30));  // the first slot is 30 s or less late
  TaskEngine& second = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(second.Register(WithWindow(Task("c", Schedule("* * * * *"), probe.Fn()), minutes(5))),
              IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "c", 1));
  Settle();
  EXPECT_EQ(recorder_->Count("skipped", "c"), 0);
}

TEST_F(EngineTest, ATriggerIsNeverSkipped) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_TRUE(
      engine.Register(WithWindow(Task("m", Schedule("0 0 1 1 *"), probe.Fn()), milliseconds(0)))
          .ok());
  Settle();
  ASSERT_THAT(engine.Trigger("m"), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "m", 1));
  EXPECT_EQ(recorder_->Count("skipped", "m"), 0);
}

TEST_F(EngineTest, ALocalDurationTaskSkipsTheSlotsALongRunMissed) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_TRUE(
      engine
          .Register(WithWindow(Task("l", Schedule("PT10S", "PT10M"), probe.Fn(), TaskScope::kLocal),
                               milliseconds(0)))
          .ok());
  ASSERT_TRUE(probe.WaitCalls(1));
  AdvanceBy(seconds(35));
  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 1));
  Settle();
  EXPECT_EQ(probe.calls(), 1) << "the missed slot ran at once";
  EXPECT_EQ(recorder_->Count("skipped", "l"), 1);
  probe.Release();
  AdvanceBy(seconds(4));  // 39 s: before the grid's next point
  EXPECT_EQ(probe.calls(), 1);
  AdvanceBy(seconds(1));  // 40 s
  ASSERT_TRUE(probe.WaitCalls(2));
}

TEST_F(EngineTest, AGlobalDurationTaskSkipsTheSlotsALongRunMissed) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_TRUE(
      engine
          .Register(WithWindow(Task("g", Schedule("PT10S", "PT10M"), probe.Fn()), milliseconds(0)))
          .ok());
  ASSERT_TRUE(probe.WaitCalls(1));
  const WallTime slot = clock_.Now();
  AdvanceBy(seconds(35));
  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "g", 1));
  Settle();
  EXPECT_EQ(probe.calls(), 1) << "the missed slot ran at once";
  EXPECT_EQ(recorder_->Count("skipped", "g"), 1);
  const std::optional<WallTime> next = Row("g")->next_run_start_at;
  ASSERT_TRUE(next.has_value());
  EXPECT_GE(*next, slot + seconds(40)) << "the grid's next point after now";
  EXPECT_LE(*next, slot + seconds(41));
  AdvanceBy(*next - clock_.Now());
  ASSERT_TRUE(probe.WaitCalls(2));
}

TEST_F(EngineTest, AJitteredDurationTaskStartsAtItsOffsetAndKeepsIt) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  TaskSchedule schedule = Schedule("PT1M");
  schedule.jitter_offset = JitterOffset("j", seconds(30));
  ASSERT_GT(schedule.jitter_offset, milliseconds(0));
  const WallTime registered = clock_.Now();
  ASSERT_THAT(engine.Register(Task("j", schedule, probe.Fn())), IsOk());
  Settle();
  EXPECT_EQ(Row("j")->next_run_start_at, registered + schedule.jitter_offset);
  EXPECT_EQ(probe.calls(), 0);
  AdvanceBy(schedule.jitter_offset);
  ASSERT_TRUE(recorder_->WaitFor("completed", "j", 1));
  Settle();
  EXPECT_EQ(Row("j")->next_run_start_at, registered + schedule.jitter_offset + minutes(1));
}

}  // namespace
}  // namespace stagehand::engine_internal
