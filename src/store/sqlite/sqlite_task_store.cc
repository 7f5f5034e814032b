#include "stagehand/store/sqlite_task_store.h"

#include "store/sqlite/sqlite_store.h"

namespace stagehand::store_internal {

namespace {

namespace sql = sqlite_sql;
namespace history_sql = sqlite_history_sql;

}  // namespace

Status SqliteTaskStore::Migrate() {
  RecursiveMutexLock lock(mu_);
  STAGEHAND_RETURN_IF_ERROR(store_internal::MigrateSqlite(*db_, clock_));
  STAGEHAND_RETURN_IF_ERROR(store_internal::MigrateSqliteHistory(*db_));
  history_tables_ = HistoryTables::kPresent;
  registrations_table_ = HistoryTables::kPresent;
  return Status::Ok();
}

Result<UpsertResult> SqliteTaskStore::Upsert(const std::string& id, const TaskSchedule& schedule) {
  STAGEHAND_RETURN_IF_ERROR(schedule.settings.Validate());
  const WallTime db_now = db_clock_.Now();
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan start, store_internal::PlanInsertStart(schedule, db_now));
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan reregister,
                             store_internal::PlanReregisterStart(schedule, db_now));
  RecursiveMutexLock lock(mu_);
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

Result<std::vector<UpsertResult>> SqliteTaskStore::UpsertMany(std::span<const TaskUpsert> tasks) {
  if (tasks.empty()) return std::vector<UpsertResult>();
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<store_internal::PlannedUpsert> planned,
                             store_internal::PlanUpserts(tasks, db_clock_.Now()));
  RecursiveMutexLock lock(mu_);
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

Result<PollResult> SqliteTaskStore::Poll(std::span<const std::string> ids, bool sweep_expired) {
  return PollWith(sql::kPoll, store_internal::JsonArray(ids), sweep_expired);
}

Result<PollResult> SqliteTaskStore::PollChanged(
    std::span<const std::string> ids, std::span<const std::optional<std::int64_t>> known_versions,
    bool sweep_expired) {
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

Status SqliteTaskStore::WarmUp() {
  RecursiveMutexLock lock(mu_);
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

Result<ClaimResult> SqliteTaskStore::Claim(const std::string& id, const std::string& ticket,
                                           std::chrono::milliseconds timeout,
                                           std::chrono::milliseconds lease) {
  RecursiveMutexLock lock(mu_);
  return ClaimLocked(id, ticket, timeout, lease, std::nullopt);
}

Result<std::vector<ClaimResult>> SqliteTaskStore::ClaimMany(std::span<const ClaimRequest> claims,
                                                            std::chrono::milliseconds lease) {
  if (claims.empty()) return std::vector<ClaimResult>();
  RecursiveMutexLock lock(mu_);
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

Result<std::vector<ReleaseResult>> SqliteTaskStore::ReleaseMany(
    std::span<const ReleaseRequest> releases) {
  if (releases.empty()) return std::vector<ReleaseResult>();
  std::vector<NextRunPlan> plans;
  plans.reserve(releases.size());
  const WallTime db_now = db_clock_.Now();
  for (const ReleaseRequest& release : releases) {
    STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan next, store_internal::PlanRelease(release, db_now));
    plans.push_back(next);
  }
  RecursiveMutexLock lock(mu_);
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
    STAGEHAND_ASSIGN_OR_RETURN(ReleaseResult released, ReleaseLocked(release.id, release.ticket,
                                                                     plans[i], release.error_json));
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

Result<LeaseStatus> SqliteTaskStore::RenewLease(const std::string& id, const std::string& ticket,
                                                std::chrono::milliseconds timeout,
                                                std::chrono::milliseconds lease) {
  RecursiveMutexLock lock(mu_);
  STAGEHAND_ASSIGN_OR_RETURN(
      std::optional<LeaseStatus> renewed,
      RenewLocked(id, ticket, CancelRequestedTicket(ticket), timeout, lease));
  if (renewed) return *renewed;
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> pending,
                             PendingPauseTicketLocked(id, ticket));
  if (!pending) return LeaseStatus::kLost;
  const std::string& stored = *pending;
  STAGEHAND_ASSIGN_OR_RETURN(renewed, RenewLocked(id, stored,
                                                  RowTicket::Decode(stored).cancel_requested
                                                      ? stored
                                                      : CancelRequestedTicket(stored),
                                                  timeout, lease));
  return renewed.value_or(LeaseStatus::kLost);
}

Result<bool> SqliteTaskStore::Release(const std::string& id, const std::string& ticket,
                                      const TaskSchedule& schedule,
                                      const std::optional<std::string>& error_json) {
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan next,
                             store_internal::PlanReleaseNext(schedule, db_clock_.Now()));
  RecursiveMutexLock lock(mu_);
  STAGEHAND_ASSIGN_OR_RETURN(ReleaseResult released, ReleaseLocked(id, ticket, next, error_json));
  return released.released;
}

Result<SkipResult> SqliteTaskStore::SkipSlot(const std::string& id, std::int64_t expected_version,
                                             WallTime slot, const TaskSchedule& schedule) {
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan next,
                             store_internal::PlanSkipNext(schedule, slot, db_clock_.Now()));
  RecursiveMutexLock lock(mu_);
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

Status SqliteTaskStore::Trigger(const std::string& id) {
  RecursiveMutexLock lock(mu_);
  {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kTrigger));
    STAGEHAND_RETURN_IF_ERROR(stmt.Bind(1, id).Run("triggering a task"));
    if (db_->Changes() == 1) return Status::Ok();
  }
  return UnchangedLocked(id, "triggering a task", [&](const std::string& ticket) {
    return RowTicket::Decode(ticket).paused()
               ? store_internal::PausedError(id)
               : ConflictError(fmt::format("Task {} is currently running", id));
  });
}

Status SqliteTaskStore::Cancel(const std::string& id, std::chrono::milliseconds hold) {
  RecursiveMutexLock lock(mu_);
  std::string settings_json;
  std::string ticket;
  {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kReadForCancel));
    STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Bind(1, id).Step("cancelling a task"));
    if (!row) return NotFoundError(fmt::format("Task {} does not exist", id));
    settings_json = stmt.Text(0);
    ticket = stmt.OptionalText(1).value_or("");
  }
  if (ticket.empty() || RowTicket::Decode(ticket).paused()) {
    return ConflictError(fmt::format("Task {} is not running", id));
  }
  Result<TaskSettingsV2> settings = TaskSettingsV2::FromJson(settings_json);
  if (!settings.ok()) {
    return db_->Error(
        StatusCode::kInvalidArgument,
        fmt::format("task '{}' has unparsable settings: {}", id, settings.status().message()));
  }
  if (RowTicket::Decode(ticket).cancel_requested) return Status::Ok();
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kMarkCancelled));
  stmt.Bind(1, id)
      .Bind(2, ticket)
      .Bind(3, CancelRequestedTicket(ticket))
      .Bind(4, DurationModifier(hold));
  STAGEHAND_RETURN_IF_ERROR(stmt.Run("cancelling a task"));
  if (db_->Changes() != 1) return ConflictError(fmt::format("Task {} is not running", id));
  return Status::Ok();
}

Result<std::vector<std::string>> SqliteTaskStore::SweepExpired() {
  RecursiveMutexLock lock(mu_);
  STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryTablesLocked());
  if (!history) return SweepLocked();
  SqliteTransaction transaction(*db_);
  STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<std::string> swept, SweepLocked());
  STAGEHAND_RETURN_IF_ERROR(transaction.Commit());
  return swept;
}

Result<std::vector<TaskRow>> SqliteTaskStore::States() {
  RecursiveMutexLock lock(mu_);
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

Status SqliteTaskStore::Delete(const std::string& id) {
  RecursiveMutexLock lock(mu_);
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kDelete));
  return stmt.Bind(1, id).Run("deleting a task");
}

Result<WallTime> SqliteTaskStore::DatabaseNow() {
  RecursiveMutexLock lock(mu_);
  return NowLocked();
}

std::unique_ptr<Notifications> SqliteTaskStore::Listen(std::function<void(const StoreEvent&)>) {
  return nullptr;
}

Result<ClaimResult> SqliteTaskStore::ClaimLocked(const std::string& id, const std::string& ticket,
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

Result<std::optional<WallTime>> SqliteTaskStore::ReadTime(const SqliteStatement& stmt, int column,
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

Status SqliteTaskStore::ReadTimes(
    const SqliteStatement& stmt, std::string_view id,
    std::initializer_list<std::pair<int, std::optional<WallTime>*>> columns) const {
  for (const auto& [column, target] : columns) {
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> time, ReadTime(stmt, column, id));
    *target = time;
  }
  return Status::Ok();
}

Result<WallTime> SqliteTaskStore::ObserveNow(const SqliteStatement& stmt, int column,
                                             WallTime sent) {
  const WallTime received = clock_.Now();
  Result<WallTime> now = store_internal::ParseSqliteTime(stmt.Text(column));
  if (!now.ok()) return db_->Error(StatusCode::kInternal, now.status().message());
  db_clock_.Observe(sent, received, *now);
  return *now;
}

Result<WallTime> SqliteTaskStore::NowLocked() {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kDatabaseNow));
  const WallTime sent = clock_.Now();
  STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("reading the database clock"));
  STAGEHAND_CHECK(row);
  return ObserveNow(stmt, 0, sent);
}

Result<PollResult> SqliteTaskStore::PollWith(std::string_view poll_sql, const std::string& argument,
                                             bool sweep_expired) {
  RecursiveMutexLock lock(mu_);
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

Result<PollEntry> SqliteTaskStore::ReadPollEntry(const SqliteStatement& stmt) {
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
  Result<TaskSettingsV2> settings = TaskSettingsV2::FromJson(stmt.Text(2));
  if (!settings.ok()) {
    entry.readiness = Readiness::kInvalidSettings;
    entry.settings_error = settings.status().message();
    return entry;
  }
  entry.settings = std::move(*settings);
  entry.readiness = stmt.Int(6) != 0 ? Readiness::kReady : Readiness::kNotReady;
  return entry;
}

Status SqliteTaskStore::UnchangedLocked(
    const std::string& id, const char* what,
    const std::function<Status(const std::string& ticket)>& refusal) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement read, db_->Prepare(sql::kReadTicket));
  STAGEHAND_ASSIGN_OR_RETURN(bool row, read.Bind(1, id).Step(what));
  if (!row) return NotFoundError(fmt::format("Task {} does not exist", id));
  return refusal(read.OptionalText(0).value_or(""));
}

Result<std::optional<LeaseStatus>> SqliteTaskStore::RenewLocked(const std::string& id,
                                                                const std::string& ticket,
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

Result<std::vector<std::string>> SqliteTaskStore::SweepLocked() {
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

Result<ReleaseResult> SqliteTaskStore::ReleaseLocked(const std::string& id,
                                                     const std::string& ticket,
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

Result<std::optional<ReleaseResult>> SqliteTaskStore::StepRelease(SqliteStatement& stmt,
                                                                  const std::string& id) {
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

}  // namespace stagehand::store_internal

namespace stagehand {

using store_internal::SqliteDatabase;
using store_internal::SqliteTaskStore;

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
