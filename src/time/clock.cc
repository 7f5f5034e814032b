#include "stagehand/time/clock.h"

#include "stagehand/base/mutex.h"

namespace stagehand {

bool Clock::SleepUntil(MonoTime deadline, std::stop_token stop) {
  Mutex mu;
  std::condition_variable_any cv;
  MutexLock lock(mu);
  WaitUntil(lock.unique_lock(), cv, deadline, stop, [] { return false; });
  return !stop.stop_requested() && MonoNow() >= deadline;
}

bool Clock::SleepFor(std::chrono::nanoseconds duration, std::stop_token stop) {
  return SleepUntil(MonoNow() + duration, std::move(stop));
}

WallTime SystemClock::Now() const { return std::chrono::system_clock::now(); }

MonoTime SystemClock::MonoNow() const { return std::chrono::steady_clock::now(); }

bool SystemClock::WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                            MonoTime deadline, std::stop_token stop,
                            const std::function<bool()>& done) {
  if (deadline == kMonoInfinity) {
    return cv.wait(lock, stop, done);
  }
  return cv.wait_until(lock, stop, deadline, done);
}

SystemClock& SystemClock::Instance() {
  static SystemClock clock;
  return clock;
}

}  // namespace stagehand
