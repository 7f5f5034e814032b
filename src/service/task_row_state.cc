#include "stagehand/service/task_row_state.h"

#include <optional>
#include <string>

namespace stagehand {
namespace {

std::optional<std::string> FormatOptional(const std::optional<WallTime>& instant,
                                          const TimeZone& zone) {
  if (!instant) {
    return std::nullopt;
  }
  return FormatRestTime(*instant, &zone);
}

}  // namespace

TaskState ToTaskState(const TaskRow& row, const TimeZone& zone) {
  TaskState state;
  if (row.current_run_started_at) {
    state.status = TaskState::Status::kRunning;
    state.started_at = FormatRestTime(*row.current_run_started_at, &zone);
    state.times_out_at = FormatOptional(row.current_run_expires_at, zone);
  } else {
    state.status = TaskState::Status::kIdle;
    state.starts_at = FormatOptional(row.next_run_start_at, zone);
  }
  state.last_run_ended_at = FormatOptional(row.last_run_ended_at, zone);
  if (row.last_run_error_json && !row.last_run_error_json->empty()) {
    state.last_run_error = row.last_run_error_json;
  }
  return state;
}

}  // namespace stagehand
