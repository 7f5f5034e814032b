// One client connection of the HTTP server, and how a response head is written. Only for the
// server's files (see http_server_internal.h).
#pragma once

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "http/http_server_internal.h"
#include "http/request_reader.h"

namespace stagehand::http_internal {

// How a response body is delimited.
enum class Framing { kLength, kChunked, kUntilClose };

// Returns the status line and headers of `response`. The framing headers are the server's own:
// the handler's Content-Length, Transfer-Encoding, Connection and Keep-Alive are dropped.
std::string ResponseHead(const HttpResponse& response, Framing framing, bool keep_alive,
                         std::chrono::milliseconds keep_alive_timeout);

class StreamWriter;

// One client connection, driven by the I/O thread: waits for a request (idle, then its head),
// reads its body, hands it to a handler thread, writes the answer, and starts over or closes.
// Not thread-safe: the I/O thread only (a handler thread only reads closed_).
class Connection final : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ServerCore& server, tcp::socket socket, std::string client);

  const std::string& client() const { return client_; }
  bool busy() const { return phase_ == Phase::kHandling || phase_ == Phase::kWriting; }
  std::list<Connection*>::iterator& waiting_position() { return waiting_position_; }
  bool in_waiting() const { return in_waiting_; }

  void Start() { WaitForRequest(); }

  // Closes the socket and forgets the connection. Idempotent.
  void Close();

  // Ends the connection after the answer being written, or closes it now when it is not busy.
  void CloseWhenIdle();

  // Sends `data` as the next piece of the streamed body, and ends it; StreamWriter's, on the
  // I/O thread.
  void SendChunk(std::string data);
  void EndStream();

 private:
  enum class Phase { kWaiting, kBody, kHandling, kWriting, kStreaming, kLingering, kClosed };

  // A piece of output and how many of its bytes are stream payload (for the writer's backlog).
  struct Outgoing {
    std::string bytes;
    std::size_t payload = 0;
  };

  void WaitForRequest();
  void EnterWaiting();
  void LeaveWaiting();
  void ReleaseBody() { server_.buffered_body_bytes -= std::exchange(body_reserved_, 0); }
  void ArmReadDeadline(std::chrono::milliseconds after);
  void DisarmReadDeadline();
  void OnReadDeadline();

  // Waits until the socket is readable; no buffer is held meanwhile, so an idle connection costs
  // only this object.
  void Read();
  void OnReadable(error_code ec);

  // Parses what has arrived and moves on: more reading, a handler, or a refusal.
  void Process();
  void BeginBody();
  void Dispatch();

  // Answers a request the reader or a deadline refused, then closes.
  void Refuse(int status, std::string_view message);
  void Respond(HttpRequest request, HttpResponse response);
  void FinishResponse();

  // Stops sending and reads what the client still sends until it closes (or kLingerTimeout), so
  // that it reads the last answer instead of a connection reset.
  void Linger();
  void Send(std::string bytes, std::size_t payload);
  void WriteNext();

  ServerCore& server_;
  tcp::socket socket_;
  const std::string client_;
  asio::steady_timer read_deadline_;
  asio::steady_timer write_deadline_;
  std::uint64_t read_generation_ = 0;
  std::uint64_t write_generation_ = 0;
  RequestReader reader_;
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

}  // namespace stagehand::http_internal
