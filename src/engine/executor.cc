#include "engine/executor.h"

#include <pthread.h>

#include <iterator>

#include "stagehand/base/check.h"

namespace stagehand::engine_internal {

Executor::Executor(int max_threads, std::function<void()> on_slot_freed,
                   std::chrono::milliseconds idle_lifetime)
    : max_threads_(max_threads),
      idle_lifetime_(idle_lifetime),
      on_slot_freed_(std::move(on_slot_freed)) {
  STAGEHAND_CHECK(max_threads_ > 0);
}

Executor::~Executor() { Stop(); }

bool Executor::TryReserve() {
  MutexLock lock(mu_);
  if (stopped_ || busy_ >= max_threads_) return false;
  ++busy_;
  return true;
}

void Executor::CancelReservation() {
  {
    MutexLock lock(mu_);
    STAGEHAND_CHECK(busy_ > 0);
    --busy_;
  }
  if (on_slot_freed_) on_slot_freed_();
}

void Executor::Submit(std::function<void()> job) {
  MutexLock lock(mu_);
  STAGEHAND_CHECK(busy_ > 0);
  queue_.push_back(std::move(job));
  // Idle threads that were notified but have not taken their job yet still count as idle, so
  // compare with the queue rather than with zero.
  if (static_cast<std::size_t>(idle_threads_) < queue_.size()) {
    StartWorker();
  }
  work_available_.notify_one();
}

void Executor::StartWorker() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    it = it->exited ? workers_.erase(it) : std::next(it);
  }
  if (static_cast<int>(workers_.size()) >= max_threads_) return;
  Worker& worker = workers_.emplace_back();
  worker.thread =
      std::jthread([this, &worker](std::stop_token stop) { WorkerLoop(stop, &worker); });
  // Named here, not by the thread, which carries its creator's name until it runs. For operators
  // (`top -H`) and for the reliability suite, which tells this bounded pool apart from threads
  // that would leak.
  pthread_setname_np(worker.thread.native_handle(), kThreadName);
}

int Executor::busy() const {
  MutexLock lock(mu_);
  return busy_;
}

void Executor::Stop() {
  std::list<Worker> workers;
  {
    MutexLock lock(mu_);
    stopped_ = true;
    workers.swap(workers_);
  }
  work_available_.notify_all();
  for (Worker& worker : workers) {
    worker.thread.request_stop();
    worker.thread.join();
  }
}

void Executor::WorkerLoop(std::stop_token stop, Worker* self) {
  MutexLock lock(mu_);
  while (true) {
    ++idle_threads_;
    const bool has_work =
        work_available_.wait_for(lock.unique_lock(), stop, idle_lifetime_,
                                 [&]() STAGEHAND_REQUIRES(mu_) { return !queue_.empty(); });
    --idle_threads_;
    if (!has_work) {
      self->exited = true;
      return;
    }
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    job();
    lock.Lock();
    --busy_;
    lock.Unlock();
    if (on_slot_freed_) on_slot_freed_();
    lock.Lock();
  }
}

}  // namespace stagehand::engine_internal
