// Scenarios shared by the engine's integration tests: two PluginSchedulers of one plugin, each on
// its own store (its own SQLite connection or PostgreSQL pool) over the same database, in real
// time. A binary derives EngineIntegrationTest for one database and calls the Run* scenarios.
// Tests wait for events with condition variables and bounded timeouts; the only sleeps let real
// time pass where a scenario is about time (the overlap window, a task's own work).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fixtures/task_schedules.h"
#include "stagehand/base/logger.h"
#include "stagehand/base/uuid.h"
#include "stagehand/engine/engine_options.h"
#include "stagehand/service/plugin_scheduler.h"
#include "stagehand/store/task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::engine_integration {

using ::stagehand::testing::IsOk;

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

inline constexpr char kPluginId[] = "engineit";

// How long a scenario waits for an event that must happen before it fails.
inline constexpr milliseconds kEventTimeout{2500};

// Records task runs across schedulers: start and end instants (steady clock), which scheduler ran
// each, and when a run saw its stop token fire. Thread-safe.
class RunLog {
 public:
  struct Interval {
    Steady::time_point start;
    Steady::time_point end;
    std::string host;
  };

  // Returns a function that records its run under `host`, then works for `work` of real time.
  TaskFunction Working(std::string host, milliseconds work) {
    return [this, host = std::move(host), work](std::stop_token) {
      const Steady::time_point start = Steady::now();
      Started(host, start);
      std::this_thread::sleep_for(work);
      std::lock_guard lock(mu_);
      intervals_.push_back({start, Steady::now(), host});
    };
  }

  // Returns a function that records its run under `host` and blocks until its stop token fires.
  TaskFunction Blocking(std::string host) {
    return [this, host = std::move(host)](std::stop_token stop) {
      Started(host, Steady::now());
      std::unique_lock lock(mu_);
      cv_.wait(lock, stop, [] { return false; });
      stops_.push_back(Steady::now());
      cv_.notify_all();
    };
  }

  // Waits until `count` runs have started on `host` (any host when empty). Returns the start
  // instant of the count-th such run, or nullopt after `timeout`.
  std::optional<Steady::time_point> WaitStarted(const std::string& host, size_t count = 1,
                                                milliseconds timeout = kEventTimeout) {
    std::unique_lock lock(mu_);
    std::optional<Steady::time_point> found;
    cv_.wait_for(lock, timeout, [&] {
      size_t seen = 0;
      for (const auto& [who, when] : starts_) {
        if (!host.empty() && who != host) continue;
        if (++seen == count) {
          found = when;
          return true;
        }
      }
      return false;
    });
    return found;
  }

  // Waits until a blocked run saw its stop token fire; returns when, or nullopt after `timeout`.
  std::optional<Steady::time_point> WaitStopped(milliseconds timeout = kEventTimeout) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !stops_.empty(); })) return std::nullopt;
    return stops_.front();
  }

  std::vector<Interval> Intervals() const {
    std::lock_guard lock(mu_);
    return intervals_;
  }

 private:
  void Started(const std::string& host, Steady::time_point when) {
    std::lock_guard lock(mu_);
    starts_.emplace_back(host, when);
    cv_.notify_all();
  }

  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::vector<std::pair<std::string, Steady::time_point>> starts_;
  std::vector<Interval> intervals_;
  std::vector<Steady::time_point> stops_;
};

inline double Millis(Steady::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// The base of a binary's fixture: derived classes open stores on their database.
class EngineIntegrationTest : public ::testing::Test {
 protected:
  // Returns a new store (its own connection or pool) on the test's database, already migrated.
  virtual std::shared_ptr<TaskStore> OpenStore() = 0;

  static EngineOptions ShortOptions() {
    EngineOptions options;
    options.lease = seconds(1);
    options.poll_interval = milliseconds(200);
    options.shutdown_grace = seconds(1);
    options.retry_backoff = milliseconds(100);
    return options;
  }

  std::unique_ptr<PluginScheduler> MakeScheduler(EngineOptions engine) {
    PluginSchedulerOptions options;
    options.plugin_id = kPluginId;
    options.store = OpenStore();
    options.logger = NullLogger();
    options.engine = engine;
    options.default_zone = TimeZone::Utc();
    return std::make_unique<PluginScheduler>(std::move(options));
  }

  static TaskDefinition GlobalTask(std::string id, Frequency frequency, TaskFunction fn) {
    TaskDefinition task;
    task.id = std::move(id);
    task.frequency = std::move(frequency);
    task.timeout = std::chrono::milliseconds(seconds(60));
    task.scope = TaskScope::kGlobal;
    task.fn = std::move(fn);
    return task;
  }

  // Two schedulers run a 100 ms cadence task of 30 ms for 2 s: runs happen and never overlap.
  void RunNoOverlap() {
    RunLog log;
    auto a = MakeScheduler(ShortOptions());
    auto b = MakeScheduler(ShortOptions());
    ASSERT_TRUE(a->ScheduleTask(
                     GlobalTask("overlap", milliseconds(100), log.Working("a", milliseconds(30))))
                    .ok());
    ASSERT_TRUE(b->ScheduleTask(
                     GlobalTask("overlap", milliseconds(100), log.Working("b", milliseconds(30))))
                    .ok());
    std::this_thread::sleep_for(seconds(2));  // the window the property is checked over
    a->Shutdown();
    b->Shutdown();

    std::vector<RunLog::Interval> runs = log.Intervals();
    std::sort(runs.begin(), runs.end(),
              [](const auto& x, const auto& y) { return x.start < y.start; });
    EXPECT_GE(runs.size(), 5u) << "the task barely ran in 2 s";
    for (size_t i = 1; i < runs.size(); ++i) {
      EXPECT_LE(runs[i - 1].end, runs[i].start)
          << "run " << i - 1 << " on " << runs[i - 1].host << " overlaps run " << i << " on "
          << runs[i].host << " by " << Millis(runs[i - 1].end - runs[i].start) << " ms";
    }
  }

  // A trigger on A starts a manual task registered only on B. Returns the latency (trigger call to
  // start), or nullopt when the task did not start.
  std::optional<Steady::duration> TriggerAcross(EngineOptions options) {
    RunLog log;
    auto a = MakeScheduler(options);
    auto b = MakeScheduler(options);
    EXPECT_THAT(b->ScheduleTask(GlobalTask("manual", ManualFrequency{}, log.Working("b", {}))),
                IsOk());
    // B's dispatcher polls once at registration; let it park before the trigger.
    std::this_thread::sleep_for(milliseconds(100));
    const Steady::time_point triggered = Steady::now();
    Status status = a->TriggerTask("manual");
    EXPECT_THAT(status, IsOk());
    std::optional<Steady::time_point> started = log.WaitStarted("b");
    if (!started) return std::nullopt;
    return *started - triggered;
  }

  // B runs a blocking manual task; A cancels it. Returns the latency (cancel call to B's stop
  // token firing), or nullopt when it did not fire.
  std::optional<Steady::duration> CancelAcross(EngineOptions options) {
    RunLog log;
    auto a = MakeScheduler(options);
    auto b = MakeScheduler(options);
    EXPECT_THAT(b->ScheduleTask(GlobalTask("blocking", ManualFrequency{}, log.Blocking("b"))),
                IsOk());
    EXPECT_THAT(b->TriggerTask("blocking"), IsOk());
    if (!log.WaitStarted("b")) {
      ADD_FAILURE() << "the task did not start on B";
      return std::nullopt;
    }
    const Steady::time_point cancelled = Steady::now();
    Status status = a->CancelTask("blocking");
    EXPECT_THAT(status, IsOk());
    std::optional<Steady::time_point> stopped = log.WaitStopped();
    if (!stopped) return std::nullopt;
    return *stopped - cancelled;
  }

  // Another host claims the task's row and dies (its store is closed with the claim held, never
  // renewed nor released). Returns how long after the claim B starts the task, or nullopt.
  std::optional<Steady::duration> TakeOverFromDeadOwner(EngineOptions options) {
    RunLog log;
    const TaskSchedule schedule = testing::ScheduleFrom("PT1H");
    Steady::time_point claimed;
    {
      std::shared_ptr<TaskStore> dead = OpenStore();
      Result<UpsertResult> upsert = dead->Upsert("orphan", schedule);
      EXPECT_THAT(upsert, IsOk());
      claimed = Steady::now();
      Result<ClaimResult> claim =
          dead->Claim("orphan", NewUuidV4(), std::chrono::minutes(1), options.lease);
      EXPECT_TRUE(claim.ok() && claim->claimed) << "the dying host could not claim the row";
    }
    auto b = MakeScheduler(options);
    EXPECT_THAT(b->ScheduleTask(GlobalTask("orphan", std::chrono::hours(1), log.Working("b", {}))),
                IsOk());
    std::optional<Steady::time_point> started = log.WaitStarted("b", 1, milliseconds(4000));
    if (!started) return std::nullopt;
    return *started - claimed;
  }

  // A runs a long task; B waits for the same task. A shuts down gracefully: it releases the ticket,
  // so B starts the task without waiting for A's lease (5 s) to lapse. Returns the time from the
  // end of A's shutdown to B's start, or nullopt.
  std::optional<Steady::duration> HandOverAtShutdown(EngineOptions options) {
    RunLog log;
    options.lease = seconds(5);
    auto a = MakeScheduler(options);
    EXPECT_THAT(a->ScheduleTask(GlobalTask("handover", milliseconds(100), log.Blocking("a"))),
                IsOk());
    if (!log.WaitStarted("a")) {
      ADD_FAILURE() << "the task did not start on A";
      return std::nullopt;
    }
    auto b = MakeScheduler(options);
    EXPECT_THAT(b->ScheduleTask(GlobalTask("handover", milliseconds(100), log.Working("b", {}))),
                IsOk());
    a->Shutdown();
    const Steady::time_point shut_down = Steady::now();
    EXPECT_TRUE(log.WaitStopped(milliseconds(0)).has_value()) << "A's run was not signalled";
    std::optional<Steady::time_point> started = log.WaitStarted("b", 1, milliseconds(2000));
    if (!started) return std::nullopt;
    return *started - shut_down;
  }
};

}  // namespace stagehand::engine_integration
