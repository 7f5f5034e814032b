// Schedules and durations read from app-config, with the messages of Backstage's
// readDurationFromConfig and readSchedulerServiceTaskScheduleDefinitionFromConfig, and the checks
// that report unknown keys in them. The daemon reads its tasks' schedules with these, the backend
// its scheduler durations, and an embedder a plugin's schedule from its own config block.
#pragma once

#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/config/config.h"
#include "stagehand/config/config_problems.h"
#include "stagehand/model/schedule.h"
#include "stagehand/time/duration.h"

namespace stagehand {

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
