// The run history's operations on SQLite's stagehand_task_runs table (the SQL is in
// sqlite_history_sql.h). SqliteTaskStore runs them on its connection with its mutex held, inside
// its own transaction where the operation is part of a claim, release or sweep.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/model/task_run.h"
#include "stagehand/store/run_history.h"
#include "store/sqlite/sqlite_database.h"

namespace stagehand::store_internal {

// A view of the runs table through one connection. Not thread-safe (nor is the connection).
class SqliteRunTable {
 public:
  explicit SqliteRunTable(SqliteDatabase& db) : db_(db) {}

  // Returns whether stagehand_task_runs exists.
  Result<bool> Exists();

  // Records a run as running unless its id is recorded. `started_at` is stored text; nullopt
  // means now.
  Status RecordStart(std::string_view run_id, std::string_view task_id, const RunOrigin& origin,
                     const std::optional<std::string>& started_at);

  // Closes a running or lost run with `finish` (output cut to `max_output_bytes`) at `ended_at`
  // (stored text; nullopt: now). Returns its task id when it closed it.
  Result<std::optional<std::string>> CloseRun(std::string_view run_id, const RunFinish& finish,
                                              const std::optional<std::string>& ended_at,
                                              std::size_t max_output_bytes);

  // Removes the task's ended runs beyond its `keep` newest by seq, but those in `closed` (the runs
  // the caller just closed).
  Status Trim(std::string_view task_id, int keep, std::span<const std::string> closed);

  // Closes a running run as lost now. Returns whether it did.
  Result<bool> MarkLost(std::string_view run_id, const std::string& error_json);

  // Closes as lost, at `now` (stored text), the runs of the claims that a sweep at `now` resets.
  Status MarkSweptRunsLost(const std::string& now, const std::string& error_json);

  // ListRuns' page (see RunHistory::ListRuns).
  Result<RunPage> List(const std::string& task_id, int limit,
                       const std::optional<std::string>& before);

  // GetRun (see RunHistory::GetRun).
  Result<TaskRun> Get(const std::string& run_id);

  // PruneExpired (see RunHistory::PruneExpired).
  Result<std::size_t> Prune(std::chrono::hours max_age, std::size_t max_rows);

 private:
  // Reads the run in the row `stmt` is on (the columns of sqlite_history_sql::kListRuns).
  Result<TaskRun> ReadRun(const SqliteStatement& stmt) const;
  Result<WallTime> ReadTime(const SqliteStatement& stmt, int column, std::string_view run_id) const;

  SqliteDatabase& db_;
};

}  // namespace stagehand::store_internal
