// The state of one task as the REST listing shows it (Backstage's `taskState` and `workerState`).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "stagehand/time/clock.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {

// What FormatRestTime is given for a time Backstage takes from luxon's DateTime.utc().
inline constexpr const TimeZone* kRestUtc = nullptr;

// Formats a time of a REST taskState as Backstage's luxon DateTime#toISO does, with
// milliseconds; the one formatter of REST times. For what Backstage reads with
// DateTime.fromJSDate or DateTime.now() (a task row's times, a local task's next start after a
// run) `zone` is the scheduler's zone, written as a numeric offset
// ("2026-03-08T03:00:00.000-04:00",
// "+00:00" in UTC, never "Z"). For what it takes from DateTime.utc() (a local task's start after
// its initial delay, a local run's start, timeout and end) `zone` is kRestUtc, written in UTC with
// "Z"
// ("2026-03-08T07:00:00.000Z"). Thread-safe.
std::string FormatRestTime(WallTime instant, const TimeZone* zone);

// Backstage's taskState: idle (with the next start) or running (with start and timeout). All times
// are ISO-8601 strings exactly as they are to appear on the wire. Plain value type.
struct TaskState {
  enum class Status { kIdle, kRunning };
  Status status = Status::kIdle;
  std::optional<std::string> starts_at;     // idle only
  std::optional<std::string> started_at;    // running only
  std::optional<std::string> times_out_at;  // running only
  std::optional<std::string> last_run_ended_at;
  std::optional<std::string> last_run_error;  // the raw error JSON text

  // Returns the JSON object Backstage serves, keys in its order, absent values omitted:
  // {"status":"idle","startsAt":...,"lastRunEndedAt":...,"lastRunError":...} or
  // {"status":"running","startedAt":...,"timesOutAt":...,"lastRunEndedAt":...,"lastRunError":...}.
  std::string ToJson() const;

  friend bool operator==(const TaskState&, const TaskState&) = default;
};

// Backstage's workerState: what this process's worker for a task is doing.
enum class WorkerStatus { kInitialWait, kIdle, kRunning };

// Returns "initial-wait", "idle" or "running".
std::string_view WorkerStatusName(WorkerStatus status);

// Returns Backstage's serialized error JSON for a plain error: {"name":"Error","message":"..."}
// (serialize-error shape; `name` defaults to "Error").
std::string ErrorJson(std::string_view message, std::string_view name = "Error");

}  // namespace stagehand
