// Schedule definitions: how often a task runs, how long it may take, whether it waits before its
// first run, and whether it is coordinated across hosts. Built in code, or read from config by
// stagehand/backend/schedule_config.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/model/cadence.h"
#include "stagehand/model/task_settings.h"
#include "stagehand/time/cron.h"
#include "stagehand/time/duration.h"

namespace stagehand {

// Runs at the fire times of a cron expression (5 fields, or 6 with seconds first).
struct CronFrequency {
  std::string expression;
  // The IANA zone to evaluate the expression in; the process zone (TZ) when empty. Not stored in
  // the database: every host must be configured with the same zone.
  std::string time_zone;
  // `expression` already parsed, when a reader validated it (ReadScheduleDefinitionFromConfig), so
  // that CadenceOf does not parse it again. Optional; ignored unless its source() is `expression`.
  // Not part of the value: equality compares the expression and the zone.
  std::shared_ptr<const CronExpression> program = nullptr;
  friend bool operator==(const CronFrequency& a, const CronFrequency& b) {
    return a.expression == b.expression && a.time_zone == b.time_zone;
  }
};

// Runs only when triggered.
struct ManualFrequency {
  friend bool operator==(const ManualFrequency&, const ManualFrequency&) = default;
};

// A length of time given either as a HumanDuration or as a std::chrono duration.
using DurationSpec = std::variant<HumanDuration, std::chrono::milliseconds>;

// How often a task runs.
using Frequency =
    std::variant<CronFrequency, HumanDuration, std::chrono::milliseconds, ManualFrequency>;

// Where a task is coordinated: across every host sharing the database, or in this process only.
enum class TaskScope { kGlobal, kLocal };

// Returns "global" or "local".
std::string_view TaskScopeName(TaskScope scope);

// How a failed or timed-out run is retried (stagehand extension, docs/adr/0015-retries.md): up to
// `attempts` more times, the n-th retry after a delay drawn from [d/2, d] where d = backoff ×
// 2^(n−1), at most `max_backoff`, before the task waits for its next regular slot. A cancelled
// run is not retried. Plain value type.
struct RetryPolicy {
  int attempts = 0;  // retries after the first run: 0 to kMaxRetryAttempts
  DurationSpec backoff = std::chrono::milliseconds(1000);
  std::optional<DurationSpec> max_backoff;  // none: kDefaultMaxRetryBackoff
};
inline constexpr int kMaxRetryAttempts = 100;
inline constexpr std::chrono::hours kDefaultMaxRetryBackoff{1};

// Returns the delay before retry `retry` (1 for the first) of `policy`: from [d/2, d] with
// d = min(backoff × 2^(retry−1), max_backoff), the point in that range chosen by `seed`.
std::chrono::milliseconds RetryDelay(const RetryPolicy& policy, int retry, std::uint64_t seed);

// A complete schedule. Plain value type.
struct ScheduleDefinition {
  Frequency frequency = ManualFrequency{};
  DurationSpec timeout = std::chrono::milliseconds(0);
  std::optional<DurationSpec> initial_delay;
  std::optional<TaskScope> scope;  // nullopt means global
  // stagehand extensions (docs/adr/0014-catch-up-window-and-jitter.md). Neither is stored in
  // settings_json, so Backstage reads the same settings with or without them.
  // A slot missed by more than this is skipped: the task waits for its next slot rather than run
  // late. nullopt: Backstage's behaviour (a missed slot runs once, at once).
  std::optional<DurationSpec> catchup_window;
  // Every scheduled start is delayed by a fixed offset in [0, jitter), derived from the task's id
  // (JitterOffset), the same on every host. nullopt or zero: no delay.
  std::optional<DurationSpec> jitter;
  // Retries of a failed or timed-out run (RetryPolicy); nullopt: none, as Backstage.
  std::optional<RetryPolicy> retry;
};

// Returns the first point after `now` of the grid of `slot` + k × `step` (k ≥ 1), so that a task
// that missed slots keeps its phase (and its jitter); `step` must be longer than zero.
WallTime FirstSlotAfter(WallTime slot, std::chrono::milliseconds step, WallTime now);

// Returns the fixed start offset of task `task_id` for a `jitter`: in [0, jitter), from the 64-bit
// FNV-1a hash of the id, so every host and every release computes the same one. Zero when
// `jitter` is not longer than zero.
std::chrono::milliseconds JitterOffset(std::string_view task_id, std::chrono::milliseconds jitter);

// Returns the ISO-8601 text Backstage stores for `duration` (see FormatIsoDuration).
std::string FormatDurationSpec(const DurationSpec& duration);

// Returns `duration` in whole milliseconds (casual units, rounded).
std::chrono::milliseconds ToMilliseconds(const DurationSpec& duration);

// Returns OK when the durations of `schedule` can work: a duration frequency and the timeout longer
// than zero (after rounding to whole milliseconds), an initial delay, a catch-up window and a
// jitter not negative (zero means none), and a jitter shorter than a duration frequency. Backstage
// accepts zero and negative durations, and its workers then run the task without pause; stagehand
// refuses them. Cron expressions are checked where they are parsed: CronExpression::Parse also
// rejects one that never fires. Errors: kInvalidArgument naming each field at fault, joined by ";
// ": "frequency must be longer than zero, got PT0S", "timeout must be longer than zero, got PT-1M",
// "initialDelay cannot be negative, got PT-5S".
Status ValidateScheduleDurations(const ScheduleDefinition& schedule);

// A duration of a schedule that cannot work: the field as config spells it ("frequency",
// "timeout", "initialDelay", "catchupWindow", "jitter") and why ("must be longer than zero, got
// PT0S").
struct ScheduleDurationIssue {
  std::string_view field;
  std::string reason;
};

// Returns the issues ValidateScheduleDurations reports, in field order; empty when the durations
// can work. Config readers use it to name the full key of each field.
std::vector<ScheduleDurationIssue> FindScheduleDurationIssues(const ScheduleDefinition& schedule);

// Returns the typed cadence of `frequency`: a cron frequency's program (parsed here unless a
// config reader has parsed it), a period, or manual. Errors: kInvalidArgument from
// CronExpression::Parse, its message unprefixed.
Result<Cadence> CadenceOf(const Frequency& frequency);

// Builds the stored settings for `schedule`: cadence = CadenceOf(frequency) (stored as the cron
// text verbatim, "manual", or the ISO duration); initialDelayDuration only when an initial delay
// was given. Validates nothing but the cron expression (ValidateScheduleDurations checks the
// durations). Errors: as CadenceOf.
Result<TaskSettingsV2> BuildTaskSettings(const ScheduleDefinition& schedule);

}  // namespace stagehand
