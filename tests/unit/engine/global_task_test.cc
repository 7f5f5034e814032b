// Global tasks on one host: registration, polling, claims, releases, triggers, cancels, timeouts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "engine_harness.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(EngineTest, DurationTaskRunsAtOnceThenOncePerCadence) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1M"), probe.Fn())), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  Settle();
  EXPECT_EQ(recorder_->Count("started", "t"), 1);

  clock_.Advance(seconds(59));
  Settle();
  EXPECT_EQ(recorder_->Count("started", "t"), 1);

  clock_.Advance(seconds(1));
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 2));
  Settle();
  EXPECT_EQ(probe.calls(), 2);
  const std::optional<TaskRow> row = Row("t");
  ASSERT_TRUE(row);
  EXPECT_EQ(row->current_run_ticket, std::nullopt);
  EXPECT_EQ(row->next_run_start_at, clock_.Now() + seconds(60));
}

TEST_F(EngineTest, CronEverySecondRunsEverySlotWithoutLag) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("c", Schedule("* * * * * *"), probe.Fn())), IsOk());
  // Registration sets the first run to the next slot.
  Settle();
  ASSERT_TRUE(clock_.AdvanceToNextDeadline());
  ASSERT_TRUE(recorder_->WaitFor("completed", "c", 1));
  for (int slot = 2; slot <= 30; ++slot) {
    Settle();
    ASSERT_TRUE(clock_.AdvanceToNextDeadline());
    ASSERT_TRUE(recorder_->WaitFor("completed", "c", slot)) << "slot " << slot;
  }
  Settle();
  EXPECT_EQ(probe.calls(), 30);
  const auto lags = recorder_->Lags("c");
  ASSERT_EQ(lags.size(), 30U);
  for (const auto lag : lags) EXPECT_EQ(lag, std::chrono::nanoseconds(0));
}

// Returns how many threads of this process carry `name`.
int ThreadsNamed(std::string_view name) {
  int count = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    std::getline(comm, line);
    count += line == name ? 1 : 0;
  }
  return count;
}

// Issue 15: each plugin's engine had two threads of its own.
TEST_F(EngineTest, EnginesOfManyPluginsShareOneRuntimesThreadsAndEachRunsEverySlot) {
  const int timers_before = ThreadsNamed("stagehand-timer");
  const int dispatchers_before = ThreadsNamed("stagehand-disp");
  auto runtime = std::make_shared<EngineRuntime>(clock_, 2, 32);
  constexpr int kPlugins = 12;
  std::vector<TaskEngine*> engines;
  for (int i = 0; i < kPlugins; ++i) {
    const std::string plugin = "plugin-" + std::to_string(i);
    engines.push_back(&StartEngine(std::make_shared<testing::MemoryTaskStore>(plugin, clock_),
                                   Options(), runtime, plugin));
  }
  // Counted before any run: runs start executor threads.
  EXPECT_EQ(ThreadsNamed("stagehand-timer") - timers_before, 1);
  EXPECT_EQ(ThreadsNamed("stagehand-disp") - dispatchers_before, 2);
  for (int i = 0; i < kPlugins; ++i) {
    const TaskScope scope = i % 2 == 0 ? TaskScope::kGlobal : TaskScope::kLocal;
    ASSERT_TRUE(engines[static_cast<std::size_t>(i)]
                    ->Register(Task("task-" + std::to_string(i), Schedule("* * * * * *"),
                                    MakeProbe().Fn(), scope))
                    .ok());
  }
  // A local task also runs once at registration (Backstage's local worker starts at once).
  const auto runs_after = [](int i, int slots) { return i % 2 == 0 ? slots : slots + 1; };
  for (int slot = 0; slot <= 5; ++slot) {
    if (slot > 0) {
      Settle();
      clock_.Advance(std::chrono::seconds(1));
    }
    for (int i = 0; i < kPlugins; ++i) {
      const int runs = runs_after(i, slot);
      ASSERT_TRUE(runs == 0 || recorder_->WaitFor("completed", "task-" + std::to_string(i), runs))
          << "plugin " << i << ", slot " << slot;
    }
  }
  Settle();
  for (int i = 0; i < kPlugins; ++i) {
    const int expected = runs_after(i, 5);
    EXPECT_EQ(recorder_->Count("started", "task-" + std::to_string(i)), expected) << "plugin " << i;
  }
}

// Issue 15: runs were bounded per plugin only, so the executor threads of many plugins added up.
TEST_F(EngineTest, ThePluginsOfARuntimeShareItsBoundOnRunningTasks) {
  auto runtime = std::make_shared<EngineRuntime>(clock_, 2, /*max_runs=*/1);
  TaskEngine& first = StartEngine(std::make_shared<testing::MemoryTaskStore>("one", clock_),
                                  Options(), runtime, "one");
  TaskEngine& second = StartEngine(std::make_shared<testing::MemoryTaskStore>("two", clock_),
                                   Options(), runtime, "two");
  Probe& held = MakeProbe();
  held.Hold();
  ASSERT_THAT(first.Register(Task("held", Schedule("manual"), held.Fn(), TaskScope::kLocal)),
              IsOk());
  ASSERT_THAT(first.Trigger("held"), IsOk());
  ASSERT_TRUE(held.WaitCalls(1));
  Probe& probe = MakeProbe();  // both tasks of the second plugin, which allows 32 at once
  ASSERT_THAT(second.Register(Task("global", Schedule("PT1M"), probe.Fn())), IsOk());
  ASSERT_THAT(second.Register(Task("local", Schedule("PT1M"), probe.Fn(), TaskScope::kLocal)),
              IsOk());
  Settle();
  EXPECT_EQ(probe.calls(), 0) << "the one slot is the other plugin's";

  held.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "global", 1));
  ASSERT_TRUE(recorder_->WaitFor("completed", "local", 1));
  EXPECT_EQ(probe.max_active(), 1) << "one after the other";
  Settle();
  EXPECT_EQ(recorder_->Count("started", "global") + recorder_->Count("started", "local"), 2);
}

TEST_F(EngineTest, ManualTaskRunsOnlyWhenTriggered) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("m", Schedule("manual"), probe.Fn())), IsOk());
  Settle();
  clock_.Advance(std::chrono::hours(1));
  Settle();
  EXPECT_EQ(probe.calls(), 0);

  ASSERT_THAT(engine.Trigger("m"), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "m", 1));
  Settle();
  EXPECT_EQ(recorder_->Count("started", "m"), 1);
  EXPECT_EQ(Row("m")->next_run_start_at, std::nullopt);
}

// Issue 17: a paused task starts on no host until it is resumed; a slot it missed then runs once.
TEST_F(EngineTest, APausedTaskMissesItsSlotsAndRunsOnceWhenResumed) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("p", Schedule("* * * * *"), probe.Fn())), IsOk());
  Settle();
  clock_.Advance(std::chrono::minutes(1));  // past the first slot
  ASSERT_TRUE(recorder_->WaitFor("completed", "p", 1));
  Settle();
  ASSERT_THAT(engine.Pause("p", PauseRequest{"alice", "maintenance", std::nullopt}), IsOk());
  Settle();
  for (int minute = 0; minute < 3; ++minute) {
    clock_.Advance(std::chrono::minutes(1));
    Settle();
  }
  EXPECT_EQ(probe.calls(), 1) << "a paused task ran";
  EXPECT_EQ(engine.Trigger("p"), ConflictError("Task p is paused"));
  EXPECT_EQ(engine.Resume("q"), NotFoundError("Task q does not exist"));

  ASSERT_THAT(engine.Resume("p"), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "p", 2));
  Settle();
  EXPECT_EQ(probe.calls(), 2) << "the missed slots run once, not three times";
  EXPECT_EQ(engine.Resume("p"), ConflictError("Task p is not paused"));
}

// Issue 17: a pause leaves a run in progress alone and takes effect when it ends.
TEST_F(EngineTest, APauseOfARunningTaskLetsTheRunEndThenHoldsTheTask) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("busy", Schedule("PT1M"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  ASSERT_THAT(engine.Pause("busy", PauseRequest{"alice", "deploy", std::nullopt}), IsOk());
  for (int step = 0; step < 8; ++step) {  // lease renewals find the run still holding the row
    clock_.Advance(std::chrono::seconds(5));
    Settle();
  }
  EXPECT_EQ(engine.WorkerState("busy"), WorkerStatus::kRunning);
  EXPECT_EQ(probe.stopped_by_token(), 0) << "the run was stopped";

  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "busy", 1));
  Settle();
  ASSERT_TRUE(Row("busy")->current_run_ticket.has_value());
  EXPECT_TRUE(RowTicket::Decode(*Row("busy")->current_run_ticket).paused());
  for (int minute = 0; minute < 3; ++minute) {
    clock_.Advance(std::chrono::minutes(1));
    Settle();
  }
  EXPECT_EQ(probe.calls(), 1) << "a paused task ran";
  ASSERT_THAT(engine.Resume("busy"), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "busy", 2));
}

TEST_F(EngineTest, APauseThatCancelsStopsTheRunAndHoldsTheTask) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("busy", Schedule("PT1M"), probe.Fn())), IsOk());
  ASSERT_THAT(engine.Register(Task("idle", Schedule("manual"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  PauseRequest pause{"alice", "", std::nullopt};
  pause.cancel_run = true;
  ASSERT_THAT(engine.Pause("busy", pause), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "busy", 1));
  Settle();
  EXPECT_EQ(probe.stopped_by_token(), 1);
  EXPECT_TRUE(RowTicket::Decode(*Row("busy")->current_run_ticket).paused());
  EXPECT_THAT(engine.Pause("idle", pause), IsOk()) << "nothing to cancel is not an error";
  EXPECT_TRUE(RowTicket::Decode(*Row("idle")->current_run_ticket).paused());
}

TEST_F(EngineTest, OnlyGlobalTasksCanBePaused) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("local", Schedule("manual"), probe.Fn(), TaskScope::kLocal)),
              IsOk());
  const Status local = engine.Pause("local", PauseRequest{"alice", "", std::nullopt});
  EXPECT_THAT(local, StatusIs(StatusCode::kConflict, "only global tasks can be paused"));
}

TEST_F(EngineTest, TriggerAndCancelReportBackstageErrors) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("t", Schedule("manual"), probe.Fn())), IsOk());

  EXPECT_EQ(engine.Trigger("nope"), NotFoundError("Task nope does not exist"));
  EXPECT_EQ(engine.Cancel("nope"), NotFoundError("Task nope does not exist"));
  EXPECT_EQ(engine.Cancel("t"), ConflictError("Task t is not running"));

  ASSERT_THAT(engine.Trigger("t"), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  EXPECT_EQ(engine.Trigger("t"), ConflictError("Task t is currently running"));
  EXPECT_EQ(engine.WorkerState("t"), WorkerStatus::kRunning);

  ASSERT_THAT(engine.Cancel("t"), IsOk());
  ASSERT_TRUE(probe.WaitInactive());
  EXPECT_EQ(probe.stopped_by_token(), 1);
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  Settle();
  const std::optional<TaskRow> row = Row("t");
  EXPECT_EQ(row->current_run_ticket, std::nullopt);
  EXPECT_EQ(row->last_run_error_json, R"({"name":"Error","message":"Task was cancelled"})");
  EXPECT_EQ(engine.WorkerState("t"), WorkerStatus::kIdle);
}

TEST_F(EngineTest, TimeoutSignalsTheStopToken) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H", "PT30S"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  AdvanceBy(seconds(29));
  EXPECT_EQ(probe.active(), 1);
  clock_.Advance(seconds(1));
  ASSERT_TRUE(probe.WaitInactive());
  EXPECT_EQ(probe.stopped_by_token(), 1);
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
}

TEST_F(EngineTest, FailingRunIsRecordedAndTheTaskKeepsRunning) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Throw();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT10S"), probe.Fn())), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("failed", "t", 1));
  Settle();
  EXPECT_EQ(Row("t")->last_run_error_json, R"({"name":"Error","message":"boom"})");
  clock_.Advance(seconds(10));
  ASSERT_TRUE(recorder_->WaitFor("failed", "t", 2));
}

TEST_F(EngineTest, ErrorStatusFailsTheRunWithItsMessage) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.FailWith(UnavailableError("upstream down"));
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT10S"), probe.Fn())), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("failed", "t", 1));
  Settle();
  EXPECT_EQ(Row("t")->last_run_error_json, R"({"name":"Error","message":"upstream down"})");
}

TEST_F(EngineTest, LongRunCatchesUpOnceWithoutPilingUp) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT10S", "PT10M"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  AdvanceBy(seconds(35));  // three and a half cadences late
  probe.Release();
  ASSERT_TRUE(probe.WaitCalls(2));  // due at once: greatest(scheduled + cadence, now)
  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 2));
  Settle();
  EXPECT_EQ(probe.calls(), 2);
  EXPECT_EQ(Row("t")->next_run_start_at, clock_.Now() + seconds(10));
}

TEST_F(EngineTest, InitialDelayHoldsTheFirstPoll) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1M", "PT1M", "PT30S"), probe.Fn())), IsOk());
  Settle();
  EXPECT_EQ(engine.WorkerState("t"), WorkerStatus::kInitialWait);
  clock_.Advance(seconds(29));
  Settle();
  EXPECT_EQ(probe.calls(), 0);
  clock_.Advance(seconds(1));
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
}

TEST_F(EngineTest, LeaseIsRenewedWhileTheTaskRuns) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H", "PT1H"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  Settle();
  const WallTime first_expiry = *Row("t")->current_run_expires_at;
  EXPECT_EQ(first_expiry, clock_.Now() + seconds(10));
  for (int i = 1; i <= 6; ++i) {
    ASSERT_TRUE(clock_.AdvanceToNextDeadline());
    ASSERT_TRUE(recorder_->WaitFor("renewed", "t", i));
    Settle();
  }
  EXPECT_GT(*Row("t")->current_run_expires_at, first_expiry + seconds(15));
  EXPECT_EQ(probe.active(), 1);
  EXPECT_EQ(recorder_->Count("lease-lost", "t"), 0);
  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
}

TEST_F(EngineTest, FencesItselfBeforeTheLeaseLapsesWhenRenewalsFail) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H", "PT1H"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  Settle();
  const WallTime expiry = *Row("t")->current_run_expires_at;
  store_->SetUnavailable(true);
  while (recorder_->Count("lease-lost", "t") == 0) {
    ASSERT_TRUE(clock_.AdvanceToNextDeadline());
    Settle();
    ASSERT_LT(clock_.Now(), expiry) << "the run outlived its lease";
  }
  ASSERT_TRUE(probe.WaitInactive());
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  EXPECT_EQ(probe.stopped_by_token(), 1);
  EXPECT_GE(recorder_->Count("renewal-failed", "t"), 1);
  store_->SetUnavailable(false);
  AdvanceBy(seconds(2));
  // The fenced run could not release while the database was away: its release is delivered once
  // the database answers, rather than left to the janitor after the lease.
  EXPECT_FALSE(Row("t")->current_run_ticket.has_value());
}

TEST_F(EngineTest, StopTokenOfTheCallerEndsTheRecurrence) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  std::stop_source caller;
  EngineTask task = Task("t", Schedule("PT10S"), probe.Fn());
  task.stop = caller.get_token();
  ASSERT_THAT(engine.Register(std::move(task)), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  Settle();
  caller.request_stop();
  Settle();
  clock_.Advance(seconds(60));
  Settle();
  EXPECT_EQ(recorder_->Count("started", "t"), 1);
  // A finished task may be registered again.
  EXPECT_THAT(engine.Register(Task("t", Schedule("PT10S"), probe.Fn())), IsOk());
}

TEST_F(EngineTest, DuplicateActiveIdIsAConflict) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("t", Schedule("manual"), probe.Fn())), IsOk());
  const Status again = engine.Register(Task("t", Schedule("manual"), probe.Fn()));
  EXPECT_THAT(again, StatusIs(StatusCode::kConflict));
  EXPECT_EQ(again.message(), "Task t is already scheduled in this process");
}

TEST_F(EngineTest, UnavailableStoreFailsRegistrationAndRegistersNothing) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  store_->SetUnavailable(true);
  const Status status = engine.Register(Task("t", Schedule("PT1M"), probe.Fn()));
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable));
  EXPECT_EQ(engine.WorkerState("t"), std::nullopt);
  store_->SetUnavailable(false);
  EXPECT_THAT(engine.Register(Task("t", Schedule("PT1M"), probe.Fn())), IsOk());
}

TEST_F(EngineTest, NeverClaimsWithoutAFreeSlot) {
  EngineOptions options = Options();
  options.max_concurrency = 1;
  TaskEngine& engine = StartEngine(store_, options);
  Probe& first = MakeProbe();
  Probe& second = MakeProbe();
  first.Hold();
  ASSERT_THAT(engine.Register(Task("a", Schedule("PT1M", "PT1H"), first.Fn())), IsOk());
  ASSERT_TRUE(first.WaitCalls(1));
  ASSERT_THAT(engine.Register(Task("b", Schedule("PT1M"), second.Fn())), IsOk());
  Settle();
  EXPECT_EQ(second.calls(), 0);
  EXPECT_FALSE(Row("b")->current_run_ticket.has_value());
  first.Release();
  ASSERT_TRUE(second.WaitCalls(1));
  EXPECT_EQ(std::max(first.max_active(), second.max_active()), 1);
}

TEST_F(EngineTest, TaskStopsWhenItsRowDisappearsOrItsSettingsBreak) {
  TaskEngine& engine = StartEngine();
  Probe& gone = MakeProbe();
  Probe& broken = MakeProbe();
  ASSERT_THAT(engine.Register(Task("gone", Schedule("PT10S"), gone.Fn())), IsOk());
  ASSERT_THAT(engine.Register(Task("broken", Schedule("PT10S"), broken.Fn())), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "gone", 1));
  ASSERT_TRUE(recorder_->WaitFor("completed", "broken", 1));
  Settle();
  ASSERT_THAT(store_->Delete("gone"), IsOk());
  TaskRow row = *Row("broken");
  row.settings_json = R"({"version":1})";
  store_->PutRow(row);
  clock_.Advance(seconds(60));
  Settle();
  EXPECT_EQ(gone.calls(), 1);
  EXPECT_EQ(broken.calls(), 1);
}

TEST_F(EngineTest, RowMovedEarlierByASilentWriterIsSeenAtTheNextSafetyPoll) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H"), probe.Fn())), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  Settle();
  // Another writer (say, a Backstage host) moves the next run to 20 s from now and notifies
  // nobody: polls that leave out unchanged rows must still report this one.
  TaskRow row = *Row("t");
  row.next_run_start_at = clock_.Now() + seconds(20);
  store_->PutRow(row);
  AdvanceBy(seconds(19));
  EXPECT_EQ(probe.calls(), 1);
  AdvanceBy(seconds(1));
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 2));
  EXPECT_EQ(recorder_->Lags("t").back(), std::chrono::nanoseconds(0));
}

TEST_F(EngineTest, RegisterManyIsAllOrNothingAndWritesOnce) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("taken", Schedule("manual"), probe.Fn())), IsOk());
  Settle();
  std::vector<EngineTask> clash;
  clash.push_back(Task("a", Schedule("PT1M"), probe.Fn()));
  clash.push_back(Task("taken", Schedule("PT1M"), probe.Fn()));
  const Status conflict = engine.RegisterMany(std::move(clash));
  EXPECT_THAT(conflict, StatusIs(StatusCode::kConflict));
  EXPECT_FALSE(Row("a").has_value());

  std::vector<EngineTask> batch;
  for (int i = 0; i < 50; ++i) {
    batch.push_back(Task("m" + std::to_string(i), Schedule("manual"), probe.Fn()));
  }
  batch.push_back(Task("a", Schedule("PT1M"), probe.Fn()));
  const std::uint64_t before = store_->statement_count();
  ASSERT_THAT(engine.RegisterMany(std::move(batch)), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "a", 1));
  Settle();
  // One write for the 51 rows, then one poll and the run of "a" (claim, release, poll).
  EXPECT_LE(store_->statement_count() - before, 6U);
  EXPECT_TRUE(Row("m49").has_value());
}

TEST_F(EngineTest, IdleTasksBackOffTheSafetyNetPollUntilAChangeWasNotAnnounced) {
  TaskEngine& engine = StartEngine();  // poll_interval 5 s, max_poll_interval 60 s
  Probe& probe = MakeProbe();
  for (int i = 0; i < 100; ++i) {
    ASSERT_THAT(engine.Register(Task("idle-" + std::to_string(i), Schedule("manual"), probe.Fn())),
                IsOk());
  }
  Settle();
  const auto statements_over = [&](int seconds_to_pass) {
    const std::uint64_t before = store_->statement_count();
    for (int i = 0; i < seconds_to_pass; ++i) {
      clock_.Advance(seconds(1));
      Settle();
    }
    return store_->statement_count() - before;
  };
  // 5, 10, 20, 40 s apart, then every 60 s.
  EXPECT_LE(statements_over(300), 8U);
  const std::uint64_t settled = statements_over(300);
  EXPECT_GE(settled, 4U) << "the safety-net poll stopped";
  EXPECT_LE(settled, 6U) << "an idle host should poll once a minute";

  // A writer that does not notify (a Backstage worker) claims one of the tasks.
  std::optional<TaskRow> row = Row("idle-7");
  ASSERT_TRUE(row);
  row->current_run_ticket = "backstage-ticket";
  row->current_run_started_at = clock_.Now();
  row->current_run_expires_at = clock_.Now() + hours(1);
  OtherHostStore()->PutRow(*row);
  int waited = 0;
  while (statements_over(1) == 0) {
    ASSERT_LE(++waited, 60) << "no safety-net poll within max_poll_interval";
  }
  EXPECT_EQ(statements_over(4), 0U);
  EXPECT_EQ(statements_over(1), 1U)
      << "the poll after an unannounced change comes poll_interval later";
  EXPECT_EQ(probe.calls(), 0);
}

TEST_F(EngineTest, ShutdownSignalsRunsAndReleasesTheirTickets) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H", "PT1H"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  engine.Shutdown();
  EXPECT_EQ(probe.stopped_by_token(), 1);
  const std::optional<TaskRow> row = Row("t");
  EXPECT_FALSE(row->current_run_ticket.has_value());
  EXPECT_TRUE(row->last_run_ended_at.has_value());
  EXPECT_THAT(engine.Register(Task("u", Schedule("manual"), probe.Fn())),
              StatusIs(StatusCode::kUnavailable));
}

}  // namespace
}  // namespace stagehand::engine_internal
