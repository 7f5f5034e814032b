// Spans of runs and of the REST requests that ask for them.
//
// Turns the runs the schedulers report into OpenTelemetry spans, as Backstage 0.19's scheduler
// traces them: instrumentation scope `backstage-service-scheduler`, span `task <taskId>` with the
// attributes `taskId` and `scope`; plus stagehand's (plugin, run id, host, trigger, attempt,
// outcome, start lag, slot, exit code, signal, HTTP status) and, when a run failed, timed out or
// was cancelled, status error with an `exception` event. Only sampled runs make spans (the
// engine's sampler decides, EngineOptions::trace_runs).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "stagehand/engine/observer.h"
#include "stagehand/http/http_message.h"
#include "stagehand/time/clock.h"
#include "stagehand/trace/sampler.h"
#include "stagehand/trace/span_processor.h"

namespace stagehand {

// The instrumentation scope of the run spans (Backstage's tracer name).
inline constexpr std::string_view kSchedulerTracerName = "backstage-service-scheduler";

// Thread-safe, as observers must be. `sink` and `clock` must outlive it.
class RunSpanObserver final : public SchedulerObserver {
 public:
  // `host` and `pid` name this process in every span.
  RunSpanObserver(SpanSink& sink, const Clock& clock, std::string host, long pid);

  // The span starts `duration` before the finish is reported.
  void OnRunFinished(const RunInfo& run, const RunFinish& finish,
                     std::chrono::nanoseconds duration) override;

 private:
  SpanSink& sink_;
  const Clock& clock_;
  const std::string host_;
  const long pid_;
};

// Returns `inner` wrapped so that each request it answers is a server span (kind server, named
// "<method> <route>", e.g. "POST /api/jobs/.backstage/scheduler/v1/tasks/{taskId}/trigger", with
// the method, the path, the status and the plugin; a plugin's own routes are named by the mount,
// "GET /api/jobs", their paths being unknown here), a child of the request's `traceparent` when
// it has one and `sampler` samples it. `inner` sees the request with its `traceparent` (and
// `tracestate`) replaced by the server span's context, so that a run the request triggers is the
// server span's child. `mount` is where `inner` is mounted ("/api/jobs"); requests `inner` does
// not answer make no span. `sink` and `clock` must outlive the handler.
HttpHandler TraceRequests(HttpHandler inner, std::string mount, std::string plugin_id,
                          SpanSink& sink, const Clock& clock, SamplerConfig sampler);

}  // namespace stagehand
