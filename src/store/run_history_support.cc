#include "store/run_history_support.h"

#include <fmt/format.h>

#include <charconv>

#include "stagehand/base/check.h"
#include "stagehand/store/row_ticket.h"
#include "stagehand/store/task_store.h"

namespace stagehand::store_internal {

std::string EncodeRunCursor(WallTime started_at, std::string_view run_id) {
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(started_at.time_since_epoch()).count();
  return fmt::format("{}.{}", micros, run_id);
}

std::optional<RunCursor> DecodeRunCursor(std::string_view text) {
  const std::size_t dot = text.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == text.size()) return std::nullopt;
  long long micros = 0;
  const char* first = text.data();
  const char* last = text.data() + dot;
  const auto [end, error] = std::from_chars(first, last, micros);
  if (error != std::errc() || end != last) return std::nullopt;
  return RunCursor{WallTime(std::chrono::microseconds(micros)), std::string(text.substr(dot + 1))};
}

std::string_view OutputTail(std::string_view output, std::size_t max_bytes) {
  return output.size() <= max_bytes ? output : output.substr(output.size() - max_bytes);
}

std::string_view RunIdOfTicket(std::string_view ticket) {
  const RowTicket held = RowTicket::Decode(ticket);
  return held.kind == RowTicket::Kind::kRun ? held.run : ticket;
}

WallTime ToMillis(WallTime instant) {
  return WallTime(std::chrono::floor<std::chrono::milliseconds>(instant));
}

Status ValidateStarts(std::span<const RunStart> starts) {
  for (std::size_t i = 0; i < starts.size(); ++i) {
    if (starts[i].run_id.empty() || starts[i].task_id.empty()) {
      return InvalidArgumentError(
          fmt::format("run start {} (run '{}', task '{}'): run and task ids must not be empty", i,
                      starts[i].run_id, starts[i].task_id));
    }
  }
  return Status::Ok();
}

Status ValidateEnds(std::span<const RunEnd> ends) {
  for (std::size_t i = 0; i < ends.size(); ++i) {
    if (ends[i].run_id.empty()) {
      return InvalidArgumentError(fmt::format("run end {}: the run id must not be empty", i));
    }
    if (ends[i].finish.outcome == RunOutcome::kRunning) {
      return InvalidArgumentError(fmt::format(
          "run end {} (run '{}'): outcome 'running' does not end a run", i, ends[i].run_id));
    }
  }
  return Status::Ok();
}

Status ValidatePageSize(int limit) {
  if (limit < 1 || limit > kMaxRunPageSize) {
    return InvalidArgumentError(
        fmt::format("limit must be between 1 and {}, got {}", kMaxRunPageSize, limit));
  }
  return Status::Ok();
}

Status UnknownNameError(std::string_view run_id, std::string_view column, std::string_view name) {
  return FailedPreconditionError(fmt::format(
      "run '{}' has {} '{}', which this version of stagehand does not know", run_id, column, name));
}

void LimitsHolder::Set(const RunHistoryLimits& limits) {
  STAGEHAND_CHECK(limits.max_runs_per_task >= 1);
  STAGEHAND_CHECK(limits.max_age.count() > 0);
  MutexLock lock(mu_);
  limits_ = limits;
}

RunHistoryLimits LimitsHolder::Get() const {
  MutexLock lock(mu_);
  return limits_;
}

}  // namespace stagehand::store_internal
