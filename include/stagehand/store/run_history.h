// The run history of one plugin: a bounded record of the runs of its tasks, kept in stagehand's
// own table beside the plugin's task table (same database, same connections). Global runs are
// written in the same round trip as their claim and release (ClaimRequest::history,
// ReleaseRequest::history) and closed as lost by the sweep that reclaims them; local runs, which
// have no claim, are written with the batch calls here. Runs of Backstage workers sharing the
// task table do not appear. See docs/adr/0011-run-history-storage.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/model/task_run.h"

namespace stagehand {

// How much history a plugin keeps. Plain value type.
struct RunHistoryLimits {
  // The runs kept per task: its newest, by the order in which they were recorded. On SQLite and in
  // memory, older ended runs are removed as runs of the task end; on PostgreSQL each task has a
  // ring of this many rows, and a run recorded takes the row of the run recorded this many runs
  // before it, ended or not (ADR 0011). At least 1.
  int max_runs_per_task = 100;
  // Runs that started longer ago than this are removed by PruneExpired. Positive.
  std::chrono::hours max_age{24 * 30};
  // The output kept per run: its last bytes.
  std::size_t max_output_bytes = kDefaultRunOutputTailBytes;

  friend bool operator==(const RunHistoryLimits&, const RunHistoryLimits&) = default;
};

// One page of a task's runs.
struct RunPage {
  std::vector<TaskRun> runs;  // newest start first; output tails left empty (see GetRun)
  // Pass as `before` to get the next page; nullopt when no run is older than the last of `runs`.
  std::optional<std::string> next_cursor;
};

// How many runs beyond a task's newest max_runs_per_task the count-based trim of SQLite and the
// memory store looks at (PostgreSQL keeps rings, with nothing to trim). Each end
// removes the few runs that just fell beyond the newest ones, and the short range stays clear of
// the index entries of runs removed before, which await vacuum. A run overtaken by more than
// max_runs_per_task + kRunTrimWindow newer runs of its task before it ends is left to the age
// limit.
inline constexpr int kRunTrimWindow = 16;

// The largest page ListRuns returns.
inline constexpr int kMaxRunPageSize = 1000;

// A plugin's run history, owned by its TaskStore (TaskStore::history()) and living as long as it.
// Every operation is one database round trip (one transaction on SQLite) unless its comment says
// otherwise. Thread-safe: any thread may call any method.
class RunHistory {
 public:
  virtual ~RunHistory() = default;

  // Sets the limits later writes and prunes apply (default: RunHistoryLimits{}). The limits must
  // be as their fields say (the config reader checks what users write); others abort. Not a
  // database operation.
  virtual void SetLimits(const RunHistoryLimits& limits) = 0;
  virtual RunHistoryLimits limits() const = 0;

  // Records runs as running. A start whose run id is already recorded is ignored, so a retried
  // batch writes each run once (on PostgreSQL: a start this store recorded and has not ended).
  // Errors: kInvalidArgument (an empty run or task id); kFailedPrecondition (the history tables are
  // missing: run the migrations); kUnavailable.
  virtual Status RecordStarts(std::span<const RunStart> starts) = 0;

  // Closes recorded runs with their finish (output cut to its last max_output_bytes). SQLite and
  // the memory store then trim each of their tasks: remove its runs that had ended before this call
  // and are beyond its newest max_runs_per_task runs, counted through an index on the task and the
  // order of its starts (a short range from the newest). So a task keeps at most that many runs,
  // beyond the ones still running, the ones its latest ends closed, and (left to the age limit)
  // runs overtaken by too many newer runs before they ended (kRunTrimWindow). On PostgreSQL a
  // task's ring holds its newest max_runs_per_task recorded runs, and the end of a run whose row a
  // newer run took is ignored. A run is closed if it is running or was
  // closed as lost (its host's own account replaces the sweep's); an end of any other run is
  // ignored. A run id must appear once per call. Returns how many runs were closed. Errors: as
  // RecordStarts.
  virtual Result<std::size_t> RecordEnds(std::span<const RunEnd> ends) = 0;

  // Returns up to `limit` (1..kMaxRunPageSize) runs of `task_id`, newest start first (ties broken
  // by run id, descending), starting after `before`: a cursor from an earlier page, or a run id
  // (the runs older than that run; two round trips). Errors: kInvalidArgument (limit out of range,
  // or `before` is neither a cursor nor a recorded run id); kFailedPrecondition; kUnavailable.
  virtual Result<RunPage> ListRuns(const std::string& task_id, int limit,
                                   const std::optional<std::string>& before) = 0;

  // Returns one run, with its output tail. On PostgreSQL a scan of the plugin's history (at most
  // max_runs_per_task rows per task). Errors: kNotFound "Run {id} does not exist";
  // kFailedPrecondition; kUnavailable.
  virtual Result<TaskRun> GetRun(const std::string& run_id) = 0;

  // Closes the running runs among `run_ids` as lost (now, with `error_json`), as a sweep does for
  // the runs whose claims it reclaims; for runs whose host is known to be gone by other means.
  // Returns how many were closed. Errors: kFailedPrecondition; kUnavailable.
  virtual Result<std::size_t> MarkLost(std::span<const std::string> run_ids,
                                       const std::string& error_json) = 0;

  // Returns whether the database holds the history's tables (stagehand's migrations create them;
  // a database with `skipMigrations` may not): looked up once, then remembered, so a database
  // migrated later is seen by a new store. Errors: kUnavailable.
  virtual Result<bool> TablesExist() = 0;

  // Removes up to `max_rows` runs that started before the database's now minus max_age, oldest
  // first, with no scan per task: through an index on the start, or on PostgreSQL in one scan of
  // the plugin's rings, which also removes the rows beyond a ring of max_runs_per_task (after the
  // limit was lowered). Returns how many were removed; fewer
  // than `max_rows` means none is left to remove. Callers run it now and then (the janitor).
  // Errors: kFailedPrecondition; kUnavailable.
  virtual Result<std::size_t> PruneExpired(std::size_t max_rows) = 0;
};

}  // namespace stagehand
