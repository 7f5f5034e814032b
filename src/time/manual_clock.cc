#include "stagehand/time/manual_clock.h"

#include <algorithm>
#include <vector>

#include "stagehand/base/check.h"

namespace stagehand::testing {

namespace {
// 2026-01-01T00:00:00Z.
constexpr std::chrono::seconds kDefaultStartEpoch{1767225600};
}  // namespace

ManualClock::ManualClock(WallTime wall_start)
    : wall_(wall_start), mono_(MonoTime(std::chrono::hours(1))) {}

ManualClock::~ManualClock() {
  MutexLock lock(mu_);
  STAGEHAND_CHECK(waiters_.empty());
}

WallTime ManualClock::DefaultStart() { return WallTime(kDefaultStartEpoch); }

WallTime ManualClock::Now() const {
  MutexLock lock(mu_);
  return wall_;
}

MonoTime ManualClock::MonoNow() const {
  MutexLock lock(mu_);
  return mono_;
}

bool ManualClock::WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                            MonoTime deadline, std::stop_token stop,
                            const std::function<bool()>& done) {
  STAGEHAND_CHECK(lock.owns_lock());
  auto deadline_reached = [&] {
    MutexLock clock_lock(mu_);
    return mono_ >= deadline;
  };
  std::list<Waiter>::iterator self;
  {
    MutexLock clock_lock(mu_);
    self = waiters_.insert(waiters_.end(),
                           Waiter{lock.mutex(), &cv, deadline, std::this_thread::get_id(), 0});
  }
  waiters_changed_.notify_all();
  // The predicate is re-evaluated on every wake-up: state changes notify `cv` directly, and
  // Advance* notifies it while holding the waiter's mutex, so no wake-up can be lost.
  cv.wait(lock, stop, [&] { return done() || deadline_reached(); });
  // A concurrent Advance may be about to notify through this waiter's mutex and cv; it pins the
  // entry while doing so. Release the caller's mutex so it can finish, then leave.
  lock.unlock();
  {
    MutexLock clock_lock(mu_);
    waiters_changed_.wait(clock_lock.unique_lock(),
                          [&]() STAGEHAND_REQUIRES(mu_) { return self->pins == 0; });
    waiters_.erase(self);
  }
  waiters_changed_.notify_all();
  lock.lock();
  return done();
}

void ManualClock::Advance(std::chrono::nanoseconds delta) {
  STAGEHAND_CHECK(delta.count() >= 0);
  {
    MutexLock lock(mu_);
    mono_ += std::chrono::duration_cast<MonoTime::duration>(delta);
    wall_ += std::chrono::duration_cast<WallTime::duration>(delta);
  }
  WakeDueWaiters();
}

void ManualClock::AdvanceTo(MonoTime deadline) {
  std::chrono::nanoseconds delta{0};
  {
    MutexLock lock(mu_);
    if (deadline > mono_) delta = deadline - mono_;
  }
  Advance(delta);
}

bool ManualClock::AdvanceToNextDeadline() {
  std::optional<MonoTime> next = NextDeadline();
  if (!next) return false;
  AdvanceTo(*next);
  return true;
}

void ManualClock::SetWallTime(WallTime wall) {
  MutexLock lock(mu_);
  wall_ = wall;
}

std::size_t ManualClock::NumWaiters() const {
  MutexLock lock(mu_);
  return waiters_.size();
}

bool ManualClock::IsWaiting(std::thread::id thread) const {
  MutexLock lock(mu_);
  return std::any_of(waiters_.begin(), waiters_.end(),
                     [&](const Waiter& waiter) { return waiter.thread == thread; });
}

std::optional<MonoTime> ManualClock::NextDeadline() const {
  MutexLock lock(mu_);
  std::optional<MonoTime> next;
  for (const Waiter& waiter : waiters_) {
    if (waiter.deadline == kMonoInfinity) continue;
    if (!next || waiter.deadline < *next) next = waiter.deadline;
  }
  return next;
}

bool ManualClock::BlockUntilWaiters(std::size_t count,
                                    std::chrono::milliseconds real_timeout) const {
  MutexLock lock(mu_);
  return waiters_changed_.wait_for(lock.unique_lock(), real_timeout, [&]() STAGEHAND_REQUIRES(mu_) {
    return waiters_.size() >= count;
  });
}

void ManualClock::WakeDueWaiters() {
  std::vector<std::list<Waiter>::iterator> due;
  {
    MutexLock lock(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
      if (it->deadline <= mono_) {
        ++it->pins;
        due.push_back(it);
      }
    }
  }
  // Taking each waiter's own mutex orders this notification after its predicate check, so the
  // waiter either sees the new time or is already blocked and receives the notification. The pin
  // keeps the waiter (and so its mutex and cv) alive until the notification is done.
  for (auto it : due) {
    {
      std::lock_guard waiter_lock(*it->mutex);
      it->cv->notify_all();
    }
    MutexLock lock(mu_);
    --it->pins;
  }
  if (!due.empty()) waiters_changed_.notify_all();
}

}  // namespace stagehand::testing
