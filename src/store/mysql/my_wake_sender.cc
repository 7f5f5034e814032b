#include "store/mysql/my_wake_sender.h"

#include <utility>

namespace stagehand::store_internal {

namespace {

// A wake's statements answer at once, unless the server holds a kill; a bound
// keeps a server that went silent from holding the thread (and the wakes after it) for longer.
MyConnectParams WithWakeTimeout(MyConnectParams params) {
  params.call_timeout = std::chrono::seconds(10);
  return params;
}

}  // namespace

WakeSender::WakeSender(MyConnectParams params) : params_(WithWakeTimeout(std::move(params))) {}

WakeSender::~WakeSender() {
  std::thread thread;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    thread = std::move(thread_);
  }
  cv_.notify_all();
  if (thread.joinable()) thread.join();
}

void WakeSender::Send(std::int64_t change) {
  {
    MutexLock lock(mu_);
    if (change <= asked_) return;
    asked_ = change;
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  }
  cv_.notify_all();
}

void WakeSender::Flush() {
  MutexLock lock(mu_);
  const std::int64_t wanted = asked_;
  cv_.wait(lock.unique_lock(),
           [&]() STAGEHAND_REQUIRES(mu_) { return sent_ >= wanted || stopping_; });
}

void WakeSender::Run() {
  WaiterWaker waker("");
  std::unique_ptr<MyConnection> session;
  MutexLock lock(mu_);
  while (true) {
    cv_.wait(lock.unique_lock(),
             [&]() STAGEHAND_REQUIRES(mu_) { return stopping_ || asked_ > sent_; });
    if (stopping_) break;
    const std::int64_t change = asked_;
    lock.Unlock();
    if (session == nullptr) {
      Result<std::unique_ptr<MyConnection>> opened = MyConnection::Open(params_);
      if (opened.ok()) session = std::move(*opened);
    }
    if (session != nullptr && !waker.Wake(*session, change, [](const std::string&) {}).ok()) {
      session.reset();
    }
    lock.Lock();
    sent_ = change;
    cv_.notify_all();
  }
}

}  // namespace stagehand::store_internal
