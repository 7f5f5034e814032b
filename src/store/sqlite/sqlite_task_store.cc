#include "stagehand/store/sqlite_task_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <mutex>
#include <utility>

#include "stagehand/model/task_state.h"
#include "store/next_run.h"
#include "store/prune_rule.h"
#include "store/row_rules.h"
#include "store/run_history_support.h"
#include "store/settings_cache.h"
#include "store/sqlite/sqlite_database.h"
#include "store/sqlite/sqlite_history_sql.h"
#include "store/sqlite/sqlite_migrations.h"
#include "store/sqlite/sqlite_run_table.h"
#include "store/sqlite/sqlite_sql.h"
#include "store/sqlite/sqlite_time.h"
#include "store/task_pause.h"

namespace stagehand {

namespace {

using store_internal::DatabaseClock;
using store_internal::NextRunPlan;
using store_internal::SqliteDatabase;
using store_internal::SqliteRunTable;
using store_internal::SqliteStatement;
using store_internal::SqliteTransaction;
namespace sql = store_internal::sqlite_sql;
namespace history_sql = store_internal::sqlite_history_sql;

std::string DurationModifier(std::chrono::milliseconds duration) {
  return store_internal::SecondsModifier(std::chrono::duration<double>(duration).count());
}

void BindPlan(SqliteStatement& stmt, int param, const NextRunPlan& plan) {
  switch (plan.kind) {
    case NextRunPlan::Kind::kNowPlus:
    case NextRunPlan::Kind::kScheduledPlusCadence:
      stmt.Bind(param, store_internal::SecondsModifier(plan.seconds));
      break;
    case NextRunPlan::Kind::kInstant:
      stmt.Bind(param, store_internal::FormatSqliteTime(plan.instant));
      break;
    case NextRunPlan::Kind::kNull:
    case NextRunPlan::Kind::kNow:
      break;
  }
}

// The SQLite TaskStore, its run history and its task registrations: one connection, serialised by
// a mutex. Thread-safe.
class SqliteTaskStore final : public TaskStore,
                              public RunHistory,
                              public TaskRegistrations,
                              public RequestKeys {
 public:
  SqliteTaskStore(std::string plugin_id, std::unique_ptr<SqliteDatabase> db, const Clock& clock)
      : plugin_id_(std::move(plugin_id)), clock_(clock), db_clock_(clock), db_(std::move(db)) {}

  const std::string& plugin_id() const override { return plugin_id_; }

  Status Migrate() override {
    std::lock_guard lock(mu_);
    STAGEHAND_RETURN_IF_ERROR(store_internal::MigrateSqlite(*db_, clock_));
    STAGEHAND_RETURN_IF_ERROR(store_internal::MigrateSqliteHistory(*db_));
    history_tables_ = HistoryTables::kPresent;
    registrations_table_ = HistoryTables::kPresent;
    return Status::Ok();
  }

  Result<UpsertResult> Upsert(const std::string& id, const TaskSchedule& schedule) override {
    STAGEHAND_RETURN_IF_ERROR(ValidateTaskSchedule(schedule));
    const WallTime db_now = db_clock_.Now();
    STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan start,
                               store_internal::PlanInsertStart(schedule, db_now));
    STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan reregister,
                               store_internal::PlanReregisterStart(schedule, db_now));
    std::lock_guard lock(mu_);
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt,
                               db_->Prepare(sql::Upsert(start.kind, reregister.kind)));
    stmt.Bind(1, id).Bind(2, schedule.settings.ToJson());
    BindPlan(stmt, 3, start);
    BindPlan(stmt, 4, reregister);
    const WallTime sent = clock_.Now();
    STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("registering a task"));
    STAGEHAND_CHECK(row);
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> next, ReadTime(stmt, 0, id));
    STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(stmt, 1, sent));
    return UpsertResult{next, now, stmt.Int(2)};
  }

  Result<std::vector<UpsertResult>> UpsertMany(std::span<const TaskUpsert> tasks) override {
    if (tasks.empty()) return std::vector<UpsertResult>();
    STAGEHAND_ASSIGN_OR_RETURN(std::vector<store_internal::PlannedUpsert> planned,
                               store_internal::PlanUpserts(tasks, db_clock_.Now()));
    std::lock_guard lock(mu_);
    SqliteTransaction transaction(*db_);
    STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
    std::vector<UpsertResult> results;
    results.reserve(tasks.size());
    const WallTime sent = clock_.Now();
    std::optional<WallTime> now;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const store_internal::PlannedUpsert& plan = planned[i];
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt,
                                 db_->Prepare(sql::Upsert(plan.insert.kind, plan.reregister.kind)));
      stmt.Bind(1, tasks[i].id).Bind(2, plan.settings_json);
      BindPlan(stmt, 3, plan.insert);
      BindPlan(stmt, 4, plan.reregister);
      STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("registering a task"));
      STAGEHAND_CHECK(row);
      STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> next, ReadTime(stmt, 0, tasks[i].id));
      if (!now) {
        STAGEHAND_ASSIGN_OR_RETURN(WallTime observed, ObserveNow(stmt, 1, sent));
        now = observed;
      }
      results.push_back(UpsertResult{next, *now, stmt.Int(2)});
      STAGEHAND_RETURN_IF_ERROR(stmt.Run("registering a task"));
    }
    STAGEHAND_RETURN_IF_ERROR(RecordRegistrationsLocked(tasks));
    STAGEHAND_RETURN_IF_ERROR(transaction.Commit());
    return results;
  }

  Result<PollResult> Poll(std::span<const std::string> ids, bool sweep_expired) override {
    return PollWith(sql::kPoll, store_internal::JsonArray(ids), sweep_expired);
  }

  Result<PollResult> PollChanged(std::span<const std::string> ids,
                                 std::span<const std::optional<std::int64_t>> known_versions,
                                 bool sweep_expired) override {
    STAGEHAND_CHECK(ids.size() == known_versions.size());
    std::string known = "[";
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) known += ',';
      known += store_internal::JsonArray(ids.subspan(i, 1));
      known.back() = ',';
      known += known_versions[i] ? std::to_string(*known_versions[i]) : "null";
      known += ']';
    }
    known += ']';
    return PollWith(sql::kPollChanged, known, sweep_expired);
  }

  Status WarmUp() override {
    std::lock_guard lock(mu_);
    const std::string_view statements[] = {
        sql::kPoll,          sql::kPollChanged, sql::kSweepExpired, sql::kClaim,
        sql::kClaimVersion,  sql::kRenewLease,  sql::kTrigger,      sql::kReadTicket,
        sql::kReadForCancel, sql::kStates,      sql::kDelete,       sql::kDatabaseNow,
    };
    for (std::string_view statement : statements) {
      STAGEHAND_RETURN_IF_ERROR(db_->Prepare(statement));
    }
    return Status::Ok();
  }

  Result<ClaimResult> Claim(const std::string& id, const std::string& ticket,
                            std::chrono::milliseconds timeout,
                            std::chrono::milliseconds lease) override {
    std::lock_guard lock(mu_);
    return ClaimLocked(id, ticket, timeout, lease, std::nullopt);
  }

  Result<std::vector<ClaimResult>> ClaimMany(std::span<const ClaimRequest> claims,
                                             std::chrono::milliseconds lease) override {
    if (claims.empty()) return std::vector<ClaimResult>();
    std::lock_guard lock(mu_);
    SqliteTransaction transaction(*db_);
    STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
    std::vector<ClaimResult> results;
    results.reserve(claims.size());
    for (const ClaimRequest& claim : claims) {
      STAGEHAND_ASSIGN_OR_RETURN(
          ClaimResult claimed,
          ClaimLocked(claim.id, claim.ticket, claim.timeout, lease, claim.expected_version));
      if (claimed.claimed && claim.history) {
        STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryTablesLocked());
        if (history) {
          STAGEHAND_RETURN_IF_ERROR(
              SqliteRunTable(*db_).RecordStart(claim.ticket, claim.id, *claim.history,
                                               store_internal::FormatSqliteTime(claimed.db_now)));
        }
      }
      results.push_back(claimed);
    }
    STAGEHAND_RETURN_IF_ERROR(transaction.Commit());
    return results;
  }

  Result<std::vector<ReleaseResult>> ReleaseMany(
      std::span<const ReleaseRequest> releases) override {
    if (releases.empty()) return std::vector<ReleaseResult>();
    std::vector<NextRunPlan> plans;
    plans.reserve(releases.size());
    const WallTime db_now = db_clock_.Now();
    for (const ReleaseRequest& release : releases) {
      STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan next, store_internal::PlanRelease(release, db_now));
      plans.push_back(next);
    }
    std::lock_guard lock(mu_);
    SqliteTransaction transaction(*db_);
    STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
    std::vector<ReleaseResult> results;
    results.reserve(releases.size());
    std::optional<WallTime> now;
    std::vector<std::string> ended_tasks;
    std::vector<std::string> closed;
    const RunHistoryLimits limits = limits_.Get();
    for (std::size_t i = 0; i < releases.size(); ++i) {
      const ReleaseRequest& release = releases[i];
      bool history = false;
      if (release.history) {
        STAGEHAND_ASSIGN_OR_RETURN(bool present, HistoryTablesLocked());
        history = present;
      }
      STAGEHAND_ASSIGN_OR_RETURN(
          ReleaseResult released,
          ReleaseLocked(release.id, release.ticket, plans[i], release.error_json));
      if (released.released && !now) now = released.db_now;
      if (history) {
        SqliteRunTable runs(*db_);
        STAGEHAND_RETURN_IF_ERROR(
            runs.RecordStart(release.ticket, release.id, release.history->origin,
                             store_internal::FormatSqliteTime(release.history->started_at)));
        STAGEHAND_ASSIGN_OR_RETURN(
            std::optional<std::string> task,
            runs.CloseRun(release.ticket, release.history->finish,
                          released.released ? std::optional<std::string>(
                                                  store_internal::FormatSqliteTime(released.db_now))
                                            : std::nullopt,
                          limits.max_output_bytes));
        if (task) {
          ended_tasks.push_back(std::move(*task));
          closed.push_back(release.ticket);
        }
      }
      results.push_back(std::move(released));
    }
    STAGEHAND_RETURN_IF_ERROR(TrimLocked(ended_tasks, limits.max_runs_per_task, closed));
    if (!now) {
      STAGEHAND_ASSIGN_OR_RETURN(WallTime observed, NowLocked());
      now = observed;
    }
    for (ReleaseResult& result : results) {
      if (!result.released) result.db_now = *now;
    }
    STAGEHAND_RETURN_IF_ERROR(transaction.Commit());
    return results;
  }

  Result<LeaseStatus> RenewLease(const std::string& id, const std::string& ticket,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds lease) override {
    std::lock_guard lock(mu_);
    STAGEHAND_ASSIGN_OR_RETURN(
        std::optional<LeaseStatus> renewed,
        RenewLocked(id, ticket, CancelRequestedTicket(ticket), timeout, lease));
    if (renewed) return *renewed;
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> pending,
                               PendingPauseTicketLocked(id, ticket));
    if (!pending) return LeaseStatus::kLost;
    const std::string& stored = *pending;
    STAGEHAND_ASSIGN_OR_RETURN(renewed, RenewLocked(id, stored,
                                                    stored.starts_with(kCancelRequestedPrefix)
                                                        ? stored
                                                        : CancelRequestedTicket(stored),
                                                    timeout, lease));
    return renewed.value_or(LeaseStatus::kLost);
  }

  Result<bool> Release(const std::string& id, const std::string& ticket,
                       const TaskSchedule& schedule,
                       const std::optional<std::string>& error_json) override {
    STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan next,
                               store_internal::PlanReleaseNext(schedule, db_clock_.Now()));
    std::lock_guard lock(mu_);
    STAGEHAND_ASSIGN_OR_RETURN(ReleaseResult released, ReleaseLocked(id, ticket, next, error_json));
    return released.released;
  }

  Result<SkipResult> SkipSlot(const std::string& id, std::int64_t expected_version, WallTime slot,
                              const TaskSchedule& schedule) override {
    STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan next,
                               store_internal::PlanSkipNext(schedule, slot, db_clock_.Now()));
    std::lock_guard lock(mu_);
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kSkipSlot));
    stmt.Bind(1, id).Bind(2, expected_version);
    BindPlan(stmt, 3, next);
    const WallTime sent = clock_.Now();
    STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("skipping a missed slot"));
    SkipResult result;
    if (!row) {
      result.db_now = db_clock_.Now();
      return result;
    }
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> next_start, ReadTime(stmt, 0, id));
    STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(stmt, 2, sent));
    result.skipped = true;
    result.next_run_start_at = next_start;
    result.version = stmt.Int(1);
    result.db_now = now;
    STAGEHAND_RETURN_IF_ERROR(stmt.Run("skipping a missed slot"));
    return result;
  }

  using TaskStore::Trigger;  // no notifications: a caller's trace context stays on this host
  Status Trigger(const std::string& id) override {
    std::lock_guard lock(mu_);
    {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kTrigger));
      STAGEHAND_RETURN_IF_ERROR(stmt.Bind(1, id).Run("triggering a task"));
      if (db_->Changes() == 1) return Status::Ok();
    }
    return UnchangedLocked(id, "triggering a task", [&](const std::string& ticket) {
      return store_internal::IsPausedTicket(ticket)
                 ? store_internal::PausedError(id)
                 : ConflictError(fmt::format("Task {} is currently running", id));
    });
  }

  Status Pause(const std::string& id, const PauseRequest& request,
               std::chrono::milliseconds hold) override {
    std::lock_guard lock(mu_);
    STAGEHAND_ASSIGN_OR_RETURN(WallTime now, NowLocked());
    STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePause(request, now));
    {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kPause));
      stmt.Bind(1, id).Bind(2, PausedTicket(request));
      if (request.until) {
        stmt.Bind(3, store_internal::FormatSqliteTime(*request.until));
      } else {
        stmt.BindNull(3);
      }
      STAGEHAND_RETURN_IF_ERROR(stmt.Run("pausing a task"));
      if (db_->Changes() == 1) return Status::Ok();
    }
    return UnchangedLocked(id, "pausing a task", [&](const std::string& ticket) {
      const std::optional<store_internal::HeldTicket> held =
          store_internal::ParseHeldTicket(ticket);
      if (!held || held->run_ticket.empty()) {
        return ConflictError(fmt::format("Task {} changed while it was being paused", id));
      }
      return RewriteTicketLocked(id, ticket, store_internal::PausePendingTicket(*held, request),
                                 DurationModifier(hold), "pausing a task");
    });
  }

  Status Resume(const std::string& id) override {
    std::lock_guard lock(mu_);
    {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kResume));
      STAGEHAND_RETURN_IF_ERROR(stmt.Bind(1, id).Run("resuming a task"));
      if (db_->Changes() == 1) return Status::Ok();
    }
    return UnchangedLocked(id, "resuming a task", [&](const std::string& ticket) {
      const std::optional<store_internal::HeldTicket> held =
          store_internal::ParseHeldTicket(ticket);
      if (!held || !held->pending_pause) return store_internal::NotPausedError(id);
      return RewriteTicketLocked(id, ticket, store_internal::WithoutPendingPause(*held),
                                 std::nullopt, "resuming a task");
    });
  }

  Status Cancel(const std::string& id, std::chrono::milliseconds hold) override {
    std::lock_guard lock(mu_);
    std::string settings_json;
    std::string ticket;
    {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kReadForCancel));
      STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Bind(1, id).Step("cancelling a task"));
      if (!row) return NotFoundError(fmt::format("Task {} does not exist", id));
      settings_json = stmt.Text(0);
      ticket = stmt.OptionalText(1).value_or("");
    }
    if (ticket.empty() || store_internal::IsPausedTicket(ticket)) {
      return ConflictError(fmt::format("Task {} is not running", id));
    }
    Result<TaskSettingsV2> settings = TaskSettingsV2::FromJson(settings_json);
    if (!settings.ok()) {
      return db_->Error(
          StatusCode::kInvalidArgument,
          fmt::format("task '{}' has unparsable settings: {}", id, settings.status().message()));
    }
    if (ticket.starts_with(kCancelRequestedPrefix)) return Status::Ok();
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kMarkCancelled));
    stmt.Bind(1, id)
        .Bind(2, ticket)
        .Bind(3, CancelRequestedTicket(ticket))
        .Bind(4, DurationModifier(hold));
    STAGEHAND_RETURN_IF_ERROR(stmt.Run("cancelling a task"));
    if (db_->Changes() != 1) return ConflictError(fmt::format("Task {} is not running", id));
    return Status::Ok();
  }

  Result<std::vector<std::string>> SweepExpired() override {
    std::lock_guard lock(mu_);
    STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryTablesLocked());
    if (!history) return SweepLocked();
    SqliteTransaction transaction(*db_);
    STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
    STAGEHAND_ASSIGN_OR_RETURN(std::vector<std::string> swept, SweepLocked());
    STAGEHAND_RETURN_IF_ERROR(transaction.Commit());
    return swept;
  }

  Result<std::vector<TaskRow>> States() override {
    std::lock_guard lock(mu_);
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kStates));
    std::vector<TaskRow> rows;
    while (true) {
      STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("listing tasks"));
      if (!row) return rows;
      TaskRow task;
      task.id = stmt.Text(0);
      task.settings_json = stmt.Text(1);
      task.current_run_ticket = stmt.OptionalText(3);
      task.last_run_error_json = stmt.OptionalText(6);
      STAGEHAND_RETURN_IF_ERROR(ReadTimes(stmt, task.id,
                                          {{2, &task.next_run_start_at},
                                           {4, &task.current_run_started_at},
                                           {5, &task.current_run_expires_at},
                                           {7, &task.last_run_ended_at}}));
      rows.push_back(std::move(task));
    }
  }

  Status Delete(const std::string& id) override {
    std::lock_guard lock(mu_);
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kDelete));
    return stmt.Bind(1, id).Run("deleting a task");
  }

  Result<WallTime> DatabaseNow() override {
    std::lock_guard lock(mu_);
    return NowLocked();
  }

  std::unique_ptr<Notifications> Listen(std::function<void(const StoreEvent&)>) override {
    return nullptr;
  }

  RunHistory* history() override { return this; }

  TaskRegistrations* registrations() override { return this; }

  RequestKeys* request_keys() override { return this; }

  // Holds mu_ (recursive: `apply`'s own calls of this store take it again) and the write lock for
  // the whole request; `apply`'s transactions become savepoints of this one.
  Result<KeyedOutcome> ApplyOnce(const KeyedRequest& request,
                                 const std::function<Result<KeptAnswer>()>& apply) override {
    std::lock_guard lock(mu_);
    SqliteTransaction transaction(*db_);
    STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
    {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement removed,
                                 db_->Prepare(history_sql::kRemoveExpiredRequestKeys));
      STAGEHAND_RETURN_IF_ERROR(removed.Run("removing expired idempotency keys"));
    }
    {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement earlier,
                                 db_->Prepare(history_sql::kReadRequestKey));
      earlier.Bind(1, request.key);
      STAGEHAND_ASSIGN_OR_RETURN(bool found, earlier.Step("reading an idempotency key"));
      if (found) {
        if (earlier.Text(0) != request.fingerprint) {
          return ConflictError(fmt::format(
              "the idempotency key {} was first sent with another request", request.key));
        }
        return KeyedOutcome{KeptAnswer{static_cast<int>(earlier.Int(1)), earlier.Text(2)},
                            /*replayed=*/true};
      }
    }
    STAGEHAND_ASSIGN_OR_RETURN(KeptAnswer answer, apply());
    {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement kept, db_->Prepare(history_sql::kKeepRequestKey));
      STAGEHAND_RETURN_IF_ERROR(kept.Bind(1, request.key)
                                    .Bind(2, request.fingerprint)
                                    .Bind(3, static_cast<std::int64_t>(request.retention.count()))
                                    .Bind(4, static_cast<std::int64_t>(answer.status))
                                    .Bind(5, answer.body)
                                    .Run("keeping an idempotency key"));
    }
    STAGEHAND_RETURN_IF_ERROR(transaction.Commit());
    return KeyedOutcome{std::move(answer), /*replayed=*/false};
  }

  void SetLimits(const RunHistoryLimits& limits) override { limits_.Set(limits); }

  RunHistoryLimits limits() const override { return limits_.Get(); }

  Status RecordStarts(std::span<const RunStart> starts) override {
    STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateStarts(starts));
    if (starts.empty()) return Status::Ok();
    std::lock_guard lock(mu_);
    SqliteTransaction transaction(*db_);
    STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
    SqliteRunTable runs(*db_);
    for (const RunStart& start : starts) {
      STAGEHAND_RETURN_IF_ERROR(runs.RecordStart(
          start.run_id, start.task_id, start.origin,
          start.started_at
              ? std::optional<std::string>(store_internal::FormatSqliteTime(*start.started_at))
              : std::nullopt));
    }
    return transaction.Commit();
  }

  Result<std::size_t> RecordEnds(std::span<const RunEnd> ends) override {
    STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateEnds(ends));
    if (ends.empty()) return std::size_t{0};
    const RunHistoryLimits limits = limits_.Get();
    std::lock_guard lock(mu_);
    SqliteTransaction transaction(*db_);
    STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
    SqliteRunTable runs(*db_);
    std::vector<std::string> ended_tasks;
    std::vector<std::string> closed;
    for (const RunEnd& end : ends) {
      STAGEHAND_ASSIGN_OR_RETURN(
          std::optional<std::string> task,
          runs.CloseRun(end.run_id, end.finish,
                        end.ended_at ? std::optional<std::string>(
                                           store_internal::FormatSqliteTime(*end.ended_at))
                                     : std::nullopt,
                        limits.max_output_bytes));
      if (task) {
        ended_tasks.push_back(std::move(*task));
        closed.push_back(end.run_id);
      }
    }
    STAGEHAND_RETURN_IF_ERROR(TrimLocked(ended_tasks, limits.max_runs_per_task, closed));
    STAGEHAND_RETURN_IF_ERROR(transaction.Commit());
    return closed.size();
  }

  Result<RunPage> ListRuns(const std::string& task_id, int limit,
                           const std::optional<std::string>& before) override {
    STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePageSize(limit));
    std::lock_guard lock(mu_);
    return SqliteRunTable(*db_).List(task_id, limit, before);
  }

  Result<TaskRun> GetRun(const std::string& run_id) override {
    std::lock_guard lock(mu_);
    return SqliteRunTable(*db_).Get(run_id);
  }

  Result<std::size_t> MarkLost(std::span<const std::string> run_ids,
                               const std::string& error_json) override {
    if (run_ids.empty()) return std::size_t{0};
    std::lock_guard lock(mu_);
    SqliteTransaction transaction(*db_);
    STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
    SqliteRunTable runs(*db_);
    std::size_t closed = 0;
    for (const std::string& run_id : run_ids) {
      STAGEHAND_ASSIGN_OR_RETURN(bool lost, runs.MarkLost(run_id, error_json));
      if (lost) ++closed;
    }
    STAGEHAND_RETURN_IF_ERROR(transaction.Commit());
    return closed;
  }

  Result<std::size_t> PruneExpired(std::size_t max_rows) override {
    const std::chrono::hours max_age = limits_.Get().max_age;
    std::lock_guard lock(mu_);
    return SqliteRunTable(*db_).Prune(max_age, max_rows);
  }

  Result<std::size_t> RefreshRegistrations(std::span<const std::string> task_ids,
                                           const std::string& host) override {
    if (task_ids.empty()) return std::size_t{0};
    std::lock_guard lock(mu_);
    STAGEHAND_ASSIGN_OR_RETURN(bool present, RegistrationsTableLocked(/*again_if_absent=*/true));
    if (!present) return std::size_t{0};
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt,
                               db_->Prepare(history_sql::kRefreshRegistrations));
    STAGEHAND_RETURN_IF_ERROR(stmt.Bind(1, store_internal::JsonArray(task_ids))
                                  .Bind(2, host)
                                  .Run("refreshing task registrations"));
    return static_cast<std::size_t>(db_->Changes());
  }

  Result<std::vector<PruneCandidate>> ListPruneCandidates(WallTime cutoff) override {
    std::lock_guard lock(mu_);
    STAGEHAND_RETURN_IF_ERROR(RequireRegistrationsLocked());
    STAGEHAND_ASSIGN_OR_RETURN(WallTime now, NowLocked());
    STAGEHAND_ASSIGN_OR_RETURN(std::vector<PruneRow> rows, PruneRowsLocked(std::nullopt));
    std::vector<PruneCandidate> candidates;
    for (PruneRow& row : rows) {
      if (!store_internal::IsPruneCandidate(row.task, row.last_seen_at, cutoff, now)) continue;
      candidates.push_back(PruneCandidate{std::move(row.task.id), std::move(row.host),
                                          row.last_seen_at, row.task.last_run_ended_at,
                                          row.task.next_run_start_at});
    }
    return candidates;
  }

  Result<std::vector<std::string>> PruneTasks(std::span<const std::string> task_ids,
                                              WallTime cutoff, PruneScope scope) override {
    std::lock_guard lock(mu_);
    STAGEHAND_RETURN_IF_ERROR(RequireRegistrationsLocked());
    if (task_ids.empty()) return std::vector<std::string>();
    SqliteTransaction transaction(*db_);
    STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
    STAGEHAND_ASSIGN_OR_RETURN(WallTime now, NowLocked());
    STAGEHAND_ASSIGN_OR_RETURN(std::vector<PruneRow> rows,
                               PruneRowsLocked(store_internal::JsonArray(task_ids)));
    STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryTablesLocked());
    std::vector<std::string> deleted;
    for (const PruneRow& row : rows) {
      if (!row.host && scope != PruneScope::kIncludeUnregistered) continue;
      if (!store_internal::IsPruneCandidate(row.task, row.last_seen_at, cutoff, now)) continue;
      std::vector<std::string_view> statements = {sql::kDelete, history_sql::kDeleteRegistration};
      if (history) statements.push_back(history_sql::kDeleteTaskRuns);
      for (std::string_view statement : statements) {
        STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(statement));
        STAGEHAND_RETURN_IF_ERROR(stmt.Bind(1, row.task.id).Run("pruning a task"));
      }
      deleted.push_back(row.task.id);
    }
    STAGEHAND_RETURN_IF_ERROR(transaction.Commit());
    return deleted;
  }

  Result<bool> TablesExist() override {
    std::lock_guard lock(mu_);
    return HistoryTablesLocked();
  }

 private:
  // Claim, with mu_ held; with an `expected_version`, only a row of that version is claimed.
  Result<ClaimResult> ClaimLocked(const std::string& id, const std::string& ticket,
                                  std::chrono::milliseconds timeout,
                                  std::chrono::milliseconds lease,
                                  std::optional<std::int64_t> expected_version) {
    ClaimResult result;
    {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt,
                                 db_->Prepare(expected_version ? sql::kClaimVersion : sql::kClaim));
      stmt.Bind(1, id).Bind(2, ticket).Bind(3, DurationModifier(std::min(timeout, lease)));
      if (expected_version) stmt.Bind(4, *expected_version);
      const WallTime sent = clock_.Now();
      STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("claiming a task"));
      if (row) {
        STAGEHAND_ASSIGN_OR_RETURN(WallTime started, ObserveNow(stmt, 0, sent));
        STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> expires, ReadTime(stmt, 1, id));
        result.claimed = true;
        result.db_now = started;
        result.expires_at = expires;
        STAGEHAND_RETURN_IF_ERROR(stmt.Run("claiming a task"));
        return result;
      }
    }
    STAGEHAND_ASSIGN_OR_RETURN(WallTime now, NowLocked());
    result.db_now = now;
    return result;
  }

  // Reads a timestamp column of task `id`: NULL, our or Backstage's text, or integer epoch
  // milliseconds.
  Result<std::optional<WallTime>> ReadTime(const SqliteStatement& stmt, int column,
                                           std::string_view id) const {
    if (stmt.IsNull(column)) return std::optional<WallTime>();
    if (stmt.IsInteger(column)) {
      return std::optional<WallTime>(store_internal::FromEpochMilliseconds(stmt.Int(column)));
    }
    Result<WallTime> time = store_internal::ParseSqliteTime(stmt.Text(column));
    if (!time.ok()) {
      return db_->Error(
          StatusCode::kFailedPrecondition,
          fmt::format("task '{}': {}: {}", id, stmt.ColumnName(column), time.status().message()));
    }
    return std::optional<WallTime>(*time);
  }

  // Reads the nullable time columns of task `id` into their targets.
  Status ReadTimes(const SqliteStatement& stmt, std::string_view id,
                   std::initializer_list<std::pair<int, std::optional<WallTime>*>> columns) const {
    for (const auto& [column, target] : columns) {
      STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> time, ReadTime(stmt, column, id));
      *target = time;
    }
    return Status::Ok();
  }

  // Reads the database's now from `column` and feeds the clock estimate.
  Result<WallTime> ObserveNow(const SqliteStatement& stmt, int column, WallTime sent) {
    const WallTime received = clock_.Now();
    Result<WallTime> now = store_internal::ParseSqliteTime(stmt.Text(column));
    if (!now.ok()) return db_->Error(StatusCode::kInternal, now.status().message());
    db_clock_.Observe(sent, received, *now);
    return *now;
  }

  Result<WallTime> NowLocked() {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kDatabaseNow));
    const WallTime sent = clock_.Now();
    STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("reading the database clock"));
    STAGEHAND_CHECK(row);
    return ObserveNow(stmt, 0, sent);
  }

  // Runs a poll statement (kPoll or kPollChanged) with `argument` as ?1.
  Result<PollResult> PollWith(std::string_view poll_sql, const std::string& argument,
                              bool sweep_expired) {
    std::lock_guard lock(mu_);
    PollResult result;
    SqliteTransaction transaction(*db_);
    if (sweep_expired) {
      STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
      STAGEHAND_ASSIGN_OR_RETURN(std::vector<std::string> swept, SweepLocked());
      result.swept_ids = std::move(swept);
    }
    std::optional<WallTime> now;
    {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(poll_sql));
      stmt.Bind(1, argument);
      const WallTime sent = clock_.Now();
      while (true) {
        STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("polling tasks"));
        if (!row) break;
        if (!now) {
          STAGEHAND_ASSIGN_OR_RETURN(WallTime observed, ObserveNow(stmt, 7, sent));
          now = observed;
        }
        STAGEHAND_ASSIGN_OR_RETURN(PollEntry entry, ReadPollEntry(stmt));
        result.entries.push_back(std::move(entry));
      }
    }
    if (!now) {
      STAGEHAND_ASSIGN_OR_RETURN(WallTime observed, NowLocked());
      now = observed;
    }
    result.db_now = *now;
    if (sweep_expired) STAGEHAND_RETURN_IF_ERROR(transaction.Commit());
    result.earliest_next = store_internal::EarliestIdleNext(result.entries);
    return result;
  }

  Result<PollEntry> ReadPollEntry(const SqliteStatement& stmt) {
    PollEntry entry;
    entry.id = stmt.Text(0);
    if (stmt.Int(1) == 0) {
      entry.readiness = Readiness::kMissing;
      return entry;
    }
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> next, ReadTime(stmt, 3, entry.id));
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> expires, ReadTime(stmt, 5, entry.id));
    entry.next_run_start_at = next;
    entry.current_run_expires_at = expires;
    entry.running = !stmt.IsNull(4);
    entry.version = stmt.Int(8);
    Result<TaskSettingsV2> settings = settings_cache_.Parse(stmt.Text(2));
    if (!settings.ok()) {
      entry.readiness = Readiness::kInvalidSettings;
      entry.settings_error = settings.status().message();
      return entry;
    }
    entry.settings = std::move(*settings);
    entry.readiness = stmt.Int(6) != 0 ? Readiness::kReady : Readiness::kNotReady;
    return entry;
  }

  // Whether the history tables exist, with mu_ held: known after Migrate, else looked up once.
  Result<bool> HistoryTablesLocked() {
    if (history_tables_ == HistoryTables::kUnknown) {
      STAGEHAND_ASSIGN_OR_RETURN(bool exists, SqliteRunTable(*db_).Exists());
      history_tables_ = exists ? HistoryTables::kPresent : HistoryTables::kAbsent;
    }
    return history_tables_ == HistoryTables::kPresent;
  }

  // Trims the history of each of `tasks` (ids may repeat) to its newest `keep` runs, keeping the
  // runs in `closed` (just closed by the caller), with mu_ held.
  Status TrimLocked(std::vector<std::string>& tasks, int keep,
                    std::span<const std::string> closed) {
    std::sort(tasks.begin(), tasks.end());
    tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
    SqliteRunTable runs(*db_);
    for (const std::string& task : tasks) {
      STAGEHAND_RETURN_IF_ERROR(runs.Trim(task, keep, closed));
    }
    return Status::Ok();
  }

  // Why a conditional update of task `id` (`what`, for errors) changed no row, with mu_ held:
  // kNotFound when the row does not exist, else `refusal` of the ticket it holds (empty: none).
  Status UnchangedLocked(const std::string& id, const char* what,
                         const std::function<Status(const std::string& ticket)>& refusal) {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement read, db_->Prepare(sql::kReadTicket));
    STAGEHAND_ASSIGN_OR_RETURN(bool row, read.Bind(1, id).Step(what));
    if (!row) return NotFoundError(fmt::format("Task {} does not exist", id));
    return refusal(read.OptionalText(0).value_or(""));
  }

  // Extends the expiry of the run holding `id` with `ticket` (kHeld) or `marked`
  // (kCancelRequested), with mu_ held; nullopt when neither holds it.
  Result<std::optional<LeaseStatus>> RenewLocked(const std::string& id, const std::string& ticket,
                                                 const std::string& marked,
                                                 std::chrono::milliseconds timeout,
                                                 std::chrono::milliseconds lease) {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kRenewLease));
    stmt.Bind(1, id)
        .Bind(2, ticket)
        .Bind(3, DurationModifier(timeout))
        .Bind(4, DurationModifier(lease))
        .Bind(5, marked);
    STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("renewing a lease"));
    if (!row) return std::optional<LeaseStatus>();
    const bool cancel_requested = stmt.Int(0) != 0;
    STAGEHAND_RETURN_IF_ERROR(stmt.Run("renewing a lease"));
    return std::optional(cancel_requested ? LeaseStatus::kCancelRequested : LeaseStatus::kHeld);
  }

  // Replaces the ticket `stored` of `id`, bringing its expiry forward by the modifier `hold` when
  // given, with mu_ held. Errors: kConflict when another process changed it meanwhile.
  Status RewriteTicketLocked(const std::string& id, const std::string& stored,
                             const std::string& replacement, const std::optional<std::string>& hold,
                             const char* what) {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kRewriteTicket));
    STAGEHAND_RETURN_IF_ERROR(
        stmt.Bind(1, id).Bind(2, stored).Bind(3, replacement).BindOptional(4, hold).Run(what));
    if (db_->Changes() == 1) return Status::Ok();
    return ConflictError(fmt::format("Task {} changed while {}; try again", id, what));
  }

  // Returns the ticket of `id` when it holds the row for the run `ticket` with a pending pause
  // (ADR 0013), with mu_ held; nullopt otherwise.
  Result<std::optional<std::string>> PendingPauseTicketLocked(const std::string& id,
                                                              const std::string& ticket) {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement read, db_->Prepare(sql::kReadTicket));
    STAGEHAND_ASSIGN_OR_RETURN(bool row, read.Bind(1, id).Step("reading a ticket"));
    std::optional<std::string> stored = row ? read.OptionalText(0) : std::nullopt;
    if (!stored) return stored;
    const std::optional<store_internal::HeldTicket> held = store_internal::ParseHeldTicket(*stored);
    if (!held || held->run_ticket != ticket || !held->pending_pause)
      return std::optional<std::string>();
    return stored;
  }

  // Resets the expired runs, with mu_ held; where the history tables exist, inside the caller's
  // transaction, also closes their runs as lost at the same now.
  Result<std::vector<std::string>> SweepLocked() {
    STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryTablesLocked());
    {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement resume, db_->Prepare(sql::kResumeExpiredPauses));
      STAGEHAND_RETURN_IF_ERROR(resume.Run("resuming expired pauses"));
    }
    std::string now;
    if (history) {
      STAGEHAND_ASSIGN_OR_RETURN(WallTime observed, NowLocked());
      now = store_internal::FormatSqliteTime(observed);
      STAGEHAND_RETURN_IF_ERROR(
          SqliteRunTable(*db_).MarkSweptRunsLost(now, ErrorJson("Task timed out")));
    }
    STAGEHAND_ASSIGN_OR_RETURN(std::vector<std::string> paused, SweepIntoPausesLocked(history));
    std::vector<std::string> ids = std::move(paused);
    STAGEHAND_ASSIGN_OR_RETURN(
        SqliteStatement stmt,
        db_->Prepare(history ? history_sql::kSweepExpiredAt : sql::kSweepExpired));
    stmt.Bind(1, ErrorJson("Task timed out"));
    if (history) stmt.Bind(2, now);
    while (true) {
      STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("resetting expired runs"));
      if (!row) break;
      ids.push_back(stmt.Text(0));
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  // Resets the expired runs whose tickets carry a pending pause, leaving their rows paused (and
  // closing their runs as lost when `history`), with mu_ held. Returns their ids.
  Result<std::vector<std::string>> SweepIntoPausesLocked(bool history) {
    struct Expired {
      std::string id;
      std::string ticket;
      std::string now;
    };
    std::vector<Expired> expired;
    {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement read, db_->Prepare(sql::kExpiredPendingPauses));
      while (true) {
        STAGEHAND_ASSIGN_OR_RETURN(bool row, read.Step("reading expired runs"));
        if (!row) break;
        expired.push_back(Expired{read.Text(0), read.Text(1), read.Text(2)});
      }
    }
    std::vector<std::string> ids;
    const std::string timed_out = ErrorJson("Task timed out");
    for (const Expired& run : expired) {
      const std::optional<store_internal::HeldTicket> held =
          store_internal::ParseHeldTicket(run.ticket);
      Result<WallTime> now = store_internal::ParseSqliteTime(run.now);
      if (!held || !now.ok()) continue;
      if (history) {
        RunFinish lost;
        lost.outcome = RunOutcome::kLost;
        lost.error_json = timed_out;
        STAGEHAND_RETURN_IF_ERROR(
            SqliteRunTable(*db_).CloseRun(held->run_ticket, lost, run.now, 0));
      }
      const std::optional<store_internal::PauseAfterRun> pause =
          store_internal::PauseLeftBy(*held, *now);
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kSweepIntoPause));
      stmt.Bind(1, run.id).Bind(2, run.ticket).Bind(3, timed_out);
      stmt.BindOptional(4, pause ? std::optional(pause->ticket) : std::nullopt);
      stmt.BindOptional(5, pause && pause->until ? std::optional(store_internal::FormatSqliteTime(
                                                       store_internal::ToMillis(*pause->until)))
                                                 : std::nullopt);
      stmt.Bind(6, run.now);
      STAGEHAND_RETURN_IF_ERROR(stmt.Run("resetting expired runs"));
      if (db_->Changes() == 1) ids.push_back(run.id);
    }
    return ids;
  }

  // Release, with mu_ held. A result that is not released carries no db_now.
  Result<ReleaseResult> ReleaseLocked(const std::string& id, const std::string& ticket,
                                      const NextRunPlan& next,
                                      const std::optional<std::string>& error_json) {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::Release(next.kind)));
    stmt.Bind(1, id)
        .Bind(2, ticket)
        .BindOptional(3, error_json)
        .Bind(5, CancelRequestedTicket(ticket))
        .Bind(6, ErrorJson("Task was cancelled"));
    BindPlan(stmt, 4, next);
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<ReleaseResult> released, StepRelease(stmt, id));
    if (released) return *released;
    return ReleaseIntoPauseLocked(id, ticket, next, error_json);
  }

  // Release of a run whose ticket carries a pending pause, with mu_ held: leaves the row paused.
  // Not released when the row holds no such ticket for the run.
  Result<ReleaseResult> ReleaseIntoPauseLocked(const std::string& id, const std::string& ticket,
                                               const NextRunPlan& next,
                                               const std::optional<std::string>& error_json) {
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> stored,
                               PendingPauseTicketLocked(id, ticket));
    if (!stored) return ReleaseResult{};
    STAGEHAND_ASSIGN_OR_RETURN(WallTime now, NowLocked());
    const std::optional<store_internal::HeldTicket> held = store_internal::ParseHeldTicket(*stored);
    const std::optional<store_internal::PauseAfterRun> pause =
        store_internal::PauseLeftBy(*held, now);
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt,
                               db_->Prepare(sql::ReleaseIntoPause(next.kind)));
    stmt.Bind(1, id)
        .Bind(2, *stored)
        .BindOptional(3, held->cancel_requested ? std::optional(ErrorJson("Task was cancelled"))
                                                : error_json);
    BindPlan(stmt, 4, next);
    stmt.BindOptional(5, pause ? std::optional(pause->ticket) : std::nullopt);
    stmt.BindOptional(6, pause && pause->until ? std::optional(store_internal::FormatSqliteTime(
                                                     store_internal::ToMillis(*pause->until)))
                                               : std::nullopt);
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<ReleaseResult> released, StepRelease(stmt, id));
    return released.value_or(ReleaseResult{});
  }

  // Steps a release statement (Release, ReleaseIntoPause) to its end. nullopt when it released
  // nothing (then it carries no db_now).
  Result<std::optional<ReleaseResult>> StepRelease(SqliteStatement& stmt, const std::string& id) {
    const WallTime sent = clock_.Now();
    STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("releasing a task"));
    if (!row) return std::optional<ReleaseResult>();
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> next_start, ReadTime(stmt, 0, id));
    STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(stmt, 2, sent));
    ReleaseResult result;
    result.released = true;
    result.next_run_start_at = next_start;
    result.version = stmt.Int(1);
    result.db_now = now;
    STAGEHAND_RETURN_IF_ERROR(stmt.Run("releasing a task"));
    return std::optional(result);
  }

  // A task row with its registration, as the prune rule reads them.
  struct PruneRow {
    TaskRow task;  // id and the times the rule reads
    std::optional<std::string> host;
    std::optional<WallTime> last_seen_at;
  };

  // Reads kPruneRows (no `ids`) or kPruneRowsOf (`ids`: a JSON array), with mu_ held.
  Result<std::vector<PruneRow>> PruneRowsLocked(const std::optional<std::string>& ids) {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(ids ? history_sql::kPruneRowsOf
                                                                      : history_sql::kPruneRows));
    if (ids) stmt.Bind(1, *ids);
    std::vector<PruneRow> rows;
    while (true) {
      STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("listing prune candidates"));
      if (!row) return rows;
      PruneRow& read = rows.emplace_back();
      read.task.id = stmt.Text(0);
      read.task.current_run_ticket = stmt.OptionalText(2);
      read.host = stmt.OptionalText(6);
      STAGEHAND_RETURN_IF_ERROR(ReadTimes(stmt, read.task.id,
                                          {{1, &read.task.next_run_start_at},
                                           {3, &read.task.current_run_started_at},
                                           {4, &read.task.current_run_expires_at},
                                           {5, &read.task.last_run_ended_at},
                                           {7, &read.last_seen_at}}));
    }
  }

  // Whether stagehand_task_registrations exists, with mu_ held: known after Migrate, else looked
  // up once, or again when it was absent and `again_if_absent`.
  Result<bool> RegistrationsTableLocked(bool again_if_absent) {
    if (registrations_table_ == HistoryTables::kUnknown ||
        (registrations_table_ == HistoryTables::kAbsent && again_if_absent)) {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt,
                                 db_->Prepare(history_sql::kRegistrationsTableExists));
      STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("looking for the task registrations"));
      registrations_table_ =
          row && stmt.Int(0) > 0 ? HistoryTables::kPresent : HistoryTables::kAbsent;
    }
    return registrations_table_ == HistoryTables::kPresent;
  }

  // Errors: kFailedPrecondition when stagehand_task_registrations is missing (looked for again if
  // it was before), with mu_ held.
  Status RequireRegistrationsLocked() {
    STAGEHAND_ASSIGN_OR_RETURN(bool present, RegistrationsTableLocked(/*again_if_absent=*/true));
    if (present) return Status::Ok();
    return db_->Error(StatusCode::kFailedPrecondition,
                      "the database has no stagehand_task_registrations table (it was migrated "
                      "by an older stagehand); run the migrations (stagehand db migrate)");
  }

  // Records the registrations `tasks` carry, inside the caller's transaction, with mu_ held;
  // nothing when none carries one or the table is missing.
  Status RecordRegistrationsLocked(std::span<const TaskUpsert> tasks) {
    std::string pairs;
    for (const TaskUpsert& task : tasks) {
      if (!task.registered_by) continue;
      const std::string pair[] = {task.id, *task.registered_by};
      pairs += (pairs.empty() ? "[" : ",") + store_internal::JsonArray(pair);
    }
    if (pairs.empty()) return Status::Ok();
    STAGEHAND_ASSIGN_OR_RETURN(bool present, RegistrationsTableLocked(/*again_if_absent=*/false));
    if (!present) return Status::Ok();
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt,
                               db_->Prepare(history_sql::kRecordRegistrations));
    return stmt.Bind(1, pairs + "]").Run("registering a task");
  }

  enum class HistoryTables { kUnknown, kPresent, kAbsent };

  const std::string plugin_id_;
  const Clock& clock_;
  DatabaseClock db_clock_;
  store_internal::SettingsCache settings_cache_;
  store_internal::LimitsHolder limits_;
  std::recursive_mutex mu_;
  std::unique_ptr<SqliteDatabase> db_;                      // guarded by mu_
  HistoryTables history_tables_ = HistoryTables::kUnknown;  // guarded by mu_
  // Whether stagehand_task_registrations exists. Guarded by mu_.
  HistoryTables registrations_table_ = HistoryTables::kUnknown;
};

}  // namespace

std::string SqlitePluginDatabasePath(const std::string& directory, const std::string& plugin_id) {
  return (std::filesystem::path(directory) / (plugin_id + ".sqlite")).string();
}

Result<std::unique_ptr<TaskStore>> OpenSqliteTaskStore(const std::string& plugin_id,
                                                       const SqliteStoreOptions& options,
                                                       const Clock& clock) {
  STAGEHAND_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDatabase> db,
                             SqliteDatabase::Open(plugin_id, options.path, options.busy_timeout));
  return std::unique_ptr<TaskStore>(new SqliteTaskStore(plugin_id, std::move(db), clock));
}

}  // namespace stagehand
