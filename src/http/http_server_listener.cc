#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "http/http_connection.h"
#include "http/http_server_internal.h"
#include "stagehand/http/error_response.h"

namespace stagehand::http_internal {
namespace {

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

}  // namespace

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

}  // namespace stagehand::http_internal
