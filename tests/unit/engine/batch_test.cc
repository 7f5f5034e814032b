// Global tasks due together: claimed in one ClaimMany, released through ReleaseMany, the delayed
// re-poll after another host's release, claims without polls, the safety-net poll's interval,
// and a claim in flight at shutdown.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <numeric>
#include <optional>
#include <thread>

#include "engine_harness.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

// Forwards every call to a MemoryTaskStore and records the sizes of the batched claims and
// releases and the polled ids. With `notifies` false it cannot Listen, as SQLite. Thread-safe.
class CountingStore final : public TaskStore {
 public:
  explicit CountingStore(std::shared_ptr<testing::MemoryTaskStore> inner, bool notifies = true)
      : inner_(std::move(inner)), notifies_(notifies) {}

  std::vector<std::size_t> claim_batches() const {
    std::lock_guard lock(mu_);
    return claim_batches_;
  }
  std::vector<std::size_t> release_batches() const {
    std::lock_guard lock(mu_);
    return release_batches_;
  }
  int single_releases() const {
    std::lock_guard lock(mu_);
    return single_releases_;
  }
  // Every id any poll asked for, in order; cleared by ClearPolls.
  std::vector<std::string> polled_ids() const {
    std::lock_guard lock(mu_);
    return polled_ids_;
  }
  void ClearPolls() {
    std::lock_guard lock(mu_);
    polled_ids_.clear();
  }
  // Listen then hands `event` to the handler before it returns, as PostgreSQL's listener may with
  // another host's notification.
  void DeliverOnListen(StoreEvent event) { event_on_listen_ = std::move(event); }

  const std::string& plugin_id() const override { return inner_->plugin_id(); }
  Status Migrate() override { return inner_->Migrate(); }
  Result<UpsertResult> Upsert(const std::string& id, const TaskSchedule& schedule) override {
    return inner_->Upsert(id, schedule);
  }
  Result<std::vector<UpsertResult>> UpsertMany(std::span<const TaskUpsert> tasks) override {
    return inner_->UpsertMany(tasks);
  }
  Result<PollResult> Poll(std::span<const std::string> ids, bool sweep_expired) override {
    return inner_->Poll(ids, sweep_expired);
  }
  Result<PollResult> PollChanged(std::span<const std::string> ids,
                                 std::span<const std::optional<std::int64_t>> known_versions,
                                 bool sweep_expired) override {
    {
      std::lock_guard lock(mu_);
      polled_ids_.insert(polled_ids_.end(), ids.begin(), ids.end());
    }
    return inner_->PollChanged(ids, known_versions, sweep_expired);
  }
  Result<ClaimResult> Claim(const std::string& id, const std::string& ticket,
                            std::chrono::milliseconds timeout,
                            std::chrono::milliseconds lease) override {
    return inner_->Claim(id, ticket, timeout, lease);
  }
  Result<std::vector<ClaimResult>> ClaimMany(std::span<const ClaimRequest> claims,
                                             std::chrono::milliseconds lease) override {
    Result<std::vector<ClaimResult>> claimed = inner_->ClaimMany(claims, lease);
    std::unique_lock lock(mu_);
    claim_batches_.push_back(claims.size());
    claims_held_ += hold_claims_ ? 1 : 0;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !hold_claims_; });
    return claimed;
  }
  // Makes claims wait, after the database wrote them, until ReleaseClaims: a claim in flight.
  void HoldClaims() {
    std::lock_guard lock(mu_);
    hold_claims_ = true;
  }
  void ReleaseClaims() {
    {
      std::lock_guard lock(mu_);
      hold_claims_ = false;
    }
    cv_.notify_all();
  }
  // Waits (real time, bounded) until a claim is held.
  bool WaitClaimHeld() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return claims_held_ > 0; });
  }
  Result<LeaseStatus> RenewLease(const std::string& id, const std::string& ticket,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds lease) override {
    if (fail_renewals_) return Status(StatusCode::kUnavailable, "renewals fail in this test");
    return inner_->RenewLease(id, ticket, timeout, lease);
  }
  // Makes every later lease renewal fail, as an unreachable database does.
  void FailRenewals() { fail_renewals_ = true; }
  Result<bool> Release(const std::string& id, const std::string& ticket,
                       const TaskSchedule& schedule,
                       const std::optional<std::string>& error_json) override {
    {
      std::lock_guard lock(mu_);
      ++single_releases_;
    }
    return inner_->Release(id, ticket, schedule, error_json);
  }
  Result<std::vector<ReleaseResult>> ReleaseMany(
      std::span<const ReleaseRequest> releases) override {
    {
      std::lock_guard lock(mu_);
      release_batches_.push_back(releases.size());
    }
    return inner_->ReleaseMany(releases);
  }
  Status Trigger(const std::string& id) override { return inner_->Trigger(id); }
  Status Trigger(const std::string& id, const TraceContext& caller) override {
    return inner_->Trigger(id, caller);
  }
  Status Cancel(const std::string& id, std::chrono::milliseconds hold) override {
    return inner_->Cancel(id, hold);
  }
  Result<std::vector<std::string>> SweepExpired() override { return inner_->SweepExpired(); }
  Result<std::vector<TaskRow>> States() override { return inner_->States(); }
  Status Delete(const std::string& id) override { return inner_->Delete(id); }
  Result<WallTime> DatabaseNow() override { return inner_->DatabaseNow(); }
  std::unique_ptr<Notifications> Listen(std::function<void(const StoreEvent&)> handler) override {
    if (!notifies_) return nullptr;
    if (event_on_listen_) handler(*event_on_listen_);
    return inner_->Listen(std::move(handler));
  }

 private:
  std::shared_ptr<testing::MemoryTaskStore> inner_;
  const bool notifies_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool hold_claims_ = false;
  std::atomic<bool> fail_renewals_ = false;
  int claims_held_ = 0;
  std::vector<std::size_t> claim_batches_;
  std::vector<std::size_t> release_batches_;
  int single_releases_ = 0;
  std::vector<std::string> polled_ids_;
  std::optional<StoreEvent> event_on_listen_;
};

std::size_t Sum(const std::vector<std::size_t>& sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
}

TEST_F(EngineTest, TasksDueTogetherAreClaimedInOneStatementAndReleasedInBatches) {
  auto counting = std::make_shared<CountingStore>(store_);
  TaskEngine& engine = StartEngine(counting, Options());
  Probe& probe = MakeProbe();
  probe.Hold();
  std::vector<EngineTask> tasks;
  for (int i = 0; i < 5; ++i) {
    tasks.push_back(Task("due-" + std::to_string(i), Schedule("PT1M"), probe.Fn()));
  }
  ASSERT_THAT(engine.RegisterMany(std::move(tasks)), IsOk());
  ASSERT_TRUE(probe.WaitCalls(5));
  EXPECT_EQ(counting->claim_batches(), std::vector<std::size_t>{5});

  probe.Release();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(recorder_->WaitFor("completed", "due-" + std::to_string(i), 1));
  }
  Settle();
  EXPECT_EQ(Sum(counting->release_batches()), 5u);
  EXPECT_EQ(counting->single_releases(), 0);
  for (int i = 0; i < 5; ++i) {
    const std::optional<TaskRow> row = Row("due-" + std::to_string(i));
    ASSERT_TRUE(row);
    EXPECT_EQ(row->current_run_ticket, std::nullopt);
    EXPECT_EQ(row->next_run_start_at, clock_.Now() + seconds(60));
  }
}

TEST_F(EngineTest, AnEventThatArrivesWhileTheEngineSubscribesConcernsNoTaskAndIsDropped) {
  auto counting = std::make_shared<CountingStore>(store_);
  counting->DeliverOnListen(StoreEvent{StoreEvent::Kind::kTrigger, "other-host-task"});
  TaskEngine& engine = StartEngine(counting, Options());
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("due", Schedule("PT1M"), probe.Fn())), IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
}

TEST_F(EngineTest, AnotherHostsReleaseIsPickedUpAfterTheReleasePollDelay) {
  EngineOptions options = Options();
  options.release_poll_delay = milliseconds(20);
  TaskEngine& a = StartEngine(store_, options);
  Probe& probe_a = MakeProbe();
  probe_a.Hold();
  ASSERT_THAT(a.Register(Task("shared", Schedule("PT0S"), probe_a.Fn())), IsOk());
  ASSERT_TRUE(probe_a.WaitCalls(1));

  TaskEngine& b = StartEngine(OtherHostStore(), options);
  Probe& probe_b = MakeProbe();
  ASSERT_THAT(b.Register(Task("shared", Schedule("PT0S"), probe_b.Fn())), IsOk());
  Settle();
  EXPECT_EQ(probe_b.calls(), 0);

  // A stops registering the task, so only B can run it next; A's release announces the row due.
  // (The memory store delivers the release event before A's Shutdown returns.)
  a.Shutdown();
  ASSERT_TRUE(b.WaitIdleForTesting());
  EXPECT_EQ(probe_b.calls(), 0) << "B polled before the release poll delay";
  clock_.Advance(milliseconds(19));
  ASSERT_TRUE(b.WaitIdleForTesting());
  EXPECT_EQ(probe_b.calls(), 0) << "B polled before the release poll delay";
  clock_.Advance(milliseconds(1));
  ASSERT_TRUE(probe_b.WaitCalls(1));
}

TEST_F(EngineTest, ATaskThisHostReleasedIsClaimedWhenDueWithoutAPoll) {
  auto counting = std::make_shared<CountingStore>(store_);
  EngineOptions options = Options();
  options.poll_interval = hours(1);  // no safety-net or janitor round in between
  options.janitor_interval = hours(1);
  TaskEngine& engine = StartEngine(counting, options);
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1M"), probe.Fn())), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  Settle();
  counting->ClearPolls();

  AdvanceBy(seconds(60));
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 2));
  AdvanceBy(seconds(60));
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 3));
  EXPECT_EQ(counting->polled_ids(), std::vector<std::string>{})
      << "the release told the engine the next start; its own notification is no news";
  EXPECT_EQ(Row("t")->next_run_start_at, clock_.Now() + seconds(60));
}

TEST_F(EngineTest, ARowChangedUnannouncedIsPolledBeforeItRunsWithTheNewSettings) {
  EngineOptions options = Options();
  options.poll_interval = hours(1);
  options.janitor_interval = hours(1);
  TaskEngine& engine = StartEngine(store_, options);
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1M"), probe.Fn())), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  Settle();

  // Another writer (a Backstage host, which does not notify) re-registers the task with a
  // two-minute cadence; the next start it already had stays.
  std::optional<TaskRow> row = Row("t");
  ASSERT_TRUE(row);
  row->settings_json = Schedule("PT2M").settings.ToJson();
  OtherHostStore()->PutRow(*row);

  AdvanceBy(seconds(60));
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 2));
  Settle();
  EXPECT_EQ(Row("t")->next_run_start_at, clock_.Now() + minutes(2))
      << "the run was released with the settings this host knew, not the row's";
}

TEST_F(EngineTest, ARunWhoseClaimAnsweredAfterShutdownBeganNeverStartsAndStaysDue) {
  auto gated = std::make_shared<CountingStore>(store_);
  TaskEngine& engine = StartEngine(gated, Options());  // shutdown_grace 5 s (manual clock)
  Probe& probe = MakeProbe();
  probe.Hold();  // runs until released or stopped
  gated->HoldClaims();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1M"), probe.Fn())), IsOk());
  ASSERT_TRUE(gated->WaitClaimHeld());

  std::promise<void> stopped;
  std::thread stopper([&] {
    engine.Shutdown();
    stopped.set_value();
  });
  auto done = stopped.get_future();
  EXPECT_EQ(done.wait_for(milliseconds(50)), std::future_status::timeout)
      << "Shutdown did not wait for the claim in flight";
  gated->ReleaseClaims();
  // The run the claim would start never starts, so Shutdown returns without the grace period
  // passing (the manual clock stands still).
  const bool returned = done.wait_for(seconds(10)) == std::future_status::ready;
  if (!returned) {
    probe.Release();
    clock_.Advance(seconds(5));
  }
  stopper.join();
  EXPECT_TRUE(returned) << "Shutdown waited for a run that should never have started";
  EXPECT_EQ(probe.calls(), 0) << "a run started after its host began to shut down";
  const std::optional<TaskRow> row = Row("t");
  EXPECT_EQ(row->current_run_ticket, std::nullopt) << "the claim was not released";
  EXPECT_EQ(row->next_run_start_at, clock_.Now())
      << "the run it was claimed for is not left due for another host (a finished run's next "
         "start would be a minute away)";
}

// A host paused (or starved) between a claim's answer and the run's start wakes with the claim
// at risk: its lease is lapsing and cannot be renewed, or another host holds the row by now. The
// run never starts (a function started then would outlive the claim); the task runs later.
class ClaimAtRiskBeforeStartTest : public EngineTest {
 protected:
  // Registers "t" with its first claim held until `meanwhile` has run, the whole lease later.
  void ClaimThenWakeAfterTheLease(const std::function<void()>& meanwhile) {
    gated_->HoldClaims();
    ASSERT_THAT(engine_.Register(Task("t", Schedule("PT1M"), probe_.Fn())), IsOk());
    ASSERT_TRUE(gated_->WaitClaimHeld());
    clock_.Advance(seconds(11));  // lease 10 s
    meanwhile();
    gated_->ReleaseClaims();
    ASSERT_TRUE(recorder_->WaitFor("failed", "t", 1));
    Settle();
  }

  std::shared_ptr<CountingStore> gated_ = std::make_shared<CountingStore>(store_);
  TaskEngine& engine_ = StartEngine(gated_, Options());
  Probe& probe_ = MakeProbe();
};

TEST_F(ClaimAtRiskBeforeStartTest, ALeaseThatCannotBeRenewedInTimeStartsNothing) {
  ClaimThenWakeAfterTheLease([&] { gated_->FailRenewals(); });
  // The row lapses or is released, and the task runs again on a later claim; the late one ended
  // without calling the function.
  const std::vector<std::string> errors = recorder_->Errors("t");
  ASSERT_FALSE(errors.empty());
  EXPECT_THAT(errors.front(), ::testing::HasSubstr("not started"))
      << "the function ran on the claim that was answered after its lease";
}

TEST_F(ClaimAtRiskBeforeStartTest, ARowAnotherHostTookMeanwhileStartsNothingHere) {
  ClaimThenWakeAfterTheLease([&] {
    std::optional<TaskRow> row = Row("t");
    ASSERT_TRUE(row && row->current_run_ticket);
    row->current_run_ticket = "another-hosts-ticket";
    row->current_run_started_at = clock_.Now();
    row->current_run_expires_at = clock_.Now() + seconds(10);
    OtherHostStore()->PutRow(*row);
  });
  EXPECT_EQ(probe_.calls(), 0) << "the function ran on another host's claim";
  EXPECT_EQ(Row("t")->current_run_ticket, "another-hosts-ticket")
      << "this host released over the other's ticket";

  std::optional<TaskRow> row = Row("t");
  row->current_run_ticket.reset();
  row->current_run_expires_at.reset();
  row->current_run_started_at.reset();
  row->next_run_start_at = clock_.Now() + minutes(1);
  OtherHostStore()->PutRow(*row);  // the other host's run ended
  AdvanceBy(minutes(2));
  EXPECT_TRUE(probe_.WaitCalls(1)) << "the task never ran here again";
}

// A run whose start comes late after its claim (a busy host) still gets its whole timeout: as in
// Backstage, the timeout counts from the function's start.
TEST_F(EngineTest, ATimeoutCountsFromTheRunsStartNotFromItsClaim) {
  auto gated = std::make_shared<CountingStore>(store_);
  TaskEngine& engine = StartEngine(gated, Options());
  Probe& probe = MakeProbe();
  probe.Hold();
  gated->HoldClaims();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1H", "PT30S"), probe.Fn())), IsOk());
  ASSERT_TRUE(gated->WaitClaimHeld());
  clock_.Advance(seconds(5));  // the claim is answered 5 s late, well within its 10 s lease
  gated->ReleaseClaims();
  ASSERT_TRUE(probe.WaitCalls(1));
  AdvanceBy(seconds(29));
  EXPECT_EQ(probe.active(), 1) << "the run was stopped 30 s after its claim, 25 s into its run";
  clock_.Advance(seconds(1));
  ASSERT_TRUE(probe.WaitInactive());
  EXPECT_EQ(probe.stopped_by_token(), 1);
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
}

TEST_F(EngineTest, AFailedPollIsRetriedAfterABackoffThatGrowsToRetryBackoff) {
  // Without notifications the safety-net poll stays at poll_interval (5 s).
  auto counting = std::make_shared<CountingStore>(store_, /*notifies=*/false);
  TaskEngine& engine = StartEngine(counting, Options());  // retry_backoff 1 s
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("t", Schedule("manual"), probe.Fn())), IsOk());
  Settle();
  store_->SetUnavailable(true);
  counting->ClearPolls();
  AdvanceBy(seconds(5));  // the safety-net poll, which fails
  EXPECT_EQ(counting->polled_ids().size(), 1U);
  AdvanceBy(milliseconds(49));
  EXPECT_EQ(counting->polled_ids().size(), 1U) << "retried before the first backoff (50-100 ms)";
  AdvanceBy(milliseconds(51));
  EXPECT_EQ(counting->polled_ids().size(), 2U);
  // Doubling from 100 ms to retry_backoff (1 s), each wait in its upper half: over 10 s of
  // outage at least 10 and at most 4 + 10 / 0.5 attempts.
  counting->ClearPolls();
  AdvanceBy(seconds(10));
  EXPECT_GE(counting->polled_ids().size(), 10U);
  EXPECT_LE(counting->polled_ids().size(), 24U);
  store_->SetUnavailable(false);
}

TEST_F(EngineTest, ATaskClaimedElsewhereIsNotClaimedHereUntilItsReleaseIsAnnounced) {
  auto elsewhere = OtherHostStore();  // another host, by hand
  auto counting = std::make_shared<CountingStore>(store_);
  TaskEngine& engine = StartEngine(counting, Options());
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("t", Schedule("PT1M"), probe.Fn())), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 1));
  Settle();
  // The other host (say, after a trigger this host has not polled yet) claims a run, and
  // announces it.
  TaskRow row = *Row("t");
  row.next_run_start_at = clock_.Now();
  elsewhere->PutRow(row);
  counting->ClearPolls();
  Result<std::vector<ClaimResult>> claimed = elsewhere->ClaimMany(
      std::vector<ClaimRequest>{{"t", "theirs", seconds(90), std::nullopt}}, seconds(90));
  ASSERT_THAT(claimed, IsOk());
  ASSERT_TRUE((*claimed)[0].claimed);
  Settle();
  EXPECT_EQ(counting->polled_ids(), std::vector<std::string>{})
      << "the announced claim says all there is to know";
  AdvanceBy(seconds(60));  // past the next start this host knew of
  EXPECT_EQ(recorder_->Count("claim-lost", "t"), 0) << "claimed a row it knew to be held";
  EXPECT_EQ(probe.calls(), 1);
  // Its release is announced: this host runs the next one.
  const TaskSchedule schedule = Schedule("PT1M");
  ASSERT_TRUE(
      elsewhere->ReleaseMany(std::vector<ReleaseRequest>{{"t", "theirs", schedule, std::nullopt}})
          .ok());
  AdvanceBy(seconds(60));
  ASSERT_TRUE(recorder_->WaitFor("completed", "t", 2));
  EXPECT_EQ(recorder_->Count("claim-lost", "t"), 0);
}

TEST_F(EngineTest, WithoutNotificationsTheSafetyNetPollKeepsItsInterval) {
  auto silent = std::make_shared<CountingStore>(store_, /*notifies=*/false);
  TaskEngine& engine = StartEngine(silent, Options());  // poll_interval 5 s
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("idle", Schedule("manual"), probe.Fn())), IsOk());
  Settle();
  silent->ClearPolls();
  for (int i = 0; i < 120; ++i) {
    clock_.Advance(seconds(1));
    Settle();
  }
  EXPECT_GE(silent->polled_ids().size(), 23U) << "other writers are only seen by polling";
}

}  // namespace
}  // namespace stagehand::engine_internal
