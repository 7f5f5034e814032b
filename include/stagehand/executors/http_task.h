// HTTP tasks: the task functions `stagehand serve` builds from a YAML `http:` entry. Each run sends
// one request and maps the response status to a Status, within a connect and a total timeout.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"
#include "stagehand/engine/task_function.h"
#include "stagehand/time/clock.h"

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

// Returns the parts of `url`, an absolute http:// (or, when HttpsSupported(), https://) URL
// without user information. INVALID_ARGUMENT, quoting the URL and saying what is wrong, otherwise.
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
  // The `task` field of every log record; empty leaves it out.
  std::string task_id;
};

// Sends the request of `spec` once and blocks until the response, the total timeout on `clock`,
// or `stop`. Returns OK when the status is the expected one; UNAVAILABLE with the status and the
// first 200 bytes of the body when it is not, or naming the error when no response came
// (connection refused, reset, read timeout); DEADLINE_EXCEEDED when `total_timeout` passed;
// CANCELLED at once when `stop` is requested, also while the connection is being established
// (a host name still being resolved takes as long as the resolver does); INVALID_ARGUMENT for a
// bad URL or method. Never throws. Thread-safe.
Status RunHttpTask(const HttpTaskSpec& spec, Logger& logger, Clock& clock,
                   const std::stop_token& stop);

// Runs RunHttpTask with a stop token that is requested as soon as `control.stop` or
// `control.kill` is: a request has no grace period, so both abort it at once.
Status RunHttpTask(const HttpTaskSpec& spec, Logger& logger, Clock& clock,
                   const RunControl& control);

// Returns a task function that calls RunHttpTask(spec, *logger, clock, control) on each run, or
// INVALID_ARGUMENT when the URL or method is invalid (e.g. "https is not supported in this build").
// `clock` must outlive the function.
Result<TaskFunction> MakeHttpTask(HttpTaskSpec spec, std::shared_ptr<Logger> logger, Clock& clock);

}  // namespace stagehand
