// Issue 16: what the engine writes to the run history for each run, global and local: where and
// why it started, how it ended, and what its function reported.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>

#include "engine_harness.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

// A command-like task: prints, reports an exit code, and fails when `exit_code` is not 0.
TaskFunction Command(int exit_code) {
  return [exit_code](const RunControl& control) -> Status {
    control.report->AppendOutput("hello\n");
    control.report->AppendOutput("bye\n");
    control.report->SetExitCode(exit_code);
    if (exit_code != 0) return InternalError("exited with " + std::to_string(exit_code));
    return Status::Ok();
  };
}

TEST_F(EngineTest, AGlobalRunIsRecordedWithItsHostSlotOutcomeAndOutput) {
  EngineContext context{"plugin", store_.get(), &clock_, nullptr, recorder_, Options()};
  context.host = "host-a";
  engines_.push_back(std::make_unique<TaskEngine>(std::move(context)));
  TaskEngine& engine = *engines_.back();
  const WallTime registered = clock_.Now();
  ASSERT_THAT(engine.Register(Task("job", Schedule("PT1M"), Command(3))), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("failed", "job", 1));
  Settle();

  std::optional<TaskRun> run = LatestRun(*store_, "job");
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->origin.host, "host-a");
  EXPECT_EQ(run->origin.pid, static_cast<std::int64_t>(getpid()));
  EXPECT_EQ(run->origin.trigger, RunTrigger::kSchedule);
  EXPECT_EQ(run->origin.slot, registered) << "a duration task is first due at its registration";
  EXPECT_EQ(run->origin.attempt, 1);
  EXPECT_EQ(run->finish.outcome, RunOutcome::kFailed);
  EXPECT_EQ(run->finish.exit_code, 3);
  EXPECT_THAT(run->finish.error_json.value_or(""), HasSubstr("exited with 3"));
  EXPECT_EQ(run->finish.output_tail, "hello\nbye\n");
  EXPECT_TRUE(run->ended_at.has_value());
  EXPECT_EQ(Row("job")->current_run_ticket, std::nullopt);
  EXPECT_EQ(run->run_id.size(), 36u) << "the claim's ticket";
}

TEST_F(EngineTest, ATriggeredRunIsManualAndHasNoSlot) {
  TaskEngine& engine = StartEngine();
  ASSERT_THAT(engine.Register(Task("m", Schedule("manual"), Command(0))), IsOk());
  Settle();
  ASSERT_THAT(engine.Trigger("m"), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "m", 1));
  Settle();
  std::optional<TaskRun> run = LatestRun(*store_, "m");
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->origin.trigger, RunTrigger::kManual);
  EXPECT_EQ(run->origin.slot, std::nullopt);
  EXPECT_EQ(run->finish.outcome, RunOutcome::kSucceeded);
  EXPECT_EQ(run->finish.exit_code, 0);
}

TEST_F(EngineTest, AnotherHostsTriggerMakesTheRunThisHostClaimsManual) {
  EngineOptions options = Options();
  TaskEngine& a = StartEngine(store_, options);
  ASSERT_THAT(a.Register(Task("m", Schedule("manual"), Command(0))), IsOk());
  Settle();
  // A second stagehand host triggers it through its own store; the memory table announces it.
  auto other = OtherHostStore();
  ASSERT_THAT(other->Trigger("m"), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "m", 1));
  Settle();
  std::optional<TaskRun> run = LatestRun(*store_, "m");
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->origin.trigger, RunTrigger::kManual);
}

TEST_F(EngineTest, ATimedOutRunIsRecordedAsTimedOut) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  probe.FailWith(InternalError("interrupted"));
  ASSERT_THAT(engine.Register(Task("slow", Schedule("PT1M", "PT2S"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  Settle();
  std::optional<TaskRun> running = LatestRun(*store_, "slow");
  ASSERT_TRUE(running.has_value());
  EXPECT_EQ(running->finish.outcome, RunOutcome::kRunning) << "recorded when claimed";
  AdvanceBy(seconds(2));
  ASSERT_TRUE(recorder_->WaitFor("failed", "slow", 1));
  Settle();
  std::optional<TaskRun> run = LatestRun(*store_, "slow");
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->finish.outcome, RunOutcome::kTimedOut);
  EXPECT_THAT(run->finish.error_json.value_or(""), HasSubstr("timed out after 2s"));
}

TEST_F(EngineTest, ACancelledRunIsRecordedAsCancelled) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  probe.FailWith(InternalError("stopped"));
  ASSERT_THAT(engine.Register(Task("c", Schedule("manual"), probe.Fn())), IsOk());
  Settle();
  ASSERT_THAT(engine.Trigger("c"), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  ASSERT_THAT(engine.Cancel("c"), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("failed", "c", 1));
  Settle();
  std::optional<TaskRun> run = LatestRun(*store_, "c");
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->finish.outcome, RunOutcome::kCancelled);
  // Issue 16: the history said the row's "Task was cancelled" where the log and the event stream
  // said what the engine did; all now say the engine's words.
  EXPECT_EQ(run->finish.error_json, R"({"name":"Error","message":"cancelled: stopped"})");
  EXPECT_EQ(run->origin.trigger, RunTrigger::kManual);
}

// Issue 16, the history's cost: the run after a short one is written once, whole, at its end; if
// it is still going a second after its claim, its start is recorded then, so a run that takes
// long shows as running.
TEST_F(EngineTest, TheRunAfterAShortOneIsWrittenAtItsEndOrOnceItHasRunASecond) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("m", Schedule("manual"), probe.Fn())), IsOk());
  Settle();
  // The runs recorded, newest first (both start at the same manual-clock time, so by run id).
  const auto runs = [&] {
    Result<RunPage> page = store_->history()->ListRuns("m", 10, std::nullopt);
    EXPECT_THAT(page, IsOk());
    return page.ok() ? page->runs : std::vector<TaskRun>{};
  };
  ASSERT_THAT(engine.Trigger("m"), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "m", 1));
  Settle();
  ASSERT_EQ(runs().size(), 1u);
  const std::string first = runs()[0].run_id;

  probe.Hold();
  ASSERT_THAT(engine.Trigger("m"), IsOk());
  ASSERT_TRUE(probe.WaitCalls(2));
  Settle();
  EXPECT_EQ(runs().size(), 1u) << "the claim recorded no start";
  AdvanceBy(milliseconds(999));
  Settle();
  EXPECT_EQ(runs().size(), 1u) << "not yet a second";
  AdvanceBy(milliseconds(1));
  Settle();
  std::vector<TaskRun> recorded = runs();
  ASSERT_EQ(recorded.size(), 2u) << "recorded once it has run a second";
  const TaskRun& second = recorded[0].run_id == first ? recorded[1] : recorded[0];
  EXPECT_EQ(second.finish.outcome, RunOutcome::kRunning);
  EXPECT_EQ(second.origin.trigger, RunTrigger::kManual);
  const std::string second_id = second.run_id;

  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "m", 2));
  Settle();
  recorded = runs();
  ASSERT_EQ(recorded.size(), 2u) << "one record per run: its end closed the run it recorded";
  for (const TaskRun& run : recorded) {
    EXPECT_EQ(run.finish.outcome, RunOutcome::kSucceeded) << run.run_id;
    EXPECT_TRUE(run.run_id == first || run.run_id == second_id) << run.run_id;
  }
}

TEST_F(EngineTest, LocalRunsAreRecordedWhileRunningAndWhenTheyEnd) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("local", Schedule("PT1M"), probe.Fn(), TaskScope::kLocal)),
              IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  Settle();
  std::optional<TaskRun> running = LatestRun(*store_, "local");
  ASSERT_TRUE(running.has_value());
  EXPECT_EQ(running->finish.outcome, RunOutcome::kRunning);
  EXPECT_EQ(running->origin.trigger, RunTrigger::kSchedule);
  EXPECT_EQ(running->run_id.size(), 36u);
  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "local", 1));
  Settle();
  std::optional<TaskRun> ended = LatestRun(*store_, "local");
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->run_id, running->run_id);
  EXPECT_EQ(ended->finish.outcome, RunOutcome::kSucceeded);
}

TEST_F(EngineTest, TheOutputOfARunStillGoingCanBeRead) {
  TaskEngine& engine = StartEngine();
  std::mutex mu;
  std::condition_variable cv;
  bool printed = false;
  bool release = false;
  ASSERT_TRUE(engine
                  .Register(Task("follow", Schedule("manual"),
                                 [&](const RunControl& control) {
                                   control.report->AppendOutput("step 1\n");
                                   std::unique_lock lock(mu);
                                   printed = true;
                                   cv.notify_all();
                                   cv.wait(lock, [&] { return release; });
                                 }))
                  .ok());
  Settle();
  ASSERT_THAT(engine.Trigger("follow"), IsOk());
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, seconds(10), [&] { return printed; }));
  }
  Settle();
  std::optional<TaskRun> running = LatestRun(*store_, "follow");
  ASSERT_TRUE(running.has_value());
  std::optional<RunReport::Snapshot> live = engine.LiveRunReport(running->run_id);
  ASSERT_TRUE(live.has_value());
  EXPECT_EQ(live->output_tail, "step 1\n");
  EXPECT_FALSE(engine.LiveRunReport("no-such-run").has_value());
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(recorder_->WaitFor("completed", "follow", 1));
  Settle();
  EXPECT_FALSE(engine.LiveRunReport(running->run_id).has_value()) << "ended: the history has it";
}

}  // namespace
}  // namespace stagehand::engine_internal
