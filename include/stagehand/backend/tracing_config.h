// How the backend traces runs (issue 18, docs/adr/0017-traces-over-otlp-json.md): read, as every
// OpenTelemetry SDK does, from the standard environment variables, and where one is unset from
// `stagehand.tracing` in app-config. The OTEL_* variables are read here, by name, rather than
// through app-config's ${VAR}: operators and platforms set them without touching the config.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "stagehand/backend/app_config.h"
#include "stagehand/base/status.h"
#include "stagehand/config/config.h"
#include "stagehand/http/http_message.h"
#include "stagehand/trace/sampler.h"
#include "stagehand/trace/span.h"
#include "stagehand/trace/span_processor.h"

namespace stagehand {

// A value type.
struct TracingConfig {
  // Traces are exported when an endpoint is configured (or `stagehand.tracing.enabled` is true)
  // and OTEL_SDK_DISABLED is not true.
  bool enabled = false;
  // The traces URL: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, or OTEL_EXPORTER_OTLP_ENDPOINT
  // (`stagehand.tracing.endpoint`) + "/v1/traces"; http://localhost:4318/v1/traces by default.
  std::string endpoint = "http://localhost:4318/v1/traces";
  HttpHeaders headers;
  std::chrono::milliseconds timeout{10000};
  // service.name first, then the other resource attributes, then telemetry.sdk.*.
  TraceResource resource;
  SamplerConfig sampler;
  BatchSpanOptions batch;
};

// Reads the tracing settings of `root` (the merged app-config) and of `environment`:
//   OTEL_SDK_DISABLED                                  stagehand.tracing.enabled
//   OTEL_EXPORTER_OTLP_TRACES_ENDPOINT                 stagehand.tracing.tracesEndpoint
//   OTEL_EXPORTER_OTLP_ENDPOINT                        stagehand.tracing.endpoint
//   OTEL_EXPORTER_OTLP_[TRACES_]HEADERS (k=v,k2=v2)    stagehand.tracing.headers (a map)
//   OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT (ms)           stagehand.tracing.timeout (a duration)
//   OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (http/json)   stagehand.tracing.protocol
//   OTEL_SERVICE_NAME                                  stagehand.tracing.serviceName
//   OTEL_RESOURCE_ATTRIBUTES (k=v,k2=v2)               stagehand.tracing.resourceAttributes (a map)
//   OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG       stagehand.tracing.sampler, .samplerArg
//   OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE
// An environment variable wins over its config key. Errors: kInvalidArgument listing every
// problem, each naming its variable or key (an unknown key under stagehand.tracing, a protocol
// other than http/json, a malformed header list, a bad number, sampler or URL).
Result<TracingConfig> ReadTracingConfig(const Config& root, const EnvironmentLookup& environment);

}  // namespace stagehand
