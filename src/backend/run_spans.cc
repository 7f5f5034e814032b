#include "stagehand/backend/run_spans.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "stagehand/base/text.h"
#include "stagehand/model/schedule.h"
#include "stagehand/model/task_run.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {
namespace {

using std::chrono::nanoseconds;

// The name and message of Backstage's error JSON ({"name": ..., "message": ...}), or the text
// itself when it is not such an object.
std::pair<std::string, std::string> ErrorParts(const std::string& error_json) {
  const nlohmann::json error = nlohmann::json::parse(error_json, nullptr, false);
  if (!error.is_object()) return {"Error", error_json};
  std::string name = error.value("name", std::string("Error"));
  std::string message = error.value("message", error_json);
  return {std::move(name), std::move(message)};
}

// The route of a path under a plugin's mount, ids replaced by their parameter names (low
// cardinality, as span names must be): "/.backstage/scheduler/v1/tasks/{taskId}/trigger",
// "/.stagehand/v1/runs/{runId}". Empty for the plugin's own routes, whose shape is not known here
// (their spans are named by the mount).
std::string RouteOf(std::string_view path) {
  if (!path.starts_with("/.backstage/") && !path.starts_with("/.stagehand/")) return {};
  std::vector<std::string_view> segments;
  while (!path.empty()) {
    const std::size_t slash = path.find('/', 1);
    segments.push_back(path.substr(0, slash));
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash);
  }
  const auto at = [&](std::size_t i) { return i < segments.size() ? segments[i] : ""; };
  std::string route;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const bool task_id = i >= 1 && at(i - 1) == "/tasks" && i + 1 < segments.size();
    const bool run_id = i >= 1 && at(i - 1) == "/runs" && at(0) == "/.stagehand";
    route += task_id ? "/{taskId}" : run_id ? "/{runId}" : std::string(segments[i]);
  }
  return route;
}

}  // namespace

HttpHandler TraceRequests(HttpHandler inner, std::string mount, std::string plugin_id,
                          SpanSink& sink, const Clock& clock, SamplerConfig sampler) {
  return [inner = std::move(inner), mount = std::move(mount), plugin_id = std::move(plugin_id),
          &sink, &clock, sampler](const HttpRequest& request) -> std::optional<HttpResponse> {
    TraceContext parent;
    if (std::optional<std::string_view> header = FindHeader(request.headers, "traceparent")) {
      Result<TraceContext> parsed =
          ParseTraceparent(*header, FindHeader(request.headers, "tracestate").value_or(""));
      if (parsed.ok()) parent = *std::move(parsed);
    }
    TraceContext context;
    context.trace_id = parent.valid() ? parent.trace_id : NewTraceId();
    context.span_id = NewSpanId();
    context.flags =
        ShouldSample(sampler, context.trace_id, parent.valid() ? &parent : nullptr) ? 0x01 : 0x00;
    context.trace_state = parent.trace_state;

    HttpRequest traced = request;
    std::erase_if(traced.headers, [](const auto& header) {
      return EqualsIgnoreCase(header.first, "traceparent") ||
             EqualsIgnoreCase(header.first, "tracestate");
    });
    traced.headers.emplace_back("traceparent", FormatTraceparent(context));
    if (!context.trace_state.empty())
      traced.headers.emplace_back("tracestate", context.trace_state);

    const WallTime start = clock.Now();
    std::optional<HttpResponse> response = inner(traced);
    if (!response || !context.sampled()) return response;
    SpanData span;
    span.context = context;
    if (parent.valid()) span.parent_span_id = parent.span_id;
    span.name = request.method + " " + mount + RouteOf(request.path);
    span.kind = SpanKind::kServer;
    span.start = start;
    span.end = std::max(start, clock.Now());
    span.attributes = {{"http.request.method", request.method},
                       {"url.path", mount + request.path},
                       {"http.route", mount + RouteOf(request.path)},
                       {"http.response.status_code", static_cast<std::int64_t>(response->status)},
                       {"stagehand.plugin_id", plugin_id}};
    if (response->status >= 500) span.status = SpanStatusCode::kError;
    sink.OnEnd(std::move(span));
    return response;
  };
}

RunSpanObserver::RunSpanObserver(SpanSink& sink, const Clock& clock, std::string host, long pid)
    : sink_(sink), clock_(clock), host_(std::move(host)), pid_(pid) {}

void RunSpanObserver::OnRunFinished(const RunInfo& run, const RunFinish& finish,
                                    nanoseconds duration) {
  if (run.trace == nullptr || !run.trace->sampled()) return;
  const WallTime end = clock_.Now();
  SpanData span;
  span.context = *run.trace;
  if (run.caller != nullptr && run.caller->trace_id == run.trace->trace_id) {
    span.parent_span_id = run.caller->span_id;
  }
  span.name = "task " + std::string(run.task_id);
  span.kind = SpanKind::kInternal;
  span.end = end;
  span.start = end - std::chrono::duration_cast<WallTime::duration>(duration);
  span.attributes = {
      {"taskId", std::string(run.task_id)},
      {"scope", std::string(TaskScopeName(run.scope))},
      {"stagehand.plugin_id", std::string(run.plugin_id)},
      {"stagehand.run_id", std::string(run.run_id)},
      {"host.name", host_},
      {"process.pid", static_cast<std::int64_t>(pid_)},
      {"stagehand.trigger", std::string(RunTriggerName(run.trigger))},
      {"stagehand.attempt", static_cast<std::int64_t>(run.attempt)},
      {"stagehand.outcome", std::string(RunOutcomeName(finish.outcome))},
      {"stagehand.start_lag_ms", std::chrono::duration<double, std::milli>(run.lag).count()},
  };
  if (run.slot) span.attributes.emplace_back("stagehand.slot", FormatIsoInstantUtc(*run.slot));
  if (finish.exit_code) {
    span.attributes.emplace_back("process.exit.code", static_cast<std::int64_t>(*finish.exit_code));
  }
  if (finish.signal) {
    span.attributes.emplace_back("stagehand.signal", static_cast<std::int64_t>(*finish.signal));
  }
  if (finish.http_status) {
    span.attributes.emplace_back("http.response.status_code",
                                 static_cast<std::int64_t>(*finish.http_status));
  }
  if (finish.outcome != RunOutcome::kSucceeded) {
    auto [type, message] = finish.error_json
                               ? ErrorParts(*finish.error_json)
                               : std::pair<std::string, std::string>{
                                     "Error", std::string(RunOutcomeName(finish.outcome))};
    span.status = SpanStatusCode::kError;
    span.status_message = message;
    span.events.push_back(
        {"exception",
         span.end,
         {{"exception.type", std::move(type)}, {"exception.message", std::move(message)}}});
  }
  sink_.OnEnd(std::move(span));
}

}  // namespace stagehand
