#include "store/task_pause.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "stagehand/base/json_string.h"
#include "stagehand/time/time_zone.h"
#include "store/run_history_support.h"

namespace stagehand {

namespace {

// The pause as the tickets hold it: {"by":…,"reason":…}, with "until" in ISO-8601 UTC when set.
std::string PauseJson(const PauseRequest& request) {
  std::string json = "{\"by\":";
  AppendJsonString(json, request.by);
  json += ",\"reason\":";
  AppendJsonString(json, request.reason);
  if (request.until) {
    json += ",\"until\":";
    AppendJsonString(json, FormatIsoInstantUtc(store_internal::ToMillis(*request.until)));
  }
  json += '}';
  return json;
}

// Reads a pause's JSON; fields that are missing or of another type stay empty.
TaskPause ParsePauseJson(std::string_view json) {
  TaskPause pause;
  const nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return pause;
  if (auto by = parsed.find("by"); by != parsed.end() && by->is_string()) {
    pause.by = by->get<std::string>();
  }
  if (auto reason = parsed.find("reason"); reason != parsed.end() && reason->is_string()) {
    pause.reason = reason->get<std::string>();
  }
  if (auto until = parsed.find("until"); until != parsed.end() && until->is_string()) {
    if (Result<WallTime> instant = ParseIsoInstant(until->get<std::string>()); instant.ok()) {
      pause.until = *instant;
    }
  }
  return pause;
}

}  // namespace

std::string PausedTicket(const PauseRequest& request) {
  return std::string(kPausedPrefix) + PauseJson(request);
}

std::optional<TaskPause> PauseOf(const TaskRow& row) {
  if (!row.current_run_ticket) return std::nullopt;
  const std::string& ticket = *row.current_run_ticket;
  if (ticket.starts_with(kPausedPrefix)) {
    TaskPause pause = ParsePauseJson(std::string_view(ticket).substr(kPausedPrefix.size()));
    pause.since = row.current_run_started_at.value_or(WallTime{});
    pause.until = row.current_run_expires_at;
    return pause;
  }
  const std::optional<store_internal::HeldTicket> held = store_internal::ParseHeldTicket(ticket);
  if (!held || !held->pending_pause) return std::nullopt;
  TaskPause pause = ParsePauseJson(*held->pending_pause);
  pause.since = row.current_run_started_at.value_or(WallTime{});
  pause.pending = true;
  return pause;
}

Status TaskStore::Pause(const std::string& /*id*/, const PauseRequest& /*request*/,
                        std::chrono::milliseconds /*hold*/) {
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

std::optional<HeldTicket> ParseHeldTicket(std::string_view stored) {
  if (stored.starts_with(kPausedPrefix)) return std::nullopt;
  HeldTicket held;
  if (stored.starts_with(kCancelRequestedPrefix)) {
    held.cancel_requested = true;
    stored.remove_prefix(kCancelRequestedPrefix.size());
  }
  if (stored.starts_with(kPausePendingPrefix)) {
    stored.remove_prefix(kPausePendingPrefix.size());
    const std::size_t colon = stored.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    held.pending_pause = stored.substr(colon + 1);
    stored = stored.substr(0, colon);
  }
  held.run_ticket = stored;
  return held;
}

std::string PausePendingTicket(const HeldTicket& held, const PauseRequest& request) {
  std::string ticket = held.cancel_requested ? std::string(kCancelRequestedPrefix) : std::string();
  ticket += kPausePendingPrefix;
  ticket += held.run_ticket;
  ticket += ':';
  ticket += PauseJson(request);
  return ticket;
}

std::string WithoutPendingPause(const HeldTicket& held) {
  return held.cancel_requested ? CancelRequestedTicket(held.run_ticket)
                               : std::string(held.run_ticket);
}

std::optional<PauseAfterRun> PauseLeftBy(const HeldTicket& held, WallTime now) {
  if (!held.pending_pause) return std::nullopt;
  const TaskPause pause = ParsePauseJson(*held.pending_pause);
  if (pause.until && *pause.until <= now) return std::nullopt;
  return PauseAfterRun{std::string(kPausedPrefix) + std::string(*held.pending_pause), pause.until};
}

Status PausedError(const std::string& id) {
  return ConflictError(fmt::format("Task {} is paused", id));
}

Status NotPausedError(const std::string& id) {
  return ConflictError(fmt::format("Task {} is not paused", id));
}

}  // namespace store_internal
}  // namespace stagehand
