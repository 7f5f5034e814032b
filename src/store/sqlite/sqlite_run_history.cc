#include "store/sqlite/sqlite_store.h"

namespace stagehand::store_internal {

namespace {

namespace sql = sqlite_sql;
namespace history_sql = sqlite_history_sql;

}  // namespace

Status SqliteTaskStore::RecordStarts(std::span<const RunStart> starts) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateStarts(starts));
  if (starts.empty()) return Status::Ok();
  RecursiveMutexLock lock(mu_);
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

Result<std::size_t> SqliteTaskStore::RecordEnds(std::span<const RunEnd> ends) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateEnds(ends));
  if (ends.empty()) return std::size_t{0};
  const RunHistoryLimits limits = limits_.Get();
  RecursiveMutexLock lock(mu_);
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

Result<RunPage> SqliteTaskStore::ListRuns(const std::string& task_id, int limit,
                                          const std::optional<std::string>& before) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePageSize(limit));
  RecursiveMutexLock lock(mu_);
  return SqliteRunTable(*db_).List(task_id, limit, before);
}

Result<TaskRun> SqliteTaskStore::GetRun(const std::string& run_id) {
  RecursiveMutexLock lock(mu_);
  return SqliteRunTable(*db_).Get(run_id);
}

Result<std::size_t> SqliteTaskStore::MarkLost(std::span<const std::string> run_ids,
                                              const std::string& error_json) {
  if (run_ids.empty()) return std::size_t{0};
  RecursiveMutexLock lock(mu_);
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

Result<std::size_t> SqliteTaskStore::PruneExpired(std::size_t max_rows) {
  const std::chrono::hours max_age = limits_.Get().max_age;
  RecursiveMutexLock lock(mu_);
  return SqliteRunTable(*db_).Prune(max_age, max_rows);
}

Result<bool> SqliteTaskStore::TablesExist() {
  RecursiveMutexLock lock(mu_);
  return HistoryTablesLocked();
}

Result<bool> SqliteTaskStore::HistoryTablesLocked() {
  if (history_tables_ == HistoryTables::kUnknown) {
    STAGEHAND_ASSIGN_OR_RETURN(bool exists, SqliteRunTable(*db_).Exists());
    history_tables_ = exists ? HistoryTables::kPresent : HistoryTables::kAbsent;
  }
  return history_tables_ == HistoryTables::kPresent;
}

Status SqliteTaskStore::TrimLocked(std::vector<std::string>& tasks, int keep,
                                   std::span<const std::string> closed) {
  std::sort(tasks.begin(), tasks.end());
  tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
  SqliteRunTable runs(*db_);
  for (const std::string& task : tasks) {
    STAGEHAND_RETURN_IF_ERROR(runs.Trim(task, keep, closed));
  }
  return Status::Ok();
}

}  // namespace stagehand::store_internal
