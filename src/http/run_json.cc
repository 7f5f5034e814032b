#include "http/run_json.h"

#include "stagehand/model/task_state.h"

namespace stagehand::http_internal {

std::string RunTimeText(WallTime instant) { return FormatRestTime(instant, kRestUtc); }

nlohmann::ordered_json ErrorValue(const std::optional<std::string>& error_json) {
  if (!error_json) {
    return nullptr;
  }
  nlohmann::ordered_json parsed =
      nlohmann::ordered_json::parse(*error_json, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object()) {
    return parsed;
  }
  nlohmann::ordered_json error;
  error["name"] = "Error";
  error["message"] = *error_json;
  return error;
}

nlohmann::ordered_json OptionalValue(const std::optional<int>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json RunJson(const TaskRun& run, std::string_view plugin_id) {
  const auto time_or_null = [](const std::optional<WallTime>& instant) {
    return instant ? nlohmann::ordered_json(RunTimeText(*instant))
                   : nlohmann::ordered_json(nullptr);
  };
  const auto ms_or_null = [](const std::optional<std::chrono::milliseconds>& ms) {
    return ms ? nlohmann::ordered_json(ms->count()) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json json;
  json["runId"] = run.run_id;
  json["taskId"] = run.task_id;
  json["pluginId"] = plugin_id;
  json["host"] = run.origin.host;
  json["pid"] = run.origin.pid;
  json["trigger"] = RunTriggerName(run.origin.trigger);
  json["attempt"] = run.origin.attempt;
  json["traceId"] = run.origin.trace_id ? nlohmann::ordered_json(*run.origin.trace_id)
                                        : nlohmann::ordered_json(nullptr);
  json["slot"] = time_or_null(run.origin.slot);
  json["startedAt"] = RunTimeText(run.started_at);
  json["endedAt"] = time_or_null(run.ended_at);
  json["durationMs"] = ms_or_null(run.duration());
  json["startLagMs"] = ms_or_null(run.start_lag());
  json["outcome"] = RunOutcomeName(run.finish.outcome);
  json["error"] = ErrorValue(run.finish.error_json);
  json["exitCode"] = OptionalValue(run.finish.exit_code);
  json["signal"] = OptionalValue(run.finish.signal);
  json["httpStatus"] = OptionalValue(run.finish.http_status);
  return json;
}

std::string DumpJson(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace stagehand::http_internal
