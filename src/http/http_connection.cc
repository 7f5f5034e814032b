#include "http/http_connection.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/status.hpp>
#include <utility>
#include <vector>

#include "http/response_compression.h"
#include "stagehand/base/mutex.h"
#include "stagehand/base/text.h"
#include "stagehand/http/error_response.h"

namespace stagehand::http_internal {
namespace {

// How long a closing connection may take to read what its client still sends after the last
// answer (so the client sees that answer rather than a reset).
constexpr std::chrono::seconds kLingerTimeout{1};

}  // namespace

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

Connection::Connection(ServerCore& server, tcp::socket socket, std::string client)
    : server_(server),
      socket_(std::move(socket)),
      client_(std::move(client)),
      read_deadline_(server.io),
      write_deadline_(server.io),
      reader_(server.limits) {}

void Connection::Close() {
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

void Connection::CloseWhenIdle() {
  keep_alive_ = false;
  if (!busy()) {
    Close();
  }
}

void Connection::SendChunk(std::string data) {
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

void Connection::EndStream() {
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

void Connection::WaitForRequest() {
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

void Connection::EnterWaiting() {
  if (!in_waiting_) {
    waiting_position_ = server_.waiting.insert(server_.waiting.end(), this);
    in_waiting_ = true;
  }
}

void Connection::LeaveWaiting() {
  if (in_waiting_) {
    server_.waiting.erase(waiting_position_);
    in_waiting_ = false;
  }
}

void Connection::ArmReadDeadline(std::chrono::milliseconds after) {
  const std::uint64_t generation = ++read_generation_;
  read_deadline_.expires_after(after);
  read_deadline_.async_wait([self = shared_from_this(), generation](error_code ec) {
    if (!ec && generation == self->read_generation_) {
      self->OnReadDeadline();
    }
  });
}

void Connection::DisarmReadDeadline() {
  ++read_generation_;
  read_deadline_.cancel();
}

void Connection::OnReadDeadline() {
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

void Connection::Read() {
  if (reading_ || phase_ == Phase::kClosed) {
    return;
  }
  reading_ = true;
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
    self->reading_ = false;
    self->OnReadable(ec);
  });
}

void Connection::OnReadable(error_code ec) {
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

void Connection::Process() {
  if (phase_ == Phase::kWaiting && !head_started_ && !input_.empty()) {
    head_started_ = true;
    ArmReadDeadline(server_.options.head_timeout);
  }
  const std::size_t consumed = reader_.Feed(input_);
  input_.erase(0, consumed);
  switch (reader_.state()) {
    case RequestReader::State::kNeedMore:
      if (phase_ == Phase::kWaiting && reader_.head_done()) {
        BeginBody();
        if (phase_ != Phase::kBody) {
          return;
        }
      }
      Read();
      return;
    case RequestReader::State::kComplete:
      if (!started_) {
        started_ = server_.clock->MonoNow();
      }
      Dispatch();
      return;
    case RequestReader::State::kRefused:
      Refuse(reader_.refused_status(), reader_.refused_message());
      return;
  }
}

void Connection::BeginBody() {
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

void Connection::Dispatch() {
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
    CompressIfAccepted(request, response);
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

void Connection::Refuse(int status, std::string_view message) {
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

void Connection::Respond(HttpRequest request, HttpResponse response) {
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

void Connection::FinishResponse() {
  if (keep_alive_ && !server_.stopping) {
    reader_.Next();
    WaitForRequest();
  } else {
    Linger();
  }
}

void Connection::Linger() {
  phase_ = Phase::kLingering;
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  ArmReadDeadline(kLingerTimeout);
  Read();
}

void Connection::Send(std::string bytes, std::size_t payload) {
  outbox_.push_back({std::move(bytes), payload});
  if (!writing_) {
    WriteNext();
  }
}

void Connection::WriteNext() {
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

}  // namespace stagehand::http_internal
