// The TaskStore contract: every operation of the TaskStore interface, checked through the
// StoreFixture seam so that the memory, SQLite and PostgreSQL stores are held to the same
// behaviour. It covers the database-related cases of Backstage's TaskWorker.test.ts and
// PluginTaskSchedulerJanitor.test.ts (spec §15) and the stagehand additions (leases, batched
// polls, notifications).
//
// Time: the database clock is only moved with LetTimePass, which sleeps for real on the SQL
// stores, so the waits here are short. Expected times are bracketed by DatabaseNow() before and
// after the operation, widened by the fixture's time resolution.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "contract/contract_test.h"
#include "contract/store_fixture.h"
#include "stagehand/model/task_state.h"
#include "stagehand/service/task_row_state.h"
#include "stagehand/store/task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/cron.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::contract {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

// Returns the first fire time of `expression` strictly after `after`, in UTC.
WallTime CronNext(const std::string& expression, WallTime after) {
  Result<CronExpression> cron = CronExpression::Parse(expression);
  if (!cron.ok()) {
    ADD_FAILURE() << cron.status().ToString();
    return after;
  }
  Result<WallTime> next = cron->NextAfter(after, TimeZone::Utc());
  if (!next.ok()) {
    ADD_FAILURE() << next.status().ToString();
    return after;
  }
  return *next;
}

WallTime WholeSeconds(WallTime t) { return std::chrono::floor<seconds>(t); }

// Returns whether each release of a batch found its ticket holding the row.
std::vector<bool> ReleasedFlags(const std::vector<ReleaseResult>& results) {
  std::vector<bool> flags;
  flags.reserve(results.size());
  for (const ReleaseResult& result : results) flags.push_back(result.released);
  return flags;
}

TaskRow RawRow(std::string id, std::string settings_json) {
  TaskRow row;
  row.id = std::move(id);
  row.settings_json = std::move(settings_json);
  return row;
}

class TaskStoreContractTest : public ContractTest {};

// --- Schema and clock ------------------------------------------------------------------------

TEST_F(TaskStoreContractTest, MigrateIsIdempotent) {
  EXPECT_THAT(store_->Migrate(), IsOk());
  EXPECT_THAT(store_->Migrate(), IsOk());
  std::unique_ptr<TaskStore> other = fixture_->OpenStore();
  EXPECT_THAT(other->Migrate(), IsOk());
  ASSERT_TRUE(Upsert("after-migrate", Schedule("PT10M")).has_value());
  EXPECT_THAT(store_->Migrate(), IsOk());
  EXPECT_TRUE(fixture_->GetRawRow("after-migrate").has_value());
}

TEST_F(TaskStoreContractTest, DatabaseNowFollowsTheClock) {
  const WallTime first = Now();
  const WallTime host = fixture_->clock().Now();
  EXPECT_LT(std::chrono::abs(first - host), seconds(2)) << Show(first) << " vs " << Show(host);
  fixture_->LetTimePass(milliseconds(20));
  EXPECT_TRUE(Within(Now(), first + milliseconds(20), first + seconds(5)));
}

TEST_F(TaskStoreContractTest, StatesAreOrderedById) {
  Upsert("b", Schedule("PT10M"));
  Upsert("c", Schedule("manual"));
  Upsert("a", Schedule("0 * * * *"));
  fixture_->PutRawRow(
      RawRow("0-raw", R"({"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"})"));
  Result<std::vector<TaskRow>> states = store_->States();
  ASSERT_THAT(states, IsOk());
  std::vector<std::string> ids;
  for (const TaskRow& row : *states) {
    ids.push_back(row.id);
    EXPECT_EQ(row, Row(row.id)) << row.id;
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"0-raw", "a", "b", "c"}));
}

TEST_F(TaskStoreContractTest, StatesOfAnEmptyTableIsEmpty) {
  Result<std::vector<TaskRow>> states = store_->States();
  ASSERT_THAT(states, IsOk());
  EXPECT_TRUE(states->empty());
}

// --- TaskWorker.test.ts: goes through the expected states -----------------------------------

TEST_F(TaskStoreContractTest, GoesThroughTheExpectedStates) {
  const TimeZone utc = TimeZone::Utc();
  const TaskSchedule schedule = Schedule("* * * * * *", "PT0.3S", "PT1M");

  WallTime before = Now();
  Result<UpsertResult> upsert = store_->Upsert("states", schedule);
  WallTime after = Now();
  ASSERT_THAT(upsert, IsOk());
  TaskRow row = Row("states");
  EXPECT_EQ(row.id, "states");
  EXPECT_EQ(row.settings_json,
            R"({"version":2,"cadence":"* * * * * *","initialDelayDuration":"PT0.3S",)"
            R"("timeoutAfterDuration":"PT1M"})");
  EXPECT_TRUE(Within(row.next_run_start_at, before + milliseconds(300), after + milliseconds(300)));
  EXPECT_FALSE(row.current_run_ticket.has_value());
  EXPECT_FALSE(row.current_run_started_at.has_value());
  EXPECT_FALSE(row.current_run_expires_at.has_value());
  EXPECT_FALSE(row.last_run_error_json.has_value());
  EXPECT_FALSE(row.last_run_ended_at.has_value());
  EXPECT_EQ(upsert->next_run_start_at, row.next_run_start_at);
  EXPECT_TRUE(Within(upsert->db_now, before, after));

  Result<std::vector<TaskRow>> states = store_->States();
  ASSERT_THAT(states, IsOk());
  ASSERT_EQ(states->size(), 1u);
  EXPECT_EQ((*states)[0], row);
  TaskState idle;
  idle.status = TaskState::Status::kIdle;
  idle.starts_at = FormatIsoInstant(*row.next_run_start_at, utc);
  EXPECT_EQ(ToTaskState((*states)[0], utc), idle);

  // The initial delay holds the first run back (checked only while it has not yet passed, so a
  // slow machine cannot make this flaky).
  PollResult early = Poll({"states"});
  ASSERT_EQ(early.entries.size(), 1u);
  EXPECT_EQ(early.entries[0].readiness,
            early.db_now >= *row.next_run_start_at ? Readiness::kReady : Readiness::kNotReady);
  Result<ClaimResult> early_claim = store_->Claim("states", "too-early", minutes(1), minutes(1));
  ASSERT_THAT(early_claim, IsOk());
  EXPECT_EQ(early_claim->claimed, early_claim->db_now >= *row.next_run_start_at);
  if (early_claim->claimed) {
    ASSERT_TRUE(Release("states", "too-early", schedule));
    ASSERT_THAT(store_->Trigger("states"), IsOk());
    row = Row("states");
  }

  LetStoredTimePass(milliseconds(350));
  EXPECT_EQ(ReadinessOf("states"), Readiness::kReady);

  before = Now();
  Result<ClaimResult> claim = store_->Claim("states", "ticket-1", minutes(1), minutes(1));
  after = Now();
  ASSERT_THAT(claim, IsOk());
  ASSERT_TRUE(claim->claimed);
  TaskRow running = Row("states");
  EXPECT_EQ(running.current_run_ticket, "ticket-1");
  EXPECT_TRUE(Within(running.current_run_started_at, before, after));
  EXPECT_TRUE(Within(claim->db_now, before, after));
  ASSERT_TRUE(running.current_run_started_at.has_value());
  EXPECT_TRUE(Same(running.current_run_expires_at, *running.current_run_started_at + minutes(1)));
  ASSERT_TRUE(running.current_run_expires_at.has_value());
  EXPECT_TRUE(Same(claim->expires_at, *running.current_run_expires_at));
  EXPECT_EQ(running.next_run_start_at, row.next_run_start_at);  // the claim leaves it alone
  EXPECT_EQ(ReadinessOf("states"), Readiness::kNotReady);

  states = store_->States();
  ASSERT_THAT(states, IsOk());
  ASSERT_EQ(states->size(), 1u);
  TaskState running_state;
  running_state.status = TaskState::Status::kRunning;
  running_state.started_at = FormatIsoInstant(*running.current_run_started_at, utc);
  running_state.times_out_at = FormatIsoInstant(*running.current_run_expires_at, utc);
  if (running.last_run_ended_at) {  // the early claim succeeded on a slow machine, and ended
    running_state.last_run_ended_at = FormatIsoInstant(*running.last_run_ended_at, utc);
  }
  running_state.last_run_error = running.last_run_error_json;
  EXPECT_EQ(ToTaskState((*states)[0], utc), running_state);

  before = Now();
  EXPECT_TRUE(Release("states", "ticket-1", schedule));
  after = Now();
  TaskRow released = Row("states");
  EXPECT_FALSE(released.current_run_ticket.has_value());
  EXPECT_FALSE(released.current_run_started_at.has_value());
  EXPECT_FALSE(released.current_run_expires_at.has_value());
  EXPECT_FALSE(released.last_run_error_json.has_value());
  EXPECT_TRUE(Within(released.last_run_ended_at, before, after));
  EXPECT_TRUE(Within(released.next_run_start_at, CronNext("* * * * * *", before),
                     CronNext("* * * * * *", after)));

  states = store_->States();
  ASSERT_THAT(states, IsOk());
  ASSERT_EQ(states->size(), 1u);
  TaskState idle_again;
  idle_again.status = TaskState::Status::kIdle;
  idle_again.starts_at = FormatIsoInstant(*released.next_run_start_at, utc);
  idle_again.last_run_ended_at = FormatIsoInstant(*released.last_run_ended_at, utc);
  EXPECT_EQ(ToTaskState((*states)[0], utc), idle_again);
}

TEST_F(TaskStoreContractTest, FailedRunRecordsTheErrorAndASuccessClearsIt) {
  const TimeZone utc = TimeZone::Utc();
  const TaskSchedule schedule = Schedule("PT10M");
  Upsert("fails", schedule);
  ASSERT_TRUE(Claim("fails", "t1"));
  const std::string error = ErrorJson("failed");
  WallTime before = Now();
  ASSERT_TRUE(Release("fails", "t1", schedule, error));
  WallTime after = Now();
  TaskRow row = Row("fails");
  EXPECT_EQ(row.last_run_error_json, error);
  EXPECT_TRUE(Within(row.last_run_ended_at, before, after));

  Result<std::vector<TaskRow>> states = store_->States();
  ASSERT_THAT(states, IsOk());
  ASSERT_EQ(states->size(), 1u);
  const TaskState state = ToTaskState((*states)[0], utc);
  EXPECT_EQ(state.status, TaskState::Status::kIdle);
  EXPECT_EQ(state.last_run_error, error);
  EXPECT_NE(state.ToJson().find(R"("lastRunError":"{\"name\":\"Error\",\"message\":\"failed\"}")"),
            std::string::npos)
      << state.ToJson();

  ASSERT_THAT(store_->Trigger("fails"), IsOk());
  ASSERT_TRUE(Claim("fails", "t2"));
  fixture_->LetTimePass(milliseconds(5));
  before = Now();
  ASSERT_TRUE(Release("fails", "t2", schedule));
  after = Now();
  row = Row("fails");
  EXPECT_FALSE(row.last_run_error_json.has_value());
  EXPECT_TRUE(Within(row.last_run_ended_at, before, after));
}

// --- TaskWorker.test.ts: tickets and rows that go away --------------------------------------

TEST_F(TaskStoreContractTest, DoesNotClobberATicketLockWhenStolen) {
  const TaskSchedule schedule = Schedule("PT10M");
  Upsert("stolen", schedule);
  ASSERT_TRUE(Claim("stolen", "mine"));

  const WallTime base = WholeSeconds(Now());
  TaskRow stolen = Row("stolen");
  stolen.current_run_ticket = "theirs";
  stolen.current_run_started_at = base - seconds(1);
  stolen.current_run_expires_at = base + minutes(5);
  fixture_->PutRawRow(stolen);

  Result<bool> released = store_->Release("stolen", "mine", schedule, std::nullopt);
  ASSERT_THAT(released, IsOk());
  EXPECT_FALSE(*released);
  Result<LeaseStatus> renewed = store_->RenewLease("stolen", "mine", minutes(1), minutes(1));
  ASSERT_THAT(renewed, IsOk());
  EXPECT_EQ(*renewed, LeaseStatus::kLost);
  EXPECT_EQ(Row("stolen"), stolen);
}

TEST_F(TaskStoreContractTest, GracefullyHandlesADisappearedRow) {
  const TaskSchedule schedule = Schedule("PT10M");
  Upsert("gone", schedule);
  ASSERT_THAT(store_->Delete("gone"), IsOk());
  EXPECT_FALSE(Claim("gone", "t1"));
  EXPECT_FALSE(fixture_->GetRawRow("gone").has_value());

  Upsert("gone", schedule);
  ASSERT_TRUE(Claim("gone", "t2"));
  ASSERT_THAT(store_->Delete("gone"), IsOk());
  Result<bool> released = store_->Release("gone", "t2", schedule, std::nullopt);
  ASSERT_THAT(released, IsOk());
  EXPECT_FALSE(*released);
  Result<LeaseStatus> renewed = store_->RenewLease("gone", "t2", minutes(1), minutes(1));
  ASSERT_THAT(renewed, IsOk());
  EXPECT_EQ(*renewed, LeaseStatus::kLost);
  EXPECT_FALSE(fixture_->GetRawRow("gone").has_value());
  EXPECT_EQ(ReadinessOf("gone"), Readiness::kMissing);
}

TEST_F(TaskStoreContractTest, DeleteRemovesOnlyThatRowAndToleratesMissingRows) {
  Upsert("keep", Schedule("PT10M"));
  Upsert("drop", Schedule("PT10M"));
  ASSERT_THAT(store_->Delete("drop"), IsOk());
  EXPECT_FALSE(fixture_->GetRawRow("drop").has_value());
  EXPECT_TRUE(fixture_->GetRawRow("keep").has_value());
  EXPECT_THAT(store_->Delete("drop"), IsOk());
  EXPECT_THAT(store_->Delete("never-existed"), IsOk());
}

// --- TaskWorker.test.ts: next_run_start_at is always the min between schedule changes -------

TEST_F(TaskStoreContractTest, CronChangesNeverMoveTheNextRunLater) {
  WallTime before = Now();
  Upsert("cron", Schedule("*/15 * * * *", "PT2M"));
  WallTime after = Now();
  const std::optional<WallTime> delayed = Row("cron").next_run_start_at;
  ASSERT_TRUE(Within(delayed, before + minutes(2), after + minutes(2)));

  before = Now();
  Result<UpsertResult> faster = store_->Upsert("cron", Schedule("*/2 * * * *"));
  after = Now();
  ASSERT_THAT(faster, IsOk());
  const std::optional<WallTime> every_two = Row("cron").next_run_start_at;
  EXPECT_TRUE(Within(every_two, CronNext("*/2 * * * *", before), CronNext("*/2 * * * *", after)));
  EXPECT_LT(every_two, delayed);
  EXPECT_EQ(faster->next_run_start_at, every_two);
  EXPECT_EQ(Row("cron").settings_json,
            R"({"version":2,"cadence":"*/2 * * * *","timeoutAfterDuration":"PT1M"})");

  fixture_->LetTimePass(milliseconds(10));
  before = Now();
  Upsert("cron", Schedule("*/15 * * * *"));
  const std::optional<WallTime> back = Row("cron").next_run_start_at;
  ASSERT_TRUE(back.has_value());
  ASSERT_TRUE(every_two.has_value());
  EXPECT_LE(*back, *every_two) << Show(back) << " moved later than " << Show(every_two);
  EXPECT_GE(*back, std::min(*every_two, CronNext("*/15 * * * *", before))) << Show(back);
}

TEST_F(TaskStoreContractTest, DurationChangesNeverMoveTheNextRunLater) {
  const TaskSchedule slow = Schedule("PT120M");
  Upsert("duration", slow);
  const std::optional<WallTime> scheduled = Row("duration").next_run_start_at;
  ASSERT_TRUE(scheduled.has_value());
  ASSERT_TRUE(Claim("duration", "t1"));
  ASSERT_TRUE(Release("duration", "t1", slow));
  EXPECT_TRUE(Same(Row("duration").next_run_start_at, *scheduled + minutes(120)));

  const WallTime before = Now();
  Upsert("duration", Schedule("PT60M"));
  const WallTime after = Now();
  const std::optional<WallTime> sooner = Row("duration").next_run_start_at;
  EXPECT_TRUE(Within(sooner, before + minutes(60), after + minutes(60)));

  fixture_->LetTimePass(milliseconds(10));
  Upsert("duration", Schedule("PT60M"));
  EXPECT_EQ(Row("duration").next_run_start_at, sooner);
  Upsert("duration", slow);
  EXPECT_EQ(Row("duration").next_run_start_at, sooner);
}

TEST_F(TaskStoreContractTest, DurationChangesNeverMoveTheNextRunLaterWithInitialDelay) {
  const TaskSchedule slow = Schedule("PT120M", "PT0.2S");
  WallTime before = Now();
  Upsert("delayed", slow);
  WallTime after = Now();
  const std::optional<WallTime> first = Row("delayed").next_run_start_at;
  ASSERT_TRUE(Within(first, before + milliseconds(200), after + milliseconds(200)));

  LetStoredTimePass(milliseconds(250));
  ASSERT_TRUE(Claim("delayed", "t1"));
  ASSERT_TRUE(Release("delayed", "t1", slow));
  // Anchored on the delayed start, not on the end of the run.
  EXPECT_TRUE(Same(Row("delayed").next_run_start_at, *first + minutes(120)));

  // The initial delay plays no part when the row exists.
  before = Now();
  Upsert("delayed", Schedule("PT60M", "PT0.2S"));
  after = Now();
  EXPECT_TRUE(Within(Row("delayed").next_run_start_at, before + minutes(60), after + minutes(60)));
}

// --- TaskWorker.test.ts: manual tasks and transitions ---------------------------------------

TEST_F(TaskStoreContractTest, ManualTaskNeverGetsANextRun) {
  const TaskSchedule manual = Schedule("manual");
  Result<UpsertResult> upsert = store_->Upsert("manual", manual);
  ASSERT_THAT(upsert, IsOk());
  EXPECT_FALSE(upsert->next_run_start_at.has_value());
  EXPECT_FALSE(Row("manual").next_run_start_at.has_value());
  EXPECT_EQ(Row("manual").settings_json,
            R"({"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"})");

  PollResult poll = Poll({"manual"});
  ASSERT_EQ(poll.entries.size(), 1u);
  EXPECT_EQ(poll.entries[0].readiness, Readiness::kNotReady);
  ASSERT_TRUE(poll.entries[0].settings.has_value());
  EXPECT_TRUE(poll.entries[0].settings->cadence.is_manual());
  EXPECT_FALSE(poll.entries[0].next_run_start_at.has_value());
  EXPECT_FALSE(poll.earliest_next.has_value());
  EXPECT_FALSE(Claim("manual", "not-due"));

  ASSERT_THAT(store_->Trigger("manual"), IsOk());
  EXPECT_EQ(ReadinessOf("manual"), Readiness::kReady);
  ASSERT_TRUE(Claim("manual", "t1"));
  ASSERT_TRUE(Release("manual", "t1", manual));
  TaskRow row = Row("manual");
  EXPECT_FALSE(row.next_run_start_at.has_value());
  EXPECT_TRUE(row.last_run_ended_at.has_value());

  Upsert("manual", manual);
  EXPECT_FALSE(Row("manual").next_run_start_at.has_value());
}

TEST_F(TaskStoreContractTest, FreshManualTaskWithInitialDelayStartsAfterTheDelay) {
  const WallTime before = Now();
  Upsert("manual-delayed", Schedule("manual", "PT10M"));
  const WallTime after = Now();
  EXPECT_TRUE(
      Within(Row("manual-delayed").next_run_start_at, before + minutes(10), after + minutes(10)));
}

TEST_F(TaskStoreContractTest, ManualToDurationPopulatesTheNextRun) {
  Upsert("m2d", Schedule("manual"));
  ASSERT_FALSE(Row("m2d").next_run_start_at.has_value());
  const WallTime before = Now();
  Upsert("m2d", Schedule("PT4H"));
  const WallTime after = Now();
  EXPECT_TRUE(Within(Row("m2d").next_run_start_at, before + hours(4), after + hours(4)));
}

TEST_F(TaskStoreContractTest, ManualToCronPopulatesTheNextRun) {
  Upsert("m2c", Schedule("manual"));
  ASSERT_FALSE(Row("m2c").next_run_start_at.has_value());
  const WallTime before = Now();
  Upsert("m2c", Schedule("0 * * * *"));
  const WallTime after = Now();
  EXPECT_TRUE(Within(Row("m2c").next_run_start_at, CronNext("0 * * * *", before),
                     CronNext("0 * * * *", after)));
}

TEST_F(TaskStoreContractTest, CadenceToManualKeepsThePendingRun) {
  Upsert("d2m", Schedule("PT10M"));
  const std::optional<WallTime> pending = Row("d2m").next_run_start_at;
  ASSERT_TRUE(pending.has_value());
  Result<UpsertResult> upsert = store_->Upsert("d2m", Schedule("manual"));
  ASSERT_THAT(upsert, IsOk());
  EXPECT_EQ(upsert->next_run_start_at, pending);
  EXPECT_EQ(Row("d2m").next_run_start_at, pending);
  EXPECT_EQ(Row("d2m").settings_json,
            R"({"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"})");
  // It still runs once more; its release then leaves it without a next run.
  ASSERT_TRUE(Claim("d2m", "t1"));
  ASSERT_TRUE(Release("d2m", "t1", Schedule("manual")));
  EXPECT_FALSE(Row("d2m").next_run_start_at.has_value());

  Upsert("c2m", Schedule("0 * * * *"));
  const std::optional<WallTime> cron_pending = Row("c2m").next_run_start_at;
  ASSERT_TRUE(cron_pending.has_value());
  Upsert("c2m", Schedule("manual"));
  EXPECT_EQ(Row("c2m").next_run_start_at, cron_pending);
}

// --- Registration -----------------------------------------------------------------------------

TEST_F(TaskStoreContractTest, NewDurationTaskIsDueAtOnceAndCronTaskAtItsFirstFireTime) {
  WallTime before = Now();
  Upsert("new-duration", Schedule("PT1H"));
  WallTime after = Now();
  EXPECT_TRUE(Within(Row("new-duration").next_run_start_at, before, after));
  EXPECT_EQ(ReadinessOf("new-duration"), Readiness::kReady);

  before = Now();
  Upsert("new-cron", Schedule("0 0 * * * *"));
  after = Now();
  EXPECT_TRUE(Within(Row("new-cron").next_run_start_at, CronNext("0 0 * * * *", before),
                     CronNext("0 0 * * * *", after)));

  // Every second: due at the next second, not at once (Backstage's one-second head start made the
  // slot already begun due again; see docs/backstage-differences.md).
  before = Now();
  Upsert("every-second", Schedule("* * * * * *"));
  after = Now();
  EXPECT_TRUE(Within(Row("every-second").next_run_start_at, CronNext("* * * * * *", before),
                     CronNext("* * * * * *", after)));
  EXPECT_EQ(ReadinessOf("every-second"), Readiness::kNotReady);
}

TEST_F(TaskStoreContractTest, UpsertRewritesTheSettings) {
  Upsert("rewrite", Schedule("PT10M"));
  Upsert("rewrite", Schedule("PT5M", "PT30S", "PT2M"));
  EXPECT_EQ(Row("rewrite").settings_json,
            R"({"version":2,"cadence":"PT5M","initialDelayDuration":"PT30S",)"
            R"("timeoutAfterDuration":"PT2M"})");
}

TEST_F(TaskStoreContractTest, UpsertRejectsInvalidSettingsWithoutWriting) {
  // A cadence that does not parse cannot be a Cadence at all; the durations are texts to check.
  for (const TaskSchedule& bad :
       {Schedule("PT10M", std::nullopt, "1 min"), Schedule("PT10M", "soon"),
        Schedule("0 * * * *", std::nullopt, "PT1m")}) {
    Result<UpsertResult> result = store_->Upsert("bad", bad);
    ASSERT_THAT(result, StatusIs(StatusCode::kInvalidArgument)) << bad.settings.ToJson();
  }
  EXPECT_FALSE(fixture_->GetRawRow("bad").has_value());
}

// --- Claim and leases -------------------------------------------------------------------------

TEST_F(TaskStoreContractTest, ClaimNeedsADueUnclaimedRow) {
  Upsert("future", Schedule("PT10M", "PT1H"));
  EXPECT_FALSE(Claim("future", "t1"));
  EXPECT_FALSE(Row("future").current_run_ticket.has_value());

  Upsert("due", Schedule("PT10M"));
  ASSERT_TRUE(Claim("due", "first"));
  EXPECT_FALSE(Claim("due", "second"));
  EXPECT_EQ(Row("due").current_run_ticket, "first");

  EXPECT_FALSE(Claim("missing", "t1"));
  EXPECT_FALSE(fixture_->GetRawRow("missing").has_value());
}

TEST_F(TaskStoreContractTest, ClaimExpiresAfterTheShorterOfLeaseAndTimeout) {
  Upsert("lease", Schedule("PT10M"));
  Result<ClaimResult> short_lease = store_->Claim("lease", "t1", minutes(1), seconds(5));
  ASSERT_THAT(short_lease, IsOk());
  ASSERT_TRUE(short_lease->claimed);
  TaskRow row = Row("lease");
  ASSERT_TRUE(row.current_run_started_at.has_value());
  EXPECT_TRUE(Same(row.current_run_expires_at, *row.current_run_started_at + seconds(5)));
  EXPECT_TRUE(Same(short_lease->expires_at, *row.current_run_started_at + seconds(5)));

  Upsert("timeout", Schedule("PT10M"));
  Result<ClaimResult> short_timeout = store_->Claim("timeout", "t2", seconds(3), minutes(1));
  ASSERT_THAT(short_timeout, IsOk());
  ASSERT_TRUE(short_timeout->claimed);
  row = Row("timeout");
  ASSERT_TRUE(row.current_run_started_at.has_value());
  EXPECT_TRUE(Same(row.current_run_expires_at, *row.current_run_started_at + seconds(3)));
}

TEST_F(TaskStoreContractTest, RenewLeaseExtendsButNeverBeyondTheTimeout) {
  Upsert("renew", Schedule("PT10M"));
  Result<ClaimResult> claim = store_->Claim("renew", "t1", seconds(2), milliseconds(100));
  ASSERT_THAT(claim, IsOk());
  ASSERT_TRUE(claim->claimed);
  const TaskRow claimed = Row("renew");
  ASSERT_TRUE(claimed.current_run_started_at.has_value());
  const WallTime started = *claimed.current_run_started_at;
  // From the claim's own time: a store of a coarser resolution rounds the start down and the
  // expiry up.
  EXPECT_TRUE(Same(claimed.current_run_expires_at, claim->db_now + milliseconds(100)));

  fixture_->LetTimePass(milliseconds(20));
  WallTime before = Now();
  Result<LeaseStatus> renewed = store_->RenewLease("renew", "t1", seconds(2), milliseconds(500));
  WallTime after = Now();
  ASSERT_THAT(renewed, IsOk());
  EXPECT_EQ(*renewed, LeaseStatus::kHeld);
  TaskRow row = Row("renew");
  EXPECT_TRUE(
      Within(row.current_run_expires_at, before + milliseconds(500), after + milliseconds(500)));
  EXPECT_EQ(row.current_run_ticket, "t1");
  EXPECT_EQ(row.current_run_started_at, claimed.current_run_started_at);

  renewed = store_->RenewLease("renew", "t1", seconds(2), hours(1));
  ASSERT_THAT(renewed, IsOk());
  EXPECT_EQ(*renewed, LeaseStatus::kHeld);
  EXPECT_TRUE(Same(Row("renew").current_run_expires_at, started + seconds(2)));

  const TaskRow before_wrong = Row("renew");
  renewed = store_->RenewLease("renew", "not-mine", seconds(2), hours(1));
  ASSERT_THAT(renewed, IsOk());
  EXPECT_EQ(*renewed, LeaseStatus::kLost);
  EXPECT_EQ(Row("renew"), before_wrong);

  // A cancel keeps the row held: the owner still renews it, and learns of the cancel.
  ASSERT_THAT(store_->Cancel("renew", minutes(1)), IsOk());
  before = Now();
  renewed = store_->RenewLease("renew", "t1", hours(1), milliseconds(500));
  after = Now();
  ASSERT_THAT(renewed, IsOk());
  EXPECT_EQ(*renewed, LeaseStatus::kCancelRequested);
  row = Row("renew");
  EXPECT_EQ(row.current_run_ticket, CancelRequestedTicket("t1"));
  EXPECT_TRUE(
      Within(row.current_run_expires_at, before + milliseconds(500), after + milliseconds(500)));
  renewed = store_->RenewLease("renew", "t2", hours(1), milliseconds(500));
  ASSERT_THAT(renewed, IsOk());
  EXPECT_EQ(*renewed, LeaseStatus::kLost);
}

// --- Release ----------------------------------------------------------------------------------

TEST_F(TaskStoreContractTest, ReleaseOfAnOnTimeDurationRunKeepsThePhase) {
  const TaskSchedule schedule = Schedule("PT10M");
  Upsert("on-time", schedule);
  const std::optional<WallTime> scheduled = Row("on-time").next_run_start_at;
  ASSERT_TRUE(scheduled.has_value());
  fixture_->LetTimePass(milliseconds(30));
  ASSERT_TRUE(Claim("on-time", "t1"));
  fixture_->LetTimePass(milliseconds(20));
  ASSERT_TRUE(Release("on-time", "t1", schedule));
  EXPECT_TRUE(Same(Row("on-time").next_run_start_at, *scheduled + minutes(10)));
  EXPECT_EQ(ReadinessOf("on-time"), Readiness::kNotReady);
}

TEST_F(TaskStoreContractTest, AReleaseThatRetriesStartsTheTaskAfterTheDelayNotAtItsSlot) {
  const TaskSchedule schedule = Schedule("* * * * *");
  Upsert("retried", schedule);
  ASSERT_THAT(store_->Trigger("retried"), IsOk());
  ASSERT_TRUE(Claim("retried", "t1"));
  ReleaseRequest release{"retried", "t1", schedule, ErrorJson("boom")};
  release.next_in = milliseconds(1500);
  const WallTime before = Now();
  Result<std::vector<ReleaseResult>> released = store_->ReleaseMany({&release, 1});
  const WallTime after = Now();
  ASSERT_THAT(released, IsOk());
  ASSERT_TRUE((*released)[0].released);
  const TaskRow row = Row("retried");
  EXPECT_TRUE(
      Within(row.next_run_start_at, before + milliseconds(1500), after + milliseconds(1500)));
  EXPECT_EQ((*released)[0].next_run_start_at, row.next_run_start_at);
  EXPECT_EQ(row.last_run_error_json, ErrorJson("boom"));
  Result<std::optional<RunError>> error = store_->LastRunError("retried");
  ASSERT_THAT(error, IsOk());
  ASSERT_TRUE(error->has_value());
  EXPECT_EQ((*error)->Encode(), ErrorJson("boom"));
  error = store_->LastRunError("nope");
  ASSERT_THAT(error, IsOk());
  EXPECT_FALSE(error->has_value());
}

TEST_F(TaskStoreContractTest, ReleaseOfALateDurationRunIsDueImmediately) {
  const TaskSchedule schedule = Schedule("PT0.1S");
  Upsert("late", schedule);
  ASSERT_TRUE(Claim("late", "t1"));
  fixture_->LetTimePass(milliseconds(150));
  const WallTime before = Now();
  ASSERT_TRUE(Release("late", "t1", schedule));
  const WallTime after = Now();
  EXPECT_TRUE(Within(Row("late").next_run_start_at, before, after));
  EXPECT_EQ(ReadinessOf("late"), Readiness::kReady);
}

TEST_F(TaskStoreContractTest, ReleaseOfACronRunMovesToTheNextFireTimeAfterNow) {
  const TaskSchedule every_second = Schedule("* * * * * *");
  Upsert("cron-release", every_second);
  ASSERT_THAT(store_->Trigger("cron-release"), IsOk());
  ASSERT_TRUE(Claim("cron-release", "t1"));
  WallTime before = Now();
  ASSERT_TRUE(Release("cron-release", "t1", every_second));
  WallTime after = Now();
  const std::optional<WallTime> next = Row("cron-release").next_run_start_at;
  EXPECT_TRUE(Within(next, CronNext("* * * * * *", before), CronNext("* * * * * *", after)));
  ASSERT_TRUE(next.has_value());
  EXPECT_GT(*next, before);

  // The release uses the settings the worker ran with (they may be newer than the row's).
  const TaskSchedule hourly = Schedule("0 0 * * * *");
  ASSERT_THAT(store_->Trigger("cron-release"), IsOk());
  ASSERT_TRUE(Claim("cron-release", "t2"));
  before = Now();
  ASSERT_TRUE(Release("cron-release", "t2", hourly));
  after = Now();
  EXPECT_TRUE(Within(Row("cron-release").next_run_start_at, CronNext("0 0 * * * *", before),
                     CronNext("0 0 * * * *", after)));
}

// --- Skipping a missed slot (ADR 0014) ---------------------------------------------------------

TEST_F(TaskStoreContractTest, SkipSlotMovesAMissedDurationSlotToTheNextPointOfItsGrid) {
  const TaskSchedule schedule = Schedule("PT0.1S");
  Upsert("skip", schedule);
  fixture_->LetTimePass(milliseconds(250));  // two and a half cadences missed
  const PollEntry entry = Poll({"skip"}).entries.at(0);
  ASSERT_EQ(entry.readiness, Readiness::kReady);
  const WallTime slot = *entry.next_run_start_at;
  const TaskRow before_row = Row("skip");
  Result<SkipResult> skipped = store_->SkipSlot("skip", entry.version, slot, schedule);
  ASSERT_THAT(skipped, IsOk());
  ASSERT_TRUE(skipped->skipped);
  const TaskRow row = Row("skip");
  ASSERT_TRUE(row.next_run_start_at.has_value());
  EXPECT_EQ(row.next_run_start_at, skipped->next_run_start_at);
  EXPECT_GT(*row.next_run_start_at, skipped->db_now);
  EXPECT_LE(
      *row.next_run_start_at,
      skipped->db_now + std::max<milliseconds>(milliseconds(100), fixture_->time_resolution()));
  // On the slot's grid: a whole number of cadences after it.
  EXPECT_EQ((*row.next_run_start_at - slot) % milliseconds(100), WallTime::duration::zero());
  // Not a run: the last run's end and error are left as they were, and no ticket is written.
  EXPECT_EQ(row.last_run_ended_at, before_row.last_run_ended_at);
  EXPECT_EQ(row.last_run_error_json, before_row.last_run_error_json);
  EXPECT_FALSE(row.current_run_ticket.has_value());
  EXPECT_EQ(Poll({"skip"}).entries.at(0).version, skipped->version);

  // The same skip again (another host's, from the same poll) changes nothing.
  Result<SkipResult> again = store_->SkipSlot("skip", entry.version, slot, schedule);
  ASSERT_THAT(again, IsOk());
  EXPECT_FALSE(again->skipped);
  EXPECT_EQ(Row("skip").next_run_start_at, row.next_run_start_at);
}

TEST_F(TaskStoreContractTest, SkipSlotMovesACronSlotToItsNextFireAndLeavesAHeldRowAlone) {
  const TaskSchedule hourly = Schedule("0 0 * * * *");
  Upsert("skip-cron", hourly);
  ASSERT_THAT(store_->Trigger("skip-cron"), IsOk());
  PollEntry entry = Poll({"skip-cron"}).entries.at(0);
  const WallTime before = Now();
  Result<SkipResult> skipped =
      store_->SkipSlot("skip-cron", entry.version, *entry.next_run_start_at, hourly);
  const WallTime after = Now();
  ASSERT_TRUE(skipped.ok() && skipped->skipped);
  EXPECT_TRUE(Within(Row("skip-cron").next_run_start_at, CronNext("0 0 * * * *", before),
                     CronNext("0 0 * * * *", after)));

  // A claimed row is never skipped, nor is a missing one.
  ASSERT_THAT(store_->Trigger("skip-cron"), IsOk());
  entry = Poll({"skip-cron"}).entries.at(0);
  ASSERT_TRUE(Claim("skip-cron", "t1"));
  skipped = store_->SkipSlot("skip-cron", entry.version, *entry.next_run_start_at, hourly);
  ASSERT_THAT(skipped, IsOk());
  EXPECT_FALSE(skipped->skipped);
  EXPECT_EQ(Row("skip-cron").current_run_ticket, "t1");
  skipped = store_->SkipSlot("missing", entry.version, *entry.next_run_start_at, hourly);
  ASSERT_THAT(skipped, IsOk());
  EXPECT_FALSE(skipped->skipped);
}

TEST_F(TaskStoreContractTest, JitteredRegistrationIsNotMovedBackToTheUnjitteredSlot) {
  TaskSchedule jittered = Schedule("0 0 * * * *");
  jittered.jitter_offset = minutes(7);
  const WallTime before = Now();
  Upsert("jitter", jittered);
  const WallTime after = Now();
  const WallTime slot_before = CronNext("0 0 * * * *", before - minutes(7)) + minutes(7);
  const WallTime slot_after = CronNext("0 0 * * * *", after - minutes(7)) + minutes(7);
  EXPECT_TRUE(Within(Row("jitter").next_run_start_at, slot_before, slot_after));
  const std::optional<WallTime> first = Row("jitter").next_run_start_at;
  Upsert("jitter", jittered);  // another host registers the same definition
  EXPECT_EQ(Row("jitter").next_run_start_at, first);
  // Backstage's settings are those of the unjittered definition.
  Upsert("plain", Schedule("0 0 * * * *"));
  EXPECT_EQ(Row("jitter").settings_json, Row("plain").settings_json);
}

// --- Trigger ----------------------------------------------------------------------------------

TEST_F(TaskStoreContractTest, TriggerMakesAnIdleTaskDueNow) {
  Upsert("trigger", Schedule("PT10M", "PT1H"));
  const std::string settings = Row("trigger").settings_json;
  ASSERT_EQ(ReadinessOf("trigger"), Readiness::kNotReady);
  const WallTime before = Now();
  ASSERT_THAT(store_->Trigger("trigger"), IsOk());
  const WallTime after = Now();
  const TaskRow row = Row("trigger");
  EXPECT_TRUE(Within(row.next_run_start_at, before, after));
  EXPECT_EQ(row.settings_json, settings);
  EXPECT_EQ(ReadinessOf("trigger"), Readiness::kReady);
}

TEST_F(TaskStoreContractTest, TriggerOfAMissingTaskIsNotFound) {
  const Status status = store_->Trigger("nope");
  EXPECT_THAT(status, StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(status.message(), "Task nope does not exist");
  EXPECT_FALSE(fixture_->GetRawRow("nope").has_value());
}

TEST_F(TaskStoreContractTest, TriggerOfARunningTaskIsAConflict) {
  Upsert("busy", Schedule("PT10M"));
  ASSERT_TRUE(Claim("busy", "t1"));
  const TaskRow running = Row("busy");
  const Status status = store_->Trigger("busy");
  EXPECT_THAT(status, StatusIs(StatusCode::kConflict));
  EXPECT_EQ(status.message(), "Task busy is currently running");
  EXPECT_EQ(Row("busy"), running);
}

// --- Cancel -----------------------------------------------------------------------------------

TEST_F(TaskStoreContractTest, CancelKeepsTheRowHeldUntilTheOwnerReleases) {
  const TaskSchedule schedule = Schedule("PT10M");
  Upsert("cancel", schedule);
  const std::optional<WallTime> scheduled = Row("cancel").next_run_start_at;
  ASSERT_TRUE(scheduled.has_value());
  ASSERT_TRUE(Claim("cancel", "t1"));
  const TaskRow claimed = Row("cancel");
  const Status status = store_->Cancel("cancel", hours(1));
  ASSERT_THAT(status, IsOk());
  TaskRow row = Row("cancel");
  EXPECT_EQ(row.current_run_ticket, CancelRequestedTicket("t1"));
  EXPECT_EQ(row.current_run_started_at, claimed.current_run_started_at);
  EXPECT_EQ(row.current_run_expires_at, claimed.current_run_expires_at);  // already earlier
  EXPECT_EQ(row.next_run_start_at, scheduled);
  EXPECT_EQ(row.last_run_error_json, std::nullopt);
  EXPECT_EQ(ToTaskState(row, TimeZone::Utc()).status, TaskState::Status::kRunning);

  // Nothing can start another run while the cancelled one is stopping.
  const Status trigger = store_->Trigger("cancel");
  EXPECT_THAT(trigger, StatusIs(StatusCode::kConflict));
  EXPECT_EQ(trigger.message(), "Task cancel is currently running");
  EXPECT_FALSE(Claim("cancel", "t2"));
  EXPECT_NE(ReadinessOf("cancel"), Readiness::kReady);
  // A second cancel is accepted and changes nothing.
  ASSERT_THAT(store_->Cancel("cancel", milliseconds(1)), IsOk());
  EXPECT_EQ(Row("cancel"), row);

  // The owner's release ends the run as Backstage's cancel would have, whatever its outcome.
  const WallTime before = Now();
  Result<bool> released = store_->Release("cancel", "t1", schedule, std::nullopt);
  const WallTime after = Now();
  ASSERT_THAT(released, IsOk());
  EXPECT_TRUE(*released);
  row = Row("cancel");
  EXPECT_FALSE(row.current_run_ticket.has_value());
  EXPECT_FALSE(row.current_run_started_at.has_value());
  EXPECT_FALSE(row.current_run_expires_at.has_value());
  EXPECT_TRUE(Within(row.last_run_ended_at, before, after));
  EXPECT_EQ(row.last_run_error_json, kCancelledJson);
  EXPECT_TRUE(Same(row.next_run_start_at, *scheduled + minutes(10)));
  EXPECT_THAT(store_->Trigger("cancel"), IsOk());
}

TEST_F(TaskStoreContractTest, CancelBringsTheExpiryForwardToTheHold) {
  Upsert("hold", Schedule("PT10M"));
  Result<ClaimResult> claim = store_->Claim("hold", "t1", hours(1), hours(1));
  ASSERT_THAT(claim, IsOk());
  ASSERT_TRUE(claim->claimed);
  const WallTime before = Now();
  ASSERT_THAT(store_->Cancel("hold", milliseconds(300)), IsOk());
  const WallTime after = Now();
  EXPECT_TRUE(Within(Row("hold").current_run_expires_at, before + milliseconds(300),
                     after + milliseconds(300)));

  // An owner that never releases is swept once the hold has passed.
  LetStoredTimePass(milliseconds(400));
  Result<std::vector<std::string>> swept = store_->SweepExpired();
  ASSERT_THAT(swept, IsOk());
  EXPECT_EQ(*swept, std::vector<std::string>{"hold"});
  EXPECT_FALSE(Row("hold").current_run_ticket.has_value());
}

TEST_F(TaskStoreContractTest, CancelledRunReleaseRecordsTheCancelAndReschedulesACronTask) {
  const TaskSchedule schedule = Schedule("* * * * * *");
  Upsert("cancel-cron", schedule);
  ASSERT_THAT(store_->Trigger("cancel-cron"), IsOk());
  ASSERT_TRUE(Claim("cancel-cron", "t1"));
  ASSERT_THAT(store_->Cancel("cancel-cron", minutes(1)), IsOk());
  const WallTime before = Now();
  Result<bool> released =
      store_->Release("cancel-cron", "t1", schedule, ErrorJson("the function failed"));
  const WallTime after = Now();
  ASSERT_THAT(released, IsOk());
  EXPECT_TRUE(*released);
  const TaskRow row = Row("cancel-cron");
  EXPECT_EQ(row.last_run_error_json, kCancelledJson);
  EXPECT_TRUE(Within(row.next_run_start_at, CronNext("* * * * * *", before),
                     CronNext("* * * * * *", after)));
}

TEST_F(TaskStoreContractTest, CannotCancelANonExistentTask) {
  const Status status = store_->Cancel("nope", minutes(1));
  EXPECT_THAT(status, StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(status.message(), "Task nope does not exist");
}

TEST_F(TaskStoreContractTest, CannotCancelATaskThatIsNotRunning) {
  Upsert("idle", Schedule("PT10M"));
  const TaskRow idle = Row("idle");
  const Status status = store_->Cancel("idle", minutes(1));
  EXPECT_THAT(status, StatusIs(StatusCode::kConflict));
  EXPECT_EQ(status.message(), "Task idle is not running");
  EXPECT_EQ(Row("idle"), idle);
}

// --- Pause and resume (ADR 0013) --------------------------------------------------------------

PauseRequest PauseBy(std::string by, std::string reason,
                     std::optional<WallTime> until = std::nullopt) {
  return PauseRequest{std::move(by), std::move(reason), until};
}

TEST_F(TaskStoreContractTest, APausedTaskHoldsATicketNoWorkerClaims) {
  Upsert("paused", Schedule("PT10M"));
  ASSERT_EQ(ReadinessOf("paused"), Readiness::kReady);
  const TaskRow idle = Row("paused");
  const WallTime before = Now();
  const Status paused =
      store_->Pause("paused", PauseBy("alice", "disk \"full\"\nagain"), minutes(1));
  const WallTime after = Now();
  ASSERT_THAT(paused, IsOk());

  const TaskRow row = Row("paused");
  ASSERT_TRUE(row.current_run_ticket.has_value());
  EXPECT_TRUE(RowTicket::Decode(*row.current_run_ticket).paused()) << *row.current_run_ticket;
  EXPECT_TRUE(Within(row.current_run_started_at, before, after));
  EXPECT_FALSE(row.current_run_expires_at.has_value()) << "no janitor may clear it";
  EXPECT_EQ(row.next_run_start_at, idle.next_run_start_at);
  EXPECT_EQ(row.settings_json, idle.settings_json);
  EXPECT_EQ(row.last_run_ended_at, idle.last_run_ended_at);
  const std::optional<TaskPause> pause = PauseOf(row);
  ASSERT_TRUE(pause.has_value());
  EXPECT_EQ(pause->by, "alice");
  EXPECT_EQ(pause->reason, "disk \"full\"\nagain");
  EXPECT_EQ(pause->since, *row.current_run_started_at);
  EXPECT_FALSE(pause->until.has_value());

  EXPECT_EQ(ReadinessOf("paused"), Readiness::kNotReady);
  EXPECT_FALSE(Claim("paused", "t1"));
  Result<std::vector<std::string>> swept = store_->SweepExpired();
  ASSERT_THAT(swept, IsOk());
  EXPECT_TRUE(swept->empty());
  EXPECT_EQ(Row("paused"), row);
}

TEST_F(TaskStoreContractTest, APauseOfAPausedTaskReplacesItsReasonAndUntil) {
  Upsert("again", Schedule("PT10M"));
  ASSERT_THAT(store_->Pause("again", PauseBy("alice", "first"), minutes(1)), IsOk());
  const WallTime until = WholeSeconds(Now()) + hours(2);
  ASSERT_THAT(store_->Pause("again", PauseBy("bob", "second", until), minutes(1)), IsOk());
  const std::optional<TaskPause> pause = PauseOf(Row("again"));
  ASSERT_TRUE(pause.has_value());
  EXPECT_EQ(pause->by, "bob");
  EXPECT_EQ(pause->reason, "second");
  EXPECT_EQ(pause->until, until);
}

TEST_F(TaskStoreContractTest, PausesThatCannotBeAreRefusedChangingNothing) {
  Status status = store_->Pause("nope", PauseBy("alice", ""), minutes(1));
  EXPECT_THAT(status, StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(status.message(), "Task nope does not exist");
  EXPECT_FALSE(fixture_->GetRawRow("nope").has_value());

  Upsert("busy", Schedule("PT10M"));
  ASSERT_TRUE(Claim("busy", "t1"));
  const TaskRow running = Row("busy");
  status = store_->Pause("busy", PauseBy("alice", "", Now() - minutes(1)), minutes(1));
  EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(Row("busy"), running);

  Upsert("idle", Schedule("PT10M"));
  const TaskRow idle = Row("idle");
  status = store_->Pause("idle", PauseBy("alice", "", Now() - minutes(1)), minutes(1));
  EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(status.message(), "Invalid pause: 'until' is not in the future");
  status =
      store_->Pause("idle", PauseBy("alice", std::string(kMaxPauseTextBytes + 1, 'x')), minutes(1));
  EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(status.message(), "Invalid pause: 'reason' is longer than 1024 bytes");
  EXPECT_EQ(Row("idle"), idle);
}

TEST_F(TaskStoreContractTest, ResumeClearsThePauseAndKeepsTheNextStart) {
  Upsert("resumed", Schedule("PT10M"));
  const TaskRow idle = Row("resumed");
  ASSERT_THAT(store_->Pause("resumed", PauseBy("alice", "maintenance"), minutes(1)), IsOk());
  const Status resumed = store_->Resume("resumed");
  ASSERT_THAT(resumed, IsOk());
  EXPECT_EQ(Row("resumed"), idle);
  EXPECT_EQ(ReadinessOf("resumed"), Readiness::kReady) << "a slot missed while paused runs at once";

  Status status = store_->Resume("resumed");
  EXPECT_THAT(status, StatusIs(StatusCode::kConflict));
  EXPECT_EQ(status.message(), "Task resumed is not paused");
  ASSERT_TRUE(Claim("resumed", "t1"));
  status = store_->Resume("resumed");
  EXPECT_THAT(status, StatusIs(StatusCode::kConflict));
  EXPECT_EQ(status.message(), "Task resumed is not paused");
  status = store_->Resume("nope");
  EXPECT_THAT(status, StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(status.message(), "Task nope does not exist");
}

TEST_F(TaskStoreContractTest, TriggersAndCancelsOfAPausedTaskAreConflictsThatSaySo) {
  Upsert("held", Schedule("PT10M", "PT1H"));
  ASSERT_THAT(store_->Pause("held", PauseBy("alice", ""), minutes(1)), IsOk());
  const TaskRow paused = Row("held");
  Status status = store_->Trigger("held");
  EXPECT_THAT(status, StatusIs(StatusCode::kConflict));
  EXPECT_EQ(status.message(), "Task held is paused");
  status = store_->Cancel("held", minutes(1));
  EXPECT_THAT(status, StatusIs(StatusCode::kConflict));
  EXPECT_EQ(status.message(), "Task held is not running");
  EXPECT_EQ(Row("held"), paused);
}

TEST_F(TaskStoreContractTest, APauseUntilAnInstantEndsThenWithoutRecordingARun) {
  Upsert("until", Schedule("PT10M"));
  Upsert("until-polled", Schedule("PT10M"));
  const TaskRow idle = Row("until");
  const WallTime until = Now() + milliseconds(150);
  ASSERT_THAT(store_->Pause("until", PauseBy("alice", "", until), minutes(1)), IsOk());
  ASSERT_THAT(store_->Pause("until-polled", PauseBy("alice", "", until), minutes(1)), IsOk());
  EXPECT_TRUE(Same(Row("until").current_run_expires_at, std::chrono::floor<milliseconds>(until)));
  Result<std::vector<std::string>> swept = store_->SweepExpired();
  ASSERT_THAT(swept, IsOk());
  EXPECT_TRUE(swept->empty());
  EXPECT_TRUE(PauseOf(Row("until")).has_value());

  LetStoredTimePass(milliseconds(200));
  swept = store_->SweepExpired();
  ASSERT_THAT(swept, IsOk());
  EXPECT_TRUE(swept->empty()) << "an ended pause is not a lost run";
  EXPECT_EQ(Row("until"), idle) << "no end, no error recorded";
  const PollResult poll = Poll({"until-polled"}, /*sweep=*/true);
  ASSERT_EQ(poll.entries.size(), 1u);
  EXPECT_EQ(poll.entries[0].readiness, Readiness::kReady);
  EXPECT_TRUE(poll.swept_ids.empty());
  EXPECT_FALSE(Row("until-polled").current_run_ticket.has_value());
  EXPECT_FALSE(Row("until-polled").last_run_error_json.has_value());
}

TEST_F(TaskStoreContractTest, APauseOfARunningTaskWaitsForTheRunAndItsReleaseLeavesItPaused) {
  const TaskSchedule schedule = Schedule("PT10M");
  Upsert("busy", schedule);
  const std::optional<WallTime> scheduled = Row("busy").next_run_start_at;
  ASSERT_TRUE(Claim("busy", "t1"));
  const TaskRow running = Row("busy");
  const WallTime until = WholeSeconds(Now()) + hours(2);
  const Status paused = store_->Pause("busy", PauseBy("alice", "deploy", until), minutes(1));
  ASSERT_THAT(paused, IsOk());

  TaskRow row = Row("busy");
  ASSERT_TRUE(row.current_run_ticket.has_value());
  const RowTicket pausing = RowTicket::Decode(*row.current_run_ticket);
  EXPECT_TRUE(pausing.HeldBy(*running.current_run_ticket) && pausing.pause_json &&
              !pausing.cancel_requested)
      << *row.current_run_ticket;
  EXPECT_EQ(row.current_run_started_at, running.current_run_started_at);
  EXPECT_EQ(row.current_run_expires_at, running.current_run_expires_at) << "the run's own expiry";
  std::optional<TaskPause> pause = PauseOf(row);
  ASSERT_TRUE(pause.has_value());
  EXPECT_TRUE(pause->pending);
  EXPECT_EQ(pause->by, "alice");
  EXPECT_EQ(pause->until, until);

  Result<LeaseStatus> lease = store_->RenewLease("busy", "t1", minutes(1), minutes(1));
  ASSERT_THAT(lease, IsOk());
  EXPECT_EQ(*lease, LeaseStatus::kHeld) << "the run goes on";
  EXPECT_EQ(store_->Trigger("busy").message(), "Task busy is currently running");
  EXPECT_FALSE(Claim("busy", "t2"));

  const WallTime before = Now();
  ASSERT_TRUE(Release("busy", "t1", schedule));
  const WallTime after = Now();
  row = Row("busy");
  ASSERT_TRUE(row.current_run_ticket.has_value());
  EXPECT_TRUE(RowTicket::Decode(*row.current_run_ticket).paused()) << *row.current_run_ticket;
  EXPECT_TRUE(Within(row.current_run_started_at, before, after));
  EXPECT_EQ(row.current_run_expires_at, until);
  EXPECT_TRUE(Within(row.last_run_ended_at, before, after));
  EXPECT_FALSE(row.last_run_error_json.has_value());
  EXPECT_TRUE(Same(row.next_run_start_at, *scheduled + minutes(10)));
  pause = PauseOf(row);
  ASSERT_TRUE(pause.has_value());
  EXPECT_FALSE(pause->pending);
  EXPECT_EQ(pause->by, "alice");
  EXPECT_EQ(pause->reason, "deploy");
  EXPECT_EQ(pause->until, until);
  EXPECT_EQ(store_->Trigger("busy").message(), "Task busy is paused");

  ASSERT_THAT(store_->Resume("busy"), IsOk());
  EXPECT_FALSE(Row("busy").current_run_ticket.has_value());
}

TEST_F(TaskStoreContractTest, APendingPauseAndACancelInEitherOrderStopTheRunAndPauseTheTask) {
  const TaskSchedule schedule = Schedule("PT10M");
  for (const bool cancel_first : {true, false}) {
    const std::string id = cancel_first ? "cancel-then-pause" : "pause-then-cancel";
    Upsert(id, schedule);
    ASSERT_TRUE(Claim(id, "t1"));
    if (cancel_first) {
      ASSERT_THAT(store_->Cancel(id, minutes(1)), IsOk());
    }
    ASSERT_THAT(store_->Pause(id, PauseBy("alice", ""), minutes(1)), IsOk());
    if (!cancel_first) {
      ASSERT_THAT(store_->Cancel(id, minutes(1)), IsOk());
    }
    EXPECT_TRUE(RowTicket::Decode(*Row(id).current_run_ticket).cancel_requested) << id;
    EXPECT_TRUE(PauseOf(Row(id)).has_value()) << id;
    Result<LeaseStatus> lease = store_->RenewLease(id, "t1", minutes(1), minutes(1));
    ASSERT_THAT(lease, IsOk());
    EXPECT_EQ(*lease, LeaseStatus::kCancelRequested) << id;

    const ReleaseRequest release{id, "t1", schedule, ErrorJson("the function failed")};
    Result<std::vector<ReleaseResult>> released = store_->ReleaseMany({&release, 1});
    ASSERT_THAT(released, IsOk());
    EXPECT_TRUE((*released)[0].released) << id;
    const TaskRow row = Row(id);
    EXPECT_EQ(row.last_run_error_json, kCancelledJson) << id;
    EXPECT_TRUE(PauseOf(row).has_value() && !PauseOf(row)->pending) << id;
    EXPECT_FALSE(row.current_run_expires_at.has_value()) << id;
  }
}

TEST_F(TaskStoreContractTest, ResumeOfAPendingPauseLeavesTheRunGoingAndItsReleaseFreesTheTask) {
  const TaskSchedule schedule = Schedule("PT10M");
  Upsert("changed-mind", schedule);
  ASSERT_TRUE(Claim("changed-mind", "t1"));
  const TaskRow running = Row("changed-mind");
  ASSERT_THAT(store_->Pause("changed-mind", PauseBy("alice", ""), minutes(1)), IsOk());
  ASSERT_THAT(store_->Pause("changed-mind", PauseBy("bob", "again"), minutes(1)), IsOk());
  EXPECT_EQ(PauseOf(Row("changed-mind"))->by, "bob") << "a second pause replaces the first";
  ASSERT_THAT(store_->Resume("changed-mind"), IsOk());
  EXPECT_EQ(Row("changed-mind"), running);
  EXPECT_EQ(store_->Resume("changed-mind").message(), "Task changed-mind is not paused");
  ASSERT_TRUE(Release("changed-mind", "t1", schedule));
  EXPECT_FALSE(Row("changed-mind").current_run_ticket.has_value());

  Upsert("marked", schedule);
  ASSERT_TRUE(Claim("marked", "t1"));
  ASSERT_THAT(store_->Cancel("marked", minutes(1)), IsOk());
  const TaskRow cancelled = Row("marked");
  ASSERT_THAT(store_->Pause("marked", PauseBy("alice", ""), minutes(1)), IsOk());
  ASSERT_THAT(store_->Resume("marked"), IsOk());
  EXPECT_EQ(Row("marked"), cancelled) << "the cancel's mark stays";
}

// A Backstage worker never renews its claim, and stops a run whose ticket changed without being
// able to release it: the pause brings the expiry forward, so the sweep pauses the task soon.
TEST_F(TaskStoreContractTest, APauseOfARunNobodyRenewsTakesEffectWithinTheHold) {
  Upsert("backstage-run", Schedule("PT10M"));
  ASSERT_TRUE(Claim("backstage-run", "t1", hours(1), hours(1)));
  const WallTime before = Now();
  ASSERT_THAT(store_->Pause("backstage-run", PauseBy("alice", ""), milliseconds(100)), IsOk());
  const WallTime after = Now();
  EXPECT_TRUE(Within(Row("backstage-run").current_run_expires_at, before + milliseconds(100),
                     after + milliseconds(100)));
  LetStoredTimePass(milliseconds(200));
  Result<std::vector<std::string>> swept = store_->SweepExpired();
  ASSERT_THAT(swept, IsOk());
  EXPECT_EQ(*swept, std::vector<std::string>{"backstage-run"});
  const std::optional<TaskPause> pause = PauseOf(Row("backstage-run"));
  ASSERT_TRUE(pause.has_value());
  EXPECT_FALSE(pause->pending);
  ASSERT_THAT(store_->Resume("backstage-run"), IsOk());
  EXPECT_EQ(ReadinessOf("backstage-run"), Readiness::kReady);
}

TEST_F(TaskStoreContractTest, APendingPauseWhoseUntilHasPassedWhenTheRunEndsLeavesTheTaskFree) {
  const TaskSchedule schedule = Schedule("PT10M");
  Upsert("brief", schedule);
  ASSERT_TRUE(Claim("brief", "t1"));
  ASSERT_THAT(store_->Pause("brief", PauseBy("alice", "", Now() + milliseconds(100)), minutes(1)),
              IsOk());
  LetStoredTimePass(milliseconds(200));
  ASSERT_TRUE(Release("brief", "t1", schedule));
  EXPECT_FALSE(Row("brief").current_run_ticket.has_value());
}

TEST_F(TaskStoreContractTest, ASweptRunWithAPendingPauseLeavesTheTaskPaused) {
  for (const bool by_poll : {false, true}) {
    const std::string id = by_poll ? "swept-by-poll" : "swept";
    Upsert(id, Schedule("PT10M"));
    ASSERT_TRUE(Claim(id, "t-" + id, milliseconds(100), milliseconds(100)));
    ASSERT_THAT(store_->Pause(id, PauseBy("alice", "crash"), minutes(1)), IsOk());
    LetStoredTimePass(milliseconds(200));
    std::vector<std::string> swept;
    if (by_poll) {
      swept = Poll({id}, /*sweep=*/true).swept_ids;
    } else {
      Result<std::vector<std::string>> result = store_->SweepExpired();
      ASSERT_THAT(result, IsOk());
      swept = *result;
    }
    EXPECT_EQ(swept, std::vector<std::string>{id}) << "the lost run is reported";
    const TaskRow row = Row(id);
    EXPECT_EQ(row.last_run_error_json, kTimedOutJson) << id;
    const std::optional<TaskPause> pause = PauseOf(row);
    ASSERT_TRUE(pause.has_value()) << id;
    EXPECT_FALSE(pause->pending) << id;
    EXPECT_EQ(pause->reason, "crash") << id;
    EXPECT_FALSE(row.current_run_expires_at.has_value()) << id;
    EXPECT_EQ(ReadinessOf(id), Readiness::kNotReady) << id;
  }
}

// --- PluginTaskSchedulerJanitor.test.ts and sweeps ------------------------------------------

TEST_F(TaskStoreContractTest, JanitorResetsRunsWhoseExpiryHasPassed) {
  const WallTime base = WholeSeconds(Now());
  const std::string settings = R"({"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT1M"})";
  TaskRow expired = RawRow("expired", settings);
  expired.next_run_start_at = base - minutes(10);
  expired.current_run_ticket = "lost-ticket";
  expired.current_run_started_at = base - hours(48);
  expired.current_run_expires_at = base - hours(24);
  TaskRow no_expiry = RawRow("no-expiry", settings);
  no_expiry.next_run_start_at = base - hours(1);
  no_expiry.current_run_ticket = "forever";
  no_expiry.current_run_started_at = base - hours(48);
  TaskRow live = RawRow("live", settings);
  live.next_run_start_at = base - seconds(5);
  live.current_run_ticket = "live-ticket";
  live.current_run_started_at = base - seconds(5);
  live.current_run_expires_at = base + hours(1);
  TaskRow idle = RawRow("idle", settings);
  idle.next_run_start_at = base - minutes(1);
  for (const TaskRow& row : {expired, no_expiry, live, idle}) fixture_->PutRawRow(row);

  const WallTime before = Now();
  Result<std::vector<std::string>> swept = store_->SweepExpired();
  const WallTime after = Now();
  ASSERT_THAT(swept, IsOk());
  EXPECT_EQ(*swept, std::vector<std::string>{"expired"});

  const TaskRow reset = Row("expired");
  EXPECT_FALSE(reset.current_run_ticket.has_value());
  EXPECT_FALSE(reset.current_run_started_at.has_value());
  EXPECT_FALSE(reset.current_run_expires_at.has_value());
  EXPECT_TRUE(Within(reset.last_run_ended_at, before, after));
  EXPECT_EQ(reset.last_run_error_json, kTimedOutJson);
  EXPECT_EQ(reset.next_run_start_at, expired.next_run_start_at);
  EXPECT_EQ(reset.settings_json, settings);
  EXPECT_EQ(Row("no-expiry"), no_expiry);
  EXPECT_EQ(Row("live"), live);
  EXPECT_EQ(Row("idle"), idle);
  EXPECT_EQ(ReadinessOf("expired"), Readiness::kReady);

  swept = store_->SweepExpired();
  ASSERT_THAT(swept, IsOk());
  EXPECT_TRUE(swept->empty());
}

TEST_F(TaskStoreContractTest, SweepReclaimsARunWhoseLeaseLapsed) {
  const TaskSchedule schedule = Schedule("PT10M");
  Upsert("lapsed", schedule);
  ASSERT_TRUE(Claim("lapsed", "dead-host", minutes(1), milliseconds(150)));
  Result<std::vector<std::string>> swept = store_->SweepExpired();
  ASSERT_THAT(swept, IsOk());
  EXPECT_TRUE(swept->empty());
  LetStoredTimePass(milliseconds(200));
  swept = store_->SweepExpired();
  ASSERT_THAT(swept, IsOk());
  EXPECT_EQ(*swept, std::vector<std::string>{"lapsed"});
  Result<LeaseStatus> renewed = store_->RenewLease("lapsed", "dead-host", minutes(1), minutes(1));
  ASSERT_THAT(renewed, IsOk());
  EXPECT_EQ(*renewed, LeaseStatus::kLost);
  EXPECT_TRUE(Claim("lapsed", "new-host"));
}

// --- TaskStatePoller.test.ts: one statement for every outcome -------------------------------

TEST_F(TaskStoreContractTest, PollBatchesEveryOutcomeIntoOneResult) {
  const WallTime base = WholeSeconds(Now());
  const TaskSchedule ready_schedule = Schedule("PT10M");
  Upsert("ready", ready_schedule);
  Upsert("future", Schedule("PT10M", "PT1H"));
  Upsert("running", Schedule("PT10M"));
  ASSERT_TRUE(Claim("running", "t1"));
  Upsert("manual", Schedule("manual"));
  TaskRow bad_json = RawRow("bad-json", "{not json");
  fixture_->PutRawRow(bad_json);
  TaskRow version_one = RawRow(
      "v1", R"({"version":1,"recurringAtMostEveryDuration":"PT1M","timeoutAfterDuration":"PT1M"})");
  version_one.next_run_start_at = base + hours(2);
  fixture_->PutRawRow(version_one);

  const std::vector<std::string> ids = {"future",  "missing", "ready", "bad-json",
                                        "running", "v1",      "manual"};
  const WallTime before = Now();
  const PollResult poll = Poll(ids);
  const WallTime after = Now();
  ASSERT_EQ(poll.entries.size(), ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(poll.entries[i].id, ids[i]);
  EXPECT_TRUE(Within(poll.db_now, before, after));
  EXPECT_TRUE(poll.swept_ids.empty());

  const PollEntry& future = poll.entries[0];
  EXPECT_EQ(future.readiness, Readiness::kNotReady);
  EXPECT_TRUE(future.settings.has_value());
  EXPECT_EQ(future.next_run_start_at, Row("future").next_run_start_at);
  EXPECT_FALSE(future.running);

  EXPECT_EQ(poll.entries[1].readiness, Readiness::kMissing);

  const PollEntry& ready = poll.entries[2];
  EXPECT_EQ(ready.readiness, Readiness::kReady);
  EXPECT_EQ(ready.settings, ready_schedule.settings);
  EXPECT_EQ(ready.next_run_start_at, Row("ready").next_run_start_at);
  EXPECT_FALSE(ready.running);

  EXPECT_EQ(poll.entries[3].readiness, Readiness::kInvalidSettings);
  EXPECT_FALSE(poll.entries[3].settings_error.empty());
  EXPECT_FALSE(poll.entries[3].settings.has_value());

  const PollEntry& running = poll.entries[4];
  EXPECT_EQ(running.readiness, Readiness::kNotReady);
  EXPECT_TRUE(running.running);
  EXPECT_EQ(running.current_run_expires_at, Row("running").current_run_expires_at);

  EXPECT_EQ(poll.entries[5].readiness, Readiness::kInvalidSettings);
  EXPECT_FALSE(poll.entries[5].settings_error.empty());

  EXPECT_EQ(poll.entries[6].readiness, Readiness::kNotReady);
  EXPECT_FALSE(poll.entries[6].next_run_start_at.has_value());

  // The earliest next start among the idle polled rows is the ready row's (a running row's
  // scheduled time does not count).
  EXPECT_EQ(poll.earliest_next, Row("ready").next_run_start_at);
  EXPECT_EQ(Poll({"future", "manual", "running"}).earliest_next, Row("future").next_run_start_at);
  EXPECT_FALSE(Poll({"manual", "missing"}).earliest_next.has_value());
  EXPECT_TRUE(Poll({}).entries.empty());
}

TEST_F(TaskStoreContractTest, PollWithSweepResetsExpiredRunsAndCountsThemUnclaimed) {
  const WallTime base = WholeSeconds(Now());
  TaskRow expired =
      RawRow("expired", R"({"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT1M"})");
  expired.next_run_start_at = base - minutes(10);
  expired.current_run_ticket = "lost";
  expired.current_run_started_at = base - minutes(10);
  expired.current_run_expires_at = base - minutes(9);
  fixture_->PutRawRow(expired);
  TaskRow elsewhere = expired;
  elsewhere.id = "expired-unpolled";
  fixture_->PutRawRow(elsewhere);

  PollResult poll = Poll({"expired"}, /*sweep=*/false);
  ASSERT_EQ(poll.entries.size(), 1u);
  EXPECT_EQ(poll.entries[0].readiness, Readiness::kNotReady);
  EXPECT_TRUE(poll.entries[0].running);
  EXPECT_TRUE(poll.swept_ids.empty());
  EXPECT_EQ(Row("expired"), expired);

  poll = Poll({"expired"}, /*sweep=*/true);
  ASSERT_EQ(poll.entries.size(), 1u);
  EXPECT_EQ(poll.entries[0].readiness, Readiness::kReady);
  EXPECT_FALSE(poll.entries[0].running);
  std::vector<std::string> swept = poll.swept_ids;
  std::sort(swept.begin(), swept.end());
  EXPECT_EQ(swept, (std::vector<std::string>{"expired", "expired-unpolled"}));
  EXPECT_EQ(poll.earliest_next, expired.next_run_start_at);
  const TaskRow row = Row("expired");
  EXPECT_FALSE(row.current_run_ticket.has_value());
  EXPECT_EQ(row.last_run_error_json, kTimedOutJson);
  EXPECT_EQ(row.next_run_start_at, expired.next_run_start_at);
  EXPECT_FALSE(Row("expired-unpolled").current_run_ticket.has_value());
}

TEST_F(TaskStoreContractTest, UpsertManyFollowsUpsertsRulesForEveryRow) {
  // Existing rows first, in the state the single-row tests leave them in.
  Upsert("cron", Schedule("*/15 * * * *", "PT2M"));
  Upsert("duration", Schedule("PT120M", "PT1H"));
  Upsert("manual-to-duration", Schedule("manual"));
  const std::optional<WallTime> cron_delayed = Row("cron").next_run_start_at;
  const std::optional<WallTime> duration_delayed = Row("duration").next_run_start_at;
  ASSERT_TRUE(cron_delayed.has_value());
  ASSERT_TRUE(duration_delayed.has_value());

  const std::vector<TaskUpsert> batch = {
      {"new-duration", Schedule("PT10M")},
      {"cron", Schedule("*/2 * * * *")},          // earlier: moves
      {"duration", Schedule("PT180M")},           // later: kept
      {"manual-to-duration", Schedule("PT30M")},  // had none: populated
      {"new-manual", Schedule("manual")},
      {"new-delayed", Schedule("PT10M", "PT1H")},
      {"new-cron", Schedule("0 0 1 1 *")},
  };
  const WallTime before = Now();
  Result<std::vector<UpsertResult>> results = store_->UpsertMany(batch);
  const WallTime after = Now();
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const TaskRow row = Row(batch[i].id);
    EXPECT_EQ((*results)[i].next_run_start_at, row.next_run_start_at) << batch[i].id;
    const PollResult polled = Poll({batch[i].id});
    ASSERT_EQ(polled.entries.size(), 1U);
    EXPECT_EQ((*results)[i].version, polled.entries[0].version) << batch[i].id;
    EXPECT_EQ(row.settings_json, batch[i].schedule.settings.ToJson()) << batch[i].id;
    EXPECT_TRUE(Within((*results)[i].db_now, before, after)) << batch[i].id;
  }
  EXPECT_TRUE(Within(Row("new-duration").next_run_start_at, before, after));
  EXPECT_TRUE(Within(Row("cron").next_run_start_at, CronNext("*/2 * * * *", before),
                     CronNext("*/2 * * * *", after)));
  EXPECT_LT(Row("cron").next_run_start_at, cron_delayed);
  EXPECT_EQ(Row("duration").next_run_start_at, duration_delayed);
  EXPECT_TRUE(Within(Row("manual-to-duration").next_run_start_at, before + minutes(30),
                     after + minutes(30)));
  EXPECT_FALSE(Row("new-manual").next_run_start_at.has_value());
  EXPECT_TRUE(Within(Row("new-delayed").next_run_start_at, before + hours(1), after + hours(1)));
  EXPECT_TRUE(Same(Row("new-cron").next_run_start_at, CronNext("0 0 1 1 *", before)));
  Result<std::vector<UpsertResult>> none = store_->UpsertMany({});
  ASSERT_THAT(none, IsOk());
  EXPECT_TRUE(none->empty());
}

// Stores may split a large batch into several statements (MySQL writes 500 rows a statement):
// every row is written by its own rules, and each result belongs to its task, whatever the order.
TEST_F(TaskStoreContractTest, UpsertManyOfThousandsOfTasksWritesEveryRow) {
  constexpr int kTasks = 1234;
  const auto id_of = [](int i) { return "bulk-" + std::to_string(10000 + i); };
  // Every 7th row exists with a later start (the batch moves it earlier), every 11th with an
  // earlier one (kept).
  for (int i = 0; i < kTasks; i += 7) Upsert(id_of(i), Schedule("PT5H", "PT5H"));
  for (int i = 0; i < kTasks; i += 11) Upsert(id_of(i), Schedule("PT5M"));
  std::map<std::string, std::optional<WallTime>> later;
  std::map<std::string, std::optional<WallTime>> earlier;
  for (int i = 0; i < kTasks; i += 7) later[id_of(i)] = Row(id_of(i)).next_run_start_at;
  for (int i = 0; i < kTasks; i += 11) {
    later.erase(id_of(i));
    earlier[id_of(i)] = Row(id_of(i)).next_run_start_at;
  }
  std::vector<TaskUpsert> batch;
  for (int i = kTasks - 1; i >= 0; --i) {
    batch.push_back({id_of(i), Schedule(i % 2 == 0 ? "PT2H" : "PT3H", "PT1H")});
  }
  const WallTime before = Now();
  Result<std::vector<UpsertResult>> results = store_->UpsertMany(batch);
  const WallTime after = Now();
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), batch.size());
  std::vector<std::string> ids;
  for (const TaskUpsert& task : batch) ids.push_back(task.id);
  const PollResult polled = Poll(ids);
  ASSERT_EQ(polled.entries.size(), batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const PollEntry& entry = polled.entries[i];
    ASSERT_EQ(entry.id, batch[i].id);
    EXPECT_EQ((*results)[i].next_run_start_at, entry.next_run_start_at) << entry.id;
    EXPECT_EQ((*results)[i].version, entry.version) << entry.id;
    ASSERT_TRUE(entry.settings.has_value()) << entry.id;
    EXPECT_EQ(*entry.settings, batch[i].schedule.settings) << entry.id;
    if (const auto kept = earlier.find(entry.id); kept != earlier.end()) {
      EXPECT_EQ(entry.next_run_start_at, kept->second) << entry.id;
    } else if (const auto moved = later.find(entry.id); moved != later.end()) {
      ASSERT_TRUE(entry.next_run_start_at.has_value()) << entry.id;
      EXPECT_LT(entry.next_run_start_at, moved->second) << entry.id;
      EXPECT_GE(*entry.next_run_start_at, before) << entry.id;
    } else {
      EXPECT_TRUE(Within(entry.next_run_start_at, before + hours(1), after + hours(1))) << entry.id;
    }
  }
}

TEST_F(TaskStoreContractTest, UpsertManyWritesNothingWhenOneRowIsInvalid) {
  Upsert("existing", Schedule("PT10M"));
  const TaskRow existing = Row("existing");
  TaskSchedule invalid = Schedule("PT10M");
  invalid.settings.timeout_after_duration = "not a duration";
  Result<std::vector<UpsertResult>> results = store_->UpsertMany(std::vector<TaskUpsert>{
      {"fresh", Schedule("PT5M")}, {"existing", Schedule("PT1M")}, {"broken", invalid}});
  ASSERT_THAT(results, StatusIs(StatusCode::kInvalidArgument, "broken"));
  EXPECT_FALSE(fixture_->GetRawRow("fresh").has_value());
  EXPECT_FALSE(fixture_->GetRawRow("broken").has_value());
  EXPECT_EQ(Row("existing"), existing);

  Result<std::vector<UpsertResult>> twice = store_->UpsertMany(
      std::vector<TaskUpsert>{{"dup", Schedule("PT5M")}, {"dup", Schedule("PT1M")}});
  ASSERT_THAT(twice, StatusIs(StatusCode::kInvalidArgument, "dup"));
  EXPECT_FALSE(fixture_->GetRawRow("dup").has_value());
}

TEST_F(TaskStoreContractTest, PollChangedLeavesOutOnlyQuietUnchangedRows) {
  const WallTime base = WholeSeconds(Now());
  Upsert("quiet", Schedule("PT10M", "PT1H"));
  Upsert("manual", Schedule("manual"));
  Upsert("due", Schedule("PT10M"));
  Upsert("running", Schedule("PT10M"));
  ASSERT_TRUE(Claim("running", "t1"));
  Upsert("moved", Schedule("PT10M", "PT2H"));
  const std::vector<std::string> ids = {"quiet", "manual", "due", "running", "moved", "missing"};

  // Nothing known yet: every row is reported, as Poll does.
  std::vector<std::optional<std::int64_t>> unknown(ids.size());
  Result<PollResult> first = store_->PollChanged(ids, unknown, false);
  ASSERT_THAT(first, IsOk());
  ASSERT_EQ(first->entries.size(), ids.size());
  std::vector<std::optional<std::int64_t>> known;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(first->entries[i].id, ids[i]);
    known.push_back(first->entries[i].version);
  }
  // The versions are those Poll reports.
  const PollResult plain = Poll(ids);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (plain.entries[i].readiness != Readiness::kMissing) {
      EXPECT_EQ(plain.entries[i].version, *known[i]) << ids[i];
    }
  }
  EXPECT_NE(known[0], known[1]) << "a NULL next start has a version of its own";
  Result<UpsertResult> rewritten = store_->Upsert("manual", Schedule("manual"));
  ASSERT_THAT(rewritten, IsOk());
  EXPECT_EQ(rewritten->version, *known[1]) << "Upsert reports the version Poll reports";

  // Unchanged: only the due, running and missing rows come back.
  auto reported = [&](const PollResult& poll) {
    std::vector<std::string> out;
    for (const PollEntry& entry : poll.entries) out.push_back(entry.id);
    return out;
  };
  Result<PollResult> second = store_->PollChanged(ids, known, false);
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(reported(*second), (std::vector<std::string>{"due", "running", "missing"}));
  EXPECT_EQ(second->entries[0].readiness, Readiness::kReady);
  EXPECT_TRUE(second->entries[1].running);
  EXPECT_EQ(second->entries[2].readiness, Readiness::kMissing);
  EXPECT_TRUE(Within(second->db_now, base, Now()));

  // Another writer moves a row's next start: it is reported with its new version.
  TaskRow moved = Row("moved");
  moved.next_run_start_at = *moved.next_run_start_at - minutes(30);
  fixture_->PutRawRow(moved);
  Result<PollResult> third = store_->PollChanged(ids, known, false);
  ASSERT_THAT(third, IsOk());
  EXPECT_EQ(reported(*third), (std::vector<std::string>{"due", "running", "moved", "missing"}));
  EXPECT_EQ(third->entries[2].next_run_start_at, moved.next_run_start_at);
  EXPECT_NE(third->entries[2].version, *known[4]);
  EXPECT_EQ(third->entries[2].readiness, Readiness::kNotReady);

  // A trigger makes a quiet row due.
  ASSERT_THAT(store_->Trigger("quiet"), IsOk());
  Result<PollResult> fourth = store_->PollChanged(ids, known, false);
  ASSERT_THAT(fourth, IsOk());
  ASSERT_FALSE(fourth->entries.empty());
  EXPECT_EQ(fourth->entries[0].id, "quiet");
  EXPECT_EQ(fourth->entries[0].readiness, Readiness::kReady);

  // Swept rows count as unclaimed, as in Poll.
  TaskRow expired = Row("running");
  expired.current_run_expires_at = base - minutes(1);
  fixture_->PutRawRow(expired);
  Result<PollResult> swept = store_->PollChanged(ids, known, true);
  ASSERT_THAT(swept, IsOk());
  EXPECT_EQ(swept->swept_ids, std::vector<std::string>{"running"});
  const auto running = std::find_if(swept->entries.begin(), swept->entries.end(),
                                    [](const PollEntry& e) { return e.id == "running"; });
  ASSERT_NE(running, swept->entries.end());
  EXPECT_FALSE(running->running);
  EXPECT_EQ(running->readiness, Readiness::kReady);

  Result<PollResult> empty = store_->PollChanged({}, {}, false);
  ASSERT_THAT(empty, IsOk());
  EXPECT_TRUE(empty->entries.empty());
}

TEST_F(TaskStoreContractTest, WarmUpLeavesTheStoreWorking) {
  ASSERT_THAT(store_->WarmUp(), IsOk());
  ASSERT_THAT(store_->WarmUp(), IsOk());
  Upsert("after-warm-up", Schedule("PT10M"));
  EXPECT_EQ(ReadinessOf("after-warm-up"), Readiness::kReady);
}

// --- Rows written by Backstage ----------------------------------------------------------------

TEST_F(TaskStoreContractTest, ReadsRowsInTheFormBackstageWrites) {
  const TimeZone utc = TimeZone::Utc();
  const WallTime base = WholeSeconds(Now());
  TaskRow duration =
      RawRow("bs-duration", R"({"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT1M"})");
  duration.next_run_start_at = base - seconds(30);
  TaskRow cron_delay = RawRow(
      "bs-cron-delay",
      R"({"version":2,"cadence":"*/2 * * * * *","initialDelayDuration":"PT3S","timeoutAfterDuration":"PT1M"})");
  cron_delay.next_run_start_at = base + hours(1);
  TaskRow manual =
      RawRow("bs-manual", R"({"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"})");
  TaskRow failed =
      RawRow("bs-failed", R"({"version":2,"cadence":"PT1H","timeoutAfterDuration":"PT1M"})");
  failed.next_run_start_at = base + minutes(30);
  failed.last_run_error_json = R"({"name":"TypeError","message":"bad type"})";
  failed.last_run_ended_at = base - minutes(30);
  TaskRow running =
      RawRow("bs-running", R"({"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT1M"})");
  running.next_run_start_at = base - seconds(5);
  running.current_run_ticket = "0f8e7a52-3c1d-4b6e-9a2f-5d4c3b2a1908";
  running.current_run_started_at = base - seconds(5);
  running.current_run_expires_at = base + seconds(55);
  running.last_run_ended_at = base - seconds(605);
  const std::vector<TaskRow> rows = {cron_delay, duration, failed, manual, running};
  for (const TaskRow& row : rows) fixture_->PutRawRow(row);

  Result<std::vector<TaskRow>> states = store_->States();
  ASSERT_THAT(states, IsOk());
  EXPECT_EQ(*states, rows);
  const TaskState running_state = ToTaskState(running, utc);
  EXPECT_EQ(running_state.ToJson(),
            R"({"status":"running","startedAt":")" + FormatIsoInstant(base - seconds(5), utc) +
                R"(","timesOutAt":")" + FormatIsoInstant(base + seconds(55), utc) +
                R"(","lastRunEndedAt":")" + FormatIsoInstant(base - seconds(605), utc) + R"("})");
  EXPECT_NE(running_state.started_at->find(".000+00:00"), std::string::npos);

  const PollResult poll =
      Poll({"bs-duration", "bs-cron-delay", "bs-manual", "bs-failed", "bs-running"});
  ASSERT_EQ(poll.entries.size(), 5u);
  EXPECT_EQ(poll.entries[0].readiness, Readiness::kReady);
  ASSERT_TRUE(poll.entries[0].settings.has_value());
  EXPECT_EQ(poll.entries[0].settings->cadence.text(), "PT10M");
  EXPECT_EQ(poll.entries[0].settings->timeout_after_duration, "PT1M");
  EXPECT_FALSE(poll.entries[0].settings->initial_delay_duration.has_value());
  EXPECT_EQ(poll.entries[1].readiness, Readiness::kNotReady);
  ASSERT_TRUE(poll.entries[1].settings.has_value());
  EXPECT_EQ(poll.entries[1].settings->initial_delay_duration, "PT3S");
  EXPECT_EQ(poll.entries[1].settings->cadence.text(), "*/2 * * * * *");
  EXPECT_EQ(poll.entries[2].readiness, Readiness::kNotReady);
  EXPECT_EQ(poll.entries[3].readiness, Readiness::kNotReady);
  EXPECT_EQ(poll.entries[4].readiness, Readiness::kNotReady);
  EXPECT_TRUE(poll.entries[4].running);
  EXPECT_EQ(poll.earliest_next, base - seconds(30));

  // A due Backstage row is claimed and released with the cadence anchored on its stored time.
  const TaskSchedule duration_schedule = Schedule("PT10M");
  ASSERT_TRUE(Claim("bs-duration", "ours"));
  ASSERT_TRUE(Release("bs-duration", "ours", duration_schedule));
  EXPECT_TRUE(Same(Row("bs-duration").next_run_start_at, base - seconds(30) + minutes(10)));
  EXPECT_FALSE(Claim("bs-cron-delay", "ours"));
  EXPECT_FALSE(Claim("bs-running", "ours"));

  // A Backstage worker's run is cancelled from here: its liveness check no longer finds its
  // ticket, so it aborts; the row stays held for at most the hold, then the janitor frees it.
  const WallTime before_cancel = Now();
  ASSERT_THAT(store_->Cancel("bs-running", seconds(20)), IsOk());
  const WallTime after_cancel = Now();
  const TaskRow cancelled = Row("bs-running");
  EXPECT_EQ(cancelled.current_run_ticket,
            CancelRequestedTicket("0f8e7a52-3c1d-4b6e-9a2f-5d4c3b2a1908"));
  EXPECT_TRUE(Within(cancelled.current_run_expires_at, before_cancel + seconds(20),
                     after_cancel + seconds(20)));
  EXPECT_EQ(cancelled.next_run_start_at, running.next_run_start_at);
  EXPECT_EQ(cancelled.current_run_started_at, running.current_run_started_at);

  // A Backstage manual row runs when triggered and stays without a next run.
  ASSERT_THAT(store_->Trigger("bs-manual"), IsOk());
  ASSERT_TRUE(Claim("bs-manual", "ours"));
  ASSERT_TRUE(Release("bs-manual", "ours", Schedule("manual")));
  EXPECT_FALSE(Row("bs-manual").next_run_start_at.has_value());

  // Re-registering keeps the earlier Backstage time and writes Backstage's exact JSON.
  Upsert("bs-failed", Schedule("PT1H"));
  const TaskRow reregistered = Row("bs-failed");
  EXPECT_EQ(reregistered.next_run_start_at, failed.next_run_start_at);
  EXPECT_EQ(reregistered.settings_json, failed.settings_json);
  EXPECT_EQ(reregistered.last_run_error_json, failed.last_run_error_json);
}

TEST_F(TaskStoreContractTest, UnparsableSettingsAreReportedNotFatal) {
  const WallTime base = WholeSeconds(Now());
  TaskRow broken_running = RawRow("broken-running", "not json at all");
  broken_running.next_run_start_at = base - seconds(10);
  broken_running.current_run_ticket = "t1";
  broken_running.current_run_started_at = base - seconds(10);
  broken_running.current_run_expires_at = base + minutes(1);
  fixture_->PutRawRow(broken_running);
  TaskRow broken_idle = RawRow("broken-idle", R"({"version":2,"cadence":"every day"})");
  broken_idle.next_run_start_at = base - seconds(10);
  fixture_->PutRawRow(broken_idle);

  const PollResult poll = Poll({"broken-running", "broken-idle"});
  ASSERT_EQ(poll.entries.size(), 2u);
  EXPECT_EQ(poll.entries[0].readiness, Readiness::kInvalidSettings);
  EXPECT_EQ(poll.entries[1].readiness, Readiness::kInvalidSettings);
  EXPECT_FALSE(poll.entries[1].settings_error.empty());

  const Status cancel = store_->Cancel("broken-running", minutes(1));
  EXPECT_THAT(cancel, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(Row("broken-running"), broken_running);

  const Status idle_cancel = store_->Cancel("broken-idle", minutes(1));
  EXPECT_THAT(idle_cancel, StatusIs(StatusCode::kConflict));
  EXPECT_EQ(idle_cancel.message(), "Task broken-idle is not running");

  Result<std::vector<TaskRow>> states = store_->States();
  ASSERT_THAT(states, IsOk());
  EXPECT_EQ(states->size(), 2u);
}

// --- Notifications ----------------------------------------------------------------------------

// Collects events delivered to a listener. Thread-safe.
struct Inbox {
  std::mutex mu;
  std::condition_variable changed;
  std::vector<StoreEvent> events;

  void Add(const StoreEvent& event) {
    {
      std::lock_guard lock(mu);
      events.push_back(event);
    }
    changed.notify_all();
  }

  // Waits (bounded, in real time) until an event of `kind` for `task_id` has arrived.
  bool WaitFor(StoreEvent::Kind kind, const std::string& task_id) {
    std::unique_lock lock(mu);
    return changed.wait_for(lock, seconds(10), [&] {
      return std::any_of(events.begin(), events.end(), [&](const StoreEvent& event) {
        return event.kind == kind && event.task_id == task_id;
      });
    });
  }

  std::size_t size() {
    std::lock_guard lock(mu);
    return events.size();
  }
};

// Another host's subscription to the store's events. Members are destroyed subscription first.
struct OtherHostListener {
  std::unique_ptr<TaskStore> store;
  std::shared_ptr<Inbox> inbox = std::make_shared<Inbox>();
  std::unique_ptr<Notifications> subscription;  // nullptr where the store cannot notify
};

// Opens another host's store on the fixture's database and subscribes to its events.
OtherHostListener ListenOnAnotherHost(StoreFixture& fixture) {
  OtherHostListener listener;
  listener.store = fixture.OpenStore();
  listener.subscription = listener.store->Listen(
      [inbox = listener.inbox](const StoreEvent& event) { inbox->Add(event); });
  return listener;
}

// Issue 18: a traced trigger hands its trace context to the host that will run the task.
TEST_F(TaskStoreContractTest, ATracedTriggerCarriesItsTraceContextToTheOtherHosts) {
  if (!fixture_->supports_notifications()) {
    GTEST_SKIP() << "this store does not deliver notifications";
  }
  OtherHostListener other = ListenOnAnotherHost(*fixture_);
  ASSERT_NE(other.subscription, nullptr);
  Upsert("traced:\xc3\xa9", Schedule("manual"));
  Upsert("plain", Schedule("manual"));
  const TraceContext caller =
      *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "v=1,w=2");
  ASSERT_THAT(store_->Trigger("traced:\xc3\xa9", caller), IsOk());
  ASSERT_THAT(store_->Trigger("plain", TraceContext{}), IsOk());
  ASSERT_TRUE(other.inbox->WaitFor(StoreEvent::Kind::kTrigger, "traced:\xc3\xa9"));
  ASSERT_TRUE(other.inbox->WaitFor(StoreEvent::Kind::kTrigger, "plain"));
  std::lock_guard lock(other.inbox->mu);
  for (const StoreEvent& event : other.inbox->events) {
    if (event.kind != StoreEvent::Kind::kTrigger) continue;
    if (event.task_id == "plain") {
      EXPECT_FALSE(event.caller.valid());
    } else {
      EXPECT_EQ(event.caller, caller);
    }
  }
}

TEST_F(TaskStoreContractTest, WritesFromOneHostNotifyTheOthers) {
  if (!fixture_->supports_notifications()) {
    GTEST_SKIP() << "this store does not deliver notifications";
  }
  OtherHostListener other = ListenOnAnotherHost(*fixture_);
  ASSERT_NE(other.subscription, nullptr);
  Inbox& inbox = *other.inbox;
  using Kind = StoreEvent::Kind;
  const TaskSchedule schedule = Schedule("PT10M");

  Upsert("note", schedule);
  EXPECT_TRUE(inbox.WaitFor(Kind::kUpsert, "note"));
  ASSERT_TRUE(Claim("note", "t1"));
  ASSERT_TRUE(Release("note", "t1", schedule));
  EXPECT_TRUE(inbox.WaitFor(Kind::kRelease, "note"));
  ASSERT_THAT(store_->Trigger("note"), IsOk());
  EXPECT_TRUE(inbox.WaitFor(Kind::kTrigger, "note"));
  ASSERT_TRUE(Claim("note", "t2"));
  ASSERT_THAT(store_->Cancel("note", minutes(1)), IsOk());
  EXPECT_TRUE(inbox.WaitFor(Kind::kCancel, "note"));

  const WallTime base = WholeSeconds(Now());
  TaskRow expired = RawRow("note-expired", schedule.settings.ToJson());
  expired.next_run_start_at = base - minutes(1);
  expired.current_run_ticket = "lost";
  expired.current_run_started_at = base - minutes(1);
  expired.current_run_expires_at = base - seconds(1);
  fixture_->PutRawRow(expired);
  Result<std::vector<std::string>> swept = store_->SweepExpired();
  ASSERT_THAT(swept, IsOk());
  EXPECT_TRUE(inbox.WaitFor(Kind::kSweep, "note-expired"));

  Upsert("note-paused", schedule);
  ASSERT_THAT(store_->Pause("note-paused", PauseRequest{"alice", "", std::nullopt}, minutes(1)),
              IsOk());
  EXPECT_TRUE(inbox.WaitFor(Kind::kUpsert, "note-paused"));
  ASSERT_THAT(store_->Resume("note-paused"), IsOk());
  EXPECT_TRUE(inbox.WaitFor(Kind::kRelease, "note-paused"));

  ASSERT_THAT(store_->Delete("note"), IsOk());
  EXPECT_TRUE(inbox.WaitFor(Kind::kDelete, "note"));

  // After the subscription is gone, nothing more is delivered.
  other.subscription.reset();
  const std::size_t delivered = inbox.size();
  ASSERT_THAT(store_->Trigger("note-expired"), IsOk());
  Upsert("note-after", schedule);
  EXPECT_EQ(inbox.size(), delivered);
}

TEST_F(TaskStoreContractTest, SettingsOnlyReregistrationChangesTheVersion) {
  // Cadences whose re-registration keeps the next start: a later one (now + 1 h after now + 10 min)
  // and a manual one (NULL stays NULL).
  const TaskSchedule delayed = Schedule("PT1H", "PT10M");
  const TaskSchedule manual = Schedule("manual");
  Upsert("delayed", delayed);
  Upsert("manual", manual);
  const std::vector<std::string> ids = {"delayed", "manual"};
  const PollResult before = Poll(ids);
  ASSERT_EQ(before.entries.size(), ids.size());
  const TaskRow delayed_row = Row("delayed");
  const TaskRow manual_row = Row("manual");

  // The same settings again: the version stays.
  Result<UpsertResult> same = store_->Upsert("delayed", delayed);
  ASSERT_THAT(same, IsOk());
  EXPECT_EQ(same->version, before.entries[0].version);

  // Only the timeout changes: the next start stays, the version does not.
  const std::vector<TaskSchedule> longer = {Schedule("PT1H", "PT10M", "PT2M"),
                                            Schedule("manual", std::nullopt, "PT2M")};
  std::vector<std::optional<std::int64_t>> known;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    Result<UpsertResult> rewritten = store_->Upsert(ids[i], longer[i]);
    ASSERT_THAT(rewritten, IsOk());
    EXPECT_NE(rewritten->version, before.entries[i].version) << ids[i];
    known.push_back(before.entries[i].version);
  }
  EXPECT_EQ(Row("delayed").next_run_start_at, delayed_row.next_run_start_at);
  EXPECT_EQ(Row("delayed").settings_json, longer[0].settings.ToJson());
  EXPECT_FALSE(Row("manual").next_run_start_at.has_value());
  EXPECT_NE(Row("manual").settings_json, manual_row.settings_json);

  // A poll with the old versions reports both rows, with their new settings.
  Result<PollResult> changed = store_->PollChanged(ids, known, false);
  ASSERT_THAT(changed, IsOk());
  ASSERT_EQ(changed->entries.size(), ids.size());
  const PollResult after = Poll(ids);
  ASSERT_EQ(after.entries.size(), ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const PollEntry& entry = changed->entries[i];
    EXPECT_EQ(entry.id, ids[i]);
    EXPECT_EQ(entry.readiness, Readiness::kNotReady) << ids[i];
    ASSERT_TRUE(entry.settings.has_value()) << ids[i];
    EXPECT_EQ(entry.settings->timeout_after_duration, "PT2M") << ids[i];
    EXPECT_EQ(entry.next_run_start_at, before.entries[i].next_run_start_at) << ids[i];
    EXPECT_EQ(entry.version, after.entries[i].version) << ids[i];
    known[i] = entry.version;
  }

  // With the new versions, nothing is reported.
  Result<PollResult> quiet = store_->PollChanged(ids, known, false);
  ASSERT_THAT(quiet, IsOk());
  EXPECT_TRUE(quiet->entries.empty());
}

// --- Batches ----------------------------------------------------------------------------------

TEST_F(TaskStoreContractTest, ClaimManyClaimsEachDueFreeRowWithItsOwnTicket) {
  Upsert("due-a", Schedule("PT10M"));
  Upsert("due-b", Schedule("PT10M"));
  Upsert("future", Schedule("PT10M", "PT1H"));
  Upsert("manual", Schedule("manual"));
  Upsert("held", Schedule("PT10M"));
  ASSERT_TRUE(Claim("held", "other-host"));
  const TaskRow held = Row("held");

  const std::vector<ClaimRequest> claims = {
      {"due-b", "ticket-b", seconds(3), std::nullopt},
      {"future", "ticket-f", minutes(1), std::nullopt},
      {"missing", "ticket-m", minutes(1), std::nullopt},
      {"held", "ticket-h", minutes(1), std::nullopt},
      {"manual", "ticket-x", minutes(1), std::nullopt},
      {"due-a", "ticket-a", minutes(1), std::nullopt},
  };
  const WallTime before = Now();
  Result<std::vector<ClaimResult>> claimed = store_->ClaimMany(claims, seconds(5));
  const WallTime after = Now();
  ASSERT_THAT(claimed, IsOk());
  ASSERT_EQ(claimed->size(), claims.size());
  const std::vector<bool> expected = {true, false, false, false, false, true};
  for (std::size_t i = 0; i < claims.size(); ++i) {
    EXPECT_EQ((*claimed)[i].claimed, expected[i]) << claims[i].id;
    EXPECT_TRUE(Within((*claimed)[i].db_now, before, after)) << claims[i].id;
    EXPECT_EQ((*claimed)[i].expires_at.has_value(), expected[i]) << claims[i].id;
  }

  // Each claimed row holds its own ticket and expires after the shorter of its timeout and the
  // lease, as a single Claim would write it.
  const TaskRow b = Row("due-b");
  EXPECT_EQ(b.current_run_ticket, "ticket-b");
  ASSERT_TRUE(b.current_run_started_at.has_value());
  EXPECT_TRUE(Within(b.current_run_started_at, before, after));
  EXPECT_TRUE(Same(b.current_run_expires_at, *b.current_run_started_at + seconds(3)));
  EXPECT_TRUE(Same((*claimed)[0].expires_at, *b.current_run_started_at + seconds(3)));
  const TaskRow a = Row("due-a");
  EXPECT_EQ(a.current_run_ticket, "ticket-a");
  ASSERT_TRUE(a.current_run_started_at.has_value());
  EXPECT_TRUE(Same(a.current_run_expires_at, *a.current_run_started_at + seconds(5)));
  EXPECT_EQ(ToTaskState(a, TimeZone::Utc()).status, TaskState::Status::kRunning);

  EXPECT_EQ(Row("held"), held);
  EXPECT_FALSE(Row("future").current_run_ticket.has_value());
  EXPECT_FALSE(Row("manual").current_run_ticket.has_value());
  EXPECT_FALSE(fixture_->GetRawRow("missing").has_value());

  // The claimed runs are ordinary runs: renewed, released one at a time, claimable again.
  Result<LeaseStatus> renewed = store_->RenewLease("due-a", "ticket-a", minutes(1), minutes(1));
  ASSERT_THAT(renewed, IsOk());
  EXPECT_EQ(*renewed, LeaseStatus::kHeld);
  EXPECT_TRUE(Release("due-a", "ticket-a", Schedule("PT0S")));
  Result<std::vector<ClaimResult>> again =
      store_->ClaimMany(std::vector<ClaimRequest>{{"due-a", "ticket-a2", minutes(1), std::nullopt},
                                                  {"due-b", "t", minutes(1), std::nullopt}},
                        minutes(1));
  ASSERT_THAT(again, IsOk());
  ASSERT_EQ(again->size(), 2u);
  EXPECT_TRUE((*again)[0].claimed);
  EXPECT_FALSE((*again)[1].claimed);
  EXPECT_EQ(Row("due-a").current_run_ticket, "ticket-a2");
  EXPECT_EQ(Row("due-b").current_run_ticket, "ticket-b");

  Result<std::vector<ClaimResult>> none = store_->ClaimMany({}, minutes(1));
  ASSERT_THAT(none, IsOk());
  EXPECT_TRUE(none->empty());
}

TEST_F(TaskStoreContractTest, ReleaseManyReleasesEachRunByReleasesRules) {
  const TaskSchedule duration = Schedule("PT10M");
  const TaskSchedule cron = Schedule("* * * * * *");
  const TaskSchedule manual = Schedule("manual");
  Upsert("duration", duration);
  Upsert("cron", cron);
  ASSERT_THAT(store_->Trigger("cron"), IsOk());
  Upsert("manual", manual);
  ASSERT_THAT(store_->Trigger("manual"), IsOk());
  Upsert("cancelled", duration);
  Upsert("stolen", duration);
  const std::optional<WallTime> scheduled = Row("duration").next_run_start_at;
  const std::optional<WallTime> cancelled_scheduled = Row("cancelled").next_run_start_at;
  ASSERT_TRUE(scheduled.has_value());
  ASSERT_TRUE(cancelled_scheduled.has_value());
  ASSERT_TRUE(Claim("duration", "t-duration"));
  ASSERT_TRUE(Claim("cron", "t-cron"));
  ASSERT_TRUE(Claim("manual", "t-manual"));
  ASSERT_TRUE(Claim("cancelled", "t-cancelled"));
  ASSERT_THAT(store_->Cancel("cancelled", minutes(1)), IsOk());
  ASSERT_TRUE(Claim("stolen", "t-thief"));
  const TaskRow stolen = Row("stolen");

  const std::vector<ReleaseRequest> releases = {
      {"cron", "t-cron", cron, std::nullopt},
      {"stolen", "t-stolen", duration, std::nullopt},
      {"duration", "t-duration", duration, ErrorJson("boom")},
      {"missing", "t-missing", duration, std::nullopt},
      {"cancelled", "t-cancelled", duration, std::nullopt},
      {"manual", "t-manual", manual, std::nullopt},
  };
  const WallTime before = Now();
  Result<std::vector<ReleaseResult>> released = store_->ReleaseMany(releases);
  const WallTime after = Now();
  ASSERT_THAT(released, IsOk());
  EXPECT_EQ(ReleasedFlags(*released), (std::vector<bool>{true, false, true, false, true, true}));

  const TaskRow d = Row("duration");
  EXPECT_FALSE(d.current_run_ticket.has_value());
  EXPECT_FALSE(d.current_run_started_at.has_value());
  EXPECT_FALSE(d.current_run_expires_at.has_value());
  EXPECT_TRUE(Within(d.last_run_ended_at, before, after));
  EXPECT_EQ(d.last_run_error_json, ErrorJson("boom"));
  EXPECT_TRUE(Same(d.next_run_start_at, *scheduled + minutes(10)));

  const TaskRow c = Row("cron");
  EXPECT_FALSE(c.current_run_ticket.has_value());
  EXPECT_EQ(c.last_run_error_json, std::nullopt);
  EXPECT_TRUE(
      Within(c.next_run_start_at, CronNext("* * * * * *", before), CronNext("* * * * * *", after)));

  const TaskRow m = Row("manual");
  EXPECT_FALSE(m.current_run_ticket.has_value());
  EXPECT_FALSE(m.next_run_start_at.has_value());

  const TaskRow x = Row("cancelled");
  EXPECT_FALSE(x.current_run_ticket.has_value());
  EXPECT_EQ(x.last_run_error_json, kCancelledJson);
  EXPECT_TRUE(Same(x.next_run_start_at, *cancelled_scheduled + minutes(10)));

  EXPECT_EQ(Row("stolen"), stolen);
  EXPECT_FALSE(fixture_->GetRawRow("missing").has_value());

  // Released again with the same tickets: nothing holds them any more.
  Result<std::vector<ReleaseResult>> twice = store_->ReleaseMany(releases);
  ASSERT_THAT(twice, IsOk());
  EXPECT_EQ(ReleasedFlags(*twice), std::vector<bool>(releases.size(), false));
  EXPECT_EQ(Row("duration"), d);

  Result<std::vector<ReleaseResult>> none = store_->ReleaseMany({});
  ASSERT_THAT(none, IsOk());
  EXPECT_TRUE(none->empty());
}

TEST_F(TaskStoreContractTest, ClaimManyClaimsOnlyRowsOfTheExpectedVersion) {
  const TaskSchedule due = Schedule("PT10M");
  const TaskSchedule immediate = Schedule("PT0S");
  // Each row is due and free when the batch below runs; each `stale` version is one the row had
  // before something changed it.
  Result<UpsertResult> current = store_->Upsert("current", due);
  ASSERT_THAT(current, IsOk());
  Upsert("plain", due);
  Upsert("held", due);
  ASSERT_TRUE(Claim("held", "other-host"));

  Result<UpsertResult> triggered = store_->Upsert("triggered", Schedule("PT10M", "PT1H"));
  ASSERT_THAT(triggered, IsOk());
  ASSERT_THAT(store_->Trigger("triggered"), IsOk());

  Result<UpsertResult> resettled = store_->Upsert("resettled", due);
  ASSERT_THAT(resettled, IsOk());
  Upsert("resettled", Schedule("PT10M", std::nullopt, "PT2M"));

  Result<UpsertResult> recycled = store_->Upsert("recycled", immediate);
  ASSERT_THAT(recycled, IsOk());
  ASSERT_TRUE(Claim("recycled", "earlier-run"));
  LetStoredTimePass(milliseconds(5));
  ASSERT_TRUE(Release("recycled", "earlier-run", immediate));

  const std::vector<std::string> stale_ids = {"triggered", "resettled", "recycled"};
  std::vector<TaskRow> stale_rows;
  for (const std::string& id : stale_ids) stale_rows.push_back(Row(id));
  const PollResult polled = Poll({"current", "triggered", "resettled", "recycled"});
  ASSERT_EQ(polled.entries.size(), 4u);
  for (const PollEntry& entry : polled.entries) {
    EXPECT_EQ(entry.readiness, Readiness::kReady) << entry.id;
  }
  EXPECT_EQ(polled.entries[0].version, current->version);
  EXPECT_NE(polled.entries[1].version, triggered->version) << "a trigger moves the next start";
  EXPECT_NE(polled.entries[2].version, resettled->version) << "new settings";
  EXPECT_NE(polled.entries[3].version, recycled->version) << "another run moved the next start";

  std::vector<ClaimRequest> claims = {
      {"triggered", "t-triggered", minutes(1), triggered->version},
      {"current", "t-current", minutes(1), current->version},
      {"resettled", "t-resettled", minutes(1), resettled->version},
      {"plain", "t-plain", minutes(1), std::nullopt},
      {"recycled", "t-recycled", minutes(1), recycled->version},
      {"held", "t-held", minutes(1), std::nullopt},
      {"missing", "t-missing", minutes(1), current->version},
  };
  Result<std::vector<ClaimResult>> claimed = store_->ClaimMany(claims, minutes(1));
  ASSERT_THAT(claimed, IsOk());
  ASSERT_EQ(claimed->size(), claims.size());
  const std::vector<bool> expected = {false, true, false, true, false, false, false};
  for (std::size_t i = 0; i < claims.size(); ++i) {
    EXPECT_EQ((*claimed)[i].claimed, expected[i]) << claims[i].id;
    EXPECT_EQ((*claimed)[i].expires_at.has_value(), expected[i]) << claims[i].id;
  }
  EXPECT_EQ(Row("current").current_run_ticket, "t-current");
  EXPECT_EQ(Row("plain").current_run_ticket, "t-plain");
  EXPECT_EQ(Row("held").current_run_ticket, "other-host");
  for (std::size_t i = 0; i < stale_ids.size(); ++i) {
    EXPECT_EQ(Row(stale_ids[i]), stale_rows[i]) << stale_ids[i];
  }

  // The versions a poll reports now are current: those claims succeed, one without expectation
  // as before.
  Result<std::vector<ClaimResult>> fresh = store_->ClaimMany(
      std::vector<ClaimRequest>{
          {"triggered", "t2-triggered", minutes(1), polled.entries[1].version},
          {"resettled", "t2-resettled", minutes(1), polled.entries[2].version},
          {"recycled", "t2-recycled", minutes(1), std::nullopt},
      },
      minutes(1));
  ASSERT_THAT(fresh, IsOk());
  ASSERT_EQ(fresh->size(), 3u);
  for (std::size_t i = 0; i < stale_ids.size(); ++i) {
    EXPECT_TRUE((*fresh)[i].claimed) << stale_ids[i];
    EXPECT_EQ(Row(stale_ids[i]).current_run_ticket, "t2-" + stale_ids[i]);
  }
}

TEST_F(TaskStoreContractTest, ReleaseManyReportsEachReleasedRowsNextStartAndVersion) {
  const TaskSchedule duration = Schedule("PT10M");
  const TaskSchedule manual = Schedule("manual");
  const TaskSchedule immediate = Schedule("PT0S");
  Upsert("duration", duration);
  Upsert("manual", manual);
  ASSERT_THAT(store_->Trigger("manual"), IsOk());
  Upsert("again", immediate);
  Upsert("stolen", duration);
  ASSERT_TRUE(Claim("duration", "t-duration"));
  ASSERT_TRUE(Claim("manual", "t-manual"));
  ASSERT_TRUE(Claim("again", "t-again"));
  ASSERT_TRUE(Claim("stolen", "t-thief"));
  fixture_->LetTimePass(milliseconds(5));

  const std::vector<ReleaseRequest> releases = {
      {"duration", "t-duration", duration, std::nullopt},
      {"stolen", "t-stolen", duration, std::nullopt},
      {"manual", "t-manual", manual, std::nullopt},
      {"missing", "t-missing", duration, std::nullopt},
      {"again", "t-again", immediate, std::nullopt},
  };
  const WallTime before = Now();
  Result<std::vector<ReleaseResult>> released = store_->ReleaseMany(releases);
  const WallTime after = Now();
  ASSERT_THAT(released, IsOk());
  ASSERT_EQ(released->size(), releases.size());
  EXPECT_EQ(ReleasedFlags(*released), (std::vector<bool>{true, false, true, false, true}));

  std::vector<std::string> ids;
  for (const ReleaseRequest& release : releases) ids.push_back(release.id);
  const PollResult polled = Poll(ids);
  ASSERT_EQ(polled.entries.size(), ids.size());
  for (std::size_t i = 0; i < releases.size(); ++i) {
    const ReleaseResult& result = (*released)[i];
    EXPECT_TRUE(Within(result.db_now, before, after)) << ids[i];
    if (!result.released) {
      EXPECT_FALSE(result.version.has_value()) << ids[i];
      continue;
    }
    EXPECT_EQ(result.next_run_start_at, Row(ids[i]).next_run_start_at) << ids[i];
    EXPECT_EQ(result.next_run_start_at, polled.entries[i].next_run_start_at) << ids[i];
    ASSERT_TRUE(result.version.has_value()) << ids[i];
    EXPECT_EQ(*result.version, polled.entries[i].version) << ids[i];
  }
  EXPECT_FALSE((*released)[2].next_run_start_at.has_value()) << "manual";
  EXPECT_TRUE(Within((*released)[4].next_run_start_at, before, after));
  EXPECT_EQ(Row("stolen").current_run_ticket, "t-thief");

  // The reported version is the one a claim without a poll can expect.
  Result<std::vector<ClaimResult>> claimed = store_->ClaimMany(
      std::vector<ClaimRequest>{{"again", "t-again-2", minutes(1), (*released)[4].version}},
      minutes(1));
  ASSERT_THAT(claimed, IsOk());
  ASSERT_EQ(claimed->size(), 1u);
  EXPECT_TRUE((*claimed)[0].claimed);
  EXPECT_EQ(Row("again").current_run_ticket, "t-again-2");
}

TEST_F(TaskStoreContractTest, ReleaseManyNotifiesEveryReleasedTask) {
  if (!fixture_->supports_notifications()) {
    GTEST_SKIP() << "this store does not deliver notifications";
  }
  OtherHostListener other = ListenOnAnotherHost(*fixture_);
  ASSERT_NE(other.subscription, nullptr);
  Inbox& inbox = *other.inbox;
  const TaskSchedule schedule = Schedule("PT10M");
  Upsert("batch-1", schedule);
  Upsert("batch-2", schedule);
  Result<std::vector<ClaimResult>> claimed =
      store_->ClaimMany(std::vector<ClaimRequest>{{"batch-1", "t1", minutes(1), std::nullopt},
                                                  {"batch-2", "t2", minutes(1), std::nullopt}},
                        minutes(1));
  ASSERT_THAT(claimed, IsOk());
  Result<std::vector<ReleaseResult>> released = store_->ReleaseMany(std::vector<ReleaseRequest>{
      {"batch-1", "t1", schedule, std::nullopt}, {"batch-2", "t2", schedule, std::nullopt}});
  ASSERT_THAT(released, IsOk());
  EXPECT_EQ(ReleasedFlags(*released), (std::vector<bool>{true, true}));
  EXPECT_TRUE(inbox.WaitFor(StoreEvent::Kind::kRelease, "batch-1"));
  EXPECT_TRUE(inbox.WaitFor(StoreEvent::Kind::kRelease, "batch-2"));
}

TEST_F(TaskStoreContractTest, ClaimManyAnnouncesEachClaimWithItsTicket) {
  if (!fixture_->supports_notifications()) {
    GTEST_SKIP() << "this store does not deliver notifications";
  }
  OtherHostListener other = ListenOnAnotherHost(*fixture_);
  ASSERT_NE(other.subscription, nullptr);
  Inbox& inbox = *other.inbox;
  const TaskSchedule schedule = Schedule("PT10M");
  const std::string long_id = "colon:\nnewline-" + std::string(230, 'x');
  Upsert("claim-1", schedule);
  Upsert(long_id, schedule);
  Upsert("held", schedule);
  ASSERT_THAT(store_->Claim("held", "earlier", minutes(1), minutes(1)), IsOk());
  Result<std::vector<ClaimResult>> claimed =
      store_->ClaimMany(std::vector<ClaimRequest>{{"claim-1", "ticket-1", minutes(1), std::nullopt},
                                                  {long_id, "ticket:2", minutes(1), std::nullopt},
                                                  {"held", "ticket-3", minutes(1), std::nullopt}},
                        minutes(1));
  ASSERT_THAT(claimed, IsOk());
  ASSERT_TRUE(inbox.WaitFor(StoreEvent::Kind::kClaim, "claim-1"));
  ASSERT_TRUE(inbox.WaitFor(StoreEvent::Kind::kClaim, long_id));
  // A release after the claims is delivered after them; then every claim event has arrived.
  ASSERT_THAT(store_->Release("held", "earlier", schedule, std::nullopt), IsOk());
  ASSERT_TRUE(inbox.WaitFor(StoreEvent::Kind::kRelease, "held"));
  std::map<std::string, std::string> tickets;
  {
    std::lock_guard lock(inbox.mu);
    for (const StoreEvent& event : inbox.events) {
      if (event.kind == StoreEvent::Kind::kClaim) tickets[event.task_id] = event.ticket;
    }
  }
  EXPECT_EQ(tickets,
            (std::map<std::string, std::string>{{"claim-1", "ticket-1"}, {long_id, "ticket:2"}}))
      << "one event per claimed row, with its ticket; none for a row not claimed";
}

TEST_F(TaskStoreContractTest, ReleaseManyOfManyLongIdsNotifiesEachOnce) {
  if (!fixture_->supports_notifications()) {
    GTEST_SKIP() << "this store does not deliver notifications";
  }
  OtherHostListener other = ListenOnAnotherHost(*fixture_);
  ASSERT_NE(other.subscription, nullptr);
  Inbox& inbox = *other.inbox;
  const TaskSchedule schedule = Schedule("PT10M");
  // 120 ids of 250 characters (about 350 bytes, with two-byte letters, colons and newlines): more
  // than one notification payload can hold.
  std::vector<std::string> ids;
  std::vector<ClaimRequest> claims;
  std::vector<ReleaseRequest> releases;
  for (int i = 0; i < 120; ++i) {
    std::string id = std::to_string(1000 + i) + ":\n";
    while (id.size() < 340) id += "\xc3\xa9t\xc3\xa9";
    ASSERT_TRUE(Upsert(id, schedule).has_value()) << i;
    ids.push_back(id);
    claims.push_back({id, "ticket-" + std::to_string(i), minutes(1), std::nullopt});
    releases.push_back({id, "ticket-" + std::to_string(i), schedule, std::nullopt});
  }
  Result<std::vector<ClaimResult>> claimed = store_->ClaimMany(claims, minutes(1));
  ASSERT_THAT(claimed, IsOk());
  Result<std::vector<ReleaseResult>> released = store_->ReleaseMany(releases);
  ASSERT_THAT(released, IsOk());
  EXPECT_EQ(ReleasedFlags(*released), std::vector<bool>(ids.size(), true));
  for (const std::string& id : ids) {
    ASSERT_TRUE(inbox.WaitFor(StoreEvent::Kind::kRelease, id)) << id.substr(0, 4);
  }
  std::map<std::string, int> releases_of;
  {
    std::lock_guard lock(inbox.mu);
    for (const StoreEvent& event : inbox.events) {
      if (event.kind == StoreEvent::Kind::kRelease) ++releases_of[event.task_id];
    }
  }
  EXPECT_EQ(releases_of.size(), ids.size()) << "events for ids that were not released";
  for (const std::string& id : ids) EXPECT_EQ(releases_of[id], 1) << id.substr(0, 4);
}

TEST_F(TaskStoreContractTest, EachRowHasExactlyOneWinnerWhenHostsClaimManyAtOnce) {
  constexpr int kHosts = 4;
  constexpr int kTasks = 6;
  const int rounds = std::max(1, fixture_->claim_race_rounds() / 4);
  const TaskSchedule schedule = Schedule("PT0S");
  std::vector<std::unique_ptr<TaskStore>> hosts;
  for (int i = 0; i < kHosts; ++i) {
    hosts.push_back(fixture_->OpenStore());
    ASSERT_NE(hosts.back(), nullptr);
  }
  std::vector<std::string> ids;
  for (int t = 0; t < kTasks; ++t) {
    ids.push_back("many-" + std::to_string(t));
    ASSERT_TRUE(Upsert(ids.back(), schedule).has_value());
  }
  // results[h][t]: the ticket host h won task t with (empty: lost); "!" marks a failed call.
  std::vector<std::vector<std::string>> results(kHosts, std::vector<std::string>(kTasks));
  std::barrier sync(kHosts + 1);
  std::vector<std::jthread> threads;
  threads.reserve(kHosts);
  for (int h = 0; h < kHosts; ++h) {
    threads.emplace_back([&, h] {
      for (int round = 0; round < rounds; ++round) {
        sync.arrive_and_wait();
        std::vector<ClaimRequest> claims;
        // Each host asks in its own order (rotated, every other one reversed).
        for (int k = 0; k < kTasks; ++k) {
          const int rotated = (k + h) % kTasks;
          const int t = h % 2 == 0 ? rotated : kTasks - 1 - rotated;
          claims.push_back(
              {ids[static_cast<std::size_t>(t)],
               "r" + std::to_string(round) + "-h" + std::to_string(h) + "-t" + std::to_string(t),
               minutes(1), std::nullopt});
        }
        Result<std::vector<ClaimResult>> claimed =
            hosts[static_cast<std::size_t>(h)]->ClaimMany(claims, minutes(1));
        std::vector<std::string>& mine = results[static_cast<std::size_t>(h)];
        std::fill(mine.begin(), mine.end(), std::string());
        for (std::size_t i = 0; i < claims.size(); ++i) {
          const std::size_t t = static_cast<std::size_t>(
              std::find(ids.begin(), ids.end(), claims[i].id) - ids.begin());
          if (!claimed.ok()) {
            mine[t] = "!";
          } else if ((*claimed)[i].claimed) {
            mine[t] = claims[i].ticket;
          }
        }
        sync.arrive_and_wait();
      }
    });
  }

  int bad = 0;
  int failed = 0;
  std::string first_bad;
  for (int round = 0; round < rounds; ++round) {
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    std::vector<ReleaseRequest> releases;
    for (int t = 0; t < kTasks; ++t) {
      int winners = 0;
      for (int h = 0; h < kHosts; ++h) {
        const std::string& ticket =
            results[static_cast<std::size_t>(h)][static_cast<std::size_t>(t)];
        if (ticket == "!") {
          ++failed;
        } else if (!ticket.empty()) {
          ++winners;
          releases.push_back({ids[static_cast<std::size_t>(t)], ticket, schedule, std::nullopt});
        }
      }
      if (winners != 1 && bad++ == 0) {
        first_bad = "round " + std::to_string(round) + ", " + ids[static_cast<std::size_t>(t)] +
                    ": " + std::to_string(winners) + " winners";
      }
    }
    Result<std::vector<ReleaseResult>> released = store_->ReleaseMany(releases);
    if (!released.ok() || std::count_if(released->begin(), released->end(),
                                        [](const ReleaseResult& r) { return r.released; }) !=
                              static_cast<std::ptrdiff_t>(releases.size())) {
      ++failed;
    }
  }
  threads.clear();
  EXPECT_EQ(bad, 0) << first_bad << " (of " << rounds << " rounds)";
  EXPECT_EQ(failed, 0);
}

// --- Mutual exclusion -------------------------------------------------------------------------

TEST_F(TaskStoreContractTest, ExactlyOneOfEightHostsWinsEachClaimRace) {
  constexpr int kHosts = 8;
  const int rounds = fixture_->claim_race_rounds();
  const TaskSchedule schedule = Schedule("PT0S");
  std::vector<std::unique_ptr<TaskStore>> hosts;
  for (int i = 0; i < kHosts; ++i) {
    hosts.push_back(fixture_->OpenStore());
    ASSERT_NE(hosts.back(), nullptr);
  }
  ASSERT_TRUE(Upsert("race", schedule).has_value());

  enum Outcome : int { kLost = 0, kWon = 1, kFailed = 2 };
  std::array<std::atomic<int>, kHosts> outcomes{};
  std::barrier sync(kHosts + 1);
  std::vector<std::jthread> threads;
  threads.reserve(kHosts);
  for (int h = 0; h < kHosts; ++h) {
    threads.emplace_back([&, h] {
      for (int round = 0; round < rounds; ++round) {
        sync.arrive_and_wait();
        const std::string ticket = "r" + std::to_string(round) + "-h" + std::to_string(h);
        Result<ClaimResult> claim =
            hosts[static_cast<std::size_t>(h)]->Claim("race", ticket, minutes(1), minutes(1));
        outcomes[static_cast<std::size_t>(h)] =
            !claim.ok() ? kFailed : (claim->claimed ? kWon : kLost);
        sync.arrive_and_wait();
      }
    });
  }

  int bad_rounds = 0;
  int failed_claims = 0;
  int failed_releases = 0;
  std::string first_bad;
  for (int round = 0; round < rounds; ++round) {
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    int winners = 0;
    int winner = -1;
    for (int h = 0; h < kHosts; ++h) {
      const int outcome = outcomes[static_cast<std::size_t>(h)];
      if (outcome == kWon) {
        ++winners;
        winner = h;
      } else if (outcome == kFailed) {
        ++failed_claims;
      }
    }
    if (winners != 1) {
      if (bad_rounds++ == 0) {
        first_bad =
            "round " + std::to_string(round) + " had " + std::to_string(winners) + " winners";
      }
    }
    if (winner >= 0) {
      const std::string ticket = "r" + std::to_string(round) + "-h" + std::to_string(winner);
      Result<bool> released = store_->Release("race", ticket, schedule, std::nullopt);
      if (!released.ok() || !*released) ++failed_releases;
    }
  }
  threads.clear();
  EXPECT_EQ(bad_rounds, 0) << first_bad << " (of " << rounds << " rounds)";
  EXPECT_EQ(failed_claims, 0);
  EXPECT_EQ(failed_releases, 0);
}

}  // namespace
}  // namespace stagehand::contract
