// The mutex of stagehand: a std::mutex that clang's thread-safety analysis knows about, so that
// members declared STAGEHAND_GUARDED_BY(mu_) (thread_annotations.h) are checked at compile time.
//
//   Mutex mu_;
//   int count_ STAGEHAND_GUARDED_BY(mu_);
//
//   MutexLock lock(mu_);
//   cv_.wait(lock.unique_lock(), [&]() STAGEHAND_REQUIRES(mu_) { return count_ > 0; });
//
// A Mutex is locked only through a MutexLock; a predicate that a condition variable or
// Clock::WaitUntil evaluates with the lock held is a lambda marked STAGEHAND_REQUIRES.
#pragma once

#include <mutex>

#include "stagehand/base/thread_annotations.h"

namespace stagehand {

// A non-recursive mutex. Thread-safe.
class STAGEHAND_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction, like std::unique_lock. It may be released and
// re-acquired in between (around user code, I/O or logging), and lends its std::unique_lock to
// condition variables and Clock::WaitUntil, which release and re-acquire it while they wait.
// Not thread-safe: it belongs to the thread that made it.
class STAGEHAND_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) STAGEHAND_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() STAGEHAND_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Releases the mutex, which must be held.
  void Unlock() STAGEHAND_RELEASE() { lock_.unlock(); }
  // Re-acquires the mutex after Unlock.
  void Lock() STAGEHAND_ACQUIRE() { lock_.lock(); }

  // Returns the underlying lock, for std::condition_variable(_any)::wait and Clock::WaitUntil.
  // They must return with it held again; nothing else may unlock it.
  std::unique_lock<std::mutex>& unique_lock() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace stagehand
