// Several engines ("hosts") on one shared table: mutual exclusion, cross-host trigger and cancel,
// takeover of a dead host's run.
#include <gtest/gtest.h>

#include "engine_harness.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;

using std::chrono::seconds;

TEST_F(EngineTest, TwoHostsNeverOverlapAGlobalTask) {
  TaskEngine& a = StartEngine();
  TaskEngine& b = StartEngine(OtherHostStore(), Options());
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(a.Register(Task("t", Schedule("PT1S", "PT1H"), probe.Fn())), IsOk());
  ASSERT_THAT(b.Register(Task("t", Schedule("PT1S", "PT1H"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  for (int i = 0; i < 20; ++i) {
    AdvanceBy(seconds(1));
    EXPECT_EQ(probe.active(), 1);
  }
  EXPECT_EQ(probe.calls(), 1);
  probe.Release();
  // The run ended 19 cadences late: one catch-up run follows at once, then one per second, each on
  // whichever host claims it first.
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 2));
  for (int run = 3; run <= 12; ++run) {
    AdvanceBy(seconds(1));
    ASSERT_TRUE(recorder_->WaitFor("completed", "t", run));
  }
  EXPECT_EQ(probe.max_active(), 1);
  EXPECT_EQ(recorder_->Count("started", "t"), 12);
}

TEST_F(EngineTest, AnotherHostTakesTheNextRunWhenTheLastRunnerStops) {
  TaskEngine& a = StartEngine();
  Probe& probe = MakeProbe();
  std::stop_source a_stops;
  EngineTask on_a = Task("t", Schedule("PT1M"), probe.Fn());
  on_a.stop = a_stops.get_token();
  ASSERT_THAT(a.Register(std::move(on_a)), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  TaskEngine& b = StartEngine(OtherHostStore(), Options());
  ASSERT_THAT(b.Register(Task("t", Schedule("PT1M"), probe.Fn())), IsOk());
  AdvanceBy(seconds(60));
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 2));
  a_stops.request_stop();  // A no longer runs the task
  AdvanceBy(seconds(60));
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 3));
  EXPECT_EQ(recorder_->Count("started", "t"), 3);
}

TEST_F(EngineTest, TriggerOnOneHostRunsTheTaskRegisteredOnAnother) {
  TaskEngine& a = StartEngine();
  TaskEngine& b = StartEngine(OtherHostStore(), Options());
  Probe& probe = MakeProbe();
  ASSERT_THAT(a.Register(Task("m", Schedule("manual"), probe.Fn())), IsOk());
  Settle();
  ASSERT_THAT(b.Trigger("m"), IsOk());
  // The other host hears about it through the store's notification: no time has to pass.
  ASSERT_TRUE(recorder_->WaitFor("completed", "m", 1));
  EXPECT_EQ(probe.calls(), 1);
}

TEST_F(EngineTest, CancelOnOneHostStopsTheRunOnAnother) {
  TaskEngine& a = StartEngine();
  TaskEngine& b = StartEngine(OtherHostStore(), Options());
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(a.Register(Task("m", Schedule("manual", "PT1H"), probe.Fn())), IsOk());
  ASSERT_THAT(a.Trigger("m"), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  ASSERT_THAT(b.Cancel("m"), IsOk());
  ASSERT_TRUE(probe.WaitInactive());
  EXPECT_EQ(probe.stopped_by_token(), 1);
  // The owner releases the run itself, recording the cancel.
  ASSERT_TRUE(recorder_->WaitFor("completed", "m", 1));
  Settle();
  EXPECT_EQ(recorder_->Count("lease-lost", "m"), 0);
  const TaskRow row = *Row("m");
  EXPECT_EQ(row.last_run_error_json, R"({"name":"Error","message":"Task was cancelled"})");
  EXPECT_FALSE(row.current_run_ticket.has_value());
  EXPECT_THAT(b.Trigger("m"), IsOk());
}

// A task function that keeps running after its stop token fires, until the test lets it return
// (a command still in its SIGTERM grace, say). Thread-safe.
class SlowToStop {
 public:
  TaskFunction Fn() {
    return [this](std::stop_token stop) -> Status {
      std::stop_callback on_stop(stop, [this] {
        std::lock_guard lock(mu_);
        stop_seen_ = true;
        cv_.notify_all();
      });
      std::unique_lock lock(mu_);
      ++calls_;
      ++active_;
      max_active_ = std::max(max_active_, active_);
      cv_.notify_all();
      cv_.wait(lock, [&] { return may_return_; });
      --active_;
      return Status::Ok();
    };
  }
  void LetReturn() {
    std::lock_guard lock(mu_);
    may_return_ = true;
    cv_.notify_all();
  }
  bool WaitStopSeen() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return stop_seen_; });
  }
  bool WaitCalls(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return calls_ >= n; });
  }
  int calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  int max_active() const {
    std::lock_guard lock(mu_);
    return max_active_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int calls_ = 0;
  int active_ = 0;
  int max_active_ = 0;
  bool stop_seen_ = false;
  bool may_return_ = false;
};

// Regression (reliability suite, scenario `rest`): a cancel freed the row at once, so a trigger
// right after it started a second run on another host while the cancelled one was still stopping.
TEST_F(EngineTest, CancelFollowedByTriggerNeverOverlapsARunThatIsSlowToStop) {
  TaskEngine& a = StartEngine();
  TaskEngine& b = StartEngine(OtherHostStore(), Options());
  SlowToStop fn;
  ASSERT_THAT(b.Register(Task("m", Schedule("manual", "PT1H"), fn.Fn())), IsOk());
  ASSERT_THAT(b.Trigger("m"), IsOk());
  ASSERT_TRUE(fn.WaitCalls(1));
  ASSERT_THAT(a.Register(Task("m", Schedule("manual", "PT1H"), fn.Fn())), IsOk());
  Settle();

  ASSERT_THAT(a.Cancel("m"), IsOk());
  ASSERT_TRUE(fn.WaitStopSeen());
  EXPECT_EQ(a.Trigger("m"), ConflictError("Task m is currently running"));
  EXPECT_THAT(a.Cancel("m"), IsOk());  // idempotent while the run stops
  // The owner keeps renewing the held row for as long as its function takes to return.
  AdvanceBy(seconds(35));
  EXPECT_EQ(a.Trigger("m"), ConflictError("Task m is currently running"));
  EXPECT_EQ(b.Trigger("m"), ConflictError("Task m is currently running"));
  EXPECT_EQ(Row("m")->current_run_ticket.value_or("").rfind("cancel:", 0), 0u);
  EXPECT_EQ(fn.calls(), 1);
  EXPECT_EQ(recorder_->Count("lease-lost", "m"), 0);
  EXPECT_EQ(recorder_->Count("reclaimed", "m"), 0);

  fn.LetReturn();
  ASSERT_TRUE(recorder_->WaitFor("completed", "m", 1));
  Settle();
  const TaskRow row = *Row("m");
  EXPECT_FALSE(row.current_run_ticket.has_value());
  EXPECT_EQ(row.last_run_error_json, R"({"name":"Error","message":"Task was cancelled"})");
  ASSERT_THAT(a.Trigger("m"), IsOk());
  ASSERT_TRUE(fn.WaitCalls(2));
  ASSERT_TRUE(recorder_->WaitFor("completed", "m", 2));
  EXPECT_EQ(fn.max_active(), 1);
}

TEST_F(EngineTest, DeadHostsRunIsTakenOverAfterTheLease) {
  TaskEngine& b = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(b.Register(Task("t", Schedule("PT1H", "PT1H"), probe.Fn())), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  Settle();
  // Another host claimed the task and died: its row holds a ticket that expires in one lease.
  TaskRow row = *Row("t");
  row.next_run_start_at = clock_.Now();
  row.current_run_ticket = "dead-host-ticket";
  row.current_run_started_at = clock_.Now();
  row.current_run_expires_at = clock_.Now() + seconds(10);
  store_->PutRow(row);
  ASSERT_TRUE(b.Trigger("t").code() == StatusCode::kConflict);
  const MonoTime died = clock_.MonoNow();
  while (recorder_->Count("started", "t") < 2) {
    ASSERT_TRUE(clock_.AdvanceToNextDeadline());
    Settle();
    ASSERT_LE(clock_.MonoNow() - died, seconds(11)) << "no takeover within lease + 1 s";
  }
  EXPECT_EQ(recorder_->Count("reclaimed", "t"), 1);
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 2));
}

TEST_F(EngineTest, HostThatLosesItsTicketToTheJanitorStopsTheRun) {
  TaskEngine& a = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(a.Register(Task("t", Schedule("PT1H", "PT1H"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  Settle();
  // Another writer (say, a Backstage janitor) resets the run.
  TaskRow row = *Row("t");
  row.current_run_ticket.reset();
  row.current_run_started_at.reset();
  row.current_run_expires_at.reset();
  store_->PutRow(row);
  AdvanceBy(seconds(4));  // the next renewal finds the ticket gone
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  EXPECT_EQ(probe.stopped_by_token(), 1);
  EXPECT_EQ(recorder_->Count("lease-lost", "t"), 1);
  // The reset left the task due, so a fresh run (with a new ticket) follows.
  ASSERT_TRUE(probe.WaitCalls(2));
  probe.Release();
}

TEST_F(EngineTest, ConcurrentTriggersAndCancelsKeepOneRunAtATime) {
  TaskEngine& a = StartEngine();
  TaskEngine& b = StartEngine(OtherHostStore(), Options());
  Probe& probe = MakeProbe();
  ASSERT_THAT(a.Register(Task("m", Schedule("manual"), probe.Fn())), IsOk());
  ASSERT_THAT(b.Register(Task("m", Schedule("manual"), probe.Fn())), IsOk());
  std::vector<std::jthread> callers;
  std::atomic<int> unexpected{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      TaskEngine& engine = t % 2 == 0 ? a : b;
      for (int i = 0; i < 200; ++i) {
        const Status status = (i + t) % 3 == 0 ? engine.Cancel("m") : engine.Trigger("m");
        if (!status.ok() && status.code() != StatusCode::kConflict) ++unexpected;
      }
    });
  }
  callers.clear();
  Settle();
  EXPECT_EQ(unexpected, 0);
  // Settle leaves a run that is inside its function; wait until every run that started has ended.
  ASSERT_TRUE(recorder_->WaitFor("completed", "m", recorder_->Count("started", "m")));
  Settle();
  // The triggers may all have been cancelled or refused; one more, on a free row, runs.
  const int before = probe.calls();
  ASSERT_THAT(a.Trigger("m"), IsOk());
  ASSERT_TRUE(probe.WaitCalls(before + 1));
  Settle();
  EXPECT_EQ(probe.max_active(), 1);
}

}  // namespace
}  // namespace stagehand::engine_internal
