// A TCP proxy on 127.0.0.1 in front of a test server, for faults the server cannot stage itself:
// a partition (bytes stop moving both ways, nothing closes) and a held request (the client's bytes
// that contain a given text wait until the test lets them through, as if the client's thread had
// stalled right before sending them). Thread-safe; integration tests only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace stagehand::proxy_test {

class TcpProxy {
 public:
  explicit TcpProxy(int target_port) : target_port_(target_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address = Loopback(0);
    ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(listener_, 16);
    socklen_t length = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    thread_ = std::jthread([this](std::stop_token stop) { Loop(stop); });
  }
  ~TcpProxy() {
    thread_.request_stop();
    Wake();
    thread_.join();
    for (const Pair& pair : pairs_) {
      ::close(pair.client);
      ::close(pair.server);
    }
    ::close(listener_);
    ::close(wake_);
  }
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }

  // Stops forwarding on every connection, present and future; sockets stay open.
  void Blackhole() {
    blackholed_ = true;
    Wake();
  }

  // Holds the next bytes a client sends that contain `text` (found within one read) until
  // ReleaseHeld; other bytes keep moving.
  void HoldNext(std::string text) {
    std::lock_guard lock(mu_);
    hold_text_ = std::move(text);
    held_.clear();
  }

  // Waits up to `longest` until bytes are held; returns whether they are.
  bool WaitUntilHeld(std::chrono::milliseconds longest) {
    std::unique_lock lock(mu_);
    return held_changed_.wait_for(lock, longest, [&] { return !held_.empty(); });
  }

  // Sends the held bytes on to the server.
  void ReleaseHeld() {
    std::lock_guard lock(mu_);
    release_ = true;
    Wake();
  }

 private:
  struct Pair {
    int client;
    int server;
  };

  static sockaddr_in Loopback(int port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    return address;
  }

  void Wake() {
    const std::uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof one);
  }

  // Forwards a client's read, unless it is the one to hold. Proxy thread only.
  void FromClient(int server, const std::string& bytes) {
    {
      std::lock_guard lock(mu_);
      if (!hold_text_.empty() && bytes.find(hold_text_) != std::string::npos) {
        hold_text_.clear();
        held_ = bytes;
        held_to_ = server;
        held_changed_.notify_all();
        return;
      }
    }
    (void)!::write(server, bytes.data(), bytes.size());
  }

  void SendReleased() {
    std::string bytes;
    int to = -1;
    {
      std::lock_guard lock(mu_);
      if (!release_) return;
      release_ = false;
      bytes = std::exchange(held_, {});
      to = held_to_;
    }
    if (!bytes.empty()) (void)!::write(to, bytes.data(), bytes.size());
  }

  void Loop(const std::stop_token& stop) {
    while (!stop.stop_requested()) {
      std::vector<pollfd> fds = {{wake_, POLLIN, 0}, {listener_, POLLIN, 0}};
      if (!blackholed_) {
        for (const Pair& pair : pairs_) {
          fds.push_back({pair.client, POLLIN, 0});
          fds.push_back({pair.server, POLLIN, 0});
        }
      }
      if (::poll(fds.data(), fds.size(), -1) <= 0) continue;
      if (fds[0].revents != 0) {
        std::uint64_t count = 0;
        (void)!::read(wake_, &count, sizeof count);
        SendReleased();
      }
      if (fds[1].revents != 0) Accept();
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        const Pair& pair = pairs_[(i - 2) / 2];
        const bool from_client = fds[i].fd == pair.client;
        char buffer[16384];
        const ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
        if (got <= 0) continue;
        if (from_client) {
          FromClient(pair.server, std::string(buffer, static_cast<std::size_t>(got)));
        } else {
          (void)!::write(pair.client, buffer, static_cast<std::size_t>(got));
        }
      }
    }
  }

  void Accept() {
    const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) return;
    const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address = Loopback(target_port_);
    ::connect(server, reinterpret_cast<sockaddr*>(&address), sizeof address);
    pairs_.push_back({client, server});
  }

  const int target_port_;
  int port_ = 0;
  int listener_ = -1;
  int wake_ = -1;
  std::atomic<bool> blackholed_{false};
  std::vector<Pair> pairs_;  // used by the proxy thread only (and the destructor)
  std::mutex mu_;
  std::condition_variable held_changed_;
  std::string hold_text_;  // guarded by mu_
  std::string held_;       // guarded by mu_
  int held_to_ = -1;       // guarded by mu_
  bool release_ = false;   // guarded by mu_
  std::jthread thread_;
};

}  // namespace stagehand::proxy_test
