#include "stagehand/http/http_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/status.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <list>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "http/path_match.h"
#include "http/request_reader.h"
#include "http/response_compression.h"
#include "stagehand/base/json_string.h"
#include "stagehand/base/mutex.h"
#include "stagehand/http/error_response.h"

namespace stagehand {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

constexpr std::string_view kLivenessPath = "/.backstage/health/v1/liveness";
constexpr std::string_view kReadinessPath = "/.backstage/health/v1/readiness";
// How long a closing connection may take to read what its client still sends after the last
// answer (so the client sees that answer rather than a reset) and how long Stop waits for the
// answers of requests being handled.
constexpr std::chrono::seconds kLingerTimeout{1};
constexpr std::chrono::seconds kStopGrace{1};
// Descriptors kept free for everything else the process opens (database, task pipes, logs).
constexpr rlim_t kReservedDescriptors = 128;
constexpr std::string_view kIoThreadName = "stagehand-io";
constexpr std::string_view kHandlerThreadName = "stagehand-http";

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

HttpResponse JsonResponse(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
  response.body = std::move(body);
  return response;
}

void NameThisThread(std::string_view name) {
  ::pthread_setname_np(::pthread_self(), std::string(name).c_str());
}

// How a response body is delimited.
enum class Framing { kLength, kChunked, kUntilClose };

// Returns the status line and headers of `response`. The framing headers are the server's own:
// the handler's Content-Length, Transfer-Encoding, Connection and Keep-Alive are dropped.
std::string ResponseHead(const HttpResponse& response, Framing framing, bool keep_alive,
                         std::chrono::milliseconds keep_alive_timeout) {
  const boost::beast::string_view reason = boost::beast::http::obsolete_reason(
      boost::beast::http::int_to_status(static_cast<unsigned>(response.status)));
  std::string head = fmt::format("HTTP/1.1 {} {}\r\n", response.status,
                                 std::string_view(reason.data(), reason.size()));
  for (const auto& [name, value] : response.headers) {
    if (EqualsIgnoreCase(name, "Content-Length") || EqualsIgnoreCase(name, "Transfer-Encoding") ||
        EqualsIgnoreCase(name, "Connection") || EqualsIgnoreCase(name, "Keep-Alive")) {
      continue;
    }
    head += fmt::format("{}: {}\r\n", name, value);
  }
  if (framing == Framing::kChunked) {
    head += "Transfer-Encoding: chunked\r\n";
  } else if (framing == Framing::kLength) {
    head += fmt::format("Content-Length: {}\r\n", response.body.size());
  }
  if (keep_alive) {
    head += fmt::format(
        "Connection: keep-alive\r\nKeep-Alive: timeout={}\r\n",
        std::max<std::int64_t>(
            1, std::chrono::duration_cast<std::chrono::seconds>(keep_alive_timeout).count()));
  } else {
    head += "Connection: close\r\n";
  }
  head += "\r\n";
  return head;
}

std::string ClientAddress(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API.
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
  } else if (address.ss_family == AF_INET6) {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API.
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
  }
  return text;
}

// Handler jobs, run by a fixed set of named threads.
class HandlerPool {
 public:
  HandlerPool(int threads, std::size_t max_queued) : max_queued_(max_queued) {
    for (int i = 0; i < std::max(1, threads); ++i) {
      threads_.emplace_back([this] { Loop(); });
    }
  }
  ~HandlerPool() { Join(); }
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  // Queues `job`. Returns false when max_queued jobs are already waiting.
  bool TrySubmit(std::function<void()> job) {
    {
      MutexLock lock(mu_);
      if (jobs_.size() >= max_queued_ || stopping_) {
        return false;
      }
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
    return true;
  }

  // Runs what is queued, then joins the threads.
  void Join() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& thread : threads_) {
      if (thread.joinable()) {
        thread.join();
      }
    }
  }

 private:
  void Loop() {
    NameThisThread(kHandlerThreadName);
    for (;;) {
      std::function<void()> job;
      {
        MutexLock lock(mu_);
        cv_.wait(lock.unique_lock(),
                 [&]() STAGEHAND_REQUIRES(mu_) { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) {
          return;
        }
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  const std::size_t max_queued_;
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_ STAGEHAND_GUARDED_BY(mu_);
  bool stopping_ STAGEHAND_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

class Connection;

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
  std::optional<HttpResponse> HealthResponse(const HttpRequest& request) const {
    const bool get = request.method == "GET" || request.method == "HEAD";
    if (get && http_internal::RouteMatches(request.path, kLivenessPath)) {
      return JsonResponse(200, R"({"status":"ok"})");
    }
    if (get && http_internal::RouteMatches(request.path, kReadinessPath)) {
      if (!ready.load()) {
        return JsonResponse(503, R"({"status":"error","message":"Backend is not ready"})");
      }
      if (readiness_check) {
        if (std::optional<std::string> reason = readiness_check()) {
          std::string body = R"({"status":"error","message":)";
          AppendJsonString(body, *reason);
          body += '}';
          return JsonResponse(503, std::move(body));
        }
      }
      return JsonResponse(200, R"({"status":"ok"})");
    }
    return std::nullopt;
  }

  // Hands `request` to the mount it falls under; 404 with an empty body when there is none or
  // the mount has no route, 500 when the handler throws. Runs on a handler thread.
  HttpResponse Handle(const HttpRequest& request) {
    HttpHandler handler;
    std::optional<std::string_view> relative;
    {
      MutexLock lock(mu);
      for (const auto& [prefix, mounted] : mounts) {
        relative = http_internal::StripMount(request.path, prefix);
        if (relative) {
          handler = mounted;
          break;
        }
      }
    }
    std::optional<HttpResponse> routed;
    if (relative) {
      HttpRequest inner = request;
      inner.path = std::string(*relative);
      try {
        routed = handler(inner);
      } catch (const std::exception& exception) {
        return ErrorResponse(InternalError(exception.what()), request, *logger);
      } catch (...) {
        return ErrorResponse(InternalError("unknown exception"), request, *logger);
      }
    }
    if (!routed) {
      routed.emplace();
      routed->status = 404;
    }
    return std::move(*routed);
  }

  // Returns what answers `method` on `path`: a health path, the prefix of the mount it falls
  // under, or "unmatched".
  std::string RouteOf(std::string_view method, std::string_view path) {
    const bool get = method == "GET" || method == "HEAD";
    for (const std::string_view health : {kLivenessPath, kReadinessPath}) {
      if (get && http_internal::RouteMatches(path, health)) {
        return std::string(health);
      }
    }
    MutexLock lock(mu);
    for (const auto& [prefix, mounted] : mounts) {
      if (http_internal::StripMount(path, prefix)) {
        return prefix;
      }
    }
    return "unmatched";
  }

  // Returns whether successful answers on `route` (see RouteOf) are logged at debug.
  bool IsQuietRoute(std::string_view route) const {
    return route == kLivenessPath || route == kReadinessPath ||
           std::find(options.quiet_routes.begin(), options.quiet_routes.end(), route) !=
               options.quiet_routes.end();
  }

  // Reports one answered request to the observer and the access log. `head_done` is when its
  // head was whole, when known.
  void RecordAnswer(const HttpRequest& request, int status, std::optional<MonoTime> head_done) {
    const std::chrono::nanoseconds elapsed =
        head_done ? clock->MonoNow() - *head_done : std::chrono::nanoseconds(0);
    const std::string route = RouteOf(request.method, request.path);
    if (options.on_request) {
      HttpRequestRecord record;
      record.method = MethodLabel(request.method);
      record.route = route;
      record.status = status;
      record.duration = elapsed;
      options.on_request(record);
    }
    const LogLevel level = status < 400 && IsQuietRoute(route) ? LogLevel::kDebug : LogLevel::kInfo;
    if (!logger->Enabled(level)) {
      return;
    }
    LogFields fields = {
        {"method", request.method}, {"path", request.path}, {"status", std::to_string(status)}};
    if (head_done) {
      fields.emplace_back(
          "duration_ms",
          fmt::format("{:.3f}", std::chrono::duration<double, std::milli>(elapsed).count()));
    }
    logger->Log(level, "request", fields);
  }

  // I/O thread only, from here on.
  void AwaitConnections();
  void AcceptReady();
  void Admit(int fd, const sockaddr_storage& address);
  bool EvictOldestWaiting(const std::string* client);
  void Forget(Connection& connection);
  void CloseAll(bool busy_too);

  HttpServerOptions options;
  http_internal::RequestLimits limits;
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

// A streamed response body's writer: producers on any thread, the connection on the I/O thread.
class StreamWriter final : public HttpBodyWriter {
 public:
  StreamWriter(asio::io_context& io, std::weak_ptr<Connection> connection, std::size_t max_backlog)
      : io_(io), connection_(std::move(connection)), max_backlog_(max_backlog) {}

  bool Write(std::string data) override;
  void Close() override;
  bool closed() const override {
    MutexLock lock(mu_);
    return closed_;
  }
  void OnClose(std::function<void()> callback) override {
    MutexLock lock(mu_);
    if (!closed_) {
      on_close_.push_back(std::move(callback));
      return;
    }
    lock.Unlock();
    callback();
  }

  // Marks the stream closed because the connection closed. I/O thread.
  void Detach() {
    MutexLock lock(mu_);
    std::vector<std::function<void()>> callbacks = MarkClosed();
    lock.Unlock();
    RunCallbacks(callbacks);
  }
  // Gives back backlog once `bytes` were written. I/O thread.
  void Sent(std::size_t bytes) {
    MutexLock lock(mu_);
    backlog_ -= std::min(backlog_, bytes);
  }

 private:
  // Closes the stream (once) and returns the close callbacks, for the caller to run once it has
  // released mu_ (none if it was closed already).
  std::vector<std::function<void()>> MarkClosed() STAGEHAND_REQUIRES(mu_) {
    if (closed_) {
      return {};
    }
    closed_ = true;
    return std::move(on_close_);
  }
  static void RunCallbacks(const std::vector<std::function<void()>>& callbacks) {
    for (const std::function<void()>& callback : callbacks) {
      callback();
    }
  }

  // Runs `action` on the connection, on the I/O thread, if it is still open then.
  template <typename Action>
  void OnConnection(Action action) {
    asio::post(io_, [connection = connection_, action = std::move(action)]() mutable {
      if (const std::shared_ptr<Connection> alive = connection.lock()) {
        action(*alive);
      }
    });
  }

  asio::io_context& io_;
  std::weak_ptr<Connection> connection_;
  const std::size_t max_backlog_;
  mutable Mutex mu_;
  bool closed_ STAGEHAND_GUARDED_BY(mu_) = false;
  std::size_t backlog_ STAGEHAND_GUARDED_BY(mu_) = 0;
  std::vector<std::function<void()>> on_close_ STAGEHAND_GUARDED_BY(mu_);
};

// One client connection, driven by the I/O thread: waits for a request (idle, then its head),
// reads its body, hands it to a handler thread, writes the answer, and starts over or closes.
class Connection final : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ServerCore& server, tcp::socket socket, std::string client)
      : server_(server),
        socket_(std::move(socket)),
        client_(std::move(client)),
        read_deadline_(server.io),
        write_deadline_(server.io),
        reader_(server.limits) {}

  const std::string& client() const { return client_; }
  bool busy() const { return phase_ == Phase::kHandling || phase_ == Phase::kWriting; }
  std::list<Connection*>::iterator& waiting_position() { return waiting_position_; }
  bool in_waiting() const { return in_waiting_; }

  void Start() { WaitForRequest(); }

  // Closes the socket and forgets the connection. Idempotent.
  void Close() {
    if (phase_ == Phase::kClosed) {
      return;
    }
    const std::shared_ptr<Connection> self = shared_from_this();
    phase_ = Phase::kClosed;
    closed_.store(true);
    if (stream_) {
      stream_->Detach();
    }
    LeaveWaiting();
    ReleaseBody();
    ++read_generation_;
    ++write_generation_;
    read_deadline_.cancel();
    write_deadline_.cancel();
    error_code ignored;
    socket_.close(ignored);
    server_.Forget(*this);
  }

  // Ends the connection after the answer being written, or closes it now when it is not busy.
  void CloseWhenIdle() {
    keep_alive_ = false;
    if (!busy()) {
      Close();
    }
  }

  void SendChunk(std::string data) {
    if (phase_ != Phase::kStreaming) {
      return;
    }
    const std::size_t size = data.size();
    if (size == 0) {
      return;
    }
    if (chunked_) {
      Send(fmt::format("{:x}\r\n", size), 0);
      Send(std::move(data), size);
      Send("\r\n", 0);
    } else {
      Send(std::move(data), size);
    }
  }

  void EndStream() {
    if (phase_ != Phase::kStreaming || stream_ended_) {
      return;
    }
    stream_ended_ = true;
    if (chunked_) {
      Send("0\r\n\r\n", 0);
    }
    after_flush_ = [this] { Linger(); };
    if (outbox_.empty()) {
      std::exchange(after_flush_, nullptr)();
    }
  }

 private:
  enum class Phase { kWaiting, kBody, kHandling, kWriting, kStreaming, kLingering, kClosed };

  // A piece of output and how many of its bytes are stream payload (for the writer's backlog).
  struct Outgoing {
    std::string bytes;
    std::size_t payload = 0;
  };

  void WaitForRequest() {
    phase_ = Phase::kWaiting;
    head_started_ = false;
    started_.reset();
    EnterWaiting();
    ArmReadDeadline(server_.options.keep_alive_timeout);
    if (!input_.empty()) {
      Process();
    } else {
      Read();
    }
  }

  void EnterWaiting() {
    if (!in_waiting_) {
      waiting_position_ = server_.waiting.insert(server_.waiting.end(), this);
      in_waiting_ = true;
    }
  }

  void LeaveWaiting() {
    if (in_waiting_) {
      server_.waiting.erase(waiting_position_);
      in_waiting_ = false;
    }
  }

  void ReleaseBody() { server_.buffered_body_bytes -= std::exchange(body_reserved_, 0); }

  void ArmReadDeadline(std::chrono::milliseconds after) {
    const std::uint64_t generation = ++read_generation_;
    read_deadline_.expires_after(after);
    read_deadline_.async_wait([self = shared_from_this(), generation](error_code ec) {
      if (!ec && generation == self->read_generation_) {
        self->OnReadDeadline();
      }
    });
  }

  void DisarmReadDeadline() {
    ++read_generation_;
    read_deadline_.cancel();
  }

  void OnReadDeadline() {
    switch (phase_) {
      case Phase::kWaiting:
        if (!head_started_) {
          Close();
          return;
        }
        [[fallthrough]];
      case Phase::kBody:
        Refuse(408, {});
        return;
      case Phase::kLingering:
        Close();
        return;
      case Phase::kHandling:
      case Phase::kWriting:
      case Phase::kStreaming:
      case Phase::kClosed:
        return;
    }
  }

  // Waits until the socket is readable; no buffer is held meanwhile, so an idle connection costs
  // only this object.
  void Read() {
    if (reading_ || phase_ == Phase::kClosed) {
      return;
    }
    reading_ = true;
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
      self->reading_ = false;
      self->OnReadable(ec);
    });
  }

  void OnReadable(error_code ec) {
    if (phase_ == Phase::kClosed) {
      return;
    }
    if (ec) {
      Close();
      return;
    }
    std::array<char, std::size_t{64}* 1024>& buffer = server_.read_buffer;
    const std::size_t n = socket_.read_some(asio::buffer(buffer), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      Read();
      return;
    }
    if (ec) {
      Close();
      return;
    }
    if (phase_ == Phase::kStreaming || phase_ == Phase::kLingering) {
      Read();
      return;
    }
    input_.append(buffer.data(), n);
    if (phase_ == Phase::kWaiting || phase_ == Phase::kBody) {
      Process();
    }
  }

  // Parses what has arrived and moves on: more reading, a handler, or a refusal.
  void Process() {
    if (phase_ == Phase::kWaiting && !head_started_ && !input_.empty()) {
      head_started_ = true;
      ArmReadDeadline(server_.options.head_timeout);
    }
    const std::size_t consumed = reader_.Feed(input_);
    input_.erase(0, consumed);
    switch (reader_.state()) {
      case http_internal::RequestReader::State::kNeedMore:
        if (phase_ == Phase::kWaiting && reader_.head_done()) {
          BeginBody();
          if (phase_ != Phase::kBody) {
            return;
          }
        }
        Read();
        return;
      case http_internal::RequestReader::State::kComplete:
        if (!started_) {
          started_ = server_.clock->MonoNow();
        }
        Dispatch();
        return;
      case http_internal::RequestReader::State::kRefused:
        Refuse(reader_.refused_status(), reader_.refused_message());
        return;
    }
  }

  void BeginBody() {
    phase_ = Phase::kBody;
    started_ = server_.clock->MonoNow();
    LeaveWaiting();
    const std::uint64_t length = reader_.body_length();
    if (length > server_.options.max_buffered_body_bytes - server_.buffered_body_bytes) {
      Refuse(503, {});
      return;
    }
    body_reserved_ = static_cast<std::size_t>(length);
    server_.buffered_body_bytes += body_reserved_;
    ArmReadDeadline(server_.options.body_timeout);
    const std::optional<std::string_view> expect = FindHeader(reader_.request().headers, "Expect");
    if (expect && EqualsIgnoreCase(*expect, "100-continue")) {
      Send("HTTP/1.1 100 Continue\r\n\r\n", 0);
    }
  }

  void Dispatch() {
    LeaveWaiting();
    DisarmReadDeadline();
    phase_ = Phase::kHandling;
    keep_alive_ = keep_alive_ && reader_.keep_alive() && !server_.stopping;
    HttpRequest request = std::move(reader_.mutable_request());
    if (std::optional<HttpResponse> health = server_.HealthResponse(request)) {
      Respond(std::move(request), std::move(*health));
      return;
    }
    if (MethodLabel(request.method) == "other") {
      HttpResponse not_found;
      not_found.status = 404;
      Respond(std::move(request), std::move(not_found));
      return;
    }
    HttpRequest summary;
    summary.method = request.method;
    summary.path = request.path;
    summary.query = request.query;
    auto job = [self = shared_from_this(), request = std::move(request)]() mutable {
      if (self->closed_.load()) {
        return;
      }
      HttpResponse response = self->server_.Handle(request);
      http_internal::CompressIfAccepted(request, response);
      asio::post(self->server_.io,
                 [self, request = std::move(request), response = std::move(response)]() mutable {
                   if (self->phase_ == Phase::kHandling) {
                     self->Respond(std::move(request), std::move(response));
                   }
                 });
    };
    if (!server_.handlers->TrySubmit(std::move(job))) {
      keep_alive_ = false;
      HttpResponse busy = ProtocolErrorResponse(503, summary);
      Respond(std::move(summary), std::move(busy));
    }
  }

  // Answers a request the reader or a deadline refused, then closes.
  void Refuse(int status, std::string_view message) {
    LeaveWaiting();
    DisarmReadDeadline();
    phase_ = Phase::kHandling;
    keep_alive_ = false;
    HttpRequest request = std::move(reader_.mutable_request());
    HttpResponse response =
        message.empty()
            ? ProtocolErrorResponse(status, request)
            : ErrorResponse(InvalidArgumentError(std::string(message)), request, *server_.logger);
    Respond(std::move(request), std::move(response));
  }

  void Respond(HttpRequest request, HttpResponse response) {
    ReleaseBody();
    const bool head_only = request.method == "HEAD";
    const bool streamed = static_cast<bool>(response.stream) && !head_only;
    if (streamed) {
      keep_alive_ = false;
    }
    chunked_ = reader_.version() >= 11;
    const Framing framing =
        !streamed ? Framing::kLength : (chunked_ ? Framing::kChunked : Framing::kUntilClose);
    std::string out =
        ResponseHead(response, framing, keep_alive_, server_.options.keep_alive_timeout);
    if (!head_only && !streamed) {
      out += response.body;
    }
    server_.RecordAnswer(request, response.status, started_);
    Send(std::move(out), 0);
    if (streamed) {
      phase_ = Phase::kStreaming;
      stream_ = std::make_shared<StreamWriter>(server_.io, weak_from_this(),
                                               server_.options.max_stream_backlog_bytes);
      Read();
      response.stream(stream_);
      return;
    }
    phase_ = Phase::kWriting;
    after_flush_ = [this] { FinishResponse(); };
  }

  void FinishResponse() {
    if (keep_alive_ && !server_.stopping) {
      reader_.Next();
      WaitForRequest();
    } else {
      Linger();
    }
  }

  // Stops sending and reads what the client still sends until it closes (or kLingerTimeout), so
  // that it reads the last answer instead of a connection reset.
  void Linger() {
    phase_ = Phase::kLingering;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    ArmReadDeadline(kLingerTimeout);
    Read();
  }

  void Send(std::string bytes, std::size_t payload) {
    outbox_.push_back({std::move(bytes), payload});
    if (!writing_) {
      WriteNext();
    }
  }

  void WriteNext() {
    if (outbox_.empty()) {
      ++write_generation_;
      write_deadline_.cancel();
      if (after_flush_) {
        std::exchange(after_flush_, nullptr)();
      }
      return;
    }
    writing_ = true;
    const std::uint64_t generation = ++write_generation_;
    write_deadline_.expires_after(server_.options.write_timeout);
    write_deadline_.async_wait([self = shared_from_this(), generation](error_code ec) {
      if (!ec && generation == self->write_generation_) {
        self->Close();
      }
    });
    asio::async_write(socket_, asio::buffer(outbox_.front().bytes),
                      [self = shared_from_this()](error_code ec, std::size_t) {
                        self->writing_ = false;
                        if (self->phase_ == Phase::kClosed) {
                          return;
                        }
                        if (ec) {
                          self->Close();
                          return;
                        }
                        if (self->stream_) {
                          self->stream_->Sent(self->outbox_.front().payload);
                        }
                        self->outbox_.pop_front();
                        self->WriteNext();
                      });
  }

  ServerCore& server_;
  tcp::socket socket_;
  const std::string client_;
  asio::steady_timer read_deadline_;
  asio::steady_timer write_deadline_;
  std::uint64_t read_generation_ = 0;
  std::uint64_t write_generation_ = 0;
  http_internal::RequestReader reader_;
  std::string input_;
  std::deque<Outgoing> outbox_;
  std::function<void()> after_flush_;
  std::shared_ptr<StreamWriter> stream_;
  std::optional<MonoTime> started_;
  std::size_t body_reserved_ = 0;  // of server_.buffered_body_bytes
  std::list<Connection*>::iterator waiting_position_;
  Phase phase_ = Phase::kWaiting;
  std::atomic<bool> closed_{false};
  bool in_waiting_ = false;
  bool head_started_ = false;
  bool keep_alive_ = true;
  bool reading_ = false;
  bool writing_ = false;
  bool chunked_ = true;
  bool stream_ended_ = false;
};

bool StreamWriter::Write(std::string data) {
  MutexLock lock(mu_);
  if (closed_) {
    return false;
  }
  if (backlog_ + data.size() > max_backlog_) {
    OnConnection([](Connection& connection) { connection.Close(); });
    std::vector<std::function<void()>> callbacks = MarkClosed();
    lock.Unlock();
    RunCallbacks(callbacks);
    return false;
  }
  backlog_ += data.size();
  OnConnection([data = std::move(data)](Connection& connection) mutable {
    connection.SendChunk(std::move(data));
  });
  return true;
}

void StreamWriter::Close() {
  MutexLock lock(mu_);
  if (closed_) {
    return;
  }
  OnConnection([](Connection& connection) { connection.EndStream(); });
  std::vector<std::function<void()>> callbacks = MarkClosed();
  lock.Unlock();
  RunCallbacks(callbacks);
}

void ServerCore::AwaitConnections() {
  acceptor.async_wait(tcp::acceptor::wait_read, [this](error_code ec) {
    if (!ec && !stopping) {
      AcceptReady();
    }
  });
}

void ServerCore::AcceptReady() {
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API.
    const int fd = ::accept4(acceptor.native_handle(), reinterpret_cast<sockaddr*>(&address),
                             &length, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      Admit(fd, address);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) {
      continue;
    }
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      const MonoTime now = clock->MonoNow();
      if (now - last_accept_warning >= std::chrono::seconds(10)) {
        last_accept_warning = now;
        logger->Warn("HTTP server cannot accept connections for now",
                     {{"error", std::strerror(errno)}});
      }
      accept_pause.expires_after(std::chrono::milliseconds(100));
      accept_pause.async_wait([this](error_code ec) {
        if (!ec && !stopping) {
          AwaitConnections();
        }
      });
      return;
    }
    break;
  }
  AwaitConnections();
}

void ServerCore::Admit(int fd, const sockaddr_storage& address) {
  std::string client = ClientAddress(address);
  const auto at_client_cap = [&] {
    const auto found = per_client.find(client);
    return found != per_client.end() && found->second >= options.max_connections_per_client;
  };
  if ((at_client_cap() && !EvictOldestWaiting(&client)) ||
      (connections.size() >= max_connections && !EvictOldestWaiting(nullptr))) {
    HttpRequest none;
    HttpResponse busy = ProtocolErrorResponse(503, none);
    const std::string out =
        ResponseHead(busy, Framing::kLength, false, options.keep_alive_timeout) + busy.body;
    (void)::send(fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::close(fd);
    return;
  }
  const int yes = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  tcp::socket socket(io);
  error_code ec;
  socket.assign(address.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    return;
  }
  socket.non_blocking(true, ec);
  auto connection = std::make_shared<Connection>(*this, std::move(socket), client);
  connections.emplace(connection.get(), connection);
  ++per_client[client];
  connection->Start();
}

bool ServerCore::EvictOldestWaiting(const std::string* client) {
  for (Connection* candidate : waiting) {
    if (client == nullptr || candidate->client() == *client) {
      candidate->Close();
      return true;
    }
  }
  return false;
}

void ServerCore::Forget(Connection& connection) {
  const auto found = per_client.find(connection.client());
  if (found != per_client.end() && --found->second == 0) {
    per_client.erase(found);
  }
  connections.erase(&connection);
  if (all_closed_wanted && connections.empty()) {
    all_closed_wanted = false;
    all_closed.set_value();
  }
}

void ServerCore::CloseAll(bool busy_too) {
  std::vector<std::shared_ptr<Connection>> open;
  open.reserve(connections.size());
  for (const auto& [address, connection] : connections) {
    open.push_back(connection);
  }
  for (const std::shared_ptr<Connection>& connection : open) {
    if (busy_too) {
      connection->Close();
    } else {
      connection->CloseWhenIdle();
    }
  }
}

}  // namespace

struct HttpServer::Impl : ServerCore {
  using ServerCore::ServerCore;
};

HttpServer::HttpServer(HttpServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Mount(std::string prefix, HttpHandler handler) {
  while (!prefix.empty() && prefix.back() == '/') {
    prefix.pop_back();
  }
  MutexLock lock(impl_->mu);
  for (auto& [existing, mounted] : impl_->mounts) {
    if (EqualsIgnoreCase(existing, prefix)) {
      mounted = std::move(handler);
      return;
    }
  }
  impl_->mounts.emplace_back(std::move(prefix), std::move(handler));
}

void HttpServer::SetReady(bool ready) { impl_->ready.store(ready); }

void HttpServer::SetReadinessCheck(std::function<std::optional<std::string>()> check) {
  impl_->readiness_check = std::move(check);
}

namespace {

// Opens a close-on-exec, non-blocking listening socket on host:port. Errors: kUnavailable.
Result<tcp::endpoint> Listen(tcp::acceptor& acceptor, const std::string& host, std::uint16_t port) {
  error_code ec;
  tcp::resolver resolver(acceptor.get_executor());
  const auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return UnavailableError(fmt::format("cannot listen on {}:{}: {}", host, port,
                                        ec ? ec.message() : "no such address"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  const int fd = ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          IPPROTO_TCP);
  if (fd < 0) {
    return UnavailableError(
        fmt::format("cannot listen on {}:{}: {}", host, port, std::strerror(errno)));
  }
  const int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  if (::bind(fd, endpoint.data(), static_cast<socklen_t>(endpoint.size())) != 0 ||
      ::listen(fd, SOMAXCONN) != 0) {
    const int error = errno;
    ::close(fd);
    return UnavailableError(
        fmt::format("cannot listen on {}:{}: {}", host, port, std::strerror(error)));
  }
  acceptor.assign(endpoint.protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    return UnavailableError(fmt::format("cannot listen on {}:{}: {}", host, port, ec.message()));
  }
  tcp::endpoint bound = acceptor.local_endpoint(ec);
  if (ec) {
    return UnavailableError(fmt::format("cannot listen on {}:{}: {}", host, port, ec.message()));
  }
  return bound;
}

}  // namespace

Status HttpServer::Start() {
  Impl& impl = *impl_;
  MutexLock lock(impl.start_mu);
  if (impl.started) {
    return FailedPreconditionError("the HTTP server is already started");
  }
  STAGEHAND_ASSIGN_OR_RETURN(tcp::endpoint bound,
                             Listen(impl.acceptor, impl.options.host, impl.options.port));
  rlimit files{};
  impl.max_connections = impl.options.max_connections;
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    const rlim_t room = files.rlim_cur > kReservedDescriptors * 2
                            ? files.rlim_cur - kReservedDescriptors
                            : files.rlim_cur / 2;
    impl.max_connections = std::min<std::size_t>(impl.max_connections, room);
  }
  impl.bound_port.store(bound.port());
  impl.started = true;
  impl.handlers =
      std::make_unique<HandlerPool>(impl.options.handler_threads, impl.options.max_queued_requests);
  impl.AwaitConnections();
  impl.work.emplace(impl.io.get_executor());
  impl.io_thread = std::thread([&impl] {
    NameThisThread(kIoThreadName);
    impl.io.run();
  });
  return Status::Ok();
}

void HttpServer::Stop() {
  Impl& impl = *impl_;
  MutexLock lock(impl.start_mu);
  if (!impl.started || !impl.io_thread.joinable()) {
    return;
  }
  std::promise<void> idle_closed;
  std::future<void> all_closed;
  asio::post(impl.io, [&] {
    impl.stopping = true;
    error_code ignored;
    impl.acceptor.close(ignored);
    impl.accept_pause.cancel();
    impl.CloseAll(false);
    impl.all_closed = std::promise<void>();
    all_closed = impl.all_closed.get_future();
    if (impl.connections.empty()) {
      impl.all_closed.set_value();
    } else {
      impl.all_closed_wanted = true;
    }
    idle_closed.set_value();
  });
  idle_closed.get_future().wait();
  impl.handlers->Join();
  if (all_closed.wait_for(kStopGrace) != std::future_status::ready) {
    std::promise<void> forced;
    asio::post(impl.io, [&] {
      impl.all_closed_wanted = false;
      impl.CloseAll(true);
      forced.set_value();
    });
    forced.get_future().wait();
  }
  impl.work.reset();
  impl.io.stop();
  impl.io_thread.join();
  impl.bound_port.store(0);
}

std::uint16_t HttpServer::port() const { return impl_->bound_port.load(); }

}  // namespace stagehand
