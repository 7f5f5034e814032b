#include "store/task_pause.h"

#include <fmt/format.h>

namespace stagehand {

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

std::optional<PauseAfterRun> PauseLeftBy(const RowTicket& held, WallTime now) {
  if (held.kind != RowTicket::Kind::kRun || !held.pause_json) return std::nullopt;
  const TaskPause pause = held.DecodePause();
  if (pause.until && *pause.until <= now) return std::nullopt;
  RowTicket paused;
  paused.kind = RowTicket::Kind::kPaused;
  paused.pause_json = held.pause_json;
  return PauseAfterRun{paused.Encode(), pause.until};
}

Status PausedError(const std::string& id) {
  return ConflictError(fmt::format("Task {} is paused", id));
}

Status NotPausedError(const std::string& id) {
  return ConflictError(fmt::format("Task {} is not paused", id));
}

}  // namespace store_internal
}  // namespace stagehand
