// A finished span, as a tracer hands it to an exporter. Plain value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "stagehand/time/clock.h"
#include "stagehand/trace/trace_context.h"

namespace stagehand {

using AttributeValue = std::variant<std::string, std::int64_t, double, bool>;
using Attributes = std::vector<std::pair<std::string, AttributeValue>>;

// OpenTelemetry's span kinds, with OTLP's numbers.
enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3, kProducer = 4, kConsumer = 5 };

// OpenTelemetry's status codes, with OTLP's numbers.
enum class SpanStatusCode { kUnset = 0, kOk = 1, kError = 2 };

struct SpanEvent {
  std::string name;
  WallTime time{};
  Attributes attributes;
};

// A link to another span (here: the trigger that asked for a run, when it is not the parent).
struct SpanLink {
  TraceContext context;
  Attributes attributes;
};

struct SpanData {
  TraceContext context;  // trace id, span id, flags and tracestate of this span
  std::optional<SpanId> parent_span_id;
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  WallTime start{};
  WallTime end{};
  Attributes attributes;
  std::vector<SpanEvent> events;
  std::vector<SpanLink> links;
  SpanStatusCode status = SpanStatusCode::kUnset;
  std::string status_message;
};

// Receives finished spans. Thread-safe; OnEnd is quick and never blocks on I/O.
class SpanSink {
 public:
  virtual ~SpanSink() = default;
  virtual void OnEnd(SpanData span) = 0;
};

// The resource and instrumentation scope the spans of one process are exported under.
struct TraceResource {
  Attributes attributes;  // service.name first, then OTEL_RESOURCE_ATTRIBUTES and the SDK's own
};

}  // namespace stagehand
