// The run history's operations on MySQL's stagehand_task_runs table (its DDL is among stagehand's
// own migrations, my_wakeups.cc). Times are kept as UTC `datetime(3)`, whatever the session's
// zone (the table is stagehand's own: Backstage's local-time convention does not apply), and
// cross the wire as epoch microseconds. MySqlTaskStore runs these inside its own transactions,
// beside the claim, release or sweep they belong to.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/model/task_run.h"
#include "stagehand/store/run_history.h"
#include "store/mysql/my_connection.h"
#include "store/mysql/my_migrations.h"

namespace stagehand::store_internal {

// A run to record as running (see RunHistory::RecordStarts); `started_at` nullopt: now.
struct MyRunStart {
  const std::string* run_id;
  const std::string* task_id;
  const RunOrigin* origin;
  std::optional<WallTime> started_at;
};

// A run to close (see RunHistory::RecordEnds); `ended_at` nullopt: now.
struct MyRunEnd {
  const std::string* run_id;
  const RunFinish* finish;
  std::optional<WallTime> ended_at;
};

// A view of the runs table through one session, in the caller's transaction where it has one.
// Errors: what `error_of` maps a failed statement to. Not thread-safe (nor is the session).
class MyRunTable {
 public:
  MyRunTable(MyConnection& session, MyErrorOf error_of)
      : session_(session), error_of_(std::move(error_of)) {}

  // Returns whether stagehand_task_runs exists.
  Result<bool> Exists();

  // Records runs as running, each unless its run id is recorded, numbering each task's runs
  // through its row of stagehand_task_run_counts (locked until the caller commits). Four
  // statements: the recorded ids, the counts, their values, the rows.
  Status RecordStarts(std::span<const MyRunStart> starts);

  // Closes the running or lost runs among `ends` (outputs cut to `max_output_bytes`), locking
  // them first. Returns the (run id, task id) of each run it closed.
  Result<std::vector<std::pair<std::string, std::string>>> CloseRuns(std::span<const MyRunEnd> ends,
                                                                     std::size_t max_output_bytes);

  // Removes each task's ended runs beyond its `keep` newest by sequence number, within
  // kRunTrimWindow of that bound, but those in `closed` (the runs the caller just closed).
  // `tasks` may repeat.
  Status Trim(std::vector<std::string> tasks, int keep, std::span<const std::string> closed);

  // Closes the running runs among `run_ids` as lost, with `error_json`, at `at` (nullopt: now).
  // Returns how many it closed.
  Result<std::size_t> MarkLost(std::span<const std::string> run_ids, const std::string& error_json,
                               const std::optional<WallTime>& at);

  // ListRuns' page (see RunHistory::ListRuns).
  Result<RunPage> List(const std::string& task_id, int limit,
                       const std::optional<std::string>& before);

  // GetRun (see RunHistory::GetRun).
  Result<TaskRun> Get(const std::string& run_id);

  // PruneExpired (see RunHistory::PruneExpired).
  Result<std::size_t> Prune(std::chrono::hours max_age, std::size_t max_rows);

  // Removes every run of `task_id`.
  Status DeleteTask(const std::string& task_id);

 private:
  Result<MyResult> Run(std::string_view sql, const MyParams& params, std::string_view what);
  // Reads the run in row `row` of `result` (the columns of kRunColumns).
  static Result<TaskRun> ReadRun(const MyResult& result, int row);

  MyConnection& session_;
  const MyErrorOf error_of_;
};

}  // namespace stagehand::store_internal
