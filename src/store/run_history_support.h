// What every RunHistory implementation shares: the page cursor, the output bound, the validation
// of batches, the limits a store's threads read, and the run id a claim ticket names. Called by
// the stores on the caller's thread, before or after their database work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "stagehand/base/mutex.h"
#include "stagehand/base/status.h"
#include "stagehand/model/task_run.h"
#include "stagehand/store/run_history.h"

namespace stagehand::store_internal {

// The position after which a page starts: the last run of the previous page.
struct RunCursor {
  WallTime started_at;
  std::string run_id;
};

// Returns the cursor text for the run (started_at, run_id): "<epoch microseconds>.<run id>".
std::string EncodeRunCursor(WallTime started_at, std::string_view run_id);

// Returns the cursor `text` encodes, or nullopt if it is not a cursor (then it may be a run id).
std::optional<RunCursor> DecodeRunCursor(std::string_view text);

// Returns the last `max_bytes` bytes of `output` (all of it when shorter).
std::string_view OutputTail(std::string_view output, std::size_t max_bytes);

// Returns the run id that claim `ticket` names: the ticket without a cancel's or a pending
// pause's mark.
std::string_view RunIdOfTicket(std::string_view ticket);

// Returns `instant` truncated to the millisecond, the precision times given by callers are kept at.
WallTime ToMillis(WallTime instant);

// Errors: kInvalidArgument naming the first start with an empty run or task id.
Status ValidateStarts(std::span<const RunStart> starts);
// Errors: kInvalidArgument naming the first end with an empty run id, or a run outcome.
Status ValidateEnds(std::span<const RunEnd> ends);
// Errors: kInvalidArgument unless 1 <= limit <= kMaxRunPageSize.
Status ValidatePageSize(int limit);

// Returns kFailedPrecondition for a stored trigger or outcome name this version does not know
// (a newer stagehand wrote the run).
Status UnknownNameError(std::string_view run_id, std::string_view column, std::string_view name);

// Decodes one run of the history, from the columns every dialect selects in this order: run_id,
// task_id, host, pid, trigger, slot, started_at, ended_at, outcome, error_json, exit_code, signal,
// http_status, attempt, trace_id. `row` reads column i of one result row of the dialect:
// Text(i) -> std::string, Int(i) -> std::int64_t, OptionalText(i), OptionalInt(i), and
// Time(i) -> Result<std::optional<WallTime>> (nullopt for NULL). Errors: UnknownNameError for a
// trigger or outcome this version does not know, and the row's own for a time it cannot read.
template <class Row>
Result<TaskRun> DecodeRunRow(const Row& row) {
  TaskRun run;
  run.run_id = row.Text(0);
  run.task_id = row.Text(1);
  run.origin.host = row.Text(2);
  run.origin.pid = row.Int(3);
  const std::string trigger = row.Text(4);
  const std::optional<RunTrigger> parsed_trigger = ParseRunTrigger(trigger);
  if (!parsed_trigger) return UnknownNameError(run.run_id, "trigger", trigger);
  run.origin.trigger = *parsed_trigger;
  STAGEHAND_ASSIGN_OR_RETURN(run.origin.slot, row.Time(5));
  STAGEHAND_ASSIGN_OR_RETURN(const std::optional<WallTime> started, row.Time(6));
  run.started_at = started.value_or(WallTime{});
  STAGEHAND_ASSIGN_OR_RETURN(run.ended_at, row.Time(7));
  const std::string outcome = row.Text(8);
  const std::optional<RunOutcome> parsed_outcome = ParseRunOutcome(outcome);
  if (!parsed_outcome) return UnknownNameError(run.run_id, "outcome", outcome);
  run.finish.outcome = *parsed_outcome;
  run.finish.error_json = row.OptionalText(9);
  const auto optional_int = [&row](int column) -> std::optional<int> {
    const std::optional<std::int64_t> value = row.OptionalInt(column);
    if (!value) return std::nullopt;
    return static_cast<int>(*value);
  };
  run.finish.exit_code = optional_int(10);
  run.finish.signal = optional_int(11);
  run.finish.http_status = optional_int(12);
  run.origin.attempt = static_cast<int>(row.Int(13));
  run.origin.trace_id = row.OptionalText(14);
  return run;
}

// The limits of one store, set by any thread and read by every operation. Thread-safe.
class LimitsHolder {
 public:
  // Aborts unless limits.max_runs_per_task >= 1 and max_age is positive (the config reader
  // validates what users write).
  void Set(const RunHistoryLimits& limits);
  RunHistoryLimits Get() const;

 private:
  mutable Mutex mu_;
  RunHistoryLimits limits_ STAGEHAND_GUARDED_BY(mu_);
};

}  // namespace stagehand::store_internal
