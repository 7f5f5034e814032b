// Instrumentation hooks of the scheduling engine and of the plugin schedulers above it. The
// backend turns them into Backstage's metric names and into the live event stream; tests use them
// to wait for events.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "stagehand/model/schedule.h"
#include "stagehand/model/task_pause.h"
#include "stagehand/model/task_run.h"
#include "stagehand/time/clock.h"
#include "stagehand/trace/trace_context.h"

namespace stagehand {

// Identifies one run of one task in hook calls.
struct RunInfo {
  std::string_view plugin_id;
  std::string_view task_id;
  TaskScope scope = TaskScope::kGlobal;
  std::string_view ticket;  // empty for local runs
  // The run's id in the run history: its ticket for a global run, a UUID of its own for a local
  // one.
  std::string_view run_id;
  RunTrigger trigger = RunTrigger::kSchedule;
  int attempt = 1;
  std::optional<WallTime> slot;     // the time the run was due for; none when triggered or retried
  std::chrono::nanoseconds lag{0};  // how late it started after its due time (as OnRunStarted's)
  // The run's span context (EngineOptions::trace_runs), or null when runs are not traced.
  const TraceContext* trace = nullptr;
  // The context of the TriggerTask call that asked for the run, when it gave one (the run's span
  // is its child), or null.
  const TraceContext* caller = nullptr;
};

// Receives scheduler events. The run, lease and claim hooks are called from engine threads, the
// task hooks from the thread that called the scheduler; never with a scheduler lock held.
// Implementations must be thread-safe and quick, and must not block. Every method has an empty
// default.
class SchedulerObserver {
 public:
  virtual ~SchedulerObserver() = default;

  // A run started; `lag` is the actual start minus the scheduled time (zero when unknown).
  virtual void OnRunStarted(const RunInfo& /*run*/, std::chrono::nanoseconds /*lag*/) {}
  // A run returned successfully after `duration`.
  virtual void OnRunCompleted(const RunInfo& /*run*/, std::chrono::nanoseconds /*duration*/) {}
  // A run failed (threw or returned an error) after `duration`; `error_json` as stored.
  virtual void OnRunFailed(const RunInfo& /*run*/, std::chrono::nanoseconds /*duration*/,
                           std::string_view /*error_json*/) {}
  // Every run's end, after OnRunCompleted or OnRunFailed: how it ended, as the run history records
  // it (output included).
  virtual void OnRunFinished(const RunInfo& /*run*/, const RunFinish& /*finish*/,
                             std::chrono::nanoseconds /*duration*/) {}
  // A scheduled slot of a task was missed by more than its catch-up window and skipped (not run):
  // `slot` is when it was due (wall time), `late` how late it was when skipped.
  virtual void OnSlotSkipped(std::string_view /*plugin_id*/, std::string_view /*task_id*/,
                             WallTime /*slot*/, std::chrono::nanoseconds /*late*/) {}
  // A failed or timed-out run (attempt `attempt`, 1 for the first) is retried after `delay`
  // (RetryPolicy), on whichever host claims it then.
  virtual void OnRetryScheduled(const RunInfo& /*run*/, int /*attempt*/,
                                std::chrono::milliseconds /*delay*/) {}
  // Another host claimed a task this host had seen ready.
  virtual void OnClaimLost(std::string_view /*plugin_id*/, std::string_view /*task_id*/) {}
  // A running task's lease was extended.
  virtual void OnLeaseRenewed(const RunInfo& /*run*/) {}
  // A lease renewal failed (database unavailable); the run continues until its fence deadline.
  virtual void OnLeaseRenewalFailed(const RunInfo& /*run*/) {}
  // This host stopped treating a run as its own: its ticket vanished (cancel, janitor) or its
  // lease could not be renewed in time (self-fencing).
  virtual void OnLeaseLost(const RunInfo& /*run*/) {}
  // After a failover the new database server lacked the claim of run `run_id` of `task_id` (due
  // at `slot`, when scheduled), and another host had claimed or changed the task's row meanwhile:
  // the run may be done twice (another host runs its slot again), or, when `lost`, its outcome
  // was not recorded. `why` says which write went missing. Asynchronous replication only: a
  // synchronous standby holds every write a host was told was committed.
  virtual void OnRunAtRisk(std::string_view /*plugin_id*/, std::string_view /*task_id*/,
                           std::string_view /*run_id*/, std::optional<WallTime> /*slot*/,
                           std::string_view /*why*/) {}
  // After a failover a write this host had made (a run's release) was missing on the new database
  // server, and this host wrote it again there.
  virtual void OnWriteReplayed(std::string_view /*plugin_id*/, std::string_view /*task_id*/) {}
  // The janitor reset an expired run of `task_id` (whoever held it).
  virtual void OnReclaimed(std::string_view /*plugin_id*/, std::string_view /*task_id*/) {}
  // A run's function has still not returned a lease after its timeout signalled it to stop; its
  // claim stays held until it does. Reported once per run.
  virtual void OnRunOverdue(const RunInfo& /*run*/) {}

  // A task was registered in this process (ScheduleTask or ScheduleTasks succeeded).
  virtual void OnTaskRegistered(std::string_view /*plugin_id*/, std::string_view /*task_id*/) {}
  // TriggerTask was called and is about to reach the engine, which may start the run before
  // TriggerTask returns: OnTaskTriggered or OnTaskTriggerRefused follows, on the same thread. Lets
  // a view put the trigger before the run it starts.
  virtual void OnTaskTriggerRequested(std::string_view /*plugin_id*/,
                                      std::string_view /*task_id*/) {}
  // TriggerTask succeeded: the task runs soon, on this host or another.
  virtual void OnTaskTriggered(std::string_view /*plugin_id*/, std::string_view /*task_id*/) {}
  // TriggerTask failed (unknown task, already running, shutting down, database unavailable).
  virtual void OnTaskTriggerRefused(std::string_view /*plugin_id*/, std::string_view /*task_id*/) {}
  // CancelTask succeeded: the task's current run was asked to stop.
  virtual void OnTaskCancelled(std::string_view /*plugin_id*/, std::string_view /*task_id*/) {}
  // A pause on this host was accepted (docs/adr/0013-pausing-a-task-in-backstages-row.md).
  virtual void OnTaskPaused(std::string_view /*plugin_id*/, std::string_view /*task_id*/,
                            const PauseRequest& /*pause*/) {}
  // A resume on this host was accepted.
  virtual void OnTaskResumed(std::string_view /*plugin_id*/, std::string_view /*task_id*/) {}
};

}  // namespace stagehand
