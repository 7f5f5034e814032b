// The table `stagehand tasks` prints: one row per task of the scheduler REST listing, with the
// cadence said humanly ("every 1m") and times both relative and absolute ("in 4s (12:00:05)") in a
// given zone. Pure functions of their inputs (the current time is a parameter); thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::cli {

// One entry of `GET /api/<pluginId>/.backstage/scheduler/v1/tasks`, reduced to what the table
// shows. Statuses are empty when the listing has null. A value type.
struct TaskRow {
  std::string plugin_id;
  std::string task_id;
  std::string scope;
  std::string cadence;        // settings.cadence as listed: cron, "manual" or an ISO duration
  std::string time_zone;      // timeZone (stagehand's listing): a cron cadence's zone, else empty
  std::string worker_status;  // workerState.status: idle, running, initial-wait
  std::string task_status;    // taskState.status: idle, running
  std::optional<WallTime> starts_at;          // taskState.startsAt: the next run
  std::optional<WallTime> started_at;         // taskState.startedAt: the current run's start
  std::optional<WallTime> last_run_ended_at;  // taskState.lastRunEndedAt
  std::optional<std::string> last_run_error;  // taskState.lastRunError: a JSON text
  // The newest ended run in the run history: its outcome ("failed") and how long it took; absent
  // when the history has none or was not read.
  std::optional<std::string> last_outcome;
  std::optional<std::chrono::milliseconds> last_duration;
  // The pause (stagehand's listing: "pause"), while the task is paused.
  struct Pause {
    std::string by;
    std::string reason;
    std::optional<WallTime> until;
    bool pending = false;  // the task pauses when its run in progress ends
  };
  std::optional<Pause> pause;
};

// Parses a listing body `{"tasks":[...]}` of plugin `plugin_id`: Backstage's, or stagehand's with
// the zones of cron cadences (GET /api/<pluginId>/.stagehand/v1/tasks). Unknown keys are ignored
// and a timestamp that does not parse is treated as absent. Errors: kInvalidArgument when the body
// is not JSON or has no `tasks` array.
Result<std::vector<TaskRow>> ParseTaskListing(std::string_view plugin_id, std::string_view body);

// Returns `span` in compact units, largest first, zero units left out: "1h30m", "45s", "500ms",
// "2d3h". At most `max_units` units are shown, the rest truncated ("2m58s" with 2, "2m" with 1);
// a zero span is "0s".
std::string FormatSpan(std::chrono::milliseconds span, std::size_t max_units);

// Returns the cadence as a person reads it: an ISO duration becomes "every 1m" / "every 1h30m",
// "manual" is kept, a cron expression is kept and followed by its `time_zone` when known
// ("0 3 * * * (Europe/Berlin)"), an empty one is "-".
std::string FormatCadence(std::string_view cadence, std::string_view time_zone = {});

// Returns the wall time of `when` in `zone`: "12:00:05" on the same local day as `now`, else
// "2026-03-07 12:00:05".
std::string FormatLocalTime(WallTime when, WallTime now, const TimeZone& zone);

// Returns `when` relative to `now` and absolute: "in 4s (12:00:05)", "2m58s ago (11:57:02)",
// "now (12:00:00)" within a second. The relative part shows at most two units, truncated.
std::string FormatWhen(WallTime when, WallTime now, const TimeZone& zone);

// Returns the state the table shows: "running" when the worker or the task state says so, else
// the worker's status (e.g. "initial-wait"), else the task state's, else "-".
std::string DisplayState(const TaskRow& row);

// Returns the message of a lastRunError (Backstage's serialised error, `{"name","message"}` as a
// JSON string), on one line and cut to at most `max_chars` characters (code points) with "…"
// at the end when longer. Text that is not such JSON is shown as it is, cut the same way.
std::string ShortError(std::string_view last_run_error, std::size_t max_chars);

// Returns the aligned table, with a header row: PLUGIN, TASK, SCOPE, CADENCE, STATE, NEXT RUN
// (or when the running run started), LAST RUN ENDED, OUTCOME and DURATION (of the newest ended
// run in the history), LAST ERROR; "-" for what is unknown. With `colour`, the header is bold,
// running states green, initial-wait yellow, outcomes as OutcomeColour says and errors red (ANSI
// escapes; alignment ignores them). Every line ends with '\n'.
std::string RenderTaskTable(const std::vector<TaskRow>& rows, WallTime now, const TimeZone& zone,
                            bool colour);

}  // namespace stagehand::cli
