// The time source of stagehand. Nothing outside src/time reads a clock or sleeps: every component
// receives a Clock& and uses it for wall time (cron, display), monotonic time (timeouts, leases,
// backoff) and for every wait, so that tests can drive time with testing::ManualClock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stop_token>

namespace stagehand {

// Wall-clock instant (UTC). Used for cron evaluation, database rows and display only.
using WallTime = std::chrono::system_clock::time_point;
// Monotonic instant. Used for every deadline inside a process.
using MonoTime = std::chrono::steady_clock::time_point;

// Reads time and waits on it. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;

  // Returns the current wall-clock time.
  virtual WallTime Now() const = 0;
  // Returns the current monotonic time.
  virtual MonoTime MonoNow() const = 0;

  // Blocks the calling thread, which holds `lock`, on `cv` until `done()` returns true, `stop` is
  // requested, or MonoNow() reaches `deadline` (inclusive). `done` is evaluated with `lock` held.
  // Other threads that change the state `done` reads must do so under the same mutex and then
  // call cv.notify_all(). Returns the final value of done().
  virtual bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                         MonoTime deadline, std::stop_token stop,
                         const std::function<bool()>& done) = 0;

  // Blocks until MonoNow() reaches `deadline` or `stop` is requested. Returns true if the
  // deadline was reached, false if stopped first.
  bool SleepUntil(MonoTime deadline, std::stop_token stop);
  // Same as SleepUntil(MonoNow() + duration, stop).
  bool SleepFor(std::chrono::nanoseconds duration, std::stop_token stop);
};

// The real clocks: std::chrono::system_clock and steady_clock. Thread-safe.
class SystemClock final : public Clock {
 public:
  WallTime Now() const override;
  MonoTime MonoNow() const override;
  bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                 MonoTime deadline, std::stop_token stop,
                 const std::function<bool()>& done) override;

  // Returns a process-wide instance.
  static SystemClock& Instance();
};

// The farthest representable deadline; waiting until it means "until woken or stopped".
inline constexpr MonoTime kMonoInfinity = MonoTime::max();

}  // namespace stagehand
