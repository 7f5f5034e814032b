#include "stagehand/trace/otlp_json.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

namespace stagehand {
namespace {

using Json = nlohmann::json;

// OTLP/JSON writes 64-bit integers (and fixed64 times) as decimal strings.
std::string UnixNanos(WallTime time) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count());
}

Json AnyValue(const AttributeValue& value) {
  return std::visit(
      [](const auto& v) -> Json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return {{"stringValue", v}};
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          return {{"intValue", std::to_string(v)}};
        } else if constexpr (std::is_same_v<T, double>) {
          return {{"doubleValue", v}};
        } else {
          return {{"boolValue", v}};
        }
      },
      value);
}

Json KeyValues(const Attributes& attributes) {
  Json out = Json::array();
  for (const auto& [key, value] : attributes) {
    out.push_back({{"key", key}, {"value", AnyValue(value)}});
  }
  return out;
}

Json SpanJson(const SpanData& span) {
  Json out = {
      {"traceId", HexOf(span.context.trace_id)},
      {"spanId", HexOf(span.context.span_id)},
      {"flags", span.context.flags},
      {"name", span.name},
      {"kind", static_cast<int>(span.kind)},
      {"startTimeUnixNano", UnixNanos(span.start)},
      {"endTimeUnixNano", UnixNanos(span.end)},
      {"attributes", KeyValues(span.attributes)},
  };
  if (!span.context.trace_state.empty()) out["traceState"] = span.context.trace_state;
  if (span.parent_span_id) out["parentSpanId"] = HexOf(*span.parent_span_id);
  if (!span.events.empty()) {
    Json events = Json::array();
    for (const SpanEvent& event : span.events) {
      events.push_back({{"name", event.name},
                        {"timeUnixNano", UnixNanos(event.time)},
                        {"attributes", KeyValues(event.attributes)}});
    }
    out["events"] = std::move(events);
  }
  if (!span.links.empty()) {
    Json links = Json::array();
    for (const SpanLink& link : span.links) {
      Json entry = {{"traceId", HexOf(link.context.trace_id)},
                    {"spanId", HexOf(link.context.span_id)},
                    {"attributes", KeyValues(link.attributes)}};
      if (!link.context.trace_state.empty()) entry["traceState"] = link.context.trace_state;
      links.push_back(std::move(entry));
    }
    out["links"] = std::move(links);
  }
  Json status = Json::object();
  if (span.status != SpanStatusCode::kUnset) status["code"] = static_cast<int>(span.status);
  if (!span.status_message.empty()) status["message"] = span.status_message;
  out["status"] = std::move(status);
  return out;
}

}  // namespace

std::string EncodeOtlpTraces(const TraceResource& resource, std::string_view scope_name,
                             std::string_view scope_version, const std::vector<SpanData>& spans) {
  Json encoded = Json::array();
  for (const SpanData& span : spans) encoded.push_back(SpanJson(span));
  Json scope = {{"name", scope_name}};
  if (!scope_version.empty()) scope["version"] = scope_version;
  const Json request = {
      {"resourceSpans",
       Json::array({{{"resource", {{"attributes", KeyValues(resource.attributes)}}},
                     {"scopeSpans", Json::array({{{"scope", std::move(scope)},
                                                  {"spans", std::move(encoded)}}})}}})}};
  return request.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace stagehand
