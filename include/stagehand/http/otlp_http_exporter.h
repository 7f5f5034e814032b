// Sends spans to an OpenTelemetry collector over OTLP/HTTP with the JSON encoding (POST of an
// ExportTraceServiceRequest to the traces endpoint, Content-Type application/json), the transport
// every OTLP receiver takes on port 4318. Plain http only (the project's HTTP client is built
// without TLS); put a collector or a proxy on the host for https. Used by the batch span
// processor's thread, never by a run.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/http/http_message.h"
#include "stagehand/time/clock.h"
#include "stagehand/trace/span.h"

namespace stagehand {

struct OtlpHttpOptions {
  // Reads the time of the backoff after a collector did not answer. The system clock when null.
  const Clock* clock = nullptr;
  // The traces URL, e.g. "http://127.0.0.1:4318/v1/traces".
  std::string endpoint;
  // Sent with every request (OTEL_EXPORTER_OTLP_HEADERS: an API key, say).
  HttpHeaders headers;
  // The whole request's limit (OTEL_EXPORTER_OTLP_TIMEOUT).
  std::chrono::milliseconds timeout{10000};
  TraceResource resource;
  std::string scope_name;
  std::string scope_version;
};

// Thread-compatible: one thread exports at a time (the processor's).
class OtlpHttpExporter {
 public:
  // Errors: kInvalidArgument when the endpoint is not an http URL (naming what is wrong).
  static Result<std::unique_ptr<OtlpHttpExporter>> Create(OtlpHttpOptions options);
  ~OtlpHttpExporter();
  OtlpHttpExporter(const OtlpHttpExporter&) = delete;
  OtlpHttpExporter& operator=(const OtlpHttpExporter&) = delete;

  // Posts `spans`. Errors: kUnavailable when no answer came in time or the answer was not 2xx
  // (naming the endpoint and the status or the transport error). After a request that got no
  // answer, the batches of the next second are refused at once, unencoded (then 2 s, 4 s, ... up
  // to 30 s, until an answer comes): a collector that is down costs neither the encoding nor a
  // connection attempt per batch.
  Status Export(const std::vector<SpanData>& spans);

 private:
  struct Impl;
  explicit OtlpHttpExporter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagehand
