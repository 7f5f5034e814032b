// HTTP tasks: the task functions `stagehand serve` builds from a YAML `http:` entry. Each run sends
// one request and maps the response status to a Status, within a connect and a total timeout. A run
// holds at most `max_response_bytes` of the response body, never inflates a compressed body, and
// names its URL only in redacted form (RedactUrl) in logs and errors.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"
#include "stagehand/model/task_function.h"
#include "stagehand/time/clock.h"
#include "stagehand/trace/trace_context.h"

namespace stagehand {

// The parts of an HTTP task URL. Thread-compatible value type.
struct HttpTaskUrl {
  std::string scheme;  // "http" or "https", lower case.
  std::string host;    // A name or an IPv4 address; an IPv6 address without its brackets.
  int port = 0;        // From the URL, else 80 or 443.
  std::string target;  // Path and query, "/" when absent; the fragment is dropped.
};

// Returns whether https URLs can be used (cpp-httplib built with OpenSSL).
bool HttpsSupported();

// Returns `url` with anything that may hold a secret hidden, for logs and error messages: user
// information becomes "***@", every query value (or a query item without '=') becomes "***", and
// the fragment is dropped, e.g. "https://***@host/p?api_key=***&x=***". Scheme, host, port and
// path are kept. Any text is accepted; text that is not a URL is redacted as far as it looks like
// one. Thread-safe.
std::string RedactUrl(std::string_view url);

// Returns the parts of `url`, an absolute http:// (or, when HttpsSupported(), https://) URL as
// ParseUrl (stagehand/base/url.h) reads it. INVALID_ARGUMENT, quoting the redacted URL and saying
// what is wrong, otherwise.
Result<HttpTaskUrl> ParseHttpTaskUrl(std::string_view url);

// What to send and what counts as success. Thread-compatible value type.
struct HttpTaskSpec {
  std::string url;
  std::string method = "POST";
  std::map<std::string, std::string> headers;
  std::string body;
  // The one status that counts as success; any 2xx when absent.
  std::optional<int> expect_status;
  // Caps on establishing the connection and on the whole exchange (monotonic).
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds total_timeout{30000};
  // The most response body bytes a run keeps; when the body is longer, the connection is closed
  // at the cap and the rest is never read. Counted as received: the client asks for no content
  // coding ("Accept-Encoding: identity" unless `headers` set one) and inflates nothing.
  std::size_t max_response_bytes = 1024 * 1024;
  // Whether the error of an unexpected status quotes the start of the response body.
  bool include_body_in_error = false;
  // The `task` field of every log record; empty leaves it out.
  std::string task_id;
  // The request's trace context (set by RunHttpTask from RunControl::trace: the run's span, or
  // the request's own client span when the run puts spans in RunControl::spans): when valid, the
  // request carries `traceparent` and `tracestate` (unless `headers` set them) and the run's log
  // records carry trace_id and span_id.
  TraceContext trace{};
};

// What a run received. Thread-compatible value type.
struct HttpTaskResponse {
  int status = 0;
  // At most `max_response_bytes` of the body, as received (still compressed if it was sent so).
  std::string body;
  // Whether the server sent more than `max_response_bytes`; the rest was not read.
  bool body_truncated = false;
};

// Sends the request of `spec` once and blocks until the response, the total timeout on `clock`,
// or `stop`. Returns OK when the status is the expected one; UNAVAILABLE with the status (and,
// with `include_body_in_error`, the first 200 bytes of the body) when it is not, saying whether
// the body was cut at `max_response_bytes`, or naming the error when no response came
// (connection refused, reset, read timeout); DEADLINE_EXCEEDED when `total_timeout` passed;
// CANCELLED at once when `stop` is requested, also while the connection is being established
// (a host name still being resolved takes as long as the resolver does); INVALID_ARGUMENT for a
// bad URL or method. Fills `*response`, when not null, whenever a response came. Never throws.
// Thread-safe.
Status RunHttpTask(const HttpTaskSpec& spec, Logger& logger, Clock& clock,
                   const std::stop_token& stop, HttpTaskResponse* response = nullptr);

// Runs RunHttpTask with a stop token that is requested as soon as `control.stop` or
// `control.kill` is: a request has no grace period, so both abort it at once. When a response came
// and `control.report` is set, sets the HTTP status on the report and appends the first
// kDefaultRunOutputTailBytes of the body (as received) as the run's output. When `control.spans`
// is set (a sampled run), the request is a client span of its own, child of the run's span, named
// by the method ("POST") with OpenTelemetry's HTTP client attributes (http.request.method,
// url.full redacted, server.address, server.port, http.response.status_code, error.type) and
// status error when the run fails; its `traceparent` names that span.
Status RunHttpTask(const HttpTaskSpec& spec, Logger& logger, Clock& clock,
                   const RunControl& control);

// Returns a task function that calls RunHttpTask(spec, *logger, clock, control) on each run, or
// INVALID_ARGUMENT when the URL or method is invalid (e.g. "https is not supported in this build").
// `clock` must outlive the function.
Result<TaskFunction> MakeHttpTask(HttpTaskSpec spec, std::shared_ptr<Logger> logger, Clock& clock);

}  // namespace stagehand
