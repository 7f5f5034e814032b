#include "engine/engine_runtime.h"

#include <pthread.h>

#include <algorithm>
#include <iterator>

#include "stagehand/base/check.h"

namespace stagehand::engine_internal {

EngineRuntime::EngineRuntime(Clock& clock, int dispatcher_threads, int max_runs)
    : clock_(clock), executor_(max_runs, [this] { WakeEnginesWaitingForSlots(); }) {
  STAGEHAND_CHECK(dispatcher_threads >= 1);
  waiting_.resize(static_cast<std::size_t>(dispatcher_threads) + 1);
  // Named for operators (`top -H`); the kernel keeps 15 characters.
  threads_.emplace_back([this](std::stop_token stop) { Loop(DrivenEngine::kTimer, 0, stop); });
  pthread_setname_np(threads_.back().native_handle(), "stagehand-timer");
  for (std::size_t i = 1; i < waiting_.size(); ++i) {
    threads_.emplace_back(
        [this, i](std::stop_token stop) { Loop(DrivenEngine::kDispatcher, i, stop); });
    pthread_setname_np(threads_.back().native_handle(), "stagehand-disp");
  }
}

EngineRuntime::~EngineRuntime() {
  {
    MutexLock lock(mu_);
    STAGEHAND_CHECK(entries_.empty());
  }
  for (std::jthread& thread : threads_) thread.request_stop();
  {
    MutexLock lock(mu_);
    for (std::condition_variable_any& cv : lane_cv_) cv.notify_all();
  }
  for (std::jthread& thread : threads_) thread.join();
}

EngineRuntime::Handle EngineRuntime::Add(DrivenEngine* engine) {
  Handle handle = 0;
  {
    MutexLock lock(mu_);
    handle = next_handle_++;
    Entry& entry = entries_.emplace_back();
    entry.handle = handle;
    entry.engine = engine;
    for (int lane = 0; lane < 2; ++lane) {
      ++changes_[lane];
      lane_cv_[lane].notify_one();
    }
  }
  return handle;
}

void EngineRuntime::Wake(Handle handle, bool timer, bool dispatcher) {
  {
    MutexLock lock(mu_);
    Entry* entry = Find(handle);
    if (entry == nullptr) return;
    const bool lanes[2] = {timer, dispatcher};
    for (int lane = 0; lane < 2; ++lane) {
      if (!lanes[lane]) continue;
      entry->lanes[lane].woken = true;
      ++changes_[lane];
      lane_cv_[lane].notify_one();  // any idle thread of the lane can take it
    }
  }
}

void EngineRuntime::Remove(Handle handle) {
  MutexLock lock(mu_);
  Entry* entry = Find(handle);
  if (entry == nullptr) return;
  entry->removed = true;
  state_cv_.wait(lock.unique_lock(), [&] {
    return !entry->lanes[DrivenEngine::kTimer].stepping &&
           !entry->lanes[DrivenEngine::kDispatcher].stepping;
  });
  entries_.remove_if([&](const Entry& e) { return e.handle == handle; });
}

bool EngineRuntime::WaitIdleForTesting(std::chrono::milliseconds real_timeout) {
  SystemClock& real = SystemClock::Instance();
  MutexLock lock(mu_);
  return real.WaitUntil(lock.unique_lock(), state_cv_, real.MonoNow() + real_timeout, {},
                        [&]() STAGEHAND_REQUIRES(mu_) {
                          for (const Waiting& thread : waiting_) {
                            if (!thread.waiting || thread.seen != changes_[thread.lane])
                              return false;
                          }
                          const MonoTime now = clock_.MonoNow();
                          for (const Entry& entry : entries_) {
                            if (entry.removed) continue;
                            for (const LaneState& state : entry.lanes) {
                              if (state.stepping || state.woken || state.due <= now) return false;
                            }
                          }
                          return true;
                        });
}

bool EngineRuntime::TryTakeRunSlot(Handle handle) {
  // Under mu_, so that a slot freeing between the refusal and the record wakes this engine.
  MutexLock lock(mu_);
  if (executor_.TryReserve()) return true;
  if (std::find(waiting_for_slots_.begin(), waiting_for_slots_.end(), handle) ==
      waiting_for_slots_.end()) {
    waiting_for_slots_.push_back(handle);
  }
  return false;
}

bool EngineRuntime::RunSlotAvailable(Handle handle) {
  MutexLock lock(mu_);
  if (executor_.busy() < executor_.max_threads()) return true;
  if (std::find(waiting_for_slots_.begin(), waiting_for_slots_.end(), handle) ==
      waiting_for_slots_.end()) {
    waiting_for_slots_.push_back(handle);
  }
  return false;
}

void EngineRuntime::ReturnRunSlot() { executor_.CancelReservation(); }

void EngineRuntime::SubmitRun(std::function<void()> job) { executor_.Submit(std::move(job)); }

void EngineRuntime::WakeEnginesWaitingForSlots() {
  std::vector<Handle> waiting;
  {
    MutexLock lock(mu_);
    waiting.swap(waiting_for_slots_);
  }
  for (Handle handle : waiting) Wake(handle, /*timer=*/true, /*dispatcher=*/true);
}

EngineRuntime::Entry* EngineRuntime::Find(Handle handle) {
  for (Entry& entry : entries_) {
    if (entry.handle == handle && !entry.removed) return &entry;
  }
  return nullptr;
}

void EngineRuntime::Loop(DrivenEngine::Lane lane, std::size_t index, std::stop_token stop) {
  MutexLock lock(mu_);
  while (!stop.stop_requested()) {
    const MonoTime now = clock_.MonoNow();
    Entry* pick = nullptr;
    MonoTime earliest = kMonoInfinity;
    // Start each scan after the engine picked last, so that a busy engine cannot starve others.
    const std::size_t count = entries_.size();
    const std::size_t start = count == 0 ? 0 : next_pick_[lane] % count;
    auto it = std::next(entries_.begin(), static_cast<std::ptrdiff_t>(start));
    for (std::size_t k = 0; k < count; ++k, ++it) {
      if (it == entries_.end()) it = entries_.begin();
      const LaneState& state = it->lanes[lane];
      if (it->removed || state.stepping) continue;
      if (state.woken || state.due <= now) {
        pick = &*it;
        next_pick_[lane] = start + k + 1;
        break;
      }
      earliest = std::min(earliest, state.due);
    }
    if (pick == nullptr) {
      const std::uint64_t seen = changes_[lane];
      // Marked as waiting until the wait ends, with what it has seen: WaitIdleForTesting counts
      // it only while no change has come since, so never while its deadline may be leaving the
      // clock.
      waiting_[index] = {lane, true, seen};
      state_cv_.notify_all();
      clock_.WaitUntil(lock.unique_lock(), lane_cv_[lane], earliest, stop,
                       [&]() STAGEHAND_REQUIRES(mu_) { return changes_[lane] != seen; });
      waiting_[index].waiting = false;
      continue;
    }
    LaneState& state = pick->lanes[lane];
    state.stepping = true;
    state.woken = false;
    DrivenEngine* engine = pick->engine;
    lock.Unlock();
    const MonoTime next = engine->Step(lane);
    lock.Lock();
    // The entry is still there: Remove waits for its steps before erasing it.
    state.stepping = false;
    state.due = next;
    // Another idle thread of the lane rescans, so that this engine's new due time is waited for
    // even if this thread goes on to step another engine.
    ++changes_[lane];
    lane_cv_[lane].notify_one();
    state_cv_.notify_all();
  }
}

}  // namespace stagehand::engine_internal
