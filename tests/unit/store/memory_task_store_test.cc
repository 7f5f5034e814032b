// What the contract suite cannot see from outside: the memory store's statement counting, its
// simulated outage, its time precision and its in-process notification delivery.
#include "stagehand/store/memory_task_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fixtures/task_schedules.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"

namespace stagehand::testing {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::Not;

using std::chrono::milliseconds;
using std::chrono::minutes;

TaskSchedule Schedule(std::string_view cadence) { return testing::ScheduleFrom(cadence); }

class MemoryTaskStoreTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  MemoryTaskStore store_{"plugin-a", clock_};
};

TEST_F(MemoryTaskStoreTest, CountsOneStatementPerRoundTrip) {
  ASSERT_THAT(store_.Upsert("a", Schedule("PT10M")), IsOk());
  ASSERT_THAT(store_.Upsert("b", Schedule("manual")), IsOk());
  std::uint64_t count = store_.statement_count();

  const std::vector<std::string> ids = {"a", "b", "missing"};
  ASSERT_THAT(store_.Poll(ids, /*sweep_expired=*/true), IsOk());
  EXPECT_EQ(store_.statement_count(), count + 1);

  ASSERT_THAT(store_.Claim("a", "t", minutes(1), minutes(1)), IsOk());
  EXPECT_EQ(store_.statement_count(), count + 2);
  // Cancel reads, then writes.
  ASSERT_THAT(store_.Cancel("a", minutes(1)), IsOk());
  EXPECT_EQ(store_.statement_count(), count + 4);

  // Rejected before reaching the table.
  count = store_.statement_count();
  TaskSchedule bad = Schedule("PT1M");
  bad.settings.timeout_after_duration = "1 minute";
  EXPECT_THAT(store_.Upsert("c", bad), Not(IsOk()));
  // Written behind the store's back.
  TaskRow raw;
  raw.id = "raw";
  raw.settings_json = "{}";
  store_.PutRow(raw);
  EXPECT_EQ(store_.statement_count(), count);
}

TEST_F(MemoryTaskStoreTest, UnavailableStoreFailsEveryOperationAndTouchesNothing) {
  ASSERT_THAT(store_.Upsert("a", Schedule("PT10M")), IsOk());
  const std::vector<TaskRow> rows = *store_.States();
  const std::uint64_t count = store_.statement_count();
  store_.SetUnavailable(true);

  const std::string message = "plugin plugin-a: database unavailable (simulated)";
  auto expect_unavailable = [&](const Status& status) {
    EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable));
    EXPECT_EQ(status.message(), message);
  };
  const std::vector<std::string> ids = {"a"};
  expect_unavailable(store_.Migrate());
  expect_unavailable(store_.Upsert("a", Schedule("PT1M")).status());
  expect_unavailable(store_.Poll(ids, true).status());
  expect_unavailable(store_.Claim("a", "t", minutes(1), minutes(1)).status());
  expect_unavailable(store_.RenewLease("a", "t", minutes(1), minutes(1)).status());
  expect_unavailable(store_.Release("a", "t", Schedule("PT10M"), std::nullopt).status());
  expect_unavailable(store_.Trigger("a"));
  expect_unavailable(store_.Cancel("a", minutes(1)));
  expect_unavailable(store_.SweepExpired().status());
  expect_unavailable(store_.States().status());
  expect_unavailable(store_.Delete("a"));
  expect_unavailable(store_.DatabaseNow().status());
  EXPECT_EQ(store_.statement_count(), count);

  // Another host on the same table still reaches it.
  MemoryTaskStore other("plugin-a", clock_, store_.table());
  Result<std::vector<TaskRow>> seen = other.States();
  ASSERT_THAT(seen, IsOk());
  EXPECT_EQ(*seen, rows);

  store_.SetUnavailable(false);
  EXPECT_THAT(store_.Trigger("a"), IsOk());
}

// The run history rides on the claim and the release: a payload adds no statement.
TEST_F(MemoryTaskStoreTest, HistoryPayloadsAddNoStatementAndHistoryCallsCountOneEach) {
  ASSERT_THAT(store_.Upsert("a", Schedule("PT0S")), IsOk());
  std::uint64_t count = store_.statement_count();
  const std::vector<ClaimRequest> claims = {
      {"a", "t", minutes(1), std::nullopt, RunOrigin{"host", 7}}};
  Result<std::vector<ClaimResult>> claimed = store_.ClaimMany(claims, minutes(1));
  ASSERT_THAT(claimed, IsOk());
  ASSERT_TRUE((*claimed)[0].claimed);
  EXPECT_EQ(store_.statement_count(), count + 1);
  const std::vector<ReleaseRequest> releases = {
      {"a", "t", Schedule("PT0S"), std::nullopt,
       ReleasedRun{RunFinish{RunOutcome::kSucceeded}, RunOrigin{"host", 7}}}};
  ASSERT_THAT(store_.ReleaseMany(releases), IsOk());
  EXPECT_EQ(store_.statement_count(), count + 2);
  Result<TaskRun> run = store_.GetRun("t");
  ASSERT_THAT(run, IsOk());
  EXPECT_EQ(run->finish.outcome, RunOutcome::kSucceeded);
  EXPECT_EQ(run->origin.pid, 7);

  count = store_.statement_count();
  const std::vector<RunStart> starts = {RunStart{"local", "a", RunOrigin{"host", 7}}};
  ASSERT_THAT(store_.RecordStarts(starts), IsOk());
  const std::vector<RunEnd> ends = {RunEnd{"local", RunFinish{RunOutcome::kFailed}}};
  ASSERT_THAT(store_.RecordEnds(ends), IsOk());
  ASSERT_THAT(store_.ListRuns("a", 10, std::nullopt), IsOk());
  ASSERT_THAT(store_.MarkLost(std::vector<std::string>{"local"}, "{}"), IsOk());
  ASSERT_THAT(store_.PruneExpired(10), IsOk());
  EXPECT_EQ(store_.statement_count(), count + 5);
  EXPECT_EQ(store_.history(), &store_);
}

TEST_F(MemoryTaskStoreTest, UnavailableStoreFailsHistoryOperationsAndWritesNone) {
  const std::vector<RunStart> starts = {RunStart{"run", "a", RunOrigin{"host", 1}}};
  ASSERT_THAT(store_.RecordStarts(starts), IsOk());
  store_.SetUnavailable(true);
  const std::vector<RunEnd> ends = {RunEnd{"run", RunFinish{RunOutcome::kFailed}}};
  EXPECT_THAT(store_.RecordStarts(starts), StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(store_.RecordEnds(ends), StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(store_.ListRuns("a", 10, std::nullopt), StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(store_.GetRun("run"), StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(store_.MarkLost(std::vector<std::string>{"run"}, "{}"),
              StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(store_.PruneExpired(10), StatusIs(StatusCode::kUnavailable));
  store_.SetUnavailable(false);
  Result<TaskRun> run = store_.GetRun("run");
  ASSERT_THAT(run, IsOk());
  EXPECT_EQ(run->finish.outcome, RunOutcome::kRunning);
}

// The history's "database clock" is the injected clock, at the SQL stores' precision.
TEST_F(MemoryTaskStoreTest, HistoryTimesAreTheInjectedClocksInMilliseconds) {
  clock_.Advance(std::chrono::nanoseconds(1'234'567'891));
  const WallTime now = ManualClock::DefaultStart() + milliseconds(1234);
  const std::vector<RunStart> starts = {RunStart{"run", "a", RunOrigin{"host", 1}}};
  ASSERT_THAT(store_.RecordStarts(starts), IsOk());
  clock_.Advance(milliseconds(2500));
  const std::vector<RunEnd> ends = {RunEnd{"run", RunFinish{RunOutcome::kSucceeded}}};
  ASSERT_THAT(store_.RecordEnds(ends), IsOk());
  Result<TaskRun> run = store_.GetRun("run");
  ASSERT_THAT(run, IsOk());
  EXPECT_EQ(run->started_at, now);
  EXPECT_EQ(run->ended_at, now + milliseconds(2500));
  EXPECT_EQ(run->duration(), milliseconds(2500));

  // Past the max age after its start by the manual clock, the run is pruned.
  clock_.Advance(RunHistoryLimits{}.max_age - milliseconds(2500));
  Result<std::size_t> pruned = store_.PruneExpired(10);
  ASSERT_THAT(pruned, IsOk());
  EXPECT_EQ(*pruned, 0u);
  clock_.Advance(milliseconds(1));
  pruned = store_.PruneExpired(10);
  ASSERT_THAT(pruned, IsOk());
  EXPECT_EQ(*pruned, 1u);
}

TEST_F(MemoryTaskStoreTest, StoresTimesAtMillisecondPrecision) {
  clock_.Advance(std::chrono::nanoseconds(1'234'567'891));
  Result<WallTime> now = store_.DatabaseNow();
  ASSERT_THAT(now, IsOk());
  EXPECT_EQ(*now, ManualClock::DefaultStart() + milliseconds(1234));
  Result<UpsertResult> upsert = store_.Upsert("a", Schedule("PT0.0005S"));
  ASSERT_THAT(upsert, IsOk());
  EXPECT_EQ(upsert->next_run_start_at, *now);
  ASSERT_THAT(store_.Claim("a", "t", milliseconds(1500), minutes(1)), IsOk());
  EXPECT_EQ(store_.States()->at(0).current_run_expires_at, *now + milliseconds(1500));
}

TEST_F(MemoryTaskStoreTest, ListenersOfEveryStoreOnTheTableHearEveryWriteSynchronously) {
  MemoryTaskStore other("plugin-a", clock_, store_.table());
  std::vector<StoreEvent> mine;
  std::vector<StoreEvent> theirs;
  auto mine_sub = store_.Listen([&](const StoreEvent& e) { mine.push_back(e); });
  auto theirs_sub = other.Listen([&](const StoreEvent& e) { theirs.push_back(e); });
  ASSERT_NE(mine_sub, nullptr);

  ASSERT_THAT(store_.Upsert("a", Schedule("PT10M")), IsOk());
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(theirs[0].kind, StoreEvent::Kind::kUpsert);
  EXPECT_EQ(theirs[0].task_id, "a");
  EXPECT_EQ(mine.size(), 1u);

  // Neither a claim, a lost release, a failed trigger nor a missing delete announces anything.
  ASSERT_TRUE(store_.Claim("a", "t", minutes(1), minutes(1))->claimed);
  ASSERT_FALSE(*store_.Release("a", "other", Schedule("PT10M"), std::nullopt));
  ASSERT_THAT(store_.Trigger("a"), Not(IsOk()));
  ASSERT_THAT(store_.Delete("missing"), IsOk());
  EXPECT_EQ(theirs.size(), 1u);

  ASSERT_TRUE(*store_.Release("a", "t", Schedule("PT10M"), std::nullopt));
  ASSERT_EQ(theirs.size(), 2u);
  EXPECT_EQ(theirs[1].kind, StoreEvent::Kind::kRelease);
}

TEST_F(MemoryTaskStoreTest, HandlerMayWriteToTheStore) {
  ASSERT_THAT(store_.Upsert("a", Schedule("PT10M")), IsOk());
  ASSERT_THAT(store_.Upsert("b", Schedule("manual")), IsOk());
  std::vector<StoreEvent> events;
  auto sub = store_.Listen([&](const StoreEvent& e) {
    events.push_back(e);
    if (e.kind == StoreEvent::Kind::kTrigger && e.task_id == "a") {
      EXPECT_THAT(store_.Trigger("b"), IsOk());
    }
  });
  ASSERT_THAT(store_.Trigger("a"), IsOk());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].task_id, "b");
}

TEST_F(MemoryTaskStoreTest, NoDeliveryAfterTheSubscriptionIsDestroyed) {
  ASSERT_THAT(store_.Upsert("a", Schedule("manual")), IsOk());
  std::atomic<bool> stop{false};
  std::atomic<int> late_calls{0};
  std::atomic<int> calls{0};
  MemoryTaskStore writer("plugin-a", clock_, store_.table());
  std::jthread writing([&] {
    while (!stop) {
      EXPECT_THAT(writer.Trigger("a"), IsOk());
      std::this_thread::yield();
    }
  });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int i = 0; i < 1000; ++i) {
    auto alive = std::make_shared<std::atomic<bool>>(true);
    auto heard = std::make_shared<std::atomic<bool>>(false);
    auto sub = store_.Listen([&calls, &late_calls, alive, heard](const StoreEvent&) {
      ++calls;
      if (!*alive) ++late_calls;
      *heard = true;
      // Stay inside the handler for a while: the destructor must wait for it.
      for (int spin = 0; spin < 3; ++spin) std::this_thread::yield();
      if (!*alive) ++late_calls;
    });
    // Destroy the subscription while the writer is delivering to it.
    while (!*heard && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    sub.reset();
    *alive = false;
  }
  stop = true;
  writing.join();
  EXPECT_EQ(late_calls, 0);
  EXPECT_GE(calls, 1000);
}

}  // namespace
}  // namespace stagehand::testing
