// OpenTelemetry's built-in samplers, as OTEL_TRACES_SAMPLER names them: whether a new span is
// recorded and exported. Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/trace/trace_context.h"

namespace stagehand {

enum class SamplerKind {
  kAlwaysOn,
  kAlwaysOff,
  kTraceIdRatio,
  kParentBasedAlwaysOn,
  kParentBasedAlwaysOff,
  kParentBasedTraceIdRatio,
};

// A value type. The default is OpenTelemetry's: parentbased_always_on.
struct SamplerConfig {
  SamplerKind kind = SamplerKind::kParentBasedAlwaysOn;
  double ratio = 1.0;  // for the trace id ratio samplers, in [0, 1]
};

// Parses OTEL_TRACES_SAMPLER's value ("always_on", "parentbased_traceidratio", ...) and, for the
// ratio samplers, OTEL_TRACES_SAMPLER_ARG's (empty: 1.0). `sampler_name` and `arg_name` name the
// setting in errors. Errors: kInvalidArgument naming the setting (an unknown sampler, an argument
// that is not a number in [0, 1]).
Result<SamplerConfig> ParseSampler(std::string_view sampler, std::string_view arg,
                                   std::string_view sampler_name, std::string_view arg_name);

// Whether a new span of `trace_id` is sampled; `parent` is its parent's context, or null for a
// root span. The ratio sampler keeps the trace ids whose last 8 bytes, read as a big-endian
// number, fall below ratio × 2^64, so every host decides the same for one trace.
bool ShouldSample(const SamplerConfig& sampler, const TraceId& trace_id,
                  const TraceContext* parent);

}  // namespace stagehand
