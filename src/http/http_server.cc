#include "stagehand/http/http_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "http/path_match.h"
#include "stagehand/http/error_response.h"

namespace stagehand {
namespace {

constexpr std::string_view kLivenessPath = "/.backstage/health/v1/liveness";
constexpr std::string_view kReadinessPath = "/.backstage/health/v1/readiness";
// Every path: routing is ours, not httplib's.
constexpr const char* kAnyPath = R"([\s\S]*)";

// When the request being served on this worker thread started (set before its body is read), for
// the access log, which httplib calls on the same thread once the response is written.
thread_local std::optional<MonoTime> request_started;

HttpRequest ToHttpRequest(const httplib::Request& request) {
  HttpRequest out;
  out.method = request.method;
  const std::string_view target = request.target;
  const std::size_t question = target.find('?');
  out.path = std::string(target.substr(0, question));
  if (question != std::string_view::npos) {
    out.query = std::string(target.substr(question + 1));
  }
  for (const auto& [name, value] : request.headers) {
    out.headers.emplace_back(name, value);
  }
  out.body = request.body;
  return out;
}

// The methods some route answers; every other method is one "other" label, so that clients
// cannot add label values (a metric series each) by inventing methods.
std::string_view MethodLabel(std::string_view method) {
  for (const std::string_view known :
       {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
    if (method == known) {
      return known;
    }
  }
  return "other";
}

// Returns whether httplib refused `request` with 400 only for its method: a well-formed request
// line ("<token> /<path> HTTP/1.x") whose method is none of those httplib parses. Express
// answers such a request 404 (no route has the method), and so do we.
bool IsUnknownMethodRequest(const httplib::Request& request) {
  static constexpr std::string_view kParsed[] = {"GET",     "HEAD",    "POST",  "PUT",   "DELETE",
                                                 "CONNECT", "OPTIONS", "TRACE", "PATCH", "PRI"};
  const std::string_view method = request.method;
  const bool token = !method.empty() && std::all_of(method.begin(), method.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '!' || c == '~' || c == '+' || c == '*';
  });
  return token && std::find(std::begin(kParsed), std::end(kParsed), method) == std::end(kParsed) &&
         (request.version == "HTTP/1.1" || request.version == "HTTP/1.0") &&
         !request.target.empty() && request.target.front() == '/';
}

HttpResponse JsonResponse(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
  response.body = std::move(body);
  return response;
}

void WriteResponse(HttpResponse response, httplib::Response& out) {
  out.status = response.status;
  std::string content_type;
  for (auto& [name, value] : response.headers) {
    if (http_internal::EqualsIgnoreCase(name, "Content-Type")) {
      content_type = std::move(value);
    } else {
      out.set_header(name, value);
    }
  }
  out.body = std::move(response.body);
  if (!content_type.empty()) {
    out.set_header("Content-Type", content_type);
  }
}

}  // namespace

struct HttpServer::Impl {
  explicit Impl(HttpServerOptions server_options)
      : options(std::move(server_options)),
        clock(options.clock != nullptr ? options.clock : &SystemClock::Instance()),
        logger(options.logger ? options.logger : NullLogger()) {}

  std::optional<HttpResponse> Route(const HttpRequest& request) {
    const bool get = request.method == "GET" || request.method == "HEAD";
    if (get && http_internal::RouteMatches(request.path, kLivenessPath)) {
      return JsonResponse(200, R"({"status":"ok"})");
    }
    if (get && http_internal::RouteMatches(request.path, kReadinessPath)) {
      if (ready.load()) {
        return JsonResponse(200, R"({"status":"ok"})");
      }
      return JsonResponse(503, R"({"status":"error","message":"Backend is not ready"})");
    }
    HttpHandler handler;
    std::optional<std::string_view> relative;
    {
      std::lock_guard lock(mu);
      for (const auto& [prefix, mounted] : mounts) {
        relative = http_internal::StripMount(request.path, prefix);
        if (relative) {
          handler = mounted;
          break;
        }
      }
    }
    if (!relative) {
      return std::nullopt;
    }
    HttpRequest inner = request;
    inner.path = std::string(*relative);
    return handler(inner);
  }

  void Serve(const httplib::Request& request, httplib::Response& response) {
    const HttpRequest ours = ToHttpRequest(request);
    std::optional<HttpResponse> routed = Route(ours);
    if (!routed) {
      routed.emplace();
      routed->status = 404;
    }
    WriteResponse(std::move(*routed), response);
  }

  // Returns what answers `method` on `path`: a health path, the prefix of the mount it falls
  // under, or "unmatched". The view is valid until the next call on the same thread.
  std::string_view RouteOf(std::string_view method, std::string_view path) {
    const bool get = method == "GET" || method == "HEAD";
    for (const std::string_view health : {kLivenessPath, kReadinessPath}) {
      if (get && http_internal::RouteMatches(path, health)) {
        return health;
      }
    }
    thread_local std::string route;
    std::lock_guard lock(mu);
    for (const auto& [prefix, mounted] : mounts) {
      if (http_internal::StripMount(path, prefix)) {
        route = prefix;
        return route;
      }
    }
    return "unmatched";
  }

  // Called by httplib once per answered request, after the response is written: also for those
  // refused before routing (400, 413), which have no start time when refused before the headers
  // were read.
  void OnAnswered(const httplib::Request& request, const httplib::Response& response) {
    const std::optional<MonoTime> start = std::exchange(request_started, std::nullopt);
    const std::chrono::nanoseconds elapsed =
        start ? clock->MonoNow() - *start : std::chrono::nanoseconds(0);
    const std::string_view target = request.target;
    const std::string_view path = target.substr(0, target.find('?'));
    const std::string_view route = RouteOf(request.method, path);
    if (options.on_request) {
      HttpRequestRecord record;
      record.method = MethodLabel(request.method);
      record.route = route;
      record.status = response.status;
      record.duration = elapsed;
      options.on_request(record);
    }
    const LogLevel level =
        response.status < 400 && IsQuietRoute(route) ? LogLevel::kDebug : LogLevel::kInfo;
    if (!logger->Enabled(level)) {
      return;
    }
    LogFields fields = {{"method", request.method},
                        {"path", std::string(path)},
                        {"status", std::to_string(response.status)}};
    if (start) {
      fields.emplace_back(
          "duration_ms",
          fmt::format("{:.3f}", std::chrono::duration<double, std::milli>(elapsed).count()));
    }
    logger->Log(level, "request", fields);
  }

  // Returns whether successful answers on `route` (see RouteOf) are logged at debug.
  bool IsQuietRoute(std::string_view route) const {
    return route == kLivenessPath || route == kReadinessPath ||
           std::find(options.quiet_routes.begin(), options.quiet_routes.end(), route) !=
               options.quiet_routes.end();
  }

  // Settles a request's body before httplib reads it, as RFC 9112 §6 allows, so that no request
  // waits for bytes that may never come:
  // - without Content-Length and Transfer-Encoding the body is empty (httplib would read until the
  //   peer closes);
  // - Transfer-Encoding is refused with 411 Length Required (no route takes a streamed body, and a
  //   chunk header can announce terabytes);
  // - a Content-Length that is not a decimal number is 400, one above the body limit is 413, both
  //   at once (httplib would first read or skip that many bytes, ~2^64 for "-1").
  // httplib hands pre-routing handlers a const view of a request it owns as a mutable local, so
  // adding the header through const_cast is well defined.
  httplib::Server::HandlerResponse CheckBodyFraming(const httplib::Request& request,
                                                    httplib::Response& response) {
    if (request.has_header("Transfer-Encoding")) {
      response.status = 411;
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool may_have_body = request.method == "POST" || request.method == "PUT" ||
                               request.method == "PATCH" || request.method == "DELETE" ||
                               request.method == "PRI";
    if (!may_have_body) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (!request.has_header("Content-Length")) {
      // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): see above.
      const_cast<httplib::Request&>(request).set_header("Content-Length", "0");
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string length = request.get_header_value("Content-Length");
    const bool decimal = !length.empty() && length.size() <= 19 &&
                         length.find_first_not_of("0123456789") == std::string::npos;
    if (!decimal) {
      WriteResponse(ErrorResponse(InvalidArgumentError("Invalid Content-Length header"),
                                  ToHttpRequest(request), *logger),
                    response);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (std::stoull(length) > options.max_request_body_bytes) {
      response.status = 413;
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  // Gives the error statuses that httplib or CheckBodyFraming produce without a body Backstage's
  // JSON error body (ProtocolErrorResponse), and answers an unknown method 404 with an empty body
  // as Express does. Answers from routes (a body, or a 404 for no route) are left as they are.
  // httplib has not read the headers of a request whose request line it refused and reads them
  // as further requests, so the 404 says "Connection: close" to end the exchange.
  httplib::Server::HandlerResponse OnError(const httplib::Request& request,
                                           httplib::Response& response) {
    if (!response.body.empty() || response.status == 404 || response.status >= 500) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (response.status == 400 && IsUnknownMethodRequest(request)) {
      response.status = 404;
      response.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    const int status = response.status;
    WriteResponse(ProtocolErrorResponse(status, ToHttpRequest(request)), response);
    return httplib::Server::HandlerResponse::Handled;
  }

  void Configure() {
    // httplib's default also sets SO_REUSEPORT, which lets a second server bind a busy port.
    server.set_socket_options([](socket_t socket) {
      int yes = 1;
      ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    server.set_payload_max_length(options.max_request_body_bytes);
    server.set_read_timeout(options.read_timeout);
    server.set_write_timeout(options.write_timeout);
    server.set_keep_alive_timeout(static_cast<time_t>(options.keep_alive_timeout.count()));
    server.set_pre_routing_handler(
        [this](const httplib::Request& request, httplib::Response& response) {
          request_started = clock->MonoNow();
          return CheckBodyFraming(request, response);
        });
    const auto serve = [this](const httplib::Request& request, httplib::Response& response) {
      Serve(request, response);
    };
    server.Get(kAnyPath, serve);
    server.Post(kAnyPath, serve);
    server.Put(kAnyPath, serve);
    server.Patch(kAnyPath, serve);
    server.Delete(kAnyPath, serve);
    server.Options(kAnyPath, serve);
    server.set_exception_handler(
        [this](const httplib::Request& request, httplib::Response& response, std::exception_ptr e) {
          std::string what = "unknown exception";
          try {
            std::rethrow_exception(std::move(e));
          } catch (const std::exception& exception) {
            what = exception.what();
          } catch (...) {
          }
          const HttpRequest ours = ToHttpRequest(request);
          WriteResponse(ErrorResponse(InternalError(what), ours, *logger), response);
        });
    server.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& request, httplib::Response& response) {
          return OnError(request, response);
        }));
    server.set_logger([this](const httplib::Request& request, const httplib::Response& response) {
      OnAnswered(request, response);
    });
  }

  HttpServerOptions options;
  Clock* clock;
  std::shared_ptr<Logger> logger;
  httplib::Server server;
  std::mutex mu;
  std::vector<std::pair<std::string, HttpHandler>> mounts;  // guarded by mu
  std::atomic<bool> ready{false};
  std::atomic<std::uint16_t> bound_port{0};
  std::atomic<bool> listen_returned{false};
  bool started = false;  // guarded by start_mu
  std::mutex start_mu;
  std::jthread thread;
};

HttpServer::HttpServer(HttpServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->Configure();
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Mount(std::string prefix, HttpHandler handler) {
  while (!prefix.empty() && prefix.back() == '/') {
    prefix.pop_back();
  }
  std::lock_guard lock(impl_->mu);
  for (auto& [existing, mounted] : impl_->mounts) {
    if (http_internal::EqualsIgnoreCase(existing, prefix)) {
      mounted = std::move(handler);
      return;
    }
  }
  impl_->mounts.emplace_back(std::move(prefix), std::move(handler));
}

void HttpServer::SetReady(bool ready) { impl_->ready.store(ready); }

Status HttpServer::Start() {
  std::lock_guard lock(impl_->start_mu);
  if (impl_->started) {
    return FailedPreconditionError("the HTTP server is already started");
  }
  const std::string& host = impl_->options.host;
  int port = impl_->options.port;
  if (port == 0) {
    port = impl_->server.bind_to_any_port(host);
  } else if (!impl_->server.bind_to_port(host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return UnavailableError(fmt::format("cannot listen on {}:{}", host, impl_->options.port));
  }
  impl_->bound_port.store(static_cast<std::uint16_t>(port));
  impl_->started = true;
  impl_->thread = std::jthread([impl = impl_.get()] {
    impl->server.listen_after_bind();
    impl->listen_returned.store(true);
  });
  // httplib 0.11 has no wait_until_ready(); stop() is a no-op until the accept loop runs, so wait
  // for it here (the loop starts at once: this is a few microseconds).
  while (!impl_->server.is_running() && !impl_->listen_returned.load()) {
    std::this_thread::yield();
  }
  return Status::Ok();
}

void HttpServer::Stop() {
  std::lock_guard lock(impl_->start_mu);
  if (!impl_->started) {
    return;
  }
  impl_->server.stop();
  if (impl_->thread.joinable()) {
    impl_->thread.join();
  }
  impl_->bound_port.store(0);
}

std::uint16_t HttpServer::port() const { return impl_->bound_port.load(); }

}  // namespace stagehand
