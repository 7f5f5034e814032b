#include "stagehand/http/scheduler_router.h"

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "http/path_match.h"
#include "stagehand/http/error_response.h"

namespace stagehand {
namespace {

constexpr std::string_view kTasksPrefix[] = {".backstage", "scheduler", "v1", "tasks"};

std::string JsonString(std::string_view text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool StartsWithTasksPrefix(const std::vector<std::string_view>& segments) {
  if (segments.size() < std::size(kTasksPrefix)) {
    return false;
  }
  for (std::size_t i = 0; i < std::size(kTasksPrefix); ++i) {
    if (!http_internal::EqualsIgnoreCase(segments[i], kTasksPrefix[i])) {
      return false;
    }
  }
  return true;
}

// Returns whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code points
// above U+10FFFF).
bool IsValidUtf8(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto lead = static_cast<unsigned char>(text[pos]);
    int length = 0;
    std::uint32_t code_point = 0;
    if (lead < 0x80) {
      ++pos;
      continue;
    }
    if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code_point = lead & 0x1Fu;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code_point = lead & 0x0Fu;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code_point = lead & 0x07u;
    } else {
      return false;
    }
    if (pos + static_cast<std::size_t>(length) > text.size()) {
      return false;
    }
    for (int i = 1; i < length; ++i) {
      const auto next = static_cast<unsigned char>(text[pos + static_cast<std::size_t>(i)]);
      if ((next & 0xC0) != 0x80) {
        return false;
      }
      code_point = (code_point << 6) | (next & 0x3Fu);
    }
    constexpr std::uint32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < kMinimum[length] || code_point > 0x10FFFF ||
        (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return false;
    }
    pos += static_cast<std::size_t>(length);
  }
  return true;
}

// Returns OK when a decoded task id can be stored: PostgreSQL text holds neither NUL (libpq would
// cut the id there, so "report%00x" would name "report") nor invalid UTF-8. Errors:
// kInvalidArgument naming the raw param and the problem.
Status ValidateTaskIdParam(std::string_view raw_id, std::string_view id) {
  if (id.find('\0') != std::string_view::npos) {
    return InvalidArgumentError(
        fmt::format("Invalid param '{}': a task id must not contain a NUL character", raw_id));
  }
  if (!IsValidUtf8(id)) {
    return InvalidArgumentError(
        fmt::format("Invalid param '{}': a task id must be valid UTF-8", raw_id));
  }
  return Status::Ok();
}

HttpResponse EmptyOk() {
  HttpResponse response;
  response.status = 200;
  return response;
}

}  // namespace

SchedulerRestRouter::SchedulerRestRouter(std::string plugin_id, SchedulerService& scheduler,
                                         std::shared_ptr<Logger> logger)
    : plugin_id_(std::move(plugin_id)),
      scheduler_(&scheduler),
      logger_(logger ? std::move(logger) : NullLogger()) {}

std::optional<HttpResponse> SchedulerRestRouter::Handle(const HttpRequest& request) const {
  const std::optional<std::vector<std::string_view>> segments =
      http_internal::SplitRoutePath(request.path);
  if (!segments || !StartsWithTasksPrefix(*segments)) {
    return std::nullopt;
  }
  const std::size_t prefix_size = std::size(kTasksPrefix);
  if (segments->size() == prefix_size) {
    if (request.method != "GET" && request.method != "HEAD") {
      return std::nullopt;
    }
    return ListTasks(request);
  }
  if (segments->size() != prefix_size + 2 || request.method != "POST") {
    return std::nullopt;
  }
  const std::string_view raw_id = (*segments)[prefix_size];
  const std::string_view action = (*segments)[prefix_size + 1];
  const bool trigger = http_internal::EqualsIgnoreCase(action, "trigger");
  if (raw_id.empty() || (!trigger && !http_internal::EqualsIgnoreCase(action, "cancel"))) {
    return std::nullopt;
  }
  Result<std::string> id = DecodeUriComponent(raw_id);
  if (!id.ok()) {
    return ErrorResponse(InvalidArgumentError(fmt::format("Failed to decode param '{}'", raw_id)),
                         request, *logger_);
  }
  if (Status valid = ValidateTaskIdParam(raw_id, *id); !valid.ok()) {
    return ErrorResponse(valid, request, *logger_);
  }
  const Status status = trigger ? scheduler_->TriggerTask(*id) : scheduler_->CancelTask(*id);
  if (!status.ok()) {
    return ErrorResponse(status, request, *logger_);
  }
  return EmptyOk();
}

HttpHandler SchedulerRestRouter::AsHandler() const {
  return [this](const HttpRequest& request) { return Handle(request); };
}

HttpResponse SchedulerRestRouter::ListTasks(const HttpRequest& request) const {
  Result<std::vector<TaskListing>> listings = scheduler_->ListTasks();
  if (!listings.ok()) {
    return ErrorResponse(listings.status(), request, *logger_);
  }
  const std::string plugin_id = JsonString(plugin_id_);
  std::string body = R"({"tasks":[)";
  bool first = true;
  for (const TaskListing& listing : *listings) {
    if (!first) {
      body += ',';
    }
    first = false;
    body += R"({"taskId":)";
    body += JsonString(listing.descriptor.id);
    body += R"(,"pluginId":)";
    body += plugin_id;
    body += R"(,"scope":)";
    body += JsonString(TaskScopeName(listing.descriptor.scope));
    body += R"(,"settings":)";
    body += listing.descriptor.settings.ToJson();
    body += R"(,"taskState":)";
    body += listing.task_state ? listing.task_state->ToJson() : "null";
    body += R"(,"workerState":)";
    body += listing.worker_state ? fmt::format(R"({{"status":{}}})",
                                               JsonString(WorkerStatusName(*listing.worker_state)))
                                 : "null";
    body += '}';
  }
  body += "]}";
  HttpResponse response;
  response.status = 200;
  response.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
  response.body = std::move(body);
  return response;
}

}  // namespace stagehand
