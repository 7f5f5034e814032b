#include "stagehand/model/task_state.h"

#include <nlohmann/json.hpp>

namespace stagehand {

namespace {

// Returns `text` as a JSON string literal, escaped as JSON.stringify does; invalid UTF-8 (which a
// JavaScript string cannot hold) becomes U+FFFD.
std::string JsonString(std::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void AppendMember(std::string& out, std::string_view key, const std::optional<std::string>& value) {
  if (!value) return;
  out += ',';
  out += JsonString(key);
  out += ':';
  out += JsonString(*value);
}

}  // namespace

std::string FormatRestTime(WallTime instant, const TimeZone* zone) {
  return zone == kRestUtc ? FormatIsoInstantUtc(instant) : FormatIsoInstant(instant, *zone);
}

std::string TaskState::ToJson() const {
  std::string out = "{\"status\":";
  if (status == Status::kRunning) {
    out += "\"running\"";
    AppendMember(out, "startedAt", started_at);
    AppendMember(out, "timesOutAt", times_out_at);
  } else {
    out += "\"idle\"";
    AppendMember(out, "startsAt", starts_at);
  }
  AppendMember(out, "lastRunEndedAt", last_run_ended_at);
  AppendMember(out, "lastRunError", last_run_error);
  out += '}';
  return out;
}

std::string_view WorkerStatusName(WorkerStatus status) {
  switch (status) {
    case WorkerStatus::kInitialWait:
      return "initial-wait";
    case WorkerStatus::kIdle:
      return "idle";
    case WorkerStatus::kRunning:
      return "running";
  }
  return "idle";
}

std::string ErrorJson(std::string_view message, std::string_view name) {
  std::string out = "{\"name\":";
  out += JsonString(name);
  out += ",\"message\":";
  out += JsonString(message);
  out += '}';
  return out;
}

}  // namespace stagehand
