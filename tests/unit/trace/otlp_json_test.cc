#include "stagehand/trace/otlp_json.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>

namespace stagehand {
namespace {

using nlohmann::json;

SpanData ASpan() {
  SpanData span;
  span.context =
      *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=1");
  span.parent_span_id = SpanId{0, 0, 0, 0, 0, 0, 0, 7};
  span.name = "task nightly-backup";
  span.kind = SpanKind::kInternal;
  span.start = WallTime(std::chrono::milliseconds(1700000000123));
  span.end = span.start + std::chrono::microseconds(1500);
  span.attributes = {{"taskId", std::string("nightly-backup")},
                     {"stagehand.attempt", std::int64_t{2}},
                     {"stagehand.start_lag_ms", 1.5},
                     {"stagehand.manual", true}};
  span.events.push_back({"exception", span.end, {{"exception.message", std::string("boom")}}});
  span.status = SpanStatusCode::kError;
  span.status_message = "boom";
  return span;
}

// Checked against the OTLP/JSON encoding rules of opentelemetry-proto (trace.proto, common.proto
// and the JSON mapping of OTLP/HTTP): hex ids, nanosecond times and 64-bit integers as strings,
// enums as numbers, attributes as {key, value: {<type>Value}}.
TEST(OtlpJsonTest, EncodesASpanAsTheSpecificationSays) {
  TraceResource resource;
  resource.attributes = {{"service.name", std::string("stagehand")}};
  const json request =
      json::parse(EncodeOtlpTraces(resource, "backstage-service-scheduler", "0.1.0", {ASpan()}));

  const json& resource_spans = request.at("resourceSpans");
  ASSERT_EQ(resource_spans.size(), 1u);
  EXPECT_EQ(resource_spans[0].at("resource").at("attributes"),
            json::parse(R"([{"key":"service.name","value":{"stringValue":"stagehand"}}])"));
  const json& scope_spans = resource_spans[0].at("scopeSpans");
  ASSERT_EQ(scope_spans.size(), 1u);
  EXPECT_EQ(scope_spans[0].at("scope"),
            json::parse(R"({"name":"backstage-service-scheduler","version":"0.1.0"})"));
  const json& span = scope_spans[0].at("spans").at(0);
  EXPECT_EQ(span, json::parse(R"({
    "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
    "spanId": "00f067aa0ba902b7",
    "traceState": "vendor=1",
    "parentSpanId": "0000000000000007",
    "flags": 1,
    "name": "task nightly-backup",
    "kind": 1,
    "startTimeUnixNano": "1700000000123000000",
    "endTimeUnixNano": "1700000000124500000",
    "attributes": [
      {"key": "taskId", "value": {"stringValue": "nightly-backup"}},
      {"key": "stagehand.attempt", "value": {"intValue": "2"}},
      {"key": "stagehand.start_lag_ms", "value": {"doubleValue": 1.5}},
      {"key": "stagehand.manual", "value": {"boolValue": true}}
    ],
    "events": [{"name": "exception", "timeUnixNano": "1700000000124500000",
                "attributes": [{"key": "exception.message", "value": {"stringValue": "boom"}}]}],
    "status": {"code": 2, "message": "boom"}
  })"));
}

TEST(OtlpJsonTest, ARootSpanWithUnsetStatusLeavesTheOptionalFieldsOut) {
  SpanData span = ASpan();
  span.parent_span_id.reset();
  span.context.trace_state.clear();
  span.events.clear();
  span.status = SpanStatusCode::kUnset;
  span.status_message.clear();
  const json encoded = json::parse(EncodeOtlpTraces({}, "scope", "", {span}));
  const json& out = encoded.at("resourceSpans")[0].at("scopeSpans")[0];
  EXPECT_FALSE(out.at("scope").contains("version"));
  const json& first = out.at("spans")[0];
  EXPECT_FALSE(first.contains("parentSpanId"));
  EXPECT_FALSE(first.contains("traceState"));
  EXPECT_FALSE(first.contains("events"));
  EXPECT_EQ(first.at("status"), json::object());
}

TEST(OtlpJsonTest, InvalidUtf8InANameIsReplacedNotAnError) {
  SpanData span = ASpan();
  span.name = "task \xff";
  const json encoded = json::parse(EncodeOtlpTraces({}, "scope", "", {span}));
  EXPECT_EQ(encoded.at("resourceSpans")[0].at("scopeSpans")[0].at("spans")[0].at("name"),
            "task \xef\xbf\xbd");
}

}  // namespace
}  // namespace stagehand
