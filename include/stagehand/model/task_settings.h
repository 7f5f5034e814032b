// TaskSettingsV2: the settings object Backstage stores in `settings_json` and shows over REST.
// Byte-for-byte compatible with Backstage's JSON.stringify output and validated with the rules of
// its zod schema, so rows written by either side are understood by the other.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"

namespace stagehand {

// How a task's cadence string is to be read.
enum class CadenceKind {
  kCron,      // Anything else: a cron expression.
  kDuration,  // Starts with an uppercase 'P': an ISO-8601 duration.
  kManual,    // Exactly "manual": runs only when triggered.
};

// Returns the kind of `cadence` by Backstage's rule: "manual", else 'P'-prefixed, else cron.
CadenceKind ClassifyCadence(std::string_view cadence);

// The version-2 task settings. Plain value type.
struct TaskSettingsV2 {
  std::string cadence;                                // cron, "manual", or ISO duration
  std::optional<std::string> initial_delay_duration;  // ISO duration; absent when not given
  std::string timeout_after_duration;                 // ISO duration

  CadenceKind cadence_kind() const { return ClassifyCadence(cadence); }

  // Returns the JSON Backstage writes: {"version":2,"cadence":...,"initialDelayDuration":...,
  // "timeoutAfterDuration":...}, keys in that order, no spaces, initialDelayDuration omitted when
  // absent.
  std::string ToJson() const;

  // Parses and validates settings JSON as Backstage's schema does: version must be 2; cadence a
  // parseable cron, "manual", or an empty/valid ISO duration; timeoutAfterDuration and
  // initialDelayDuration empty or valid ISO durations; unknown keys are ignored.
  // Errors: kInvalidArgument naming the offending key.
  static Result<TaskSettingsV2> FromJson(std::string_view json);

  // Validates the fields with the same rules as FromJson. Errors: kInvalidArgument naming the key.
  Status Validate() const;

  // Validates initialDelayDuration and timeoutAfterDuration only, as Validate does: for a cadence
  // already validated where it was parsed (a registration's compiled cron program). Errors:
  // kInvalidArgument naming the key.
  Status ValidateDurations() const;

  friend bool operator==(const TaskSettingsV2&, const TaskSettingsV2&) = default;
};

}  // namespace stagehand
