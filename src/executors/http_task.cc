#include "stagehand/executors/http_task.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstdint>
#include <thread>
#include <utility>

#include "stagehand/base/mutex.h"
#include "stagehand/base/url.h"
#include "stagehand/model/task_run.h"
#include "stagehand/trace/span.h"

namespace stagehand {
namespace {

constexpr std::size_t kBodyExcerptBytes = 200;
// The longest reason phrase an error quotes; the server chooses it.
constexpr std::size_t kReasonBytes = 64;
constexpr std::string_view kRedacted = "***";
// After a stop, how often the in-flight request is shut down again: a socket that was still
// being connected at the first attempt is shut down once it exists.
constexpr std::chrono::milliseconds kAbortRetry{10};
// How far past the total timeout the HTTP client's own read and write timeouts lie.
constexpr std::chrono::milliseconds kClientTimeoutSlack{1000};

Status BadUrl(std::string_view url, std::string_view reason) {
  return InvalidArgumentError(fmt::format("invalid URL '{}': {}", RedactUrl(url), reason));
}

Result<std::string> NormalizedMethod(std::string_view method) {
  if (method.empty()) {
    return InvalidArgumentError("HTTP method is empty");
  }
  std::string out;
  for (char c : method) {
    if (std::isalpha(static_cast<unsigned char>(c)) == 0) {
      return InvalidArgumentError(fmt::format("invalid HTTP method '{}'", method));
    }
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

Status CheckHeaders(const std::map<std::string, std::string>& headers) {
  for (const auto& [name, value] : headers) {
    bool name_ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isgraph(static_cast<unsigned char>(c)) != 0 && c != ':';
    });
    if (!name_ok) {
      return InvalidArgumentError(fmt::format("invalid HTTP header name '{}'", name));
    }
    if (value.find_first_of("\r\n") != std::string::npos) {
      return InvalidArgumentError(fmt::format("HTTP header '{}' has a line break", name));
    }
  }
  return Status::Ok();
}

Status CheckSpec(const HttpTaskSpec& spec) {
  STAGEHAND_RETURN_IF_ERROR(ParseHttpTaskUrl(spec.url));
  STAGEHAND_RETURN_IF_ERROR(NormalizedMethod(spec.method));
  STAGEHAND_RETURN_IF_ERROR(CheckHeaders(spec.headers));
  if (spec.expect_status && (*spec.expect_status < 100 || *spec.expect_status > 599)) {
    return InvalidArgumentError(
        fmt::format("expected HTTP status {} is not in 100..599", *spec.expect_status));
  }
  return Status::Ok();
}

// One request on a helper thread, which the caller can abandon. Thread-safe.
class Exchange {
 public:
  Exchange(const HttpTaskUrl& url, const HttpTaskSpec& spec, std::string method)
      : client_(fmt::format("{}://{}:{}", url.scheme, UrlHost(url.host), url.port)) {
    auto connect = std::min(spec.connect_timeout, spec.total_timeout);
    client_.set_connection_timeout(connect);
    // The caller's deadline ends the exchange; these only bound the helper thread if it is not
    // aborted (they are kept past the deadline so that the deadline, not a read error, decides).
    client_.set_read_timeout(spec.total_timeout + kClientTimeoutSlack);
    client_.set_write_timeout(spec.total_timeout + kClientTimeoutSlack);
    client_.set_keep_alive(false);
    client_.set_follow_location(false);
    // A compressed body is kept as received: inflating it would make the cap meaningless (a
    // 510 KB gzip bomb inflates to hundreds of megabytes).
    client_.set_decompress(false);
    client_.set_socket_options([this](socket_t sock) { Track(sock); });
    request_.method = std::move(method);
    request_.path = url.target;
    for (const auto& [name, value] : spec.headers) {
      request_.headers.emplace(name, value);
    }
    if (spec.trace.valid() && !request_.has_header("traceparent")) {
      request_.headers.emplace("traceparent", FormatTraceparent(spec.trace));
      if (!spec.trace.trace_state.empty() && !request_.has_header("tracestate")) {
        request_.headers.emplace("tracestate", spec.trace.trace_state);
      }
    }
    if (!request_.has_header("Accept-Encoding")) {
      request_.headers.emplace("Accept-Encoding", "identity");
    }
    request_.body = spec.body;
    max_body_bytes_ = spec.max_response_bytes;
    // Runs on the helper thread only; its results are published with done_.
    request_.content_receiver = [this](const char* data, std::size_t size, std::uint64_t,
                                       std::uint64_t) {
      std::size_t room = max_body_bytes_ - body_.size();
      body_.append(data, std::min(size, room));
      if (size > room) {
        body_truncated_ = true;
        return false;
      }
      return true;
    };
  }

  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  ~Exchange() {
    if (socket_copy_ >= 0) {
      close(socket_copy_);
    }
  }

  bool valid() const { return client_.is_valid(); }

  void Start() {
    worker_ = std::jthread([this] {
      httplib::Response response;
      httplib::Error error = httplib::Error::Success;
      bool ok = client_.send(request_, response, error);
      if (!ok && error == httplib::Error::Canceled && body_truncated_) {
        // The receiver ended the body at the cap: the status and headers are complete.
        ok = true;
        error = httplib::Error::Success;
      }
      {
        MutexLock lock(mu_);
        done_ = true;
        ok_ = ok;
        error_ = error;
        response_ = std::move(response);
      }
      cv_.notify_all();
    });
  }

  // Returns whether the exchange finished before `deadline` or `stop`.
  bool Wait(Clock& clock, MonoTime deadline, const std::stop_token& stop) {
    MutexLock lock(mu_);
    return clock.WaitUntil(lock.unique_lock(), cv_, deadline, stop,
                           [this]() STAGEHAND_REQUIRES(mu_) { return done_; });
  }

  // Shuts the connection down until the helper thread has finished, then joins it.
  void Abort(Clock& clock) {
    MutexLock lock(mu_);
    while (!done_) {
      // The client's stop() only reaches a connected socket; shutting down a connecting one
      // fails its connect at once instead of at the connect timeout.
      if (socket_copy_ >= 0) {
        shutdown(socket_copy_, SHUT_RDWR);
      }
      lock.Unlock();
      client_.stop();
      lock.Lock();
      clock.WaitUntil(lock.unique_lock(), cv_, clock.MonoNow() + kAbortRetry, std::stop_token(),
                      [this]() STAGEHAND_REQUIRES(mu_) { return done_; });
    }
    lock.Unlock();
    worker_.join();
  }

  // The outcome; valid after Wait returned true (the helper has set it) or after Abort.
  bool ok() const { return ok_; }
  httplib::Error error() const { return error_; }
  const httplib::Response& response() const { return response_; }
  const std::string& body() const { return body_; }
  bool body_truncated() const { return body_truncated_; }

  void Join() { worker_.join(); }

 private:
  // Keeps a copy of the descriptor of each socket the client opens, before it connects, so that
  // Abort can shut it down; a copy, so that the number is not reused while it is held.
  void Track(socket_t sock) {
    int copy = fcntl(sock, F_DUPFD_CLOEXEC, 0);
    MutexLock lock(mu_);
    if (socket_copy_ >= 0) {
      close(socket_copy_);
    }
    socket_copy_ = copy;
  }

  httplib::Client client_;
  httplib::Request request_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool done_ STAGEHAND_GUARDED_BY(mu_) = false;
  // Written by the helper thread with mu_ held before done_; read without it once done_ was seen
  // or the helper was joined, so not annotated.
  bool ok_ = false;
  httplib::Error error_ = httplib::Error::Success;
  httplib::Response response_;
  std::size_t max_body_bytes_ = 0;
  std::string body_;
  bool body_truncated_ = false;
  int socket_copy_ STAGEHAND_GUARDED_BY(mu_) = -1;
  std::jthread worker_;
};

std::string StatusExpectation(const HttpTaskSpec& spec) {
  return spec.expect_status ? std::to_string(*spec.expect_status) : "2xx";
}

// Returns the reason phrase, cut at kReasonBytes, with anything but printable ASCII replaced.
std::string SafeReason(std::string_view reason) {
  std::string out(reason.substr(0, kReasonBytes));
  for (char& c : out) {
    if (std::isprint(static_cast<unsigned char>(c)) == 0) {
      c = '?';
    }
  }
  return out;
}

// The span of a request sent for a run, as OpenTelemetry's HTTP client conventions name it: kind
// client, named by the method, a child of the run's span (`parent`), with status error when the
// run fails.
SpanData ClientSpan(const HttpTaskSpec& spec, const SpanId& parent, WallTime start, WallTime end,
                    const HttpTaskResponse& response, const Status& status) {
  SpanData span;
  span.context = spec.trace;
  span.parent_span_id = parent;
  span.kind = SpanKind::kClient;
  span.start = start;
  span.end = std::max(start, end);
  Result<std::string> method = NormalizedMethod(spec.method);
  span.name = method.ok() ? *method : "HTTP";
  span.attributes.emplace_back("http.request.method", span.name);
  span.attributes.emplace_back("url.full", RedactUrl(spec.url));
  if (Result<HttpTaskUrl> url = ParseHttpTaskUrl(spec.url); url.ok()) {
    span.attributes.emplace_back("server.address", url->host);
    span.attributes.emplace_back("server.port", static_cast<std::int64_t>(url->port));
  }
  if (response.status != 0) {
    span.attributes.emplace_back("http.response.status_code",
                                 static_cast<std::int64_t>(response.status));
  }
  if (!status.ok()) {
    span.status = SpanStatusCode::kError;
    span.status_message = status.message();
    span.attributes.emplace_back("error.type", response.status != 0
                                                   ? std::to_string(response.status)
                                                   : std::string(StatusCodeName(status.code())));
  }
  return span;
}

}  // namespace

std::string RedactUrl(std::string_view url) {
  std::string out;
  std::size_t fragment = url.find('#');
  std::string_view rest = url.substr(0, fragment);
  std::size_t scheme_end = rest.find("://");
  if (scheme_end != std::string_view::npos) {
    out.append(rest.substr(0, scheme_end + 3));
    rest.remove_prefix(scheme_end + 3);
    std::size_t authority_end = std::min(rest.find_first_of("/?"), rest.size());
    std::size_t at = rest.substr(0, authority_end).rfind('@');
    if (at != std::string_view::npos) {
      out.append(kRedacted).append("@");
      rest.remove_prefix(at + 1);
    }
  }
  std::size_t query = rest.find('?');
  out.append(rest.substr(0, query));
  if (query == std::string_view::npos) {
    return out;
  }
  out += '?';
  rest.remove_prefix(query + 1);
  bool first = true;
  while (true) {
    std::size_t end = std::min(rest.find('&'), rest.size());
    std::string_view item = rest.substr(0, end);
    if (!first) {
      out += '&';
    }
    first = false;
    std::size_t equals = item.find('=');
    if (equals != std::string_view::npos) {
      out.append(item.substr(0, equals + 1)).append(kRedacted);
    } else if (!item.empty()) {
      out.append(kRedacted);
    }
    if (end == rest.size()) {
      break;
    }
    rest.remove_prefix(end + 1);
  }
  return out;
}

bool HttpsSupported() {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  return true;
#else
  return false;
#endif
}

Result<HttpTaskUrl> ParseHttpTaskUrl(std::string_view url) {
  Result<Url> parsed = ParseUrl(url);
  if (!parsed.ok()) {
    return BadUrl(url, parsed.status().message());
  }
  HttpTaskUrl out;
  out.scheme = parsed->scheme;
  if (out.scheme == "https") {
    if (!HttpsSupported()) {
      return BadUrl(url, "https is not supported in this build");
    }
    out.port = 443;
  } else if (out.scheme == "http") {
    out.port = 80;
  } else {
    return BadUrl(url, fmt::format("unsupported scheme '{}' (expected http)", out.scheme));
  }
  out.host = std::move(parsed->host);
  if (parsed->port) {
    out.port = *parsed->port;
  }
  out.target = parsed->path.empty() ? "/" : std::move(parsed->path);
  if (parsed->query) {
    out.target += '?';
    out.target += *parsed->query;
  }
  return out;
}

Status RunHttpTask(const HttpTaskSpec& spec, Logger& logger, Clock& clock,
                   const RunControl& control) {
  const bool client_span = control.spans != nullptr && control.trace.sampled();
  if (control.trace.valid() && spec.trace.trace_id != control.trace.trace_id) {
    HttpTaskSpec traced = spec;
    traced.trace = control.trace;
    if (client_span) traced.trace.span_id = NewSpanId();
    return RunHttpTask(traced, logger, clock, control);
  }
  // A request has no grace period: either token aborts it at once.
  std::stop_source abort;
  auto request_abort = [&abort] { abort.request_stop(); };
  std::stop_callback on_stop(control.stop, request_abort);
  std::stop_callback on_kill(control.kill, request_abort);
  HttpTaskResponse response;
  const WallTime start = clock.Now();
  Status status = RunHttpTask(spec, logger, clock, abort.get_token(), &response);
  if (client_span) {
    control.spans->OnEnd(
        ClientSpan(spec, control.trace.span_id, start, clock.Now(), response, status));
  }
  if (control.report != nullptr && response.status != 0) {
    control.report->SetHttpStatus(response.status);
    control.report->AppendOutput(
        std::string_view(response.body).substr(0, kDefaultRunOutputTailBytes));
  }
  return status;
}

Status RunHttpTask(const HttpTaskSpec& spec, Logger& logger, Clock& clock,
                   const std::stop_token& stop, HttpTaskResponse* out) {
  STAGEHAND_RETURN_IF_ERROR(CheckSpec(spec));
  HttpTaskUrl url = *ParseHttpTaskUrl(spec.url);
  std::string method = *NormalizedMethod(spec.method);
  std::string redacted_url = RedactUrl(spec.url);
  std::string what = fmt::format("HTTP {} {}", method, redacted_url);
  if (stop.stop_requested()) {
    return CancelledError(what + ": not sent");
  }

  LogFields fields;
  if (!spec.task_id.empty()) {
    fields.emplace_back("task", spec.task_id);
  }
  fields.emplace_back("method", method);
  fields.emplace_back("url", redacted_url);
  AddTraceFields(spec.trace, fields);

  Exchange exchange(url, spec, method);
  if (!exchange.valid()) {
    return InvalidArgumentError(what + ": the client rejected the URL");
  }
  MonoTime deadline = clock.MonoNow() + spec.total_timeout;
  exchange.Start();
  if (!exchange.Wait(clock, deadline, stop)) {
    exchange.Abort(clock);
    if (stop.stop_requested()) {
      return CancelledError(what + ": aborted");
    }
    return DeadlineExceededError(
        fmt::format("{}: no response within {} ms", what, spec.total_timeout.count()));
  }
  exchange.Join();

  if (!exchange.ok() && clock.MonoNow() >= deadline) {
    return DeadlineExceededError(
        fmt::format("{}: no response within {} ms", what, spec.total_timeout.count()));
  }
  if (!exchange.ok()) {
    return UnavailableError(
        fmt::format("{}: request failed: {}", what, httplib::to_string(exchange.error())));
  }
  const httplib::Response& response = exchange.response();
  fields.emplace_back("status", std::to_string(response.status));
  fields.emplace_back("body_bytes", std::to_string(exchange.body().size()));
  if (exchange.body_truncated()) {
    fields.emplace_back("body_truncated", "true");
  }
  if (out != nullptr) {
    out->status = response.status;
    out->body = exchange.body();
    out->body_truncated = exchange.body_truncated();
  }
  bool expected = spec.expect_status ? response.status == *spec.expect_status
                                     : response.status >= 200 && response.status <= 299;
  if (expected) {
    logger.Info("http task response", fields);
    return Status::Ok();
  }
  logger.Warn("http task response", fields);
  std::string message = fmt::format("{}: status {}", what, response.status);
  if (std::string reason = SafeReason(response.reason); !reason.empty()) {
    message += " " + reason;
  }
  message += fmt::format(" (expected {})", StatusExpectation(spec));
  if (exchange.body_truncated()) {
    message += fmt::format("; body truncated at {} bytes", spec.max_response_bytes);
  }
  if (spec.include_body_in_error && !exchange.body().empty()) {
    message += "; body: " + exchange.body().substr(0, kBodyExcerptBytes);
  }
  return UnavailableError(std::move(message));
}

Result<TaskFunction> MakeHttpTask(HttpTaskSpec spec, std::shared_ptr<Logger> logger, Clock& clock) {
  STAGEHAND_RETURN_IF_ERROR(CheckSpec(spec));
  if (logger == nullptr) {
    logger = NullLogger();
  }
  return TaskFunction(
      [spec = std::move(spec), logger = std::move(logger), &clock](const RunControl& control) {
        return RunHttpTask(spec, *logger, clock, control);
      });
}

}  // namespace stagehand
