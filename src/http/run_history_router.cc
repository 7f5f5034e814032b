#include "stagehand/http/run_history_router.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "http/keyed_request.h"
#include "http/path_match.h"
#include "http/run_json.h"
#include "http/task_listing_json.h"
#include "stagehand/http/error_response.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {
namespace {

constexpr std::string_view kPrefix[] = {".stagehand", "v1"};

HttpResponse JsonOk(const nlohmann::ordered_json& body) {
  HttpResponse response;
  response.status = 200;
  response.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
  response.body = http_internal::DumpJson(body);
  return response;
}

// Returns the one value of query parameter `name`, or nullopt when it is absent. Errors:
// kInvalidArgument when it is malformed or given more than once.
Result<std::optional<std::string>> OneQueryValue(std::string_view query, std::string_view name) {
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<std::string> values, QueryParameterValues(query, name));
  if (values.size() > 1) {
    return InvalidArgumentError(fmt::format("{} must be given at most once", name));
  }
  if (values.empty()) {
    return std::optional<std::string>();
  }
  return std::optional<std::string>(std::move(values.front()));
}

// Returns the count `text` gives for query parameter `name`, 1 to `max`. Errors:
// kInvalidArgument naming `name`.
Result<int> ParseCount(const std::string& text, std::string_view name, int max) {
  int count = 0;
  bool digits = !text.empty() && text.size() <= 4;
  for (char c : text) {
    digits = digits && c >= '0' && c <= '9';
    if (digits) {
      count = count * 10 + (c - '0');
    }
  }
  if (!digits || count < 1 || count > max) {
    return InvalidArgumentError(
        fmt::format("{} must be an integer between 1 and {}, got '{}'", name, max, text));
  }
  return count;
}

HttpResponse EmptyOk() {
  HttpResponse response;
  response.status = 200;
  return response;
}

// Returns the pause a POST .../pause body asks for: empty, or a JSON object with optional "by" and
// "reason" (strings) and "until" (an ISO-8601 instant with its offset, or null). Errors:
// kInvalidArgument naming the field.
Result<PauseRequest> ParsePauseBody(std::string_view body) {
  PauseRequest pause;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return pause;
  }
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) {
    return InvalidArgumentError("The request body must be a JSON object");
  }
  for (const auto& [key, value] : parsed.items()) {
    if (key == "by" || key == "reason") {
      if (!value.is_string()) {
        return InvalidArgumentError(fmt::format("'{}' must be a string", key));
      }
      (key == "by" ? pause.by : pause.reason) = value.get<std::string>();
    } else if (key == "until") {
      if (value.is_null()) {
        continue;
      }
      if (!value.is_string()) {
        return InvalidArgumentError("'until' must be an ISO-8601 instant or null");
      }
      Result<WallTime> until = ParseIsoInstant(value.get<std::string>());
      if (!until.ok()) {
        return InvalidArgumentError(fmt::format(
            "'until' must be an ISO-8601 instant with its offset, {}", until.status().message()));
      }
      pause.until = *until;
    } else if (key == "cancel") {
      if (!value.is_boolean()) {
        return InvalidArgumentError("'cancel' must be true or false");
      }
      pause.cancel_run = value.get<bool>();
    } else {
      return InvalidArgumentError(fmt::format(
          "Unknown field '{}'; a pause takes 'by', 'reason', 'until' and 'cancel'", key));
    }
  }
  return pause;
}

}  // namespace

RunHistoryRouter::RunHistoryRouter(std::string plugin_id, SchedulerService& scheduler,
                                   std::shared_ptr<Logger> logger)
    : plugin_id_(std::move(plugin_id)),
      scheduler_(&scheduler),
      logger_(logger ? std::move(logger) : NullLogger()) {}

std::optional<HttpResponse> RunHistoryRouter::Handle(const HttpRequest& request) const {
  const std::optional<std::vector<std::string_view>> segments =
      http_internal::SplitRoutePath(request.path);
  if (!segments || !http_internal::StartsWithSegments(*segments, kPrefix)) {
    return std::nullopt;
  }
  const std::vector<std::string_view> rest(segments->begin() + std::size(kPrefix), segments->end());
  if (request.method == "POST") {
    if (rest.size() == 3 && EqualsIgnoreCase(rest[0], "tasks") && !rest[1].empty()) {
      if (EqualsIgnoreCase(rest[2], "pause")) return Pause(request, rest[1]);
      if (EqualsIgnoreCase(rest[2], "resume")) return Resume(request, rest[1]);
    }
    return std::nullopt;
  }
  if (request.method != "GET" && request.method != "HEAD") {
    return std::nullopt;
  }
  if (rest.size() == 1 && EqualsIgnoreCase(rest[0], "tasks")) {
    return ListTasks(request);
  }
  if (rest.size() == 3 && EqualsIgnoreCase(rest[0], "tasks") && !rest[1].empty() &&
      EqualsIgnoreCase(rest[2], "runs")) {
    return ListRuns(request, rest[1]);
  }
  if (rest.size() == 2 && EqualsIgnoreCase(rest[0], "runs") && !rest[1].empty()) {
    return GetRun(request, rest[1]);
  }
  return std::nullopt;
}

HttpResponse RunHistoryRouter::Pause(const HttpRequest& request,
                                     std::string_view raw_task_id) const {
  const auto fail = [&](const Status& error) { return ErrorResponse(error, request, *logger_); };
  Result<std::string> task_id = http_internal::DecodeIdParam(raw_task_id, "task id");
  if (!task_id.ok()) {
    return fail(task_id.status());
  }
  Result<PauseRequest> pause = ParsePauseBody(request.body);
  if (!pause.ok()) {
    return fail(pause.status());
  }
  // An authenticated caller is named by its token's subject; the body's "by" says on whose behalf.
  if (!request.principal.empty()) {
    pause->by = pause->by.empty() ? request.principal : request.principal + " (" + pause->by + ")";
  }
  return http_internal::AnswerOnce(request, *scheduler_, *logger_, [&] {
    const Status paused = scheduler_->PauseTask(*task_id, *pause);
    return paused.ok() ? EmptyOk() : fail(paused);
  });
}

HttpResponse RunHistoryRouter::Resume(const HttpRequest& request,
                                      std::string_view raw_task_id) const {
  const auto fail = [&](const Status& error) { return ErrorResponse(error, request, *logger_); };
  Result<std::string> task_id = http_internal::DecodeIdParam(raw_task_id, "task id");
  if (!task_id.ok()) {
    return fail(task_id.status());
  }
  return http_internal::AnswerOnce(request, *scheduler_, *logger_, [&] {
    const Status resumed = scheduler_->ResumeTask(*task_id);
    return resumed.ok() ? EmptyOk() : fail(resumed);
  });
}

HttpResponse RunHistoryRouter::ListTasks(const HttpRequest& request) const {
  Result<std::optional<std::string>> upcoming_text = OneQueryValue(request.query, "upcoming");
  if (!upcoming_text.ok()) {
    return ErrorResponse(upcoming_text.status(), request, *logger_);
  }
  int upcoming = 0;
  if (*upcoming_text) {
    Result<int> parsed = ParseCount(**upcoming_text, "upcoming", http_internal::kMaxUpcomingStarts);
    if (!parsed.ok()) {
      return ErrorResponse(parsed.status(), request, *logger_);
    }
    upcoming = *parsed;
  }
  return http_internal::TaskListingResponse(request, *scheduler_, plugin_id_, *logger_,
                                            /*time_zones=*/true, upcoming);
}

HttpResponse RunHistoryRouter::ListRuns(const HttpRequest& request,
                                        std::string_view raw_task_id) const {
  const auto fail = [&](const Status& error) { return ErrorResponse(error, request, *logger_); };
  Result<std::string> task_id = http_internal::DecodeIdParam(raw_task_id, "task id");
  if (!task_id.ok()) {
    return fail(task_id.status());
  }
  Result<std::optional<std::string>> limit_text = OneQueryValue(request.query, "limit");
  if (!limit_text.ok()) {
    return fail(limit_text.status());
  }
  int limit = kDefaultRunPageSize;
  if (*limit_text) {
    Result<int> parsed = ParseCount(**limit_text, "limit", kMaxRunPageSize);
    if (!parsed.ok()) {
      return fail(parsed.status());
    }
    limit = *parsed;
  }
  Result<std::optional<std::string>> before = OneQueryValue(request.query, "before");
  if (!before.ok()) {
    return fail(before.status());
  }
  if (*before) {
    if ((*before)->empty()) {
      return fail(InvalidArgumentError("before must not be empty"));
    }
    if (Status storable = http_internal::CheckStorableText(**before, "before"); !storable.ok()) {
      return fail(storable);
    }
  }
  Result<RunPage> page = scheduler_->GetTaskRuns(*task_id, limit, *before);
  if (!page.ok()) {
    return fail(page.status());
  }
  nlohmann::ordered_json body;
  nlohmann::ordered_json& runs = body["runs"] = nlohmann::ordered_json::array();
  for (const TaskRun& run : page->runs) {
    runs.push_back(http_internal::RunJson(run, plugin_id_));
  }
  body["nextCursor"] = page->next_cursor ? nlohmann::ordered_json(*page->next_cursor)
                                         : nlohmann::ordered_json(nullptr);
  return JsonOk(body);
}

HttpResponse RunHistoryRouter::GetRun(const HttpRequest& request,
                                      std::string_view raw_run_id) const {
  Result<std::string> run_id = http_internal::DecodeIdParam(raw_run_id, "run id");
  if (!run_id.ok()) {
    return ErrorResponse(run_id.status(), request, *logger_);
  }
  Result<RunDetail> detail = scheduler_->GetRun(*run_id);
  if (!detail.ok()) {
    return ErrorResponse(detail.status(), request, *logger_);
  }
  nlohmann::ordered_json body = http_internal::RunJson(detail->run, plugin_id_);
  body["output"] = detail->run.finish.output_tail;
  body["outputBytes"] = detail->output_bytes;
  body["live"] = detail->live;
  return JsonOk(body);
}

}  // namespace stagehand
