#include "http/handler_pool.h"

#include <pthread.h>

#include <algorithm>
#include <string>
#include <utility>

namespace stagehand::http_internal {
namespace {

constexpr std::string_view kHandlerThreadName = "stagehand-http";

}  // namespace

void NameThisThread(std::string_view name) {
  ::pthread_setname_np(::pthread_self(), std::string(name).c_str());
}

HandlerPool::HandlerPool(int threads, std::size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] { Loop(); });
  }
}

bool HandlerPool::TrySubmit(std::function<void()> job) {
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

void HandlerPool::Join() {
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

void HandlerPool::Loop() {
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

}  // namespace stagehand::http_internal
