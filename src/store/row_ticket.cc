#include "stagehand/store/row_ticket.h"

#include <nlohmann/json.hpp>

#include "stagehand/base/check.h"
#include "stagehand/base/json_string.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/time_zone.h"
#include "store/run_history_support.h"

namespace stagehand {

namespace {

constexpr std::string_view kCancelRequestedPrefix = "cancel:";
constexpr std::string_view kPausedPrefix = "paused:";
constexpr std::string_view kPausePendingPrefix = "pausing:";

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

}  // namespace

RowTicket RowTicket::Decode(std::string_view stored) {
  RowTicket ticket;
  if (stored.starts_with(kPausedPrefix)) {
    ticket.kind = Kind::kPaused;
    ticket.pause_json = stored.substr(kPausedPrefix.size());
    return ticket;
  }
  if (stored.starts_with(kCancelRequestedPrefix)) {
    ticket.cancel_requested = true;
    stored.remove_prefix(kCancelRequestedPrefix.size());
  }
  if (stored.starts_with(kPausePendingPrefix)) {
    stored.remove_prefix(kPausePendingPrefix.size());
    const std::size_t colon = stored.find(':');
    if (colon == std::string_view::npos) {
      ticket.kind = Kind::kUnreadable;
      ticket.run = stored;
      return ticket;
    }
    ticket.pause_json = stored.substr(colon + 1);
    stored = stored.substr(0, colon);
  }
  ticket.run = stored;
  return ticket;
}

std::string RowTicket::Encode() const {
  std::string stored;
  if (kind == Kind::kPaused) {
    stored = kPausedPrefix;
    stored += pause_json.value_or("");
    return stored;
  }
  if (cancel_requested) stored = kCancelRequestedPrefix;
  if (kind == Kind::kUnreadable || pause_json) stored += kPausePendingPrefix;
  stored += run;
  if (kind == Kind::kRun && pause_json) {
    stored += ':';
    stored += *pause_json;
  }
  return stored;
}

TaskPause RowTicket::DecodePause() const {
  TaskPause pause;
  if (!pause_json) return pause;
  const nlohmann::json parsed = nlohmann::json::parse(*pause_json, nullptr,
                                                      /*allow_exceptions=*/false);
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

std::string RowTicket::WithPendingPause(const PauseRequest& request) const {
  STAGEHAND_CHECK(kind == Kind::kRun);
  const std::string json = PauseJson(request);
  RowTicket pausing = *this;
  pausing.pause_json = json;
  return pausing.Encode();
}

std::string RowTicket::WithoutPendingPause() const {
  STAGEHAND_CHECK(kind == Kind::kRun);
  RowTicket resumed = *this;
  resumed.pause_json.reset();
  return resumed.Encode();
}

std::string CancelRequestedTicket(std::string_view ticket) {
  std::string marked(kCancelRequestedPrefix);
  marked += ticket;
  return marked;
}

std::string PausedTicket(const PauseRequest& request) {
  return std::string(kPausedPrefix) + PauseJson(request);
}

std::optional<TaskPause> PauseOf(const TaskRow& row) {
  if (!row.current_run_ticket) return std::nullopt;
  const RowTicket ticket = RowTicket::Decode(*row.current_run_ticket);
  if (ticket.kind == RowTicket::Kind::kUnreadable || !ticket.pause_json) return std::nullopt;
  TaskPause pause = ticket.DecodePause();
  pause.since = row.current_run_started_at.value_or(WallTime{});
  if (ticket.paused()) {
    pause.until = row.current_run_expires_at;
  } else {
    pause.pending = true;
  }
  return pause;
}

}  // namespace stagehand
