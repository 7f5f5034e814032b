#include "stagehand/http/http_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <future>
#include <utility>

#include "http/http_server_internal.h"
#include "stagehand/base/mutex.h"
#include "stagehand/base/text.h"

namespace stagehand {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// How long Stop waits for the answers of requests being handled.
constexpr std::chrono::seconds kStopGrace{1};
// Descriptors kept free for everything else the process opens (database, task pipes, logs).
constexpr rlim_t kReservedDescriptors = 128;
constexpr std::string_view kIoThreadName = "stagehand-io";

}  // namespace

struct HttpServer::Impl : http_internal::ServerCore {
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

Status HttpServer::Start() {
  Impl& impl = *impl_;
  MutexLock lock(impl.start_mu);
  if (impl.started) {
    return FailedPreconditionError("the HTTP server is already started");
  }
  STAGEHAND_ASSIGN_OR_RETURN(
      tcp::endpoint bound,
      http_internal::Listen(impl.acceptor, impl.options.host, impl.options.port));
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
  impl.handlers = std::make_unique<http_internal::HandlerPool>(impl.options.handler_threads,
                                                               impl.options.max_queued_requests);
  impl.AwaitConnections();
  impl.work.emplace(impl.io.get_executor());
  impl.io_thread = std::thread([&impl] {
    http_internal::NameThisThread(kIoThreadName);
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
