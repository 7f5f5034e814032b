#include "store/sqlite/sqlite_run_table.h"

#include <fmt/format.h>

#include <utility>

#include "store/run_history_support.h"
#include "store/sqlite/sqlite_history_sql.h"
#include "store/sqlite/sqlite_time.h"

namespace stagehand::store_internal {

namespace sql = sqlite_history_sql;

Result<bool> SqliteRunTable::Exists() {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_.Prepare(sql::kTableExists));
  STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("looking for the run history"));
  return row && stmt.Int(0) > 0;
}

Status SqliteRunTable::RecordStart(std::string_view run_id, std::string_view task_id,
                                   const RunOrigin& origin,
                                   const std::optional<std::string>& started_at) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_.Prepare(sql::kRecordStart));
  stmt.Bind(1, run_id)
      .Bind(2, task_id)
      .Bind(3, origin.host)
      .Bind(4, origin.pid)
      .Bind(5, RunTriggerName(origin.trigger))
      .BindOptional(6, origin.slot ? std::optional<std::string>(FormatSqliteTime(*origin.slot))
                                   : std::nullopt)
      .BindOptional(7, started_at)
      .Bind(8, static_cast<std::int64_t>(origin.attempt))
      .BindOptional(9, origin.trace_id);
  return stmt.Run("recording a run's start");
}

Result<std::optional<std::string>> SqliteRunTable::CloseRun(
    std::string_view run_id, const RunFinish& finish, const std::optional<std::string>& ended_at,
    std::size_t max_output_bytes) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_.Prepare(sql::kCloseRun));
  const auto optional_int = [](std::optional<int> value) -> std::optional<std::int64_t> {
    if (!value) return std::nullopt;
    return *value;
  };
  stmt.Bind(1, run_id)
      .BindOptional(2, ended_at)
      .Bind(3, RunOutcomeName(finish.outcome))
      .BindOptional(4, finish.error_json)
      .BindOptionalInt(5, optional_int(finish.exit_code))
      .BindOptionalInt(6, optional_int(finish.signal))
      .BindOptionalInt(7, optional_int(finish.http_status))
      .BindBlob(8, OutputTail(finish.output_tail, max_output_bytes));
  STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("recording a run's end"));
  if (!row) return std::optional<std::string>();
  std::string task_id = stmt.Text(0);
  STAGEHAND_RETURN_IF_ERROR(stmt.Run("recording a run's end"));
  return std::optional<std::string>(std::move(task_id));
}

Status SqliteRunTable::Trim(std::string_view task_id, int keep,
                            std::span<const std::string> closed) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_.Prepare(sql::kTrimTask));
  return stmt.Bind(1, task_id)
      .Bind(2, static_cast<std::int64_t>(keep))
      .Bind(3, JsonArray(closed))
      .Bind(4, static_cast<std::int64_t>(kRunTrimWindow))
      .Run("trimming a task's run history");
}

Result<bool> SqliteRunTable::MarkLost(std::string_view run_id, const std::string& error_json) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_.Prepare(sql::kMarkLost));
  STAGEHAND_RETURN_IF_ERROR(stmt.Bind(1, run_id).Bind(2, error_json).Run("marking a run lost"));
  return db_.Changes() == 1;
}

Status SqliteRunTable::MarkSweptRunsLost(const std::string& now, const std::string& error_json) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_.Prepare(sql::kMarkSweptRunsLost));
  return stmt.Bind(1, now).Bind(2, error_json).Run("marking swept runs lost");
}

Result<RunPage> SqliteRunTable::List(const std::string& task_id, int limit,
                                     const std::optional<std::string>& before) {
  std::optional<std::pair<std::string, std::string>> after;  // start (stored text), run id
  if (before) {
    if (std::optional<RunCursor> cursor = DecodeRunCursor(*before)) {
      after.emplace(FormatSqliteTime(cursor->started_at), cursor->run_id);
    } else {
      STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement anchor, db_.Prepare(sql::kRunStart));
      STAGEHAND_ASSIGN_OR_RETURN(bool row, anchor.Bind(1, *before).Step("listing runs"));
      if (!row) {
        return InvalidArgumentError(
            fmt::format("before: '{}' is neither a page cursor nor a run id", *before));
      }
      after.emplace(anchor.Text(0), *before);
    }
  }
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt,
                             db_.Prepare(after ? sql::kListRunsBefore : sql::kListRuns));
  stmt.Bind(1, task_id).Bind(2, static_cast<std::int64_t>(limit) + 1);
  if (after) stmt.Bind(3, after->first).Bind(4, after->second);
  RunPage page;
  while (true) {
    STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("listing runs"));
    if (!row) break;
    if (page.runs.size() == static_cast<std::size_t>(limit)) {
      page.next_cursor = EncodeRunCursor(page.runs.back().started_at, page.runs.back().run_id);
      break;
    }
    STAGEHAND_ASSIGN_OR_RETURN(TaskRun run, ReadRun(stmt));
    page.runs.push_back(std::move(run));
  }
  return page;
}

Result<TaskRun> SqliteRunTable::Get(const std::string& run_id) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_.Prepare(sql::kGetRun));
  STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Bind(1, run_id).Step("reading a run"));
  if (!row) return NotFoundError(fmt::format("Run {} does not exist", run_id));
  STAGEHAND_ASSIGN_OR_RETURN(TaskRun run, ReadRun(stmt));
  run.finish.output_tail = stmt.Blob(15);
  return run;
}

Result<std::size_t> SqliteRunTable::Prune(std::chrono::hours max_age, std::size_t max_rows) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db_.Prepare(sql::kPruneExpired));
  const double seconds = -std::chrono::duration<double>(max_age).count();
  STAGEHAND_RETURN_IF_ERROR(stmt.Bind(1, SecondsModifier(seconds))
                                .Bind(2, static_cast<std::int64_t>(max_rows))
                                .Run("pruning the run history"));
  return static_cast<std::size_t>(db_.Changes());
}

Result<WallTime> SqliteRunTable::ReadTime(const SqliteStatement& stmt, int column,
                                          std::string_view run_id) const {
  Result<WallTime> time = ParseSqliteTime(stmt.Text(column));
  if (!time.ok()) {
    return db_.Error(
        StatusCode::kFailedPrecondition,
        fmt::format("run '{}': {}: {}", run_id, stmt.ColumnName(column), time.status().message()));
  }
  return time;
}

Result<TaskRun> SqliteRunTable::ReadRun(const SqliteStatement& stmt) const {
  // The current row of `stmt`, as DecodeRunRow reads it.
  struct Row {
    const SqliteRunTable& table;
    const SqliteStatement& stmt;
    std::string Text(int column) const { return stmt.Text(column); }
    std::int64_t Int(int column) const { return stmt.Int(column); }
    std::optional<std::string> OptionalText(int column) const { return stmt.OptionalText(column); }
    std::optional<std::int64_t> OptionalInt(int column) const { return stmt.OptionalInt(column); }
    Result<std::optional<WallTime>> Time(int column) const {
      if (stmt.IsNull(column)) return std::optional<WallTime>();
      STAGEHAND_ASSIGN_OR_RETURN(const WallTime time, table.ReadTime(stmt, column, stmt.Text(0)));
      return std::optional<WallTime>(time);
    }
  };
  return DecodeRunRow(Row{*this, stmt});
}

}  // namespace stagehand::store_internal
