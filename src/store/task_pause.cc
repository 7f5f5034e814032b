#include "store/task_pause.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "stagehand/base/json_string.h"

namespace stagehand {

std::string PausedTicket(const PauseRequest& request) {
  std::string ticket(kPausedPrefix);
  ticket += "{\"by\":";
  AppendJsonString(ticket, request.by);
  ticket += ",\"reason\":";
  AppendJsonString(ticket, request.reason);
  ticket += '}';
  return ticket;
}

std::optional<TaskPause> PauseOf(const TaskRow& row) {
  if (!row.current_run_ticket || !row.current_run_ticket->starts_with(kPausedPrefix)) {
    return std::nullopt;
  }
  TaskPause pause;
  const nlohmann::json parsed = nlohmann::json::parse(
      row.current_run_ticket->substr(kPausedPrefix.size()), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object()) {
    if (auto by = parsed.find("by"); by != parsed.end() && by->is_string()) {
      pause.by = by->get<std::string>();
    }
    if (auto reason = parsed.find("reason"); reason != parsed.end() && reason->is_string()) {
      pause.reason = reason->get<std::string>();
    }
  }
  pause.since = row.current_run_started_at.value_or(WallTime{});
  pause.until = row.current_run_expires_at;
  return pause;
}

Status TaskStore::Pause(const std::string& /*id*/, const PauseRequest& /*request*/) {
  return UnimplementedError(
      fmt::format("plugin {}: this task store cannot pause tasks", plugin_id()));
}

Status TaskStore::Resume(const std::string& /*id*/) {
  return UnimplementedError(
      fmt::format("plugin {}: this task store cannot resume tasks", plugin_id()));
}

namespace store_internal {

Status ValidatePause(const PauseRequest& request, WallTime now) {
  STAGEHAND_RETURN_IF_ERROR(ValidatePauseTexts(request));
  if (request.until && *request.until <= now) return PauseUntilPassedError();
  return Status::Ok();
}

Status ValidatePauseTexts(const PauseRequest& request) {
  if (request.by.size() > kMaxPauseTextBytes) {
    return InvalidArgumentError(
        fmt::format("Invalid pause: 'by' is longer than {} bytes", kMaxPauseTextBytes));
  }
  if (request.reason.size() > kMaxPauseTextBytes) {
    return InvalidArgumentError(
        fmt::format("Invalid pause: 'reason' is longer than {} bytes", kMaxPauseTextBytes));
  }
  return Status::Ok();
}

Status PauseUntilPassedError() {
  return InvalidArgumentError("Invalid pause: 'until' is not in the future");
}

bool IsPausedTicket(const std::string& ticket) { return ticket.starts_with(kPausedPrefix); }

Status PausedError(const std::string& id) {
  return ConflictError(fmt::format("Task {} is paused", id));
}

Status NotPausedError(const std::string& id) {
  return ConflictError(fmt::format("Task {} is not paused", id));
}

}  // namespace store_internal
}  // namespace stagehand
