// The threads that drive task engines: one timer thread and a few dispatcher threads, shared by
// every engine of a process (one per plugin), so that the number of threads does not grow with the
// number of plugins. An engine does no waiting of its own: it hands the runtime two steps (the
// timer's and the dispatcher's), each of which does what is due and says when it is next due, and
// wakes the runtime when something changes earlier than that. The runtime also holds the executor
// that runs every engine's task functions, so runs (and their threads) are bounded per process; an
// engine denied a slot is woken when one frees.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <stop_token>
#include <thread>
#include <vector>

#include "engine/executor.h"
#include "stagehand/base/mutex.h"
#include "stagehand/time/clock.h"

namespace stagehand::engine_internal {

// What the runtime drives. Implemented by TaskEngine.
class DrivenEngine {
 public:
  enum Lane : int { kTimer = 0, kDispatcher = 1 };
  virtual ~DrivenEngine() = default;
  // Does the work of `lane` that is due now and returns when that lane is next due
  // (kMonoInfinity: only when woken). Never runs concurrently with itself for one engine and
  // lane. The timer lane must not block on I/O; the dispatcher lane may.
  virtual MonoTime Step(Lane lane) = 0;
};

// Thread-safe. Engines must be removed before the runtime is destroyed.
class EngineRuntime {
 public:
  // `clock` (which must outlive the runtime) times every engine it drives: engines on another
  // clock need a runtime of their own. `dispatcher_threads` ≥ 1; `max_runs` ≥ 1 bounds the task
  // functions running at once across every engine (and so the executor's threads).
  EngineRuntime(Clock& clock, int dispatcher_threads, int max_runs);
  ~EngineRuntime();
  EngineRuntime(const EngineRuntime&) = delete;
  EngineRuntime& operator=(const EngineRuntime&) = delete;

  Clock& clock() const { return clock_; }

  // Starts driving `engine`: both lanes step at once. Returns a handle for Wake and Remove.
  using Handle = std::uint64_t;
  Handle Add(DrivenEngine* engine);
  // Makes `lanes` of the engine step as soon as a thread is free, even when one is stepping now
  // (it steps again after). Any thread; never blocks on a step.
  void Wake(Handle handle, bool timer, bool dispatcher);
  // Stops driving the engine: returns once neither lane is stepping and none will again. Must not
  // be called from a step.
  void Remove(Handle handle);

  // Run slots (RunSlots in planner.h, for the engine `handle`): takes one, or records that the
  // engine waits for one (both its lanes are woken when one frees).
  bool TryTakeRunSlot(Handle handle);
  // Whether a slot is free; when not, as TryTakeRunSlot.
  bool RunSlotAvailable(Handle handle);
  // Returns a slot whose run will not start.
  void ReturnRunSlot();
  // Runs `job` on the executor, consuming a slot taken by TryTakeRunSlot; the slot frees when the
  // job returns.
  void SubmitRun(std::function<void()> job);

  // Test hook: blocks until every thread waits on the clock with nothing woken or due, or until
  // `real_timeout` of real time passes. Returns whether that state was reached.
  bool WaitIdleForTesting(std::chrono::milliseconds real_timeout);

 private:
  struct LaneState {
    MonoTime due{};
    bool woken = true;
    bool stepping = false;
  };
  struct Entry {
    Handle handle = 0;
    DrivenEngine* engine = nullptr;
    LaneState lanes[2];
    bool removed = false;
  };

  void Loop(DrivenEngine::Lane lane, std::size_t index, std::stop_token stop);
  Entry* Find(Handle handle) STAGEHAND_REQUIRES(mu_);
  void WakeEnginesWaitingForSlots();

  Clock& clock_;
  Mutex mu_;
  // A lane's threads wait on its own condition variable, so that a wake-up of one lane does not
  // wake the other's threads; Remove and WaitIdleForTesting wait on state_cv_.
  std::condition_variable_any lane_cv_[2];
  std::condition_variable_any state_cv_;
  std::list<Entry> entries_ STAGEHAND_GUARDED_BY(mu_);
  Handle next_handle_ STAGEHAND_GUARDED_BY(mu_) = 1;
  // Per lane: wakes, adds and finished steps.
  std::uint64_t changes_[2] STAGEHAND_GUARDED_BY(mu_) = {};
  std::size_t next_pick_[2] STAGEHAND_GUARDED_BY(mu_) = {};  // where each lane's next scan starts
  // Per thread: whether it waits on the clock, and the changes_ it had seen then.
  struct Waiting {
    DrivenEngine::Lane lane = DrivenEngine::kTimer;
    bool waiting = false;
    std::uint64_t seen = 0;
  };
  std::vector<Waiting> waiting_ STAGEHAND_GUARDED_BY(mu_);
  std::vector<Handle> waiting_for_slots_ STAGEHAND_GUARDED_BY(mu_);
  std::vector<std::jthread> threads_;
  // Last: its threads end (and stop calling back) before the rest is destroyed.
  Executor executor_;
};

}  // namespace stagehand::engine_internal
