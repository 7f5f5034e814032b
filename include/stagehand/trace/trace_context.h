// The W3C Trace Context of a span (https://www.w3.org/TR/trace-context/): the trace it belongs
// to, its own id, its flags and the vendors' tracestate, with the `traceparent` header's text
// form. What a run's span is known by: task functions read it from RunControl::trace, command
// tasks get it as TRACEPARENT and TRACESTATE, HTTP tasks send it as headers.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"

namespace stagehand {

using TraceId = std::array<std::uint8_t, 16>;
using SpanId = std::array<std::uint8_t, 8>;

// A value type. The default value is invalid (all-zero ids): no trace.
struct TraceContext {
  TraceId trace_id{};
  SpanId span_id{};
  std::uint8_t flags = 0;   // bit 0: sampled
  std::string trace_state;  // the `tracestate` header as received, or empty

  // Both ids are non-zero.
  bool valid() const;
  bool sampled() const { return (flags & 0x01) != 0; }
  friend bool operator==(const TraceContext&, const TraceContext&) = default;
};

// Parses a `traceparent` header ("00-<32 hex>-<16 hex>-<2 hex>"), with `tracestate` kept as given
// (trimmed; empty when longer than 512 bytes, which the spec lets a receiver drop). A version
// above 00 is read by its first four fields, as the spec asks. Errors: kInvalidArgument naming
// what is wrong (length, version ff, non-hex or uppercase digits, an all-zero id).
Result<TraceContext> ParseTraceparent(std::string_view traceparent,
                                      std::string_view tracestate = {});

// Returns "00-<trace id>-<span id>-<flags>" in lowercase hex.
std::string FormatTraceparent(const TraceContext& context);

// The ids in lowercase hex (32 and 16 digits), as logs and OTLP/JSON write them.
std::string HexOf(const TraceId& id);
std::string HexOf(const SpanId& id);

// Adds `trace_id` and `span_id` (lowercase hex) to a run's log record when `context` is valid, so
// that logs and traces join.
void AddTraceFields(const TraceContext& context, LogFields& fields);

// Random non-zero ids. Thread-safe.
TraceId NewTraceId();
SpanId NewSpanId();

}  // namespace stagehand
