#include "stagehand/backend/run_spans.h"

#include <nlohmann/json.hpp>
#include <utility>

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

}  // namespace

RunSpanObserver::RunSpanObserver(SpanSink& sink, const Clock& clock, std::string host, long pid)
    : sink_(sink), clock_(clock), host_(std::move(host)), pid_(pid) {}

void RunSpanObserver::OnRunStarted(const RunInfo& run, nanoseconds lag) {
  if (run.trace == nullptr || !run.trace->sampled()) return;
  std::lock_guard lock(mu_);
  started_.insert_or_assign(std::string(run.run_id), Started{clock_.Now(), lag});
}

void RunSpanObserver::OnRunFinished(const RunInfo& run, const RunFinish& finish,
                                    nanoseconds duration) {
  if (run.trace == nullptr || !run.trace->sampled()) return;
  Started started;
  {
    std::lock_guard lock(mu_);
    auto found = started_.find(run.run_id);
    if (found == started_.end()) return;
    started = found->second;
    started_.erase(found);
  }
  SpanData span;
  span.context = *run.trace;
  if (run.caller != nullptr && run.caller->trace_id == run.trace->trace_id) {
    span.parent_span_id = run.caller->span_id;
  }
  span.name = "task " + std::string(run.task_id);
  span.kind = SpanKind::kInternal;
  span.start = started.at;
  span.end =
      std::max(started.at, started.at + std::chrono::duration_cast<WallTime::duration>(duration));
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
      {"stagehand.start_lag_ms", std::chrono::duration<double, std::milli>(started.lag).count()},
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
