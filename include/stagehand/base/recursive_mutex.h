// A recursive mutex that clang's thread-safety analysis knows about, for the few owners whose
// callbacks call back into them on the same thread (a store whose `apply` callback uses the store
// again, a listener whose handler's own write notifies it again). Prefer Mutex (mutex.h): it is
// the one to use unless such re-entry is part of the contract.
//
//   RecursiveMutex mu_;
//   int count_ STAGEHAND_GUARDED_BY(mu_);
//
//   RecursiveMutexLock lock(mu_);
#pragma once

#include <mutex>

#include "stagehand/base/mutex.h"
#include "stagehand/base/thread_annotations.h"

namespace stagehand {

// A mutex that the thread holding it may lock again. Thread-safe.
class STAGEHAND_CAPABILITY("mutex") RecursiveMutex {
 public:
  RecursiveMutex() = default;
  RecursiveMutex(const RecursiveMutex&) = delete;
  RecursiveMutex& operator=(const RecursiveMutex&) = delete;

 private:
  friend class RecursiveMutexLock;
  std::recursive_mutex mu_;
};

// Holds a RecursiveMutex from construction to destruction. Not thread-safe: it belongs to the
// thread that made it.
class STAGEHAND_SCOPED_CAPABILITY RecursiveMutexLock {
 public:
  explicit RecursiveMutexLock(RecursiveMutex& mu) STAGEHAND_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~RecursiveMutexLock() STAGEHAND_RELEASE() = default;
  RecursiveMutexLock(const RecursiveMutexLock&) = delete;
  RecursiveMutexLock& operator=(const RecursiveMutexLock&) = delete;

 private:
  std::lock_guard<std::recursive_mutex> lock_;
};

}  // namespace stagehand
