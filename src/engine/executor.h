// A bounded pool of threads that run task functions, shared by every plugin of a process (it
// belongs to the EngineRuntime). A slot is reserved before a task is claimed, so an engine never
// claims a task it has no thread to run.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <thread>
#include <vector>

#include "stagehand/base/mutex.h"

namespace stagehand::engine_internal {

// Its threads are named kThreadName. They are started when jobs need them, up to `max_threads`,
// and end after kIdleLifetime without a job, so an idle plugin holds none; all are joined by
// Stop() or the destructor. Thread-safe.
class Executor {
 public:
  // The name of the pool's threads (at most 15 characters, the kernel's limit).
  static constexpr const char* kThreadName = "stagehand-run";
  // How long a thread waits for another job before it ends, by default (real time).
  static constexpr std::chrono::seconds kIdleLifetime{30};

  // `on_slot_freed` is called (without locks held) each time a job finishes.
  Executor(int max_threads, std::function<void()> on_slot_freed,
           std::chrono::milliseconds idle_lifetime = kIdleLifetime);
  ~Executor();

  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Reserves a slot for one job. Returns false when every slot is taken or the pool is stopped.
  bool TryReserve();
  // Gives back a reservation that will not be used.
  void CancelReservation();
  // Runs `job` on a pool thread. Requires a reservation, which the job consumes; its slot frees
  // when the job returns.
  void Submit(std::function<void()> job);
  // Returns the number of reserved or running slots.
  int busy() const;
  int max_threads() const { return max_threads_; }
  // Refuses new reservations, lets queued and running jobs finish, and joins every thread.
  void Stop();

 private:
  struct Worker {
    std::jthread thread;
    bool exited = false;  // guarded by mu_; set as its loop returns
  };
  // Starts a worker, after joining the ones that have ended.
  void StartWorker() STAGEHAND_REQUIRES(mu_);
  void WorkerLoop(std::stop_token stop, Worker* self);

  const int max_threads_;
  const std::chrono::milliseconds idle_lifetime_;
  std::function<void()> on_slot_freed_;
  mutable Mutex mu_;
  std::condition_variable_any work_available_;
  std::deque<std::function<void()>> queue_ STAGEHAND_GUARDED_BY(mu_);
  std::list<Worker> workers_ STAGEHAND_GUARDED_BY(mu_);
  int busy_ STAGEHAND_GUARDED_BY(mu_) = 0;
  int idle_threads_ STAGEHAND_GUARDED_BY(mu_) = 0;
  bool stopped_ STAGEHAND_GUARDED_BY(mu_) = false;
};

}  // namespace stagehand::engine_internal
