// The scheduler API that plugins use: the C++ shape of Backstage's SchedulerService. One instance
// per plugin. A task registered with scope global runs on one host at a time across every host
// that shares the plugin's database; a local task runs in every process, never overlapping itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/model/schedule.h"
#include "stagehand/model/task_function.h"
#include "stagehand/model/task_pause.h"
#include "stagehand/model/task_run.h"
#include "stagehand/model/task_settings.h"
#include "stagehand/model/task_state.h"
#include "stagehand/store/request_keys.h"
#include "stagehand/store/run_history.h"

namespace stagehand {

// What to run: Backstage's SchedulerServiceTaskInvocationDefinition.
struct TaskInvocation {
  std::string id;
  TaskFunction fn;
  // Requesting stop on this token ends the task's recurrence in this process (a run in progress
  // also sees its stop token fire).
  std::stop_token stop;
};

// A task: schedule plus invocation (Backstage's scheduleTask argument).
struct TaskDefinition {
  std::string id;
  Frequency frequency = ManualFrequency{};
  DurationSpec timeout = std::chrono::milliseconds(0);
  std::optional<DurationSpec> initial_delay;
  TaskScope scope = TaskScope::kGlobal;
  // stagehand extensions, as ScheduleDefinition's (not stored in settings_json).
  std::optional<DurationSpec> catchup_window;
  std::optional<DurationSpec> jitter;
  std::optional<RetryPolicy> retry;
  TaskFunction fn;
  std::stop_token stop;
};

// Returns the task made of `schedule` and `invocation`; the schedule's fields win, as in Backstage.
TaskDefinition MakeTaskDefinition(const ScheduleDefinition& schedule, TaskInvocation invocation);

// Returns the schedule of `task`, every field of it (MakeTaskDefinition's inverse).
ScheduleDefinition ScheduleOf(const TaskDefinition& task);

// A registered task as GetScheduledTasks reports it.
struct TaskDescriptor {
  std::string id;
  TaskScope scope = TaskScope::kGlobal;
  TaskSettingsV2 settings;
  // The IANA zone a cron cadence is evaluated in (the task's own, else the scheduler's default);
  // empty for other cadences. Not in settings: Backstage's settings_json has no zone.
  std::string time_zone{};
};

// One task as the REST listing shows it: the descriptor, the task's state (cluster-wide for
// global tasks, from the database) and this process's worker state. Either state may be unknown
// (JSON null) when there is no database row or no worker.
struct TaskListing {
  TaskDescriptor descriptor;
  std::optional<TaskState> task_state;
  std::optional<WorkerStatus> worker_state;
  // Set while the task is paused (Backstage's task_state shows a paused task as running).
  std::optional<TaskPause> pause;
};

// One run as GetRun reports it. Plain value type.
struct RunDetail {
  // The run as the history holds it, output tail included. For a live run, its exit code, signal,
  // HTTP status and output tail are what the run has reported so far.
  TaskRun run;
  // Whether the run is still going in this process (then `run` shows it as it is now).
  bool live = false;
  // Every byte the run has printed so far when live, else the size of run.finish.output_tail.
  std::uint64_t output_bytes = 0;
};

class SchedulerService;

// A schedule waiting for its function: Run() registers the task. Backstage's
// SchedulerServiceTaskRunner. Holds a reference to its scheduler, which must outlive it.
class ScheduledTaskRunner {
 public:
  ScheduledTaskRunner(SchedulerService& scheduler, ScheduleDefinition schedule)
      : scheduler_(&scheduler), schedule_(std::move(schedule)) {}

  // Registers the invocation with this runner's schedule (see SchedulerService::ScheduleTask).
  Status Run(TaskInvocation invocation);

 private:
  SchedulerService* scheduler_;
  ScheduleDefinition schedule_;
};

// One plugin's scheduler. Thread-safe: any thread may call any method.
class SchedulerService {
 public:
  virtual ~SchedulerService() = default;

  // Registers and starts a task. For global tasks the database row is written before this returns.
  // Errors: kInvalidArgument for an invalid id ("{id} is not a valid ID, expected non-empty
  // string") or schedule (naming the field); kConflict if this process already has an active task
  // with that id; kUnavailable if the database cannot be reached.
  virtual Status ScheduleTask(TaskDefinition task) = 0;

  // Registers and starts several tasks, for plugins that register many at once: the real
  // scheduler validates all of them first and writes the global ones in one database statement,
  // all or nothing (if any definition is invalid, repeats an id, or conflicts, none is registered
  // and the error names the task). Errors: as ScheduleTask. The default calls ScheduleTask for each
  // task in order and stops at the first error (the tasks before it stay registered).
  virtual Status ScheduleTasks(std::vector<TaskDefinition> tasks);

  // Registers a task, or gives a task registered in this process a new definition (a config
  // reload): a global task's row is rewritten as a registration does; the new schedule, timeout
  // and function apply from the task's next run, and a run in progress goes on with the old ones.
  // Errors: as ScheduleTask; kFailedPrecondition when the task is registered with another scope.
  // The default is kUnimplemented.
  virtual Status RescheduleTask(TaskDefinition task);

  // Stops scheduling a task registered in this process (a config reload removed it): no further
  // runs here; a run in progress is not interrupted, and the task is gone once it ends. The row of
  // a global task stays, as when a process stops. Errors: kNotFound "Task {id} is not scheduled
  // in this process". The default is kUnimplemented.
  virtual Status UnscheduleTask(std::string_view id);

  // Runs a task as soon as possible: a local task of this process first, else the database row
  // (so a global task registered only on another host can be triggered).
  // Errors: kNotFound "Task {id} does not exist"; kConflict "Task {id} is currently running";
  // kUnavailable.
  virtual Status TriggerTask(std::string_view id) = 0;
  // TriggerTask on behalf of a traced caller (a REST request with a `traceparent` header): when
  // the scheduler traces runs, the run it starts on this host for the trigger is a child span of
  // `caller`. The default ignores `caller`.
  virtual Status TriggerTask(std::string_view id, const TraceContext& caller);

  // Stops the current run of a task: local first, else the database row.
  // Errors: kNotFound "Task {id} does not exist"; kConflict "Task {id} is not running";
  // kUnavailable.
  virtual Status CancelTask(std::string_view id) = 0;

  // Pauses a global task on every host that shares its table, Backstage workers included
  // (docs/adr/0013-pausing-a-task-in-backstages-row.md): no run starts until ResumeTask or
  // `request.until`. Pausing a paused task replaces its reason and until. A run in progress goes
  // on, and the pause takes effect when it ends (ListTasks shows it pending meanwhile); with
  // `request.cancel_run` that run is also cancelled, as CancelTask does. Errors: kNotFound
  // "Task {id} does not exist"; kConflict for a local task; kInvalidArgument naming `until`,
  // `by` or `reason`; kUnavailable. The default is kUnimplemented.
  virtual Status PauseTask(std::string_view id, const PauseRequest& request);

  // Resumes a paused task; a slot it missed while paused runs at once. Errors: kNotFound;
  // kConflict "Task {id} is not paused", or for a local task; kUnavailable. The default is
  // kUnimplemented.
  virtual Status ResumeTask(std::string_view id);

  // Applies a request sent with an idempotency key (a REST trigger, cancel, pause or resume) at
  // most once per key, as RequestKeys::ApplyOnce does: `apply` (which calls this scheduler) runs
  // in one transaction with the key's answer, and a request sent again with the key gets the
  // first one's answer without being applied. Called on the request's thread. The default, for a
  // scheduler without a database, runs `apply` each time and keeps nothing.
  virtual Result<KeyedOutcome> ApplyOnce(const KeyedRequest& request,
                                         const std::function<Result<KeptAnswer>()>& apply);

  // Returns the tasks registered in this process, in registration order.
  virtual std::vector<TaskDescriptor> GetScheduledTasks() const = 0;

  // Returns the REST listing of this process's tasks. Errors: kUnavailable.
  virtual Result<std::vector<TaskListing>> ListTasks() const = 0;

  // Returns up to `limit` (1..kMaxRunPageSize) runs of a task, newest start first, older than
  // `before`: an earlier page's next_cursor, or a run id. Output tails are left empty (GetRun has
  // them). Runs of Backstage workers sharing the task table are not in the history.
  // Errors: kInvalidArgument naming `limit` or `before`; kNotFound "Task {id} does not exist" when
  // the task has no runs and is neither registered here nor in the task table;
  // kUnimplemented, saying why and how to turn it on, when the scheduler keeps no run history
  // (the default); kUnavailable.
  virtual Result<RunPage> GetTaskRuns(std::string_view task_id, int limit,
                                      const std::optional<std::string>& before) const;

  // Returns one run with its output tail; a run still going in this process with what it has
  // reported so far. Errors: kNotFound "Run {id} does not exist"; kUnimplemented when the
  // scheduler keeps no run history (the default); kUnavailable.
  virtual Result<RunDetail> GetRun(std::string_view run_id) const;

  // Returns a runner that registers tasks with `schedule`.
  ScheduledTaskRunner CreateScheduledTaskRunner(ScheduleDefinition schedule) {
    return ScheduledTaskRunner(*this, std::move(schedule));
  }
};

// Returns InvalidArgument "{id} is not a valid ID, expected non-empty string" when `id` is empty
// or only whitespace (Backstage's validateId), else OK.
Status ValidateTaskId(std::string_view id);

}  // namespace stagehand
