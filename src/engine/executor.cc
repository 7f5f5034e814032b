#include "engine/executor.h"

#include <pthread.h>

#include "stagehand/base/check.h"

namespace stagehand::engine_internal {

Executor::Executor(int max_threads, std::function<void()> on_slot_freed)
    : max_threads_(max_threads), on_slot_freed_(std::move(on_slot_freed)) {
  STAGEHAND_CHECK(max_threads_ > 0);
  // One thread from the start, so that the first run does not wait for a thread to be created.
  std::lock_guard lock(mu_);
  threads_.emplace_back([this](std::stop_token stop) { WorkerLoop(stop); });
}

Executor::~Executor() { Stop(); }

bool Executor::TryReserve() {
  std::lock_guard lock(mu_);
  if (stopped_ || busy_ >= max_threads_) return false;
  ++busy_;
  return true;
}

void Executor::CancelReservation() {
  {
    std::lock_guard lock(mu_);
    STAGEHAND_CHECK(busy_ > 0);
    --busy_;
  }
  if (on_slot_freed_) on_slot_freed_();
}

void Executor::Submit(std::function<void()> job) {
  std::lock_guard lock(mu_);
  STAGEHAND_CHECK(busy_ > 0);
  queue_.push_back(std::move(job));
  // Idle threads that were notified but have not taken their job yet still count as idle, so
  // compare with the queue rather than with zero.
  if (static_cast<std::size_t>(idle_threads_) < queue_.size() &&
      static_cast<int>(threads_.size()) < max_threads_) {
    threads_.emplace_back([this](std::stop_token stop) { WorkerLoop(stop); });
  }
  work_available_.notify_one();
}

int Executor::busy() const {
  std::lock_guard lock(mu_);
  return busy_;
}

void Executor::Stop() {
  std::vector<std::jthread> threads;
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    threads.swap(threads_);
  }
  work_available_.notify_all();
  for (std::jthread& thread : threads) {
    thread.request_stop();
    thread.join();
  }
}

void Executor::WorkerLoop(std::stop_token stop) {
  // Named for operators (`top -H`) and for the reliability suite, which tells this bounded,
  // lazily grown pool apart from threads that would leak.
  pthread_setname_np(pthread_self(), kThreadName);
  std::unique_lock lock(mu_);
  while (true) {
    ++idle_threads_;
    work_available_.wait(lock, stop, [&] { return !queue_.empty(); });
    --idle_threads_;
    if (queue_.empty()) return;
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    job();
    lock.lock();
    --busy_;
    lock.unlock();
    if (on_slot_freed_) on_slot_freed_();
    lock.lock();
  }
}

}  // namespace stagehand::engine_internal
