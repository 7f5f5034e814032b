// The HTTP server's handler threads: a fixed set of named threads that run the handlers of the
// requests the I/O thread has read, so that a slow handler never stalls the I/O thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <string_view>
#include <thread>
#include <vector>

#include "stagehand/base/mutex.h"

namespace stagehand::http_internal {

// Names the calling thread (as top and gdb show it).
void NameThisThread(std::string_view name);

// Handler jobs, run by a fixed set of named threads. Thread-safe.
class HandlerPool {
 public:
  HandlerPool(int threads, std::size_t max_queued);
  ~HandlerPool() { Join(); }
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  // Queues `job`. Returns false when max_queued jobs are already waiting.
  bool TrySubmit(std::function<void()> job);

  // Runs what is queued, then joins the threads.
  void Join();

 private:
  void Loop();

  const std::size_t max_queued_;
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_ STAGEHAND_GUARDED_BY(mu_);
  bool stopping_ STAGEHAND_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace stagehand::http_internal
