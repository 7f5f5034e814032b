// Shared helpers for the engine unit tests: a recording observer, a controllable task function and
// a fixture wiring a TaskEngine to a MemoryTaskStore and a ManualClock.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/task_engine.h"
#include "fixtures/task_schedules.h"
#include "stagehand/store/memory_task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"

namespace stagehand::engine_internal {

using ::stagehand::testing::IsOk;

// Counts engine events per kind and task; tests wait on them with a bounded real timeout.
class Recorder final : public SchedulerObserver {
 public:
  void OnRunStarted(const RunInfo& run, std::chrono::nanoseconds lag) override {
    {
      std::lock_guard lock(mu_);
      traces_[std::string(run.task_id)].push_back(
          {run.trace != nullptr ? *run.trace : TraceContext{},
           run.caller != nullptr ? *run.caller : TraceContext{}});
    }
    Add("started", run.task_id, lag);
  }
  void OnRunCompleted(const RunInfo& run, std::chrono::nanoseconds) override {
    Add("completed", run.task_id);
  }
  void OnRunFailed(const RunInfo& run, std::chrono::nanoseconds, std::string_view error) override {
    {
      std::lock_guard lock(mu_);
      errors_[std::string(run.task_id)].emplace_back(error);
    }
    Add("failed", run.task_id);
  }
  void OnClaimLost(std::string_view, std::string_view task_id) override {
    Add("claim-lost", task_id);
  }
  void OnLeaseRenewed(const RunInfo& run) override { Add("renewed", run.task_id); }
  void OnRetryScheduled(const RunInfo& run, int /*attempt*/,
                        std::chrono::milliseconds /*delay*/) override {
    Add("retry", run.task_id);
  }
  void OnLeaseRenewalFailed(const RunInfo& run) override { Add("renewal-failed", run.task_id); }
  void OnLeaseLost(const RunInfo& run) override { Add("lease-lost", run.task_id); }
  void OnReclaimed(std::string_view, std::string_view task_id) override {
    Add("reclaimed", task_id);
  }
  void OnRunOverdue(const RunInfo& run) override { Add("overdue", run.task_id); }
  void OnRunAtRisk(std::string_view, std::string_view task_id, std::string_view,
                   std::optional<WallTime>, std::string_view) override {
    Add("at-risk", task_id);
  }
  void OnWriteReplayed(std::string_view, std::string_view task_id) override {
    Add("replayed", task_id);
  }
  void OnSlotSkipped(std::string_view, std::string_view task_id, WallTime,
                     std::chrono::nanoseconds) override {
    Add("skipped", task_id);
  }

  int Count(const std::string& kind, const std::string& task) const {
    std::lock_guard lock(mu_);
    auto it = counts_.find(kind + ":" + task);
    return it == counts_.end() ? 0 : it->second;
  }
  std::vector<std::chrono::nanoseconds> Lags(const std::string& task) const {
    std::lock_guard lock(mu_);
    auto it = lags_.find(task);
    return it == lags_.end() ? std::vector<std::chrono::nanoseconds>{} : it->second;
  }
  // The error of each failed run of `task`, in order.
  std::vector<std::string> Errors(const std::string& task) const {
    std::lock_guard lock(mu_);
    auto it = errors_.find(task);
    return it == errors_.end() ? std::vector<std::string>{} : it->second;
  }
  // The span context and the caller's of each started run of `task` (invalid when none).
  std::vector<std::pair<TraceContext, TraceContext>> Traces(const std::string& task) const {
    std::lock_guard lock(mu_);
    auto it = traces_.find(task);
    return it == traces_.end() ? std::vector<std::pair<TraceContext, TraceContext>>{} : it->second;
  }
  // Waits (real time, bounded) until Count(kind, task) >= n.
  bool WaitFor(const std::string& kind, const std::string& task, int n,
               std::chrono::seconds timeout = std::chrono::seconds(10)) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      auto it = counts_.find(kind + ":" + task);
      return it != counts_.end() && it->second >= n;
    });
  }

 private:
  void Add(const std::string& kind, std::string_view task,
           std::chrono::nanoseconds lag = std::chrono::nanoseconds(-1)) {
    {
      std::lock_guard lock(mu_);
      ++counts_[kind + ":" + std::string(task)];
      if (lag.count() >= 0) lags_[std::string(task)].push_back(lag);
    }
    cv_.notify_all();
  }

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, int> counts_;
  std::map<std::string, std::vector<std::chrono::nanoseconds>> lags_;
  std::map<std::string, std::vector<std::string>> errors_;
  std::map<std::string, std::vector<std::pair<TraceContext, TraceContext>>> traces_;
};

// A task function whose runs the test controls: by default it returns at once; with Hold() each
// run blocks until Release() or until its stop token fires.
class Probe {
 public:
  TaskFunction Fn() {
    return [this](std::stop_token stop) -> Status {
      bool stopped = false;
      // Wakes the wait below under the probe's mutex, so no stop request can be missed.
      std::stop_callback on_stop(stop, [&] {
        std::lock_guard lock(mu_);
        stopped = true;
        cv_.notify_all();
      });
      std::unique_lock lock(mu_);
      ++calls_;
      ++active_;
      max_active_ = std::max(max_active_, active_);
      cv_.notify_all();
      if (hold_) {
        cv_.wait(lock, [&] { return released_ || stopped; });
        stopped_by_token_ += stopped ? 1 : 0;
      }
      --active_;
      cv_.notify_all();
      if (throw_) throw std::runtime_error("boom");
      return result_;
    };
  }
  void Hold() {
    std::lock_guard lock(mu_);
    hold_ = true;
    released_ = false;
  }
  void Release() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  void FailWith(Status status) {
    std::lock_guard lock(mu_);
    result_ = std::move(status);
  }
  void Throw() {
    std::lock_guard lock(mu_);
    throw_ = true;
  }
  int calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  int active() const {
    std::lock_guard lock(mu_);
    return active_;
  }
  int max_active() const {
    std::lock_guard lock(mu_);
    return max_active_;
  }
  int stopped_by_token() const {
    std::lock_guard lock(mu_);
    return stopped_by_token_;
  }
  // Waits (real time, bounded) until `n` runs have started.
  bool WaitCalls(int n) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return calls_ >= n; });
  }
  // Waits (real time, bounded) until no run is inside the function.
  bool WaitInactive() const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return active_ == 0; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  int calls_ = 0;
  int active_ = 0;
  int max_active_ = 0;
  int stopped_by_token_ = 0;
  bool hold_ = false;
  bool released_ = false;
  bool throw_ = false;
  Status result_;
};

inline TaskSchedule Schedule(std::string_view cadence, std::string timeout = "PT1M",
                             std::optional<std::string> initial_delay = std::nullopt) {
  return testing::ScheduleFrom(cadence, std::move(initial_delay), std::move(timeout));
}

// The newest run of `task` in `store`'s history, with its output.
inline std::optional<TaskRun> LatestRun(TaskStore& store, const std::string& task) {
  Result<RunPage> page = store.history()->ListRuns(task, 1, std::nullopt);
  EXPECT_THAT(page, IsOk());
  if (!page.ok() || page->runs.empty()) return std::nullopt;
  Result<TaskRun> run = store.history()->GetRun(page->runs[0].run_id);
  EXPECT_THAT(run, IsOk());
  return run.ok() ? std::optional(*run) : std::nullopt;
}

// Prints engine logs with the manual clock's time when STAGEHAND_TEST_LOG is set (debugging aid).
class StderrLogger final : public Logger {
 public:
  explicit StderrLogger(const testing::ManualClock& clock) : clock_(clock) {}
  void Log(LogLevel level, std::string_view message, const LogFields&) override {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        clock_.Now() - testing::ManualClock::DefaultStart());
    std::fprintf(stderr, "[%lld ms] %s %.*s\n", static_cast<long long>(ms.count()),
                 std::string(LogLevelName(level)).c_str(), static_cast<int>(message.size()),
                 message.data());
  }
  bool Enabled(LogLevel) const override { return true; }

 private:
  const testing::ManualClock& clock_;
};

class EngineTest : public ::testing::Test {
 protected:
  EngineTest() : store_(std::make_shared<testing::MemoryTaskStore>("plugin", clock_)) {}
  ~EngineTest() override {
    for (auto& engine : engines_) engine->Shutdown();
  }

  EngineOptions Options() const {
    EngineOptions options;
    options.lease = std::chrono::seconds(10);
    options.poll_interval = std::chrono::seconds(5);
    options.shutdown_grace = std::chrono::seconds(5);
    return options;
  }

  // Starts an engine ("a host", or another plugin on `runtime`) on `store`.
  TaskEngine& StartEngine(std::shared_ptr<TaskStore> store, EngineOptions options,
                          std::shared_ptr<EngineRuntime> runtime = nullptr,
                          std::string plugin_id = "plugin") {
    stores_.push_back(store);
    std::shared_ptr<Logger> logger = logger_;
    if (logger == nullptr && std::getenv("STAGEHAND_TEST_LOG") != nullptr)
      logger = std::make_shared<StderrLogger>(clock_);
    EngineContext context{std::move(plugin_id), store.get(), &clock_, logger, recorder_, options};
    context.runtime = std::move(runtime);
    engines_.push_back(std::make_unique<TaskEngine>(std::move(context)));
    return *engines_.back();
  }
  TaskEngine& StartEngine() { return StartEngine(store_, Options()); }

  // The logger of the engines started from now on (none when null, unless STAGEHAND_TEST_LOG).
  std::shared_ptr<Logger> logger_;

  // Returns a probe that outlives every engine of the test.
  Probe& MakeProbe() { return probes_.emplace_back(); }

  // Opens a second store on the same table: another host.
  std::shared_ptr<testing::MemoryTaskStore> OtherHostStore() {
    return std::make_shared<testing::MemoryTaskStore>("plugin", clock_, store_->table());
  }

  static EngineTask Task(std::string id, TaskSchedule schedule, TaskFunction fn,
                         TaskScope scope = TaskScope::kGlobal) {
    EngineTask task;
    task.id = std::move(id);
    task.scope = scope;
    task.timeout = std::chrono::milliseconds(static_cast<long>(
        ToMillisecondsCasual(*ParseIsoDuration(schedule.settings.timeout_after_duration))));
    if (schedule.settings.initial_delay_duration) {
      task.has_initial_delay = true;
      task.initial_delay = std::chrono::milliseconds(static_cast<long>(
          ToMillisecondsCasual(*ParseIsoDuration(*schedule.settings.initial_delay_duration))));
    }
    task.schedule = std::move(schedule);
    task.fn = std::move(fn);
    return task;
  }

  // Moves time forward by `duration` the way real time passes: stopping at every deadline the
  // engines wait for on the way, and letting them act before moving on.
  void AdvanceBy(std::chrono::nanoseconds duration) {
    const MonoTime target = clock_.MonoNow() + duration;
    Settle();
    while (true) {
      std::optional<MonoTime> next = clock_.NextDeadline();
      if (!next || *next > target) break;
      clock_.AdvanceTo(*next);
      Settle();
    }
    clock_.AdvanceTo(target);
    Settle();
  }

  // Waits until every engine's threads are parked.
  void Settle() {
    for (auto& engine : engines_) ASSERT_TRUE(engine->WaitIdleForTesting());
  }

  std::optional<TaskRow> Row(const std::string& id) {
    Result<std::vector<TaskRow>> rows = store_->States();
    EXPECT_THAT(rows, IsOk());
    for (const TaskRow& row : *rows) {
      if (row.id == id) return row;
    }
    return std::nullopt;
  }

  testing::ManualClock clock_;
  std::shared_ptr<testing::MemoryTaskStore> store_;
  std::shared_ptr<Recorder> recorder_ = std::make_shared<Recorder>();
  std::deque<Probe> probes_;
  std::vector<std::shared_ptr<TaskStore>> stores_;
  std::vector<std::unique_ptr<TaskEngine>> engines_;
};

}  // namespace stagehand::engine_internal
