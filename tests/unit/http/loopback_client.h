// A loopback HTTP client for the http tests: raw requests to a server on 127.0.0.1, answers read
// off the wire as they arrive, with a 10 s receive timeout so that a failing test never hangs.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>

namespace stagehand::http_testing {

// A response as read off the wire.
struct RawResponse {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
};

// Sends `request` verbatim to 127.0.0.1:`port` and reads one response (its head, then
// Content-Length bytes of body unless the request is a HEAD). Returns status 0 when nothing
// parseable came back.
inline RawResponse Exchange(std::uint16_t port, const std::string& request) {
  RawResponse response;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    return response;
  }
  timeval timeout{};
  timeout.tv_sec = 10;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API.
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return response;
  }
  std::size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      break;
    }
    sent += static_cast<std::size_t>(n);
  }
  std::string raw;
  char buffer[4096];
  std::size_t end_of_head = std::string::npos;
  std::size_t body_length = 0;
  while (end_of_head == std::string::npos || raw.size() < end_of_head + 4 + body_length) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) {
      break;
    }
    raw.append(buffer, static_cast<std::size_t>(n));
    if (end_of_head == std::string::npos) {
      end_of_head = raw.find("\r\n\r\n");
      if (end_of_head == std::string::npos) {
        continue;
      }
      const std::size_t length = raw.find("Content-Length: ");
      if (length < end_of_head && request.rfind("HEAD ", 0) != 0) {
        body_length = std::stoul(raw.substr(length + 16));
      }
    }
  }
  ::close(fd);
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || end_of_head == std::string::npos) {
    return response;
  }
  response.status = std::stoi(raw.substr(9, 3));
  response.head = raw.substr(0, end_of_head);
  response.body = raw.substr(end_of_head + 4);
  return response;
}

inline RawResponse Get(std::uint16_t port, const std::string& target,
                       const std::string& method = "GET") {
  return Exchange(
      port, method + " " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
}

inline RawResponse Post(std::uint16_t port, const std::string& target,
                        const std::string& body = "") {
  return Exchange(port, "POST " + target +
                            " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                            "Content-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body);
}

// A client socket (close-on-exec, so that descriptor checks see only the server's), connected to
// 127.0.0.1:`port`, with a 10 s receive timeout and, when `receive_buffer_bytes` is set, a receive
// buffer that small (a client that stops reading then holds little); -1 on failure. Closed by the
// destructor.
class Client {
 public:
  explicit Client(std::uint16_t port, int receive_buffer_bytes = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval timeout{};
    timeout.tv_sec = 10;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    if (receive_buffer_bytes > 0) {
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof receive_buffer_bytes);
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API.
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~Client() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return fd_ >= 0; }
  // Returns whether some bytes from the server wait to be read.
  bool HasData() const {
    char byte = 0;
    return ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  bool Send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Reads until `needle` has arrived; returns everything read, or what came before the peer
  // closed or the receive timed out.
  std::string ReadUntil(std::string_view needle) {
    while (received_.find(needle) == std::string::npos) {
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) {
        break;
      }
      received_.append(buffer, static_cast<std::size_t>(n));
    }
    return received_;
  }
  // Reads until `needle` has arrived, then forgets what was read up to its end, so that a long
  // stream costs no more than its latest part. Returns whether it arrived before the peer closed
  // or the receive timed out.
  bool Consume(std::string_view needle) {
    std::size_t from = 0;
    for (;;) {
      const std::size_t found = received_.find(needle, from);
      if (found != std::string::npos) {
        received_.erase(0, found + needle.size());
        return true;
      }
      from = received_.size() >= needle.size() ? received_.size() - needle.size() + 1 : 0;
      char buffer[16384];
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) {
        return false;
      }
      received_.append(buffer, static_cast<std::size_t>(n));
    }
  }
  // Returns whether the server closed the connection (recv gives 0 or a reset) within the
  // receive timeout, reading and dropping anything before.
  bool ClosedByServer() {
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) {
        return true;
      }
      if (n < 0) {
        return false;
      }
    }
  }

 private:
  int fd_ = -1;
  std::string received_;
};

}  // namespace stagehand::http_testing
