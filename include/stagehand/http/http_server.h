// The backend's HTTP server: listens on one address, answers the health endpoints, and hands
// requests under each mount (/api/<pluginId>) to that mount's handler with the path made relative
// to the mount. Everything else gets 404 with an empty body, an unknown method included (as
// Express). Errors the server produces itself (400, 411, 413, 414) get Backstage's JSON error
// body. One access-log line per request (at
// debug for successful health probes and quiet routes, at info otherwise).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"
#include "stagehand/http/http_message.h"
#include "stagehand/time/clock.h"

namespace stagehand {

// What the server tells its request observer about each answered request.
struct HttpRequestRecord {
  // GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, or "other" for any other method (so clients
  // cannot add label values by inventing methods).
  std::string_view method;
  // A low-cardinality name for what answered: the mount prefix ("/api/jobs", "/metrics"), the
  // health path, or "unmatched".
  std::string_view route;
  int status = 0;
  std::chrono::nanoseconds duration{0};
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  // 0 picks a free port; HttpServer::port() then tells which.
  std::uint16_t port = 7007;
  // Larger request bodies are refused with 413 before they are read.
  std::size_t max_request_body_bytes = std::size_t{1024} * 1024;
  // Monotonic limits for reading one request and writing one response.
  std::chrono::milliseconds read_timeout{10000};
  std::chrono::milliseconds write_timeout{10000};
  // How long an idle keep-alive connection stays open. Stop waits up to this long for such
  // connections, so it is kept short.
  std::chrono::seconds keep_alive_timeout{1};
  // Receives the access log (message "request", fields method, path, status, duration_ms) and
  // handler failures. Headers are never logged. Dropped when null.
  std::shared_ptr<Logger> logger;
  // Mount prefixes (as given to Mount, e.g. "/metrics") whose successful answers (status below
  // 400) are logged at debug instead of info: scrapes and probes that would flood the log. The
  // health endpoints are always treated so; their failures stay at info.
  std::vector<std::string> quiet_routes;
  // Measures request durations (monotonic). The system clock when null; must outlive the server.
  Clock* clock = nullptr;
  // Called once per answered request (also those refused before routing), on a server worker
  // thread; must be thread-safe and quick. Ignored when empty.
  std::function<void(const HttpRequestRecord&)> on_request;
};

// Thread-safe: Mount before Start; SetReady, port and Stop from any thread. Handlers run on the
// server's worker threads, concurrently. Destroying the server stops it.
class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes requests whose path is `prefix` or starts with `prefix` + "/" (case-insensitive) to
  // `handler`, with the path relative to the prefix ("/" for the prefix itself). Call before
  // Start; a later mount with the same prefix replaces the earlier one.
  void Mount(std::string prefix, HttpHandler handler);

  // Sets what /.backstage/health/v1/readiness answers: 200 when ready, 503 otherwise. Starts
  // not ready.
  void SetReady(bool ready);

  // Binds the address and starts serving on a background thread; returns once the server accepts
  // connections. Errors: kUnavailable when the address cannot be bound; kFailedPrecondition when
  // already started.
  Status Start();

  // Stops accepting, closes the listening socket and joins the server thread. Idempotent.
  void Stop();

  // Returns the bound port after Start (the chosen one when options.port was 0), else 0.
  std::uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagehand
