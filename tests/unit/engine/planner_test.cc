// The engine's decisions, step by step: the planner is driven with events and times by hand, with
// no threads, no store and no clock. Each test states what a step decides: what to poll, what to
// claim and with which version, when to wake, when to renew, fence or kill, what a store event
// means, and how run slots bound it all.
#include "engine/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fixtures/task_schedules.h"
#include "stagehand/model/run_error.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Phase = PlannedTask::Phase;

// A process-wide slot pool of a given size.
class FakeSlots final : public RunSlots {
 public:
  explicit FakeSlots(int slots) : capacity(slots) {}
  bool TryTake() override {
    if (taken >= capacity) return false;
    ++taken;
    return true;
  }
  void Return() override { --taken; }
  bool Available() override { return taken < capacity; }
  // The executor frees a started run's slot when its job returns.
  void JobReturned() { --taken; }

  int capacity;
  int taken = 0;
};

// The monotonic and database clocks of a test: the database's clock reads kWall0 at kT0.
const MonoTime kT0 = MonoTime{} + hours(1000);
const WallTime kWall0 = WallTime{} + hours(24 * 365 * 56);  // 2026

// A task registered due at kWall0 is claimed at kT1: the first safety-net poll, at kT0, finds it
// unchanged and moves its wake-up a millisecond on.
const MonoTime kT1 = kT0 + milliseconds(1);

WallTime WallAt(MonoTime t) { return kWall0 + (t - kT0); }

EngineTask Def(std::string id, std::string cadence, TaskScope scope = TaskScope::kGlobal,
               milliseconds timeout = minutes(1)) {
  EngineTask def;
  def.id = std::move(id);
  def.scope = scope;
  def.schedule.settings.cadence = testing::ParsedCadence(cadence);
  def.schedule.settings.timeout_after_duration = "PT1M";
  def.timeout = timeout;
  return def;
}

class PlannerTest : public ::testing::Test {
 protected:
  void Start(EngineOptions engine = Options(), int process_slots = 100,
             std::size_t claim_order_salt = 0) {
    slots_ = std::make_unique<FakeSlots>(process_slots);
    Planner::Options options;
    options.engine = engine;
    options.claim_order_salt = claim_order_salt;
    options.has_store = true;
    options.store_notifies = true;
    planner_ = std::make_unique<Planner>(options, *slots_, kT0);
  }

  static EngineOptions Options() {
    EngineOptions options;
    options.lease = seconds(10);
    options.poll_interval = seconds(5);
    options.max_poll_interval = minutes(1);
    options.retry_backoff = seconds(1);
    options.release_poll_delay = milliseconds(20);
    return options;
  }

  // Registers a task whose row (global) has the next start `row_next` and `version`.
  TaskPtr Register(EngineTask def, std::optional<WallTime> row_next = std::nullopt,
                   std::int64_t version = 1, MonoTime now = kT0) {
    Result<TaskPtr> task = planner_->MakeTask(std::move(def), "plugin");
    EXPECT_THAT(task, IsOk());
    EXPECT_THAT(planner_->Reserve({*task}, "plugin"), IsOk());
    planner_->Activate(**task, row_next, version, WallAt(now), now, now, WallAt(now));
    return *task;
  }

  // A poll that finds every polled row as this host knows it.
  PollResult QuietPoll(MonoTime now) {
    PollResult result;
    result.db_now = WallAt(now);
    return result;
  }

  static PollEntry Entry(const std::string& id, Readiness readiness, std::int64_t version,
                         std::optional<WallTime> next) {
    PollEntry entry;
    entry.id = id;
    entry.readiness = readiness;
    entry.version = version;
    entry.next_run_start_at = next;
    return entry;
  }

  // Sends the plan's candidates as claims at `now`, the database answering `won[i]` for each.
  std::vector<Planner::Started> Claim(Planner::DispatchPlan& plan, MonoTime now,
                                      std::vector<bool> won, std::vector<TaskPtr>* lost) {
    std::vector<std::string> tickets;
    std::vector<Planner::Candidate> reserved = planner_->ReserveClaims(
        std::move(plan.candidates), [&] { return "ticket-" + std::to_string(next_ticket_++); }, now,
        &tickets);
    std::vector<ClaimResult> results;
    for (std::size_t i = 0; i < reserved.size(); ++i) {
      ClaimResult result;
      result.claimed = i < won.size() ? won[i] : true;
      result.db_now = WallAt(now);
      results.push_back(result);
    }
    return planner_->ApplyClaims(reserved, tickets, results, now, lost);
  }

  // The first dispatcher step: the safety-net poll of every task finds nothing new.
  void FirstQuietPoll() {
    Planner::DispatchPlan plan = planner_->PlanDispatch(kT0);
    ASSERT_TRUE(plan.full);
    planner_->ApplyPoll(plan, QuietPoll(kT0), kT0);
  }

  // Claims the one task due at kT1 (registered due at kWall0, after FirstQuietPoll).
  RunPtr ClaimAtT1() {
    Planner::DispatchPlan plan = planner_->PlanDispatch(kT1);
    EXPECT_EQ(plan.candidates.size(), 1u);
    std::vector<TaskPtr> lost;
    std::vector<Planner::Started> started = Claim(plan, kT1, {true}, &lost);
    return started.empty() ? nullptr : started[0].run;
  }

  // Registers `def` due at kWall0 and claims its run at kT1 (null when it was not claimed).
  std::pair<TaskPtr, RunPtr> RegisterAndClaim(EngineTask def) {
    TaskPtr task = Register(std::move(def), kWall0, 1);
    FirstQuietPoll();
    RunPtr run = ClaimAtT1();
    EXPECT_NE(run, nullptr);
    return {task, run};
  }

  std::unique_ptr<FakeSlots> slots_;
  std::unique_ptr<Planner> planner_;
  int next_ticket_ = 0;
};

TEST_F(PlannerTest, TheFirstStepPollsEveryWaitingTaskWithTheVersionsItKnows) {
  Start();
  Register(Def("a", "PT1M"), kWall0 + seconds(30), 7);
  Register(Def("b", "PT1M"), kWall0 + seconds(40), 9);
  Register(Def("local", "PT1M", TaskScope::kLocal));

  Planner::DispatchPlan plan = planner_->PlanDispatch(kT0);
  EXPECT_TRUE(plan.poll);
  EXPECT_TRUE(plan.full);
  EXPECT_TRUE(plan.sweep) << "the janitor sweeps with every safety-net poll by default";
  EXPECT_THAT(plan.poll_ids, ElementsAre("a", "b")) << "local tasks never touch the store";
  EXPECT_THAT(plan.known_versions, ElementsAre(7, 9));
  EXPECT_THAT(plan.candidates, IsEmpty());
}

TEST_F(PlannerTest, AQuietSafetyNetPollDoublesTheIntervalUpToTheMaximum) {
  EngineOptions options = Options();
  options.poll_interval = seconds(5);
  options.max_poll_interval = seconds(15);
  Start(options);
  Register(Def("a", "manual"));  // never due: only the safety net wakes the dispatcher

  MonoTime now = kT0;
  std::vector<milliseconds> intervals;
  for (int round = 0; round < 4; ++round) {
    Planner::DispatchPlan plan = planner_->PlanDispatch(now);
    ASSERT_TRUE(plan.full) << "round " << round;
    planner_->ApplyPoll(plan, QuietPoll(now), now);
    const MonoTime next = planner_->NextDispatcherWake();
    intervals.push_back(std::chrono::duration_cast<milliseconds>(next - now));
    EXPECT_FALSE(planner_->DispatcherHasWork(next - milliseconds(1)));
    now = next;
  }
  EXPECT_THAT(intervals, ElementsAre(seconds(10), seconds(15), seconds(15), seconds(15)));
}

TEST_F(PlannerTest, ASafetyNetPollThatFindsAnUnannouncedChangeGoesBackToThePollInterval) {
  Start();
  Register(Def("a", "PT1M"), kWall0 + minutes(1), 1);
  FirstQuietPoll();
  const MonoTime now = kT0 + seconds(10);
  Planner::DispatchPlan plan = planner_->PlanDispatch(now);
  ASSERT_TRUE(plan.full);
  // A Backstage worker (which does not notify) re-registered the row: a new version.
  PollResult polled = QuietPoll(now);
  polled.entries.push_back(Entry("a", Readiness::kNotReady, 2, kWall0 + minutes(2)));
  planner_->ApplyPoll(plan, polled, now);
  EXPECT_EQ(planner_->NextDispatcherWake(), now + seconds(5));
  EXPECT_EQ(planner_->Find("a")->known_version, 2);
}

TEST_F(PlannerTest, ADueTaskWhoseRowIsKnownIsClaimedAtItsVersionWithoutAPoll) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  Start(options);
  Register(Def("a", "PT1M"), kWall0 + seconds(30), 7);
  FirstQuietPoll();
  EXPECT_EQ(planner_->NextDispatcherWake(), kT0 + seconds(30));

  const MonoTime due = kT0 + seconds(30);
  EXPECT_FALSE(planner_->DispatcherHasWork(due - milliseconds(1)));
  Planner::DispatchPlan plan = planner_->PlanDispatch(due);
  EXPECT_FALSE(plan.poll);
  ASSERT_EQ(plan.candidates.size(), 1u);
  EXPECT_EQ(plan.candidates[0].version, 7) << "the claim requires the row to be unchanged";
  EXPECT_EQ(plan.candidates[0].due, kWall0 + seconds(30));

  std::vector<TaskPtr> lost;
  std::vector<Planner::Started> started = Claim(plan, due + milliseconds(3), {true}, &lost);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_THAT(lost, IsEmpty());
  const PlannedRun& run = *started[0].run;
  EXPECT_EQ(run.lag, milliseconds(3)) << "the database's clock at the claim, against the slot";
  EXPECT_EQ(run.timeout_at, due + milliseconds(3) + minutes(1));
  // The lease (10 s, shorter than the timeout) is renewed a third of the way in, the run fenced
  // a fifth before it lapses and killed a tenth before.
  EXPECT_EQ(run.renew_at, due + milliseconds(3) + std::chrono::nanoseconds(seconds(10)) / 3);
  EXPECT_EQ(run.fence_at, due + milliseconds(3) + seconds(8));
  EXPECT_EQ(run.kill_at, due + milliseconds(3) + seconds(9));
  EXPECT_EQ(planner_->Find("a")->phase, Phase::kRunning);
  EXPECT_EQ(slots_->taken, 1);
}

TEST_F(PlannerTest, ALostClaimGivesItsSlotBackAndPollsTheRowBeforeTheNextClaim) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  Start(options);
  Register(Def("a", "PT1M"), kWall0, 7);
  FirstQuietPoll();
  const MonoTime now = kT1;
  Planner::DispatchPlan plan = planner_->PlanDispatch(now);
  std::vector<TaskPtr> lost;
  EXPECT_THAT(Claim(plan, now, {false}, &lost), IsEmpty());
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(slots_->taken, 0);

  plan = planner_->PlanDispatch(now);
  EXPECT_THAT(plan.poll_ids, ElementsAre("a"));
  EXPECT_THAT(plan.known_versions, ElementsAre(std::nullopt)) << "the row is no longer known";
  EXPECT_THAT(plan.candidates, IsEmpty());
}

TEST_F(PlannerTest, APolledReadyRowBecomesACandidateWithTheRowsSettings) {
  Start();
  Register(Def("a", "PT1M"), kWall0 + minutes(5), 1);
  Planner::DispatchPlan plan = planner_->PlanDispatch(kT0);
  PollResult polled = QuietPoll(kT0);
  PollEntry entry = Entry("a", Readiness::kReady, 3, kWall0 - seconds(2));
  TaskSettingsV2 theirs;
  theirs.cadence = testing::ParsedCadence("PT2M");
  theirs.timeout_after_duration = "PT1M";
  entry.settings = theirs;
  polled.entries.push_back(entry);
  planner_->ApplyPoll(plan, polled, kT0);
  ASSERT_EQ(plan.candidates.size(), 1u);
  EXPECT_EQ(plan.candidates[0].version, 3);
  EXPECT_EQ(plan.candidates[0].due, kWall0 - seconds(2));
  ASSERT_TRUE(plan.candidates[0].settings.has_value());
  EXPECT_EQ(plan.candidates[0].settings->cadence.text(), "PT2M")
      << "another host registered it differently: the run uses (and releases with) the row's";

  std::vector<TaskPtr> lost;
  std::vector<Planner::Started> started = Claim(plan, kT0, {true}, &lost);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].run->schedule.settings.cadence.text(), "PT2M");
  EXPECT_EQ(started[0].run->lag, seconds(2));
}

TEST_F(PlannerTest, RowsThatAreGoneOrUnreadableFinishTheirWorkers) {
  Start();
  Register(Def("gone", "PT1M"), kWall0 + minutes(1), 1);
  Register(Def("newer", "PT1M"), kWall0 + minutes(1), 1);
  Planner::DispatchPlan plan = planner_->PlanDispatch(kT0);
  PollResult polled = QuietPoll(kT0);
  polled.entries.push_back(Entry("gone", Readiness::kMissing, 0, std::nullopt));
  PollEntry invalid = Entry("newer", Readiness::kInvalidSettings, 0, std::nullopt);
  invalid.settings_error = "unknown version 3";
  polled.entries.push_back(invalid);
  Planner::PollOutcome outcome = planner_->ApplyPoll(plan, polled, kT0);
  EXPECT_THAT(outcome.finished_missing, ElementsAre("gone"));
  ASSERT_EQ(outcome.finished_invalid.size(), 1u);
  EXPECT_EQ(outcome.finished_invalid[0].second, "unknown version 3");
  EXPECT_EQ(planner_->Find("gone")->phase, Phase::kFinished);
  EXPECT_EQ(planner_->Find("newer")->phase, Phase::kFinished);
  EXPECT_EQ(planner_->NextDispatcherWake(), kMonoInfinity) << "nothing is left to wait for";
}

TEST_F(PlannerTest, ARowRunningElsewhereIsSweptWhenItsClaimExpires) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  options.janitor_interval = hours(1);
  Start(options);
  Register(Def("a", "PT1M"), kWall0, 1);
  Planner::DispatchPlan plan = planner_->PlanDispatch(kT0);
  PollResult polled = QuietPoll(kT0);
  PollEntry running = Entry("a", Readiness::kNotReady, 2, kWall0);
  running.running = true;
  running.current_run_expires_at = kWall0 + seconds(7);
  polled.entries.push_back(running);
  planner_->ApplyPoll(plan, polled, kT0);
  EXPECT_EQ(planner_->Find("a")->wake_at, kMonoInfinity) << "its release is announced";
  EXPECT_EQ(planner_->NextDispatcherWake(), kT0 + seconds(7) + milliseconds(1));
  plan = planner_->PlanDispatch(kT0 + seconds(7) + milliseconds(1));
  EXPECT_TRUE(plan.sweep);
  EXPECT_THAT(plan.poll_ids, ElementsAre("a"));
}

TEST_F(PlannerTest, AFailedPollIsRetriedAfterTheBackoff) {
  Start();
  Register(Def("a", "PT1M"), kWall0, 1);
  Planner::DispatchPlan plan = planner_->PlanDispatch(kT0);
  planner_->PollFailed(plan, kT0);
  const MonoTime retry_at = planner_->NextDispatcherWake();
  EXPECT_GE(retry_at, kT0 + kFirstRetryBackoff / 2) << "drawn from the upper half";
  EXPECT_LT(retry_at, kT0 + kFirstRetryBackoff);
  EXPECT_FALSE(planner_->DispatcherHasWork(retry_at - milliseconds(1)));
  EXPECT_TRUE(planner_->PlanDispatch(retry_at - milliseconds(1)).poll_ids.empty());
  plan = planner_->PlanDispatch(retry_at);
  EXPECT_THAT(plan.poll_ids, ElementsAre("a"));
}

TEST_F(PlannerTest, TheBackoffDoublesUpToRetryBackoffAndEndsWhenTheDatabaseAnswers) {
  Start();  // retry_backoff 1 s, lease well above 10 s
  Register(Def("a", "PT1M"), kWall0, 1);
  MonoTime now = kT0;
  std::vector<milliseconds> waits;
  for (int attempt = 0; attempt < 8; ++attempt) {
    Planner::DispatchPlan plan = planner_->PlanDispatch(now);
    ASSERT_THAT(plan.poll_ids, ElementsAre("a")) << "attempt " << attempt;
    planner_->PollFailed(plan, now);
    const MonoTime retry_at = planner_->NextDispatcherWake();
    waits.push_back(std::chrono::duration_cast<milliseconds>(retry_at - now));
    now = retry_at;
  }
  for (std::size_t i = 0; i < waits.size(); ++i) {
    const milliseconds full = std::min<milliseconds>(seconds(1), kFirstRetryBackoff * (1 << i));
    EXPECT_GE(waits[i], full / 2) << "wait " << i;
    EXPECT_LT(waits[i], full) << "wait " << i;
  }
  ASSERT_TRUE(planner_->DatabaseFailingSince().has_value());
  EXPECT_EQ(*planner_->DatabaseFailingSince(), kT0);
  planner_->DatabaseAnswered(now);
  EXPECT_FALSE(planner_->DatabaseFailingSince().has_value());
  EXPECT_FALSE(planner_->BackingOff(now));
}

TEST_F(PlannerTest, CandidatesAreClaimedEarliestDueFirstAsFarAsSlotsGo) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  options.max_concurrency = 2;
  Start(options);
  Register(Def("late", "PT1M"), kWall0 + seconds(3), 1);
  Register(Def("early", "PT1M"), kWall0 + seconds(1), 1);
  Register(Def("middle", "PT1M"), kWall0 + seconds(2), 1);
  FirstQuietPoll();
  const MonoTime now = kT0 + seconds(3);
  Planner::DispatchPlan plan = planner_->PlanDispatch(now);
  ASSERT_EQ(plan.candidates.size(), 3u);
  std::vector<TaskPtr> lost;
  std::vector<Planner::Started> started = Claim(plan, now, {true, true}, &lost);
  ASSERT_EQ(started.size(), 2u);
  EXPECT_EQ(started[0].task->def.id, "early");
  EXPECT_EQ(started[1].task->def.id, "middle");
  EXPECT_EQ(planner_->Find("late")->phase, Phase::kWaiting)
      << "still due: claimed when a slot frees";
  EXPECT_FALSE(planner_->DispatcherHasWork(now)) << "no slot: nothing to do until one frees";
  EXPECT_EQ(planner_->NextDispatcherWake(), started[0].run->renew_at)
      << "only the renewals are due; the waiting task does not spin the dispatcher";
}

// Saturated hosts sharing a table: if each reached for the oldest due rows first, all would send
// claims for the same rows and all but one would lose each. Within ClaimOrderGrain each host keeps
// an order of its own; an older grain still goes first.
TEST_F(PlannerTest, HostsReachForDifferentRowsDueWithinAGrainButOlderGrainsFirst) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  options.max_concurrency = 4;
  const auto first_claims = [&](std::size_t salt) {
    Start(options, /*process_slots=*/100, salt);
    Register(Def("overdue", "PT1M"), kWall0 - seconds(1), 1);
    for (int i = 0; i < 12; ++i) {
      Register(Def("t" + std::to_string(i), "PT1M"), kWall0 + milliseconds(5 * i), 1);
    }
    FirstQuietPoll();
    const MonoTime now = kT0 + milliseconds(90);
    Planner::DispatchPlan plan = planner_->PlanDispatch(now);
    EXPECT_EQ(plan.candidates.size(), 13u);
    std::vector<TaskPtr> lost;
    std::vector<std::string> ids;
    for (const Planner::Started& run : Claim(plan, now, {}, &lost)) ids.push_back(run.task->def.id);
    return ids;
  };
  const std::vector<std::string> host_a = first_claims(0x9e3779b97f4a7c15u);
  const std::vector<std::string> host_b = first_claims(0x5bd1e9955bd1e995u);
  ASSERT_EQ(host_a.size(), 4u);
  ASSERT_EQ(host_b.size(), 4u);
  EXPECT_EQ(host_a[0], "overdue");
  EXPECT_EQ(host_b[0], "overdue");
  EXPECT_NE(host_a, host_b) << "both hosts reached for the same rows";
  EXPECT_NE(host_a, (std::vector<std::string>{"overdue", "t0", "t1", "t2"}))
      << "rows of one grain were taken in exact due order";
}

TEST_F(PlannerTest, TheProcessWideSlotsBoundClaimsAcrossPlugins) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  Start(options, /*process_slots=*/1);
  Register(Def("a", "PT1M"), kWall0, 1);
  Register(Def("b", "PT1M"), kWall0, 1);
  FirstQuietPoll();
  slots_->taken = 1;  // another plugin's run holds the only slot
  EXPECT_FALSE(planner_->DispatcherHasWork(kT0 + seconds(1)));
  EXPECT_EQ(planner_->NextDispatcherWake(), kMonoInfinity) << "woken when a slot frees";

  slots_->JobReturned();
  ASSERT_TRUE(planner_->DispatcherHasWork(kT0 + seconds(1)));
  Planner::DispatchPlan plan = planner_->PlanDispatch(kT0 + seconds(1));
  std::vector<TaskPtr> lost;
  EXPECT_EQ(Claim(plan, kT0 + seconds(1), {true, true}, &lost).size(), 1u);
}

TEST_F(PlannerTest, AnotherHostsClaimMarksTheRowHeldUntilItsReleaseIsAnnounced) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  options.janitor_interval = hours(1);
  Start(options);
  TaskPtr task = Register(Def("a", "PT1M"), kWall0 + seconds(30), 1);
  FirstQuietPoll();
  const MonoTime now = kT0 + seconds(1);
  const MonoTime parked = planner_->NextDispatcherWake();
  EXPECT_TRUE(planner_->OnStoreEvent({StoreEvent::Kind::kClaim, "a", "theirs"}, now, parked))
      << "the sweep of its claim (if its host dies) moves the dispatcher's deadline earlier";
  EXPECT_EQ(task->wake_at, kMonoInfinity);
  EXPECT_FALSE(task->known_version.has_value());
  EXPECT_EQ(planner_->NextDispatcherWake(), now + seconds(10) + milliseconds(1));

  // Its release is announced: the row is polled after the release poll delay.
  EXPECT_TRUE(planner_->OnStoreEvent({StoreEvent::Kind::kRelease, "a"}, now, kMonoInfinity));
  EXPECT_EQ(task->poll_at, now + milliseconds(20));
  EXPECT_THAT(planner_->PlanDispatch(now + milliseconds(19)).poll_ids, IsEmpty());
  EXPECT_THAT(planner_->PlanDispatch(now + milliseconds(20)).poll_ids, ElementsAre("a"));
}

TEST_F(PlannerTest, ThisHostsOwnClaimAndReleaseNotificationsAreNoNews) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  Start(options);
  TaskPtr task = Register(Def("a", "PT1M"), kWall0, 1);
  FirstQuietPoll();
  RunPtr run = ClaimAtT1();
  ASSERT_NE(run, nullptr);
  const MonoTime parked = planner_->NextDispatcherWake();
  EXPECT_FALSE(planner_->OnStoreEvent({StoreEvent::Kind::kClaim, "a", run->ticket}, kT1, parked));
  EXPECT_EQ(task->phase, Phase::kRunning);

  // The run ends and is released; the release's result says when the row is next due.
  EXPECT_TRUE(planner_->GlobalRunReturned(*run));
  planner_->ReleasesSent({task});
  const MonoTime wake = planner_->ReleasedRowWake(*task, *run, kWall0 + minutes(1), kWall0, kT0);
  EXPECT_FALSE(planner_->FinishGlobalRun(*task, run, 2, kWall0 + minutes(1), wake));
  slots_->JobReturned();
  EXPECT_FALSE(planner_->OnStoreEvent({StoreEvent::Kind::kRelease, "a"}, kT1, kT0 + minutes(1)))
      << "the echo of this host's own release";
  EXPECT_EQ(task->poll_at, kMonoInfinity);
  EXPECT_EQ(task->known_version, 2);
  EXPECT_EQ(planner_->NextDispatcherWake(), kT0 + minutes(1));
}

TEST_F(PlannerTest, RenewalsExtendTheLeaseNoticeCancelsAndKillALostRun) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  Start(options);
  TaskPtr task = Register(Def("a", "PT1M"), kWall0, 1);
  FirstQuietPoll();
  RunPtr run = ClaimAtT1();
  ASSERT_NE(run, nullptr);

  const MonoTime renew_at = run->renew_at;
  EXPECT_THAT(planner_->PlanDispatch(renew_at - milliseconds(1)).renewals, IsEmpty());
  Planner::DispatchPlan plan = planner_->PlanDispatch(renew_at);
  ASSERT_EQ(plan.renewals.size(), 1u);
  EXPECT_EQ(planner_->RenewalHold(*task, *run, renew_at), minutes(1)) << "well within its timeout";

  EXPECT_EQ(planner_->ApplyRenewal(*run, Result<LeaseStatus>(UnavailableError("down")), renew_at,
                                   renew_at),
            Planner::RenewalOutcome::kRetry);
  EXPECT_GE(run->renew_at, renew_at + kFirstRetryBackoff / 2) << "the database's backoff";
  EXPECT_LT(run->renew_at, renew_at + kFirstRetryBackoff);

  const MonoTime sent = run->renew_at;
  EXPECT_EQ(planner_->ApplyRenewal(*run, LeaseStatus::kHeld, sent, sent),
            Planner::RenewalOutcome::kRenewed);
  EXPECT_EQ(run->fence_at, sent + seconds(8));
  EXPECT_EQ(planner_->ApplyRenewal(*run, LeaseStatus::kCancelRequested, sent, sent),
            Planner::RenewalOutcome::kCancelNoticed);
  EXPECT_EQ(run->reason, StopReason::kCancel);
  EXPECT_EQ(planner_->ApplyRenewal(*run, LeaseStatus::kCancelRequested, sent, sent),
            Planner::RenewalOutcome::kRenewed)
      << "noticed once";
  EXPECT_EQ(planner_->ApplyRenewal(*run, LeaseStatus::kLost, sent, sent),
            Planner::RenewalOutcome::kLost);
  EXPECT_FALSE(run->ours);
  EXPECT_EQ(run->reason, StopReason::kCancel) << "the first reason names the outcome";
  EXPECT_EQ(planner_->ApplyRenewal(*run, LeaseStatus::kHeld, sent, sent),
            Planner::RenewalOutcome::kStale);
}

TEST_F(PlannerTest, ARunPastItsTimeoutIsStillHeldForAWholeLease) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  Start(options);
  TaskPtr task = Register(Def("a", "PT1M", TaskScope::kGlobal, seconds(20)), kWall0, 1);
  FirstQuietPoll();
  RunPtr run = ClaimAtT1();
  ASSERT_NE(run, nullptr);
  EXPECT_EQ(planner_->RenewalHold(*task, *run, kT1 + seconds(5)), seconds(20));
  EXPECT_EQ(planner_->RenewalHold(*task, *run, kT1 + seconds(15)), seconds(25));
  EXPECT_EQ(planner_->RenewalHold(*task, *run, kT1 + seconds(40)), seconds(50));
}

TEST_F(PlannerTest, TheTimerFencesARunWhoseRenewalsFailAndKillsItBeforeTheLeaseLapses) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  Start(options);
  Register(Def("a", "PT1M", TaskScope::kGlobal, hours(1)), kWall0, 1);
  FirstQuietPoll();
  RunPtr run = ClaimAtT1();
  ASSERT_NE(run, nullptr);

  Planner::TimerActions actions;
  bool kick = false;
  EXPECT_EQ(planner_->TimerStep(kT1 + seconds(7), WallAt(kT1 + seconds(7)), &actions, &kick),
            kT1 + seconds(8));
  EXPECT_THAT(actions.to_stop, IsEmpty());

  actions = {};
  EXPECT_EQ(planner_->TimerStep(kT1 + seconds(8), WallAt(kT1 + seconds(8)), &actions, &kick),
            kT1 + seconds(9));
  EXPECT_THAT(actions.to_stop, ElementsAre(run));
  EXPECT_EQ(actions.fenced.size(), 1u);
  EXPECT_EQ(run->reason, StopReason::kLeaseLost);
  EXPECT_TRUE(run->ours) << "a renewal that gets through in time still keeps the claim";

  actions = {};
  planner_->TimerStep(kT1 + seconds(9), WallAt(kT1 + seconds(9)), &actions, &kick);
  EXPECT_THAT(actions.to_kill, ElementsAre(run));
  EXPECT_FALSE(run->ours) << "no longer renewed: the row lapses with the run dead";
}

TEST_F(PlannerTest, TheTimerSignalsATimeoutAndReportsTheRunOverdueALeaseLater) {
  Start();
  Register(Def("a", "PT1M", TaskScope::kLocal, seconds(2)));
  Planner::TimerActions actions;
  bool kick = false;
  planner_->TimerStep(kT0, kWall0, &actions, &kick);
  ASSERT_EQ(actions.to_start.size(), 1u);
  RunPtr run = actions.to_start[0].run;
  actions = {};
  EXPECT_EQ(planner_->TimerStep(kT0 + seconds(1), WallAt(kT0), &actions, &kick), kT0 + seconds(2));
  EXPECT_THAT(actions.to_stop, IsEmpty());
  EXPECT_EQ(planner_->TimerStep(kT0 + seconds(2), WallAt(kT0), &actions, &kick), kT0 + seconds(12))
      << "the overdue report, a lease after the timeout";
  EXPECT_THAT(actions.to_stop, ElementsAre(run));
  EXPECT_EQ(run->reason, StopReason::kTimeout);
  EXPECT_THAT(actions.overdue, IsEmpty());
  actions = {};
  planner_->TimerStep(kT0 + seconds(12), WallAt(kT0), &actions, &kick);
  EXPECT_EQ(actions.overdue.size(), 1u);
  EXPECT_THAT(actions.to_stop, IsEmpty()) << "signalled once";
}

TEST_F(PlannerTest, LocalTasksStartWhenDueWithinTheirSlotsAndFollowTheirCadence) {
  EngineOptions options = Options();
  options.max_concurrency = 1;
  Start(options);
  TaskPtr a = Register(Def("a", "PT1M", TaskScope::kLocal));
  TaskPtr b = Register(Def("b", "PT1M", TaskScope::kLocal));
  Register(Def("m", "manual", TaskScope::kLocal));

  Planner::TimerActions actions;
  bool kick = false;
  planner_->TimerStep(kT0, kWall0, &actions, &kick);
  ASSERT_EQ(actions.to_start.size(), 1u) << "one slot";
  EXPECT_EQ(actions.to_start[0].task, a);
  EXPECT_EQ(a->local->state.status, TaskState::Status::kRunning);
  EXPECT_FALSE(kick);

  const MonoTime end = kT0 + seconds(5);
  EXPECT_FALSE(planner_->FinishLocalRun(*a, actions.to_start[0].run, std::nullopt, end, WallAt(end))
                   .finished);
  slots_->JobReturned();
  EXPECT_EQ(a->wake_at, kT0 + minutes(1)) << "a duration cadence counts from the run's start";
  EXPECT_TRUE(a->local->state.starts_at.has_value());

  actions = {};
  EXPECT_EQ(planner_->TimerStep(end, WallAt(end), &actions, &kick), kT0 + minutes(1));
  ASSERT_EQ(actions.to_start.size(), 1u);
  EXPECT_EQ(actions.to_start[0].task, b);
  EXPECT_EQ(actions.to_start[0].run->lag, seconds(5)) << "it waited for the slot";
}

// Issue 18: a trigger's trace context goes to the manual run it asks for, within
// kTriggerCallerLifetime, and to no later run.
TEST_F(PlannerTest, ATriggersTraceContextGoesToItsRunOnlyWhileFresh) {
  Start();
  TaskPtr m = Register(Def("m", "manual", TaskScope::kLocal));
  const TraceContext caller =
      *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  const auto run_once = [&](MonoTime trigger_at, MonoTime start_at) -> TraceContext {
    EXPECT_EQ(planner_->TriggerLocal("m", trigger_at, caller), Planner::LocalRequest::kDone);
    Planner::TimerActions actions;
    bool kick = false;
    planner_->TimerStep(start_at, WallAt(start_at), &actions, &kick);
    EXPECT_EQ(actions.to_start.size(), 1u);
    if (actions.to_start.empty()) return {};
    const TraceContext seen = actions.to_start[0].run->caller;
    (void)planner_->FinishLocalRun(*m, actions.to_start[0].run, std::nullopt, start_at,
                                   WallAt(start_at));
    slots_->JobReturned();
    return seen;
  };
  EXPECT_EQ(run_once(kT0, kT0 + seconds(1)), caller);
  EXPECT_FALSE(m->trigger_caller.valid()) << "used once";
  EXPECT_FALSE(run_once(kT0 + minutes(2), kT0 + minutes(3) + seconds(1)).valid())
      << "the run started more than a minute after its trigger";
}

TEST_F(PlannerTest, ALocalTriggerMakesTheTaskDueUnlessItRuns) {
  Start();
  TaskPtr m = Register(Def("m", "manual", TaskScope::kLocal));
  EXPECT_EQ(m->wake_at, kMonoInfinity);
  EXPECT_EQ(planner_->TriggerLocal("m", kT0 + seconds(3)), Planner::LocalRequest::kDone);
  Planner::TimerActions actions;
  bool kick = false;
  planner_->TimerStep(kT0 + seconds(3), WallAt(kT0 + seconds(3)), &actions, &kick);
  ASSERT_EQ(actions.to_start.size(), 1u);
  EXPECT_EQ(planner_->TriggerLocal("m", kT0 + seconds(4)), Planner::LocalRequest::kRunning);
  EXPECT_EQ(planner_->TriggerLocal("nope", kT0), Planner::LocalRequest::kNotLocal);

  RunPtr run;
  bool kill = true;
  EXPECT_EQ(planner_->CancelLocal("m", &run, &kill), Planner::LocalRequest::kDone);
  EXPECT_EQ(run, actions.to_start[0].run);
  EXPECT_FALSE(kill) << "a first cancel leaves the run its grace";
  EXPECT_EQ(run->reason, StopReason::kCancel);
}

TEST_F(PlannerTest, AGlobalTasksInitialDelayEndsInAPoll) {
  Start();
  EngineTask def = Def("a", "PT1M");
  def.has_initial_delay = true;
  def.initial_delay = seconds(30);
  TaskPtr task = Register(std::move(def), kWall0 + seconds(30), 1);
  EXPECT_EQ(task->phase, Phase::kInitialWait);
  EXPECT_THAT(planner_->PlanDispatch(kT0).poll_ids, IsEmpty()) << "not waiting yet";
  Planner::TimerActions actions;
  bool kick = false;
  EXPECT_EQ(planner_->TimerStep(kT0, kWall0, &actions, &kick), kT0 + seconds(30));
  planner_->TimerStep(kT0 + seconds(30), WallAt(kT0 + seconds(30)), &actions, &kick);
  EXPECT_TRUE(kick);
  EXPECT_EQ(task->phase, Phase::kWaiting);
  EXPECT_THAT(planner_->PlanDispatch(kT0 + seconds(30)).poll_ids, ElementsAre("a"));
}

TEST_F(PlannerTest, ACronRowWrittenASecondBeforeItsSlotStartsAtTheSlot) {
  Start();
  // Backstage registers a cron task's next start one second before its slot.
  const WallTime slot = std::chrono::floor<hours>(kWall0) + hours(1);
  TaskPtr task = Register(Def("hourly", "0 * * * *"), slot - seconds(1), 1);
  EXPECT_EQ(task->wake_at, kT0 + (slot - kWall0));
}

TEST_F(PlannerTest, HistoryIsPrunedAMinuteAfterStartThenEveryInterval) {
  Start();
  // Never while the host starts its first runs and takes its first triggers.
  EXPECT_FALSE(planner_->PruneDue(kT0));
  EXPECT_FALSE(planner_->PruneDue(kT0 + seconds(59)));
  EXPECT_TRUE(planner_->PruneDue(kT0 + minutes(1)));
  EXPECT_FALSE(planner_->PruneDue(kT0 + minutes(10)));
  EXPECT_TRUE(planner_->PruneDue(kT0 + minutes(11)));
}

TEST_F(PlannerTest, RegistrationsOfTheGlobalTasksAreRefreshedEveryHour) {
  EngineOptions options = Options();
  options.poll_interval = hours(3);
  options.max_poll_interval = hours(3);
  options.janitor_interval = hours(3);
  Start(options);
  Register(Def("b", "manual"), std::nullopt, 1);
  Register(Def("a", "manual"), std::nullopt, 1);
  Register(Def("local", "PT1M", TaskScope::kLocal));
  FirstQuietPoll();
  // Registering recorded them: the first refresh is due an hour later, and wakes the dispatcher
  // when nothing else would.
  EXPECT_EQ(planner_->NextDispatcherWake(), kT0 + hours(1));
  EXPECT_THAT(planner_->RegistrationRefreshDue(kT0 + minutes(59)), IsEmpty());
  EXPECT_THAT(planner_->RegistrationRefreshDue(kT0 + hours(1)), ElementsAre("a", "b"))
      << "every global task, in id order, in one batch";
  EXPECT_THAT(planner_->RegistrationRefreshDue(kT0 + hours(1)), IsEmpty());
  EXPECT_EQ(planner_->NextDispatcherWake(), kT0 + hours(2));
  // A finished task is not refreshed.
  bool finished_now = false;
  planner_->StopRecurrence("a", &finished_now);
  ASSERT_TRUE(finished_now);
  EXPECT_THAT(planner_->RegistrationRefreshDue(kT0 + hours(2)), ElementsAre("b"));
}

TEST_F(PlannerTest, ShutdownSignalsEveryRunAndStartsNothingMore) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  Start(options);
  Register(Def("a", "PT1M"), kWall0, 1);
  Register(Def("b", "PT1M"), kWall0, 1);
  Register(Def("local", "PT1M", TaskScope::kLocal));
  FirstQuietPoll();
  Planner::DispatchPlan plan = planner_->PlanDispatch(kT1);
  ASSERT_EQ(plan.candidates.size(), 2u);
  std::vector<Planner::Candidate> later = {plan.candidates[1]};
  plan.candidates.pop_back();
  std::vector<TaskPtr> lost;
  RunPtr run = Claim(plan, kT1, {true}, &lost).at(0).run;

  std::vector<RunPtr> signalled = planner_->BeginShutdown();
  EXPECT_THAT(signalled, ElementsAre(run));
  EXPECT_EQ(run->reason, StopReason::kShutdown);
  std::vector<std::string> tickets = {"t"};
  EXPECT_THAT(planner_->ReserveClaims(
                  later, [] { return std::string("t"); }, kT0, &tickets),
              IsEmpty());
  Planner::TimerActions actions;
  bool kick = false;
  planner_->TimerStep(kT0, kWall0, &actions, &kick);
  EXPECT_THAT(actions.to_start, IsEmpty());
  EXPECT_FALSE(planner_->DispatcherHasWork(kT0 + hours(2)));
  EXPECT_EQ(planner_->TriggerLocal("local", kT0), Planner::LocalRequest::kShuttingDown);
}

}  // namespace
}  // namespace stagehand::engine_internal

namespace stagehand::engine_internal {
namespace {

using State = Planner::DatabaseReadiness::State;

DatabaseHealth Unreachable(MonoTime since, std::string reason) {
  DatabaseHealth health;
  health.reachable = false;
  health.unreachable_since = since;
  health.reason = std::move(reason);
  return health;
}

TEST_F(PlannerTest, ReadinessHoldsThroughAnOutageShorterThanTheGrace) {
  Start();
  const milliseconds grace = seconds(5);
  Planner::DatabaseReadiness readiness =
      planner_->Readiness(Unreachable(kT0, "refused"), kT0 + seconds(4), grace);
  EXPECT_EQ(readiness.state, State::kReady);
  EXPECT_FALSE(readiness.health.reachable);
  EXPECT_EQ(planner_->Readiness({}, kT0 + seconds(4), grace).state, State::kReady);
}

TEST_F(PlannerTest, ReadinessFoldsInTheHostsOwnFailingCalls) {
  Start();
  planner_->DatabaseFailed(kT0);
  Planner::DatabaseReadiness readiness = planner_->Readiness({}, kT0 + seconds(6), seconds(5));
  EXPECT_EQ(readiness.state, State::kUnreachable);
  EXPECT_EQ(readiness.health.reason, "its statements fail");
  EXPECT_EQ(readiness.down, seconds(6));
}

TEST_F(PlannerTest, AfterAnOutageTheHostIsReadyOnlyOnceItsClaimsAreConfirmed) {
  Start();
  Register(Def("a", "PT1M"), kWall0, 1);
  FirstQuietPoll();
  const RunPtr run = ClaimAtT1();
  ASSERT_NE(run, nullptr);
  const milliseconds grace = seconds(5);
  // The store alone saw the outage: no call of this host failed.
  EXPECT_EQ(planner_->Readiness(Unreachable(kT1, "refused"), kT1 + seconds(6), grace).state,
            State::kUnreachable);
  const MonoTime back = kT1 + seconds(7);
  Planner::DatabaseReadiness readiness = planner_->Readiness({}, back, grace);
  EXPECT_EQ(readiness.state, State::kConfirmingClaims);
  EXPECT_TRUE(readiness.step_dispatcher);
  EXPECT_TRUE(run->unconfirmed);
  EXPECT_LE(run->renew_at, back) << "the claim is renewed at once";
  EXPECT_EQ(planner_->Readiness({}, back, grace).state, State::kConfirmingClaims);
  EXPECT_EQ(planner_->ApplyRenewal(*run, LeaseStatus::kHeld, back, back),
            Planner::RenewalOutcome::kRenewed);
  EXPECT_EQ(planner_->Readiness({}, back, grace).state, State::kReady);
}

TEST_F(PlannerTest, AfterAnOutageAHostWithoutClaimsIsReadyAtOnce) {
  Start();
  const milliseconds grace = seconds(5);
  EXPECT_EQ(planner_->Readiness(Unreachable(kT0, "refused"), kT0 + seconds(6), grace).state,
            State::kUnreachable);
  EXPECT_EQ(planner_->Readiness({}, kT0 + seconds(7), grace).state, State::kReady);
}

}  // namespace
}  // namespace stagehand::engine_internal

namespace stagehand::engine_internal {
namespace {

using Verdict = Planner::StartVerdict;

EngineTask Retried(EngineTask def, int attempts) {
  def.retry = RetryPolicy{attempts, milliseconds(1000), std::nullopt};
  return def;
}

TEST_F(PlannerTest, AClaimedRunStartsAndItsTimeoutCountsFromItsStart) {
  Start();
  const auto [task, run] = RegisterAndClaim(Def("a", "PT1M", TaskScope::kGlobal, seconds(30)));
  ASSERT_NE(run, nullptr);
  const MonoTime start = kT1 + seconds(2);
  EXPECT_EQ(planner_->StartRun(*task, *run, start), Verdict::kStart);
  EXPECT_EQ(run->timeout_at, start + seconds(30));
}

TEST_F(PlannerTest, ARunWhoseClaimIsAtRiskByItsStartDoesNotStart) {
  Start();
  const auto [task, run] = RegisterAndClaim(Def("a", "PT1M"));
  ASSERT_NE(run, nullptr);
  EXPECT_EQ(planner_->StartRun(*task, *run, run->fence_at), Verdict::kClaimAtRisk);
  EXPECT_EQ(run->reason, StopReason::kLeaseLost);
}

TEST_F(PlannerTest, ARunClaimedAsTheHostShutsDownDoesNotStartAndItsSlotIsGivenBack) {
  Start();
  const auto [task, run] = RegisterAndClaim(Retried(Def("a", "PT1M"), 3));
  ASSERT_NE(run, nullptr);
  (void)planner_->BeginShutdown();
  EXPECT_EQ(planner_->StartRun(*task, *run, kT1), Verdict::kShuttingDown);
  EXPECT_FALSE(planner_->RetryNeedsRecordedAttempt(*task, *run, /*failed=*/true));
  const Planner::GlobalRunEnd end =
      planner_->PlanGlobalRunEnd(*task, *run, /*started=*/false, "{}", 0, WallAt(kT1));
  EXPECT_EQ(end.next_in, milliseconds(0)) << "due at once, for another host";
  EXPECT_EQ(end.retried_attempt, 0);
}

TEST_F(PlannerTest, AFailedGlobalRunIsRetriedCountingFromTheAttemptItsRowRecords) {
  Start();
  const auto [task, run] = RegisterAndClaim(Retried(Def("a", "PT1M"), 3));
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(planner_->RetryNeedsRecordedAttempt(*task, *run, /*failed=*/true));
  EXPECT_FALSE(planner_->RetryNeedsRecordedAttempt(*task, *run, /*failed=*/false));
  const Planner::GlobalRunEnd end = planner_->PlanGlobalRunEnd(
      *task, *run, /*started=*/true, R"({"name":"Error","message":"boom"})", 1, WallAt(kT1));
  EXPECT_EQ(end.retried_attempt, 2) << "another host's run was attempt 1";
  ASSERT_TRUE(end.next_in.has_value());
  EXPECT_GE(*end.next_in, milliseconds(1000)) << "the second retry waits a doubled backoff";
  EXPECT_LE(*end.next_in, milliseconds(2000));
  ASSERT_TRUE(end.error.has_value());
  EXPECT_EQ(RunError::Decode(*end.error).retried_attempt(), 2);
  EXPECT_EQ(task->retry_attempt, 3);
}

TEST_F(PlannerTest, AGlobalRunPastItsLastRetryIsNotRetried) {
  Start();
  const auto [task, run] = RegisterAndClaim(Retried(Def("a", "PT1M"), 2));
  ASSERT_NE(run, nullptr);
  const Planner::GlobalRunEnd end = planner_->PlanGlobalRunEnd(
      *task, *run, /*started=*/true, R"({"name":"Error","message":"boom"})", 2, WallAt(kT1));
  EXPECT_EQ(end.retried_attempt, 0);
  EXPECT_FALSE(end.next_in.has_value());
  EXPECT_EQ(end.error, R"({"name":"Error","message":"boom"})");
}

TEST_F(PlannerTest, AGlobalRunThatOutlastsItsSlotsBeyondTheWindowSkipsThem) {
  Start();
  EngineTask def = Def("a", "PT1M");
  def.catchup_window = seconds(10);
  const auto [task, run] = RegisterAndClaim(std::move(def));
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(run->slot.has_value());
  const WallTime slot = *run->slot;
  const WallTime ended = slot + minutes(3) + seconds(20);
  const Planner::GlobalRunEnd end =
      planner_->PlanGlobalRunEnd(*task, *run, /*started=*/true, std::nullopt, 0, ended);
  ASSERT_TRUE(end.skipped.has_value());
  EXPECT_EQ(end.skipped->slot, slot + minutes(1));
  EXPECT_EQ(end.skipped->next, slot + minutes(4));
  EXPECT_EQ(end.next_in, seconds(40));
  // Within the window the next slot runs at once, as Backstage would.
  const Planner::GlobalRunEnd late = planner_->PlanGlobalRunEnd(
      *task, *run, /*started=*/true, std::nullopt, 0, slot + minutes(1) + seconds(5));
  EXPECT_FALSE(late.skipped.has_value());
  EXPECT_FALSE(late.next_in.has_value());
}

TEST_F(PlannerTest, AFailedLocalRunIsRetriedAfterItsBackoff) {
  Start();
  TaskPtr task = Register(Retried(Def("l", "PT1H", TaskScope::kLocal), 1));
  Planner::TimerActions actions;
  bool kick = false;
  planner_->TimerStep(kT0, kWall0, &actions, &kick);
  ASSERT_EQ(actions.to_start.size(), 1u);
  const RunPtr run = actions.to_start[0].run;
  const MonoTime end = kT0 + seconds(2);
  const Planner::LocalRunEnd failed =
      planner_->FinishLocalRun(*task, run, R"({"message":"boom"})", end, WallAt(end));
  slots_->JobReturned();
  EXPECT_FALSE(failed.finished);
  ASSERT_TRUE(failed.retry_in.has_value());
  EXPECT_EQ(task->wake_at, end + *failed.retry_in);
  EXPECT_EQ(task->retry_attempt, 2);
}

}  // namespace
}  // namespace stagehand::engine_internal

namespace stagehand::engine_internal {
namespace {

TEST_F(PlannerTest, AClaimRecordsTheRunsStartUnlessTheTasksLastRunWasShort) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  Start(options);
  TaskPtr task = Register(Def("a", "PT1M"), kWall0, 1);
  FirstQuietPoll();
  Planner::DispatchPlan plan = planner_->PlanDispatch(kT1);
  std::vector<TaskPtr> lost;
  std::vector<Planner::Started> started = Claim(plan, kT1, {true}, &lost);
  ASSERT_EQ(started.size(), 1u);
  const RunPtr run = started[0].run;
  EXPECT_TRUE(run->start_recorded);
  EXPECT_EQ(run->claimed_at, WallAt(kT1));
  EXPECT_EQ(run->record_start_at, kMonoInfinity);

  // The run took half a second: the next claim records nothing, its run is recorded whole by its
  // release, or once it has run kShortRun.
  (void)planner_->GlobalRunReturned(*run);
  ReleaseResult released;
  released.released = true;
  released.version = 2;
  released.next_run_start_at = kWall0 + minutes(1);
  released.db_now = WallAt(kT1 + milliseconds(500));
  const MonoTime wake =
      planner_->ApplyRelease(*task, *run, milliseconds(500), released, kT1 + milliseconds(500));
  EXPECT_EQ(wake, kT0 + minutes(1));
  EXPECT_TRUE(task->short_runs);
  planner_->FinishGlobalRun(*task, run, released.version, released.next_run_start_at, wake);
  slots_->JobReturned();
  plan = planner_->PlanDispatch(wake);
  ASSERT_EQ(plan.candidates.size(), 1u);
  started = Claim(plan, wake, {true}, &lost);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_FALSE(started[0].run->start_recorded);
  EXPECT_EQ(started[0].run->record_start_at, wake + kShortRun);
}

TEST_F(PlannerTest, AReleaseThatWroteNothingLeavesTheRowsWakeUnknown) {
  Start();
  const auto [task, run] = RegisterAndClaim(Def("a", "PT1M"));
  ASSERT_NE(run, nullptr);
  ReleaseResult refused;
  refused.released = false;
  EXPECT_EQ(planner_->ApplyRelease(*task, *run, seconds(5), refused, kT1), kMonoInfinity);
  EXPECT_FALSE(task->short_runs);
}

}  // namespace
}  // namespace stagehand::engine_internal
