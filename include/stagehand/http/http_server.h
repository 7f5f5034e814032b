// The backend's HTTP server: listens on one address, answers the health endpoints, and hands
// requests under each mount (/api/<pluginId>) to that mount's handler with the path made relative
// to the mount. Everything else gets 404 with an empty body, an unknown method included (as
// Express). Errors the server produces itself (400, 408, 411, 413, 414, 431, 503) get Backstage's
// JSON error body. One access-log line per request (at debug for successful health probes and
// quiet routes, at info otherwise).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
  // A numeric address or a host name; "0.0.0.0" or "::" for every interface.
  std::string host = "127.0.0.1";
  // 0 picks a free port; HttpServer::port() then tells which.
  std::uint16_t port = 7007;
  // Larger request bodies are refused with 413 before they are read.
  std::size_t max_request_body_bytes = std::size_t{1024} * 1024;
  // Request line and header fields together; a larger head, or one with more than
  // max_header_fields fields, is refused with 431 (a request line above 8 KiB with 414).
  std::size_t max_head_bytes = std::size_t{16} * 1024;
  std::size_t max_header_fields = 100;
  // Deadlines, in real (monotonic) time: from a request's first byte to the end of its head, and
  // from there to the end of its body. A client that misses one gets 408 and is disconnected.
  std::chrono::milliseconds head_timeout{10000};
  std::chrono::milliseconds body_timeout{10000};
  // A client that accepts no byte of a response (or of a stream) for this long is disconnected.
  std::chrono::milliseconds write_timeout{10000};
  // How long a connection may wait for its next request (and for its first).
  std::chrono::milliseconds keep_alive_timeout{5000};
  // Open connections, in all and per client address. At either cap a new connection closes the
  // oldest one (of that client, or of all) that is waiting for a request or still sending its
  // head; when there is none, the new connection is refused with 503. The total is also kept
  // 128 below the process's open-file limit.
  std::size_t max_connections = 4096;
  std::size_t max_connections_per_client = 256;
  // Threads that run mounted handlers (which may wait on a database). The health endpoints are
  // answered on the I/O thread and never wait for them.
  int handler_threads = 4;
  // Requests waiting for a handler thread; beyond this, new requests get 503.
  std::size_t max_queued_requests = 1024;
  // Request bodies being received, in all: a request whose Content-Length would exceed it gets
  // 503 before its body is read, so slow uploads on many connections cannot exhaust memory.
  std::size_t max_buffered_body_bytes = std::size_t{64} * 1024 * 1024;
  // Bytes a streamed response may have queued for a slow client before the stream is closed.
  std::size_t max_stream_backlog_bytes = std::size_t{1024} * 1024;
  // Receives the access log (message "request", fields method, path, status, duration_ms) and
  // handler failures. Headers are never logged. Dropped when null.
  std::shared_ptr<Logger> logger;
  // Mount prefixes (as given to Mount, e.g. "/metrics") whose successful answers (status below
  // 400) are logged at debug instead of info: scrapes and probes that would flood the log. The
  // health endpoints are always treated so; their failures stay at info.
  std::vector<std::string> quiet_routes;
  // Measures request durations (monotonic). The system clock when null; must outlive the server.
  Clock* clock = nullptr;
  // Called once per answered request (also those refused before routing), on the server's I/O
  // thread as the answer is sent; must be thread-safe and quick. Ignored when empty.
  std::function<void(const HttpRequestRecord&)> on_request;
};

// An event-driven HTTP/1.1 server (Boost.Asio, ADR 0009): one I/O thread serves every connection,
// idle, slow or streaming, and a fixed pool runs the handlers.
// Thread-safe: Mount before Start; SetReady, port and Stop from any thread. Handlers run on the
// server's handler threads, concurrently. Destroying the server stops it.
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

  // While ready, asks `check` (on a handler thread, per probe) whether something keeps the host
  // from taking requests: a reason makes the readiness endpoint answer 503 with it as the message.
  // Call before Start.
  void SetReadinessCheck(std::function<std::optional<std::string>()> check);

  // Binds the address and starts serving on background threads; returns once the server accepts
  // connections. Errors: kUnavailable when the address cannot be bound; kFailedPrecondition when
  // already started.
  Status Start();

  // Closes the listening socket and idle connections, lets requests being handled finish and
  // their answers go out (for up to a second), closes every stream, and joins the server's
  // threads. Idempotent.
  void Stop();

  // Returns the bound port after Start (the chosen one when options.port was 0), else 0.
  std::uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagehand
