// What an engine (TaskEngine, its Releaser) tells its operators: the log lines and observer calls
// of each event of a run, a claim, a poll or the database. It decides nothing: the events and what
// they mean are the Planner's.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "engine/planner.h"
#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"
#include "stagehand/engine/observer.h"
#include "stagehand/store/task_store.h"

namespace stagehand::engine_internal {

// Thread-safe (its logger and observer are).
class EngineReporter {
 public:
  EngineReporter(std::shared_ptr<Logger> logger, std::shared_ptr<SchedulerObserver> observer,
                 std::string plugin_id);

  Logger& log() const { return *logger_; }
  const std::shared_ptr<Logger>& shared_log() const { return logger_; }
  SchedulerObserver& observer() const { return *observer_; }
  const std::string& plugin_id() const { return plugin_id_; }
  // Whether debug records are kept (skip building them otherwise).
  bool debug() const { return debug_; }

  // The fields of a log line about one run: its task, and its trace and span ids when traced.
  static LogFields RunFields(const std::string& task_id, const TraceContext& trace);
  // The observer's view of `run` of `task`.
  RunInfo InfoOf(const PlannedTask& task, const PlannedRun& run) const;

  // Task `id` is finished (its recurrence stopped and no run left).
  void TaskFinished(const std::string& id) const;
  // A slot of `task` due at `slot` was skipped `late` past due; the task waits for `next`.
  void SlotSkipped(const PlannedTask& task, WallTime slot, std::chrono::nanoseconds late,
                   const std::optional<WallTime>& next) const;
  // `run` of `task` failed on attempt `attempt` and is retried in `delay`.
  void RetryScheduled(const PlannedTask& task, const RunInfo& run, int attempt,
                      std::chrono::milliseconds delay) const;
  // Logs a failed run (`error`, nullopt: it did not fail): at error, or at warn when shutdown, a
  // cancel or an unschedule stopped it.
  void RunFailed(const PlannedTask& task, const PlannedRun& run,
                 const std::optional<std::string>& error, StopReason reason) const;
  void RunEnded(const RunInfo& info, std::chrono::nanoseconds duration,
                const RunFinish& finish) const;
  // The timer fenced `run` (its lease could not be renewed in time).
  void LeaseFenced(const PlannedTask& task, const PlannedRun& run) const;
  // `run`'s function has not returned `lease` after its timeout.
  void RunOverdue(const PlannedTask& task, const PlannedRun& run,
                  std::chrono::milliseconds lease) const;
  // Logs what a renewal of `run` (a first renewal after a server change when
  // `after_server_change`; claimed again with its ticket when `reclaimed`) came to, `status` the
  // renewal's. Returns why the run is at risk, when it is.
  std::optional<std::string> LogRenewal(const PlannedTask& task, const PlannedRun& run,
                                        Planner::RenewalOutcome outcome, bool after_server_change,
                                        bool reclaimed, const Status& status) const;
  // Tells the observer what the renewal came to (after LogRenewal and the run's signals).
  void ObserveRenewal(const PlannedTask& task, const PlannedRun& run,
                      Planner::RenewalOutcome outcome, bool reclaimed) const;
  // A poll answered: the tasks it finished, and those it swept as lost; `found` ready tasks.
  void PollAnswered(const Planner::PollOutcome& outcome, const PollResult& polled,
                    std::size_t found) const;
  // A skip of a missed slot of task `id` failed with `status`.
  void SkipFailed(const std::string& id, const Status& status) const;
  // A ClaimMany of `claims` answered `claimed`.
  void ClaimAnswered(const std::vector<ClaimRequest>& claims,
                     const Result<std::vector<ClaimResult>>& claimed) const;
  // Tasks were registered, or one redefined.
  void TasksRegistered(const std::vector<TaskPtr>& tasks) const;
  void TaskRedefined(const std::string& id, const std::string& settings_json) const;
  // Task `id` was unscheduled; `finished`: it had no run in progress.
  void TaskRetired(const std::string& id, bool finished) const;
  // The database is served by another server than before (a failover).
  void ServerChanged() const;
  // Why the plugin is not ready (empty when it is).
  std::string NotReadyWhy(const Planner::DatabaseReadiness& readiness) const;
  // `run` of `task` did not return after the shutdown grace and a kill.
  void RunAbandoned(const PlannedTask& task, const PlannedRun& run) const;

 private:
  std::shared_ptr<Logger> logger_;
  std::shared_ptr<SchedulerObserver> observer_;
  std::string plugin_id_;
  bool debug_;
};

}  // namespace stagehand::engine_internal
