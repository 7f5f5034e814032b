// The run history on the wire: a run as the REST API's RUN object, and the parts of it the event
// stream shares. Private to the http module; see docs/rest-api.md for the fields.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "stagehand/model/task_run.h"

namespace stagehand::http_internal {

// Returns a time as the REST API writes every run time: UTC with milliseconds
// ("2026-12-01T15:00:00.000Z").
std::string RunTimeText(WallTime instant);

// Returns a stored error JSON text as a value: its object, or {"name":"Error","message":<text>}
// when it is not a JSON object; null when there is none.
nlohmann::ordered_json ErrorValue(const std::optional<std::string>& error_json);

// Returns `value`, or null.
nlohmann::ordered_json OptionalValue(const std::optional<int>& value);

// Returns the RUN object of `run`, a run of plugin `plugin_id`: runId, taskId, pluginId, host, pid,
// trigger, attempt, slot, startedAt, endedAt, durationMs, startLagMs, outcome, error, exitCode,
// signal, httpStatus.
nlohmann::ordered_json RunJson(const TaskRun& run, std::string_view plugin_id);

// Returns `value` as JSON text; a byte of a string that is not valid UTF-8 becomes U+FFFD.
std::string DumpJson(const nlohmann::ordered_json& value);

}  // namespace stagehand::http_internal
