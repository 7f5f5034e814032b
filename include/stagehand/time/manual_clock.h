// A clock that moves only when a test tells it to, for deterministic tests of anything that waits.
// Like Abseil's SimulatedClock: advancing time wakes exactly the waiters whose deadline passed, and
// tests can block until a background thread is parked on the clock, so they never race it.
#pragma once

#include <chrono>
#include <cstddef>
#include <list>
#include <optional>
#include <thread>

#include "stagehand/base/mutex.h"
#include "stagehand/time/clock.h"

namespace stagehand::testing {

// A manually driven Clock. Wall and monotonic time advance together; SetWallTime moves only the
// wall clock (to simulate skew or jumps). Thread-safe.
class ManualClock final : public Clock {
 public:
  // Starts at `wall_start` (default 2026-01-01T00:00:00Z) and an arbitrary monotonic origin.
  explicit ManualClock(WallTime wall_start = DefaultStart());
  ~ManualClock() override;

  WallTime Now() const override;
  MonoTime MonoNow() const override;
  bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                 MonoTime deadline, std::stop_token stop,
                 const std::function<bool()>& done) override;

  // Moves both clocks forward by `delta` (must be >= 0) and wakes every waiter whose deadline is
  // now reached.
  void Advance(std::chrono::nanoseconds delta);
  // Moves the monotonic clock to `deadline` if it is later, and the wall clock by the same amount.
  void AdvanceTo(MonoTime deadline);
  // Moves time to the earliest deadline among the blocked waiters, if there is one that is not
  // infinite. Returns whether time moved.
  bool AdvanceToNextDeadline();
  // Sets the wall clock without moving the monotonic clock. Wakes nobody.
  void SetWallTime(WallTime wall);

  // Returns how many threads are blocked in WaitUntil right now.
  std::size_t NumWaiters() const;
  // Returns whether the thread `thread` is blocked in WaitUntil right now.
  bool IsWaiting(std::thread::id thread) const;
  // Returns the earliest finite deadline among the blocked waiters.
  std::optional<MonoTime> NextDeadline() const;
  // Blocks the calling (test) thread until at least `count` threads are blocked in WaitUntil, or
  // `real_timeout` of real time passes. Returns whether the count was reached.
  bool BlockUntilWaiters(std::size_t count,
                         std::chrono::milliseconds real_timeout = std::chrono::seconds(10)) const;

  static WallTime DefaultStart();

 private:
  struct Waiter {
    std::mutex* mutex;
    std::condition_variable_any* cv;
    MonoTime deadline;
    std::thread::id thread;
    int pins;  // Notifications in flight; the entry is not erased while > 0.
  };
  void WakeDueWaiters() STAGEHAND_EXCLUDES(mu_);

  mutable Mutex mu_;
  mutable std::condition_variable waiters_changed_;
  WallTime wall_ STAGEHAND_GUARDED_BY(mu_);
  MonoTime mono_ STAGEHAND_GUARDED_BY(mu_);
  std::list<Waiter> waiters_ STAGEHAND_GUARDED_BY(mu_);
};

}  // namespace stagehand::testing
