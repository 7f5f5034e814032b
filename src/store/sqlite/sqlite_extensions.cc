#include "store/sqlite/sqlite_store.h"

namespace stagehand::store_internal {

namespace {

namespace sql = sqlite_sql;
namespace history_sql = sqlite_history_sql;

}  // namespace

Result<KeyedOutcome> SqliteTaskStore::ApplyOnce(const KeyedRequest& request,
                                                const std::function<Result<KeptAnswer>()>& apply) {
  RecursiveMutexLock lock(mu_);
  SqliteTransaction transaction(*db_);
  STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
  {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement removed,
                               db_->Prepare(history_sql::kRemoveExpiredRequestKeys));
    STAGEHAND_RETURN_IF_ERROR(removed.Run("removing expired idempotency keys"));
  }
  {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement earlier, db_->Prepare(history_sql::kReadRequestKey));
    earlier.Bind(1, request.key);
    STAGEHAND_ASSIGN_OR_RETURN(bool found, earlier.Step("reading an idempotency key"));
    if (found) {
      if (earlier.Text(0) != request.fingerprint) {
        return ConflictError(
            fmt::format("the idempotency key {} was first sent with another request", request.key));
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

Result<std::size_t> SqliteTaskStore::RefreshRegistrations(std::span<const std::string> task_ids,
                                                          const std::string& host) {
  if (task_ids.empty()) return std::size_t{0};
  RecursiveMutexLock lock(mu_);
  STAGEHAND_ASSIGN_OR_RETURN(bool present, RegistrationsTableLocked(/*again_if_absent=*/true));
  if (!present) return std::size_t{0};
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt,
                             db_->Prepare(history_sql::kRefreshRegistrations));
  STAGEHAND_RETURN_IF_ERROR(stmt.Bind(1, store_internal::JsonArray(task_ids))
                                .Bind(2, host)
                                .Run("refreshing task registrations"));
  return static_cast<std::size_t>(db_->Changes());
}

Result<std::vector<PruneCandidate>> SqliteTaskStore::ListPruneCandidates(WallTime cutoff) {
  RecursiveMutexLock lock(mu_);
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

Result<std::vector<std::string>> SqliteTaskStore::PruneTasks(std::span<const std::string> task_ids,
                                                             WallTime cutoff, PruneScope scope) {
  RecursiveMutexLock lock(mu_);
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

Result<std::vector<SqliteTaskStore::PruneRow>> SqliteTaskStore::PruneRowsLocked(
    const std::optional<std::string>& ids) {
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

Result<bool> SqliteTaskStore::RegistrationsTableLocked(bool again_if_absent) {
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

Status SqliteTaskStore::RequireRegistrationsLocked() {
  STAGEHAND_ASSIGN_OR_RETURN(bool present, RegistrationsTableLocked(/*again_if_absent=*/true));
  if (present) return Status::Ok();
  return db_->Error(StatusCode::kFailedPrecondition,
                    "the database has no stagehand_task_registrations table (it was migrated "
                    "by an older stagehand); run the migrations (stagehand db migrate)");
}

Status SqliteTaskStore::RecordRegistrationsLocked(std::span<const TaskUpsert> tasks) {
  std::string pairs;
  for (const TaskUpsert& task : tasks) {
    if (!task.registered_by) continue;
    const std::string pair[] = {task.id, *task.registered_by};
    pairs += (pairs.empty() ? "[" : ",") + store_internal::JsonArray(pair);
  }
  if (pairs.empty()) return Status::Ok();
  STAGEHAND_ASSIGN_OR_RETURN(bool present, RegistrationsTableLocked(/*again_if_absent=*/false));
  if (!present) return Status::Ok();
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(history_sql::kRecordRegistrations));
  return stmt.Bind(1, pairs + "]").Run("registering a task");
}

Status SqliteTaskStore::Pause(const std::string& id, const PauseRequest& request,
                              std::chrono::milliseconds hold) {
  RecursiveMutexLock lock(mu_);
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
  return UnchangedLocked(
      id, "pausing a task", [&](const std::string& ticket) STAGEHAND_REQUIRES(mu_) {
        const RowTicket held = RowTicket::Decode(ticket);
        if (held.kind != RowTicket::Kind::kRun || held.run.empty()) {
          return ConflictError(fmt::format("Task {} changed while it was being paused", id));
        }
        return RewriteTicketLocked(id, ticket, held.WithPendingPause(request),
                                   DurationModifier(hold), "pausing a task");
      });
}

Status SqliteTaskStore::Resume(const std::string& id) {
  RecursiveMutexLock lock(mu_);
  {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kResume));
    STAGEHAND_RETURN_IF_ERROR(stmt.Bind(1, id).Run("resuming a task"));
    if (db_->Changes() == 1) return Status::Ok();
  }
  return UnchangedLocked(id, "resuming a task",
                         [&](const std::string& ticket) STAGEHAND_REQUIRES(mu_) {
                           const RowTicket held = RowTicket::Decode(ticket);
                           if (held.kind != RowTicket::Kind::kRun || !held.pause_json) {
                             return store_internal::NotPausedError(id);
                           }
                           return RewriteTicketLocked(id, ticket, held.WithoutPendingPause(),
                                                      std::nullopt, "resuming a task");
                         });
}

Result<std::optional<std::string>> SqliteTaskStore::PendingPauseTicketLocked(
    const std::string& id, const std::string& ticket) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement read, db_->Prepare(sql::kReadTicket));
  STAGEHAND_ASSIGN_OR_RETURN(bool row, read.Bind(1, id).Step("reading a ticket"));
  std::optional<std::string> stored = row ? read.OptionalText(0) : std::nullopt;
  if (!stored) return stored;
  const RowTicket held = RowTicket::Decode(*stored);
  if (!held.HeldBy(ticket) || !held.pause_json) return std::optional<std::string>();
  return stored;
}

Result<std::vector<std::string>> SqliteTaskStore::SweepIntoPausesLocked(bool history) {
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
    const RowTicket held = RowTicket::Decode(run.ticket);
    Result<WallTime> now = store_internal::ParseSqliteTime(run.now);
    if (held.kind != RowTicket::Kind::kRun || !now.ok()) continue;
    if (history) {
      RunFinish lost;
      lost.outcome = RunOutcome::kLost;
      lost.error_json = timed_out;
      STAGEHAND_RETURN_IF_ERROR(SqliteRunTable(*db_).CloseRun(held.run, lost, run.now, 0));
    }
    const std::optional<store_internal::PauseAfterRun> pause =
        store_internal::PauseLeftBy(held, *now);
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

Result<ReleaseResult> SqliteTaskStore::ReleaseIntoPauseLocked(
    const std::string& id, const std::string& ticket, const NextRunPlan& next,
    const std::optional<std::string>& error_json) {
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> stored,
                             PendingPauseTicketLocked(id, ticket));
  if (!stored) return ReleaseResult{};
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, NowLocked());
  const RowTicket held = RowTicket::Decode(*stored);
  const std::optional<store_internal::PauseAfterRun> pause = store_internal::PauseLeftBy(held, now);
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::ReleaseIntoPause(next.kind)));
  stmt.Bind(1, id)
      .Bind(2, *stored)
      .BindOptional(
          3, held.cancel_requested ? std::optional(ErrorJson("Task was cancelled")) : error_json);
  BindPlan(stmt, 4, next);
  stmt.BindOptional(5, pause ? std::optional(pause->ticket) : std::nullopt);
  stmt.BindOptional(6, pause && pause->until ? std::optional(store_internal::FormatSqliteTime(
                                                   store_internal::ToMillis(*pause->until)))
                                             : std::nullopt);
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<ReleaseResult> released, StepRelease(stmt, id));
  return released.value_or(ReleaseResult{});
}

Status SqliteTaskStore::RewriteTicketLocked(const std::string& id, const std::string& stored,
                                            const std::string& replacement,
                                            const std::optional<std::string>& hold,
                                            const char* what) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_->Prepare(sql::kRewriteTicket));
  STAGEHAND_RETURN_IF_ERROR(
      stmt.Bind(1, id).Bind(2, stored).Bind(3, replacement).BindOptional(4, hold).Run(what));
  if (db_->Changes() == 1) return Status::Ok();
  return ConflictError(fmt::format("Task {} changed while {}; try again", id, what));
}

}  // namespace stagehand::store_internal
