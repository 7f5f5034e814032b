// The OTLP/JSON encoding of spans (an ExportTraceServiceRequest, as an OTLP/HTTP receiver takes
// it at /v1/traces with Content-Type application/json): ids in lowercase hex, times as decimal
// strings of Unix nanoseconds, enums as their numbers, attributes as typed AnyValues.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stagehand/trace/span.h"

namespace stagehand {

// Returns the request that carries `spans` under one resource and one instrumentation scope.
std::string EncodeOtlpTraces(const TraceResource& resource, std::string_view scope_name,
                             std::string_view scope_version, const std::vector<SpanData>& spans);

}  // namespace stagehand
