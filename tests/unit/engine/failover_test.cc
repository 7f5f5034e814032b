// Global tasks through database outages and failovers: writes held back by an outage are delivered
// when the database answers, readiness follows the database, and after a failover to a server that
// lacks the last writes each claim is confirmed, taken again, or given up and reported.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "engine_harness.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(EngineTest, ARunThatEndsWhileTheDatabaseIsAwayIsReleasedWhenItAnswers) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H", "PT1H"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  Settle();
  const WallTime expiry = *Row("t")->current_run_expires_at;
  store_->SetUnavailable(true);
  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1)) << "the end waited for the database";
  AdvanceBy(seconds(3));  // the release fails, and is tried again, while the database is away
  store_->SetUnavailable(false);
  AdvanceBy(seconds(2));
  const std::optional<TaskRow> row = Row("t");
  ASSERT_TRUE(row);
  EXPECT_EQ(row->current_run_ticket, std::nullopt) << "the release waited for the lease to lapse";
  EXPECT_LT(clock_.Now(), expiry);
  const std::optional<TaskRun> run = LatestRun(*store_, "t");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->finish.outcome, RunOutcome::kSucceeded) << "recorded as something else";
  EXPECT_EQ(recorder_->Count("completed", "t"), 1);
  EXPECT_EQ(recorder_->Count("started", "t"), 1);
}

TEST_F(EngineTest, ReadinessFailsAfterTheGraceOfAnOutageAndReturnsWhenTheDatabaseAnswers) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("t", Schedule("manual"), probe.Fn())), IsOk());
  Settle();
  EXPECT_TRUE(engine.Readiness(seconds(2)).ready);
  store_->SetUnavailable(true);
  AdvanceBy(seconds(1));
  EXPECT_TRUE(engine.Readiness(seconds(2)).ready) << "within the grace";
  AdvanceBy(milliseconds(1100));
  const TaskEngine::DatabaseStatus away = engine.Readiness(seconds(2));
  EXPECT_FALSE(away.ready);
  EXPECT_NE(away.reason.find("plugin 'plugin'"), std::string::npos) << away.reason;
  EXPECT_NE(away.reason.find("unreachable"), std::string::npos) << away.reason;
  EXPECT_FALSE(away.health.reachable);
  store_->SetUnavailable(false);
  Settle();
  EXPECT_TRUE(engine.Readiness(seconds(2)).ready);
}

TEST_F(EngineTest, AHostWithARunIsReadyAgainOnlyOnceItsClaimIsConfirmed) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H", "PT1H"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  Settle();
  store_->SetUnavailable(true);
  AdvanceBy(seconds(3));
  EXPECT_FALSE(engine.Readiness(seconds(2)).ready);
  store_->SetUnavailable(false);
  const TaskEngine::DatabaseStatus back = engine.Readiness(seconds(2));
  EXPECT_FALSE(back.ready) << "ready before its claim was confirmed";
  EXPECT_NE(back.reason.find("confirming its claims"), std::string::npos) << back.reason;
  AdvanceBy(milliseconds(100));
  EXPECT_TRUE(engine.Readiness(seconds(2)).ready);
  EXPECT_EQ(probe.stopped_by_token(), 0);
  probe.Release();
}

TEST_F(EngineTest, AfterAFailoverThatLostItsClaimARunTakesTheTaskAgainAndGoesOn) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H", "PT1H", "PT10S"), probe.Fn())), IsOk());
  Settle();
  const std::shared_ptr<const testing::MemoryTaskStore::Snapshot> before_claim =
      store_->TakeSnapshot();
  AdvanceBy(seconds(10));
  ASSERT_TRUE(probe.WaitCalls(1));
  Settle();
  const std::string ticket = *Row("t")->current_run_ticket;
  store_->SimulateFailover(*before_claim);  // the new primary never saw the claim
  AdvanceBy(milliseconds(500));
  EXPECT_EQ(Row("t")->current_run_ticket, ticket) << "the claim was not taken again";
  EXPECT_EQ(probe.stopped_by_token(), 0);
  EXPECT_EQ(recorder_->Count("at-risk", "t"), 0);
  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  AdvanceBy(seconds(1));
  EXPECT_EQ(Row("t")->current_run_ticket, std::nullopt);
}

TEST_F(EngineTest, AfterAFailoverARunWhoseTaskAnotherHostTookIsStoppedAndReportedAtRisk) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H", "PT1H", "PT10S"), probe.Fn())), IsOk());
  Settle();
  const std::shared_ptr<const testing::MemoryTaskStore::Snapshot> before_claim =
      store_->TakeSnapshot();
  AdvanceBy(seconds(10));
  ASSERT_TRUE(probe.WaitCalls(1));
  Settle();
  // The new primary lacks the claim, and another host claims the slot there before this host
  // gets through to it.
  store_->SetUnavailable(true);
  store_->SimulateFailover(*before_claim);
  std::shared_ptr<testing::MemoryTaskStore> elsewhere = OtherHostStore();
  Result<std::vector<ClaimResult>> claimed = elsewhere->ClaimMany(
      std::vector<ClaimRequest>{{"t", "theirs", hours(1), std::nullopt}}, seconds(10));
  ASSERT_THAT(claimed, IsOk());
  ASSERT_TRUE((*claimed)[0].claimed);
  store_->SetUnavailable(false);
  AdvanceBy(seconds(1));
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1)) << "ran on beside the other host's run";
  Settle();
  EXPECT_EQ(probe.stopped_by_token(), 1);
  EXPECT_EQ(recorder_->Count("at-risk", "t"), 1);
  EXPECT_EQ(Row("t")->current_run_ticket, "theirs") << "its end touched the other host's claim";
}

TEST_F(EngineTest, AfterAFailoverThatLostARunsReleaseTheReleaseIsWrittenAgain) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H", "PT1H"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  Settle();
  const std::shared_ptr<const testing::MemoryTaskStore::Snapshot> while_running =
      store_->TakeSnapshot();
  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  Settle();
  const std::optional<TaskRow> released = Row("t");
  ASSERT_TRUE(released);
  ASSERT_EQ(released->current_run_ticket, std::nullopt);
  store_->SimulateFailover(*while_running);  // the new primary still has the claim
  AdvanceBy(milliseconds(500));
  const std::optional<TaskRow> row = Row("t");
  ASSERT_TRUE(row);
  EXPECT_EQ(row->current_run_ticket, std::nullopt) << "the task waits for the lease to lapse";
  EXPECT_EQ(row->next_run_start_at, released->next_run_start_at);
  EXPECT_EQ(recorder_->Count("replayed", "t"), 1);
  EXPECT_EQ(recorder_->Count("at-risk", "t"), 0);
  EXPECT_EQ(recorder_->Count("started", "t"), 1);
}

TEST_F(EngineTest, AfterAFailoverTasksKeepRunningAndRunsKeepTheirClaims) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  Probe& held = MakeProbe();
  held.Hold();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1S"), probe.Fn())), IsOk());
  ASSERT_THAT(engine.Register(Task("long", Schedule("PT1S", "PT1M"), held.Fn())), IsOk());
  ASSERT_TRUE(held.WaitCalls(1));
  AdvanceBy(seconds(3));
  const std::shared_ptr<const testing::MemoryTaskStore::Snapshot> snapshot = store_->TakeSnapshot();
  AdvanceBy(seconds(3));
  // Down for 2 s, then back on a server that lacks the last 3 s of writes: the sweep waits a
  // lease there, and the safety polls go on meanwhile.
  store_->SetUnavailable(true);
  AdvanceBy(seconds(2));
  store_->SimulateFailover(*snapshot);
  store_->SetUnavailable(false);
  const int renewed = recorder_->Count("renewed", "long");
  const int started = recorder_->Count("started", "t");
  AdvanceBy(seconds(10));  // the dispatcher parks between its steps (it once spun here)
  EXPECT_GE(recorder_->Count("renewed", "long"), renewed + 3);
  EXPECT_EQ(recorder_->Count("lease-lost", "long"), 0);
  EXPECT_TRUE(recorder_->WaitFor("started", "t", started + 1));
  held.Release();
}

TEST_F(EngineTest, AfterAFailoverATaskReleasedSeveralTimesInTheReplayWindowIsClaimedAgain) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1S"), probe.Fn())), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  // A run inside its function, or whose end is not reported yet, counts as settled: every run
  // started by then is waited for, so that the counts match the snapshot.
  const auto settle_runs = [&] {
    Settle();
    ASSERT_TRUE(recorder_->WaitFor("completed", "t", recorder_->Count("started", "t")));
    Settle();
  };
  settle_runs();
  const int before = recorder_->Count("completed", "t");
  const std::shared_ptr<const testing::MemoryTaskStore::Snapshot> snapshot = store_->TakeSnapshot();
  for (int second = 0; second < 10 && recorder_->Count("completed", "t") - before < 3; ++second) {
    AdvanceBy(seconds(1));
    settle_runs();
  }
  const int vanished = recorder_->Count("completed", "t") - before;
  ASSERT_GE(vanished, 2);
  // The new server lacks the last runs of one task, claims and releases: each release is sent
  // again there, in turn (one batch naming the task twice is refused), each run is reported at
  // risk, and the task goes on.
  store_->SimulateFailover(*snapshot);
  const int started = recorder_->Count("started", "t");
  AdvanceBy(seconds(3));
  EXPECT_TRUE(recorder_->WaitFor("started", "t", started + 2));
  EXPECT_TRUE(recorder_->WaitFor("at-risk", "t", vanished));
  EXPECT_EQ(recorder_->Count("at-risk", "t"), vanished);
}

TEST_F(EngineTest, AClaimWhoseAnswerWasLostIsGivenBackWhenTheDatabaseAnswers) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  store_->LoseNextClaimAnswer();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H"), probe.Fn())), IsOk());
  // The claim was committed; its answer never came. It is given back, due at once, and the run
  // it was for starts then, not a lease later, when the row's claim would have lapsed.
  AdvanceBy(seconds(1));
  ASSERT_TRUE(probe.WaitCalls(1)) << "the claim was not given back";
  Settle();
  EXPECT_EQ(probe.calls(), 1);
  EXPECT_EQ(recorder_->Count("started", "t"), 1);
}
}  // namespace
}  // namespace stagehand::engine_internal
