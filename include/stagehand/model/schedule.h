// Schedule definitions: how often a task runs, how long it may take, whether it waits before its
// first run, and whether it is coordinated across hosts. Built in code or read from config with the
// messages of Backstage's readSchedulerServiceTaskScheduleDefinitionFromConfig.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "stagehand/base/status.h"
#include "stagehand/config/config.h"
#include "stagehand/config/config_problems.h"
#include "stagehand/model/task_settings.h"
#include "stagehand/time/duration.h"

namespace stagehand {

// Runs at the fire times of a cron expression (5 fields, or 6 with seconds first).
struct CronFrequency {
  std::string expression;
  // The IANA zone to evaluate the expression in; the process zone (TZ) when empty. Not stored in
  // the database: every host must be configured with the same zone.
  std::string time_zone;
  friend bool operator==(const CronFrequency&, const CronFrequency&) = default;
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

// A complete schedule. Plain value type.
struct ScheduleDefinition {
  Frequency frequency = ManualFrequency{};
  DurationSpec timeout = std::chrono::milliseconds(0);
  std::optional<DurationSpec> initial_delay;
  std::optional<TaskScope> scope;  // nullopt means global
};

// Returns the ISO-8601 text Backstage stores for `duration` (see FormatIsoDuration).
std::string FormatDurationSpec(const DurationSpec& duration);

// Returns `duration` in whole milliseconds (casual units, rounded).
std::chrono::milliseconds ToMilliseconds(const DurationSpec& duration);

// Returns OK when the durations of `schedule` can work: a duration frequency and the timeout longer
// than zero (after rounding to whole milliseconds), an initial delay not negative (zero means no
// delay). Backstage accepts zero and negative durations, and its workers then run the task without
// pause; stagehand refuses them. Cron expressions are checked where they are parsed:
// CronExpression::Parse also rejects one that never fires. Errors: kInvalidArgument naming each
// field at fault, joined by "; ": "frequency must be longer than zero, got PT0S", "timeout must be
// longer than zero, got PT-1M", "initialDelay cannot be negative, got PT-5S".
Status ValidateScheduleDurations(const ScheduleDefinition& schedule);

// Builds the stored settings for `schedule`: cadence = the cron text verbatim, "manual", or the ISO
// duration; initialDelayDuration only when an initial delay was given. Does not validate.
TaskSettingsV2 BuildTaskSettings(const ScheduleDefinition& schedule);

// Reads a duration from config as Backstage's readDurationFromConfig(config, {key}) does. A string
// value is a config duration string (ParseDurationString); otherwise the value must be an object of
// the units years..milliseconds (numeric strings allowed). Errors (kInvalidArgument) carry
// Backstage's messages, e.g. "Invalid duration '1m 3s' in config at 'frequency', Error: Not a valid
// duration string, ..." or "Failed to read duration from config at 'frequency', Error: Needs one or
// more of 'years', ...". With an empty key the view itself is the duration object.
Result<HumanDuration> ReadDurationFromConfig(const Config& config, std::string_view key = {});

// Reads a schedule definition from the config view of the schedule itself (`frequency`, `timeout`,
// `initialDelay`, `scope`), as Backstage's readSchedulerServiceTaskScheduleDefinitionFromConfig.
// `frequency` is {cron: '...'} (optionally with `timeZone`), {trigger: manual}, a duration string
// or a duration object. Unknown keys are ignored, as in Backstage (CheckScheduleKeys reports them).
// Errors: kInvalidArgument with Backstage's messages, including
// `Only "global" or "local" are allowed for TaskScheduleDefinition.scope, but got: {scope}`; then,
// for a schedule Backstage accepts but that cannot work (see ValidateScheduleDurations), one line
// per field: "Invalid config value for key '<full key>' in '<file>': must be longer than zero, got
// PT0S".
Result<ScheduleDefinition> ReadScheduleDefinitionFromConfig(const Config& config);

// Adds a problem for each key of the duration object at `key` of `config` that is not a unit
// (years .. milliseconds), with the unit most likely meant (see AddUnknownKeys). Returns whether
// every key is known, true when the value is missing or not an object.
bool CheckDurationKeys(const Config& config, std::string_view key, ConfigProblems& problems);

// Adds a problem for each unknown key of the schedule view `schedule`: at its top (frequency,
// timeout, initialDelay, scope; a `cron`, `timeZone` or `trigger` there is suggested inside
// `frequency`), inside a `frequency` object (cron and timeZone when it has `cron`, trigger when it
// has `trigger`, else the duration units), and inside `timeout` and `initialDelay` objects. Returns
// whether every key is known.
bool CheckScheduleKeys(const Config& schedule, ConfigProblems& problems);

}  // namespace stagehand
