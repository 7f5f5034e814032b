// The real SchedulerService of one plugin: validates and registers tasks, then hands them to the
// scheduling engine (src/engine), which coordinates global tasks through the plugin's TaskStore
// and records every run in the store's run history, which GetTaskRuns and GetRun read.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "stagehand/base/logger.h"
#include "stagehand/engine/engine_options.h"
#include "stagehand/engine/observer.h"
#include "stagehand/service/scheduler.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {

namespace engine_internal {
class EngineRuntime;
}

// The threads that drive plugin schedulers: one timer thread and `dispatcher_threads` threads for
// database work, shared by every scheduler given them, so that a process does not hold two threads
// per plugin; and the pool that runs their task functions, at most `max_running_tasks` at once
// across all of them (each scheduler also keeps to its EngineOptions::max_concurrency). Every
// scheduler sharing them must use `clock`, which must outlive them. Thread-safe.
class SchedulerThreads {
 public:
  explicit SchedulerThreads(Clock& clock, int dispatcher_threads = 4, int max_running_tasks = 256);
  ~SchedulerThreads();
  SchedulerThreads(const SchedulerThreads&) = delete;
  SchedulerThreads& operator=(const SchedulerThreads&) = delete;

 private:
  friend class PluginScheduler;
  std::shared_ptr<engine_internal::EngineRuntime> runtime_;
};

struct PluginSchedulerOptions {
  std::string plugin_id;
  // The plugin's task table, already migrated. May be null when the plugin only has local tasks;
  // global tasks then fail with kUnavailable, and there is no run history.
  std::shared_ptr<TaskStore> store;
  // Must outlive the scheduler. The system clock when null.
  Clock* clock = nullptr;
  // Used as is: the host passes the plugin's child logger, which already carries `plugin`.
  std::shared_ptr<Logger> logger;
  // Told of the engine's events, and of each registration, trigger and cancel that succeeds.
  std::shared_ptr<SchedulerObserver> observer;
  EngineOptions engine;
  // The zone cron cadences are evaluated in when a task names none, and in which REST timestamps
  // are shown. The process zone (TZ) by default.
  TimeZone default_zone = TimeZone::ProcessDefault();
  // How long ApplyOnce keeps the answer to a request sent with an idempotency key.
  std::chrono::milliseconds idempotency_key_retention{std::chrono::hours(24)};
  // Threads shared with other schedulers on the same clock; when null the scheduler has two of its
  // own.
  std::shared_ptr<SchedulerThreads> threads;
};

// Thread-safe. Destroying it runs Shutdown().
class PluginScheduler final : public SchedulerService {
 public:
  explicit PluginScheduler(PluginSchedulerOptions options);
  ~PluginScheduler() override;

  Status ScheduleTask(TaskDefinition task) override;
  Status ScheduleTasks(std::vector<TaskDefinition> tasks) override;
  Status RescheduleTask(TaskDefinition task) override;
  Status UnscheduleTask(std::string_view id) override;
  Status TriggerTask(std::string_view id) override;
  Status TriggerTask(std::string_view id, const TraceContext& caller) override;
  Status CancelTask(std::string_view id) override;
  Status PauseTask(std::string_view id, const PauseRequest& request) override;
  Status ResumeTask(std::string_view id) override;
  // In the store's RequestKeys (the plugin's database); without a store, as the default.
  Result<KeyedOutcome> ApplyOnce(const KeyedRequest& request,
                                 const std::function<Result<KeptAnswer>()>& apply) override;
  std::vector<TaskDescriptor> GetScheduledTasks() const override;
  Result<std::vector<TaskListing>> ListTasks() const override;
  // Read options.store->history(). Errors as SchedulerService's; kUnimplemented, with a message
  // saying why and how to turn it on, when the engine records no history
  // (EngineOptions::record_history false), there is no store, or its database has no history
  // tables.
  Result<RunPage> GetTaskRuns(std::string_view task_id, int limit,
                              const std::optional<std::string>& before) const override;
  Result<RunDetail> GetRun(std::string_view run_id) const override;

  // Stops the plugin's tasks in the engine's shutdown order (see src/engine/task_engine.h): stop
  // claiming, signal running tasks, wait up to the grace period, release tickets, stop threads.
  // Idempotent; later calls to ScheduleTask fail with kUnavailable.
  void Shutdown();
  // After Shutdown: the writes (run releases, history records) that could not be delivered to the
  // database before it returned; each was logged.
  int UndeliveredWrites() const;

  const std::string& plugin_id() const;

  // Why this plugin's host should not take requests now, or nullopt: its database has not
  // answered for longer than `grace`, or it answers again and the claims this host holds are
  // still being confirmed there. Thread-safe; no database operation (for the readiness probe).
  std::optional<std::string> DatabaseUnreadyReason(std::chrono::milliseconds grace);
  // What this plugin's store knows of its database (reachable, since when not, reconnects,
  // server changes), with the engine's failing calls folded in. Thread-safe; no database
  // operation (for the metrics).
  DatabaseHealth Database() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagehand
