// What the HTTP server's files share: ServerCore, the server's state, which HttpServer::Impl is,
// and the helpers more than one of them uses. http_server.cc starts and stops the server,
// http_server_routing.cc answers requests (health, mounts, the access log),
// http_server_listener.cc accepts connections within the caps, and http_connection.cc drives one
// connection. Only for those files: it includes Boost.Asio (ADR 0009).
#pragma once

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "http/handler_pool.h"
#include "http/request_reader.h"
#include "stagehand/base/mutex.h"
#include "stagehand/base/status.h"
#include "stagehand/http/http_server.h"

namespace stagehand::http_internal {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

class Connection;

// The methods some route answers; every other method is one "other" label, so that clients
// cannot add label values (a metric series each) by inventing methods.
std::string_view MethodLabel(std::string_view method);

// Opens a close-on-exec, non-blocking listening socket on host:port. Errors: kUnavailable.
Result<tcp::endpoint> Listen(tcp::acceptor& acceptor, const std::string& host, std::uint16_t port);

// The server's state; HttpServer::Impl is this, named so the connection can see it.
struct ServerCore {
  explicit ServerCore(HttpServerOptions server_options)
      : options(std::move(server_options)),
        clock(options.clock != nullptr ? options.clock : &SystemClock::Instance()),
        logger(options.logger ? options.logger : NullLogger()) {
    limits.max_head_bytes = options.max_head_bytes;
    limits.max_header_fields = options.max_header_fields;
    limits.max_body_bytes = options.max_request_body_bytes;
  }

  // Answers the health endpoints, or returns nullopt for any other request.
  std::optional<HttpResponse> HealthResponse(const HttpRequest& request) const;

  // Hands `request` to the mount it falls under; 404 with an empty body when there is none or
  // the mount has no route, 500 when the handler throws. Runs on a handler thread.
  HttpResponse Handle(const HttpRequest& request);

  // Returns what answers `method` on `path`: a health path, the prefix of the mount it falls
  // under, or "unmatched".
  std::string RouteOf(std::string_view method, std::string_view path);

  // Returns whether successful answers on `route` (see RouteOf) are logged at debug.
  bool IsQuietRoute(std::string_view route) const;

  // Reports one answered request to the observer and the access log. `head_done` is when its
  // head was whole, when known.
  void RecordAnswer(const HttpRequest& request, int status, std::optional<MonoTime> head_done);

  // I/O thread only, from here on.
  void AwaitConnections();
  void AcceptReady();
  void Admit(int fd, const sockaddr_storage& address);
  bool EvictOldestWaiting(const std::string* client);
  void Forget(Connection& connection);
  void CloseAll(bool busy_too);

  HttpServerOptions options;
  RequestLimits limits;
  Clock* clock;
  std::shared_ptr<Logger> logger;
  Mutex mu;
  std::vector<std::pair<std::string, HttpHandler>> mounts STAGEHAND_GUARDED_BY(mu);
  std::atomic<bool> ready{false};
  std::function<std::optional<std::string>()> readiness_check;  // set before Start
  std::atomic<std::uint16_t> bound_port{0};

  asio::io_context io{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_pause{io};
  std::unique_ptr<HandlerPool> handlers;
  std::thread io_thread;
  Mutex start_mu;
  bool started STAGEHAND_GUARDED_BY(start_mu) = false;

  // I/O thread only.
  std::unordered_map<Connection*, std::shared_ptr<Connection>> connections;
  // Connections waiting for a request or reading its head, oldest first: the ones a new
  // connection may displace at a cap.
  std::list<Connection*> waiting;
  std::unordered_map<std::string, std::size_t> per_client;
  std::size_t max_connections = 0;
  std::size_t buffered_body_bytes = 0;
  bool stopping = false;
  std::promise<void> all_closed;
  bool all_closed_wanted = false;
  std::array<char, std::size_t{64} * 1024> read_buffer{};
  MonoTime last_accept_warning{};
};

}  // namespace stagehand::http_internal
