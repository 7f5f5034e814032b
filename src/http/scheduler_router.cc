#include "stagehand/http/scheduler_router.h"

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "http/keyed_request.h"
#include "http/path_match.h"
#include "http/task_listing_json.h"
#include "stagehand/http/error_response.h"

namespace stagehand {
namespace {

constexpr std::string_view kTasksPrefix[] = {".backstage", "scheduler", "v1", "tasks"};

HttpResponse EmptyOk() {
  HttpResponse response;
  response.status = 200;
  return response;
}

// The caller's W3C trace context (`traceparent`, `tracestate`); an absent or malformed one is no
// context, as the Trace Context spec asks of a receiver (the trigger itself goes ahead).
TraceContext CallerTrace(const HttpRequest& request) {
  const std::optional<std::string_view> parent = FindHeader(request.headers, "traceparent");
  if (!parent) return {};
  Result<TraceContext> context =
      ParseTraceparent(*parent, FindHeader(request.headers, "tracestate").value_or(""));
  return context.ok() ? *std::move(context) : TraceContext{};
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
  if (!segments || !http_internal::StartsWithSegments(*segments, kTasksPrefix)) {
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
  const bool trigger = EqualsIgnoreCase(action, "trigger");
  if (raw_id.empty() || (!trigger && !EqualsIgnoreCase(action, "cancel"))) {
    return std::nullopt;
  }
  Result<std::string> id = http_internal::DecodeIdParam(raw_id, "task id");
  if (!id.ok()) {
    return ErrorResponse(id.status(), request, *logger_);
  }
  return http_internal::AnswerOnce(request, *scheduler_, *logger_, [&] {
    const Status status =
        trigger ? scheduler_->TriggerTask(*id, CallerTrace(request)) : scheduler_->CancelTask(*id);
    return status.ok() ? EmptyOk() : ErrorResponse(status, request, *logger_);
  });
}

HttpHandler SchedulerRestRouter::AsHandler() const {
  return [this](const HttpRequest& request) { return Handle(request); };
}

HttpResponse SchedulerRestRouter::ListTasks(const HttpRequest& request) const {
  return http_internal::TaskListingResponse(request, *scheduler_, plugin_id_, *logger_,
                                            /*time_zones=*/false);
}

}  // namespace stagehand
