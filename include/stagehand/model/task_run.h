// A task run as the run history keeps it: where and why it started, how it ended, and the tail of
// what it printed. Plain values, shared by the store (which writes and reads them), the engine
// (which reports starts and ends) and the REST and CLI views (which show them by the lower-case
// snake names below).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "stagehand/time/clock.h"

namespace stagehand {

// What started a run.
enum class RunTrigger {
  kSchedule,  // its cadence made it due
  kManual,    // TriggerTask, REST or CLI
  kRetry,     // a retry of a failed run
  kCatchUp,   // a slot missed while no host ran, within the catch-up window
};

// How a run ended, or kRunning while it has not.
enum class RunOutcome {
  kRunning,
  kSucceeded,
  kFailed,
  kTimedOut,
  kCancelled,
  kLost,    // its host vanished: the claim lapsed and another host's sweep closed it
  kFenced,  // its host stopped it because it could no longer hold the claim
};

// The output a run keeps by default: the last 64 KiB of its stdout and stderr.
inline constexpr std::size_t kDefaultRunOutputTailBytes = 64 * 1024;

namespace task_run_internal {

inline constexpr std::array<std::pair<RunTrigger, std::string_view>, 4> kTriggerNames = {{
    {RunTrigger::kSchedule, "schedule"},
    {RunTrigger::kManual, "manual"},
    {RunTrigger::kRetry, "retry"},
    {RunTrigger::kCatchUp, "catch_up"},
}};

inline constexpr std::array<std::pair<RunOutcome, std::string_view>, 7> kOutcomeNames = {{
    {RunOutcome::kRunning, "running"},
    {RunOutcome::kSucceeded, "succeeded"},
    {RunOutcome::kFailed, "failed"},
    {RunOutcome::kTimedOut, "timed_out"},
    {RunOutcome::kCancelled, "cancelled"},
    {RunOutcome::kLost, "lost"},
    {RunOutcome::kFenced, "fenced"},
}};

template <typename Enum, std::size_t N>
constexpr std::string_view NameOf(const std::array<std::pair<Enum, std::string_view>, N>& names,
                                  Enum value) {
  for (const auto& [candidate, name] : names) {
    if (candidate == value) return name;
  }
  return {};
}

template <typename Enum, std::size_t N>
constexpr std::optional<Enum> ValueOf(const std::array<std::pair<Enum, std::string_view>, N>& names,
                                      std::string_view name) {
  for (const auto& [value, candidate] : names) {
    if (candidate == name) return value;
  }
  return std::nullopt;
}

}  // namespace task_run_internal

// Returns the name REST, the CLI and the database use: "schedule", "manual", "retry",
// "catch_up".
constexpr std::string_view RunTriggerName(RunTrigger trigger) {
  return task_run_internal::NameOf(task_run_internal::kTriggerNames, trigger);
}

// Returns the trigger named `name` (as RunTriggerName writes it), or nullopt for any other text.
constexpr std::optional<RunTrigger> ParseRunTrigger(std::string_view name) {
  return task_run_internal::ValueOf(task_run_internal::kTriggerNames, name);
}

// Returns the name REST, the CLI and the database use: "running", "succeeded", "failed",
// "timed_out", "cancelled", "lost", "fenced".
constexpr std::string_view RunOutcomeName(RunOutcome outcome) {
  return task_run_internal::NameOf(task_run_internal::kOutcomeNames, outcome);
}

// Returns the outcome named `name` (as RunOutcomeName writes it), or nullopt for any other text.
constexpr std::optional<RunOutcome> ParseRunOutcome(std::string_view name) {
  return task_run_internal::ValueOf(task_run_internal::kOutcomeNames, name);
}

// Where and why a run started: what a host knows besides the run's id, task and start time.
struct RunOrigin {
  std::string host;  // the host name
  std::int64_t pid = 0;
  RunTrigger trigger = RunTrigger::kSchedule;
  std::optional<WallTime> slot = std::nullopt;  // the time the run was due for; none if manual
  int attempt = 1;  // 1 for the first attempt at a slot, 2 for its first retry, ...
  // The run's trace id (32 lowercase hex digits) when its trace was sampled; none otherwise.
  std::optional<std::string> trace_id = std::nullopt;

  friend bool operator==(const RunOrigin&, const RunOrigin&) = default;
};

// How a run ended: what its host records besides the run's id and end time.
struct RunFinish {
  RunOutcome outcome = RunOutcome::kSucceeded;
  std::optional<std::string> error_json = std::nullopt;  // Backstage's error JSON; none on success
  std::optional<int> exit_code = std::nullopt;           // command tasks that exited
  std::optional<int> signal = std::nullopt;              // command tasks killed by a signal
  std::optional<int> http_status = std::nullopt;         // HTTP tasks that got an answer
  std::string output_tail{};  // bytes; the store keeps at most its limit's last bytes

  friend bool operator==(const RunFinish&, const RunFinish&) = default;
};

// A run starting, for a batch of starts (RunHistory::RecordStarts).
struct RunStart {
  std::string run_id;  // a UUID; a global run's claim ticket
  std::string task_id;
  RunOrigin origin{};
  std::optional<WallTime> started_at = std::nullopt;  // nullopt: the database's now()
};

// A run ending, for a batch of ends (RunHistory::RecordEnds).
struct RunEnd {
  std::string run_id;
  RunFinish finish{};
  std::optional<WallTime> ended_at = std::nullopt;  // nullopt: the database's now()
};

// One run as the history holds it. Times are UTC instants of the database's clock (or the host's,
// for a start or end recorded with its own time). Plain value type.
struct TaskRun {
  std::string run_id;
  std::string task_id;
  RunOrigin origin;
  WallTime started_at{};
  std::optional<WallTime> ended_at = std::nullopt;  // nullopt while running
  RunFinish finish;                                 // finish.outcome is kRunning while running

  // Returns started_at - slot, or zero when the run started early; nullopt without a slot.
  std::optional<std::chrono::milliseconds> start_lag() const {
    if (!origin.slot) return std::nullopt;
    const auto lag = std::chrono::floor<std::chrono::milliseconds>(started_at - *origin.slot);
    return lag.count() < 0 ? std::chrono::milliseconds(0) : lag;
  }

  // Returns ended_at - started_at; nullopt while running.
  std::optional<std::chrono::milliseconds> duration() const {
    if (!ended_at) return std::nullopt;
    return std::chrono::floor<std::chrono::milliseconds>(*ended_at - started_at);
  }

  friend bool operator==(const TaskRun&, const TaskRun&) = default;
};

}  // namespace stagehand
