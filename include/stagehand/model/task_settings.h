// TaskSettingsV2: the settings object Backstage stores in `settings_json` and shows over REST.
// Its JSON codec is byte-for-byte compatible with Backstage's JSON.stringify output and validates
// with the rules of its zod schema, so rows written by either side are understood by the other.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/model/cadence.h"

namespace stagehand {

// The version-2 task settings, typed: the cadence parsed (Cadence), the durations as the ISO
// texts the row stores. Plain value type.
struct TaskSettingsV2 {
  Cadence cadence;                                    // cron, manual, or ISO duration
  std::optional<std::string> initial_delay_duration;  // ISO duration; absent when not given
  std::string timeout_after_duration;                 // ISO duration

  // Returns the JSON Backstage writes: {"version":2,"cadence":...,"initialDelayDuration":...,
  // "timeoutAfterDuration":...}, keys in that order, no spaces, initialDelayDuration omitted when
  // absent.
  std::string ToJson() const;

  // Decodes and validates settings JSON as Backstage's schema does: version must be 2; cadence a
  // parseable cron, "manual", or an empty/valid ISO duration; timeoutAfterDuration and
  // initialDelayDuration empty or valid ISO durations; unknown keys are ignored. The cadence is
  // parsed here, once. Errors: kInvalidArgument naming the offending key.
  static Result<TaskSettingsV2> FromJson(std::string_view json);

  // Validates initialDelayDuration and timeoutAfterDuration with the rules of FromJson (a Cadence
  // is valid by construction). Errors: kInvalidArgument naming the key.
  Status Validate() const;

  friend bool operator==(const TaskSettingsV2&, const TaskSettingsV2&) = default;
};

}  // namespace stagehand
