// A scheduler for testing plugins, with the semantics of Backstage's MockSchedulerService: nothing
// runs by itself; TriggerTask runs a task inline on the calling thread; WaitForTask waits for the
// next completed run; cancelling hands the next run a fresh stop token. Like the real scheduler it
// records every run it executes (GetTaskRuns, GetRun), so tests can assert on outcomes. A task's
// `retry` is kept but not acted on: a failed run is not retried (a test triggers again).
#pragma once

#include <cstddef>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stagehand/base/mutex.h"
#include "stagehand/model/task_run.h"
#include "stagehand/service/scheduler.h"
#include "stagehand/time/clock.h"

namespace stagehand::testing {

struct MockSchedulerOptions {
  // RunStartup() does nothing when set.
  bool skip_task_run_on_startup = false;
  // RunStartup() also runs tasks with a manual frequency.
  bool include_manual_tasks_on_startup = false;
  // RunStartup() also runs tasks that have an initial delay.
  bool include_initial_delayed_tasks_on_startup = false;
  // Gives the runs' start and end times. The system clock when null; must outlive the mock.
  Clock* clock = nullptr;
};

// Thread-safe.
class MockScheduler final : public SchedulerService {
 public:
  explicit MockScheduler(MockSchedulerOptions options = {});
  ~MockScheduler() override;

  // Stores the task by id (a second registration replaces the first). Runs nothing.
  Status ScheduleTask(TaskDefinition task) override;
  // Runs the task inline and returns when it is done; returns at once if it is already running.
  // A failing task does not make TriggerTask fail (WaitForTask reports it).
  // Errors: kNotFound "Task {id} not found".
  Status TriggerTask(std::string_view id) override;
  using SchedulerService::TriggerTask;  // a caller's trace context is ignored
  // Signals the running invocation's stop token; the next trigger gets a fresh one.
  // Errors: kNotFound "Task {id} not found"; kConflict "Task {id} is not running".
  Status CancelTask(std::string_view id) override;
  // Pauses a registered global task: TriggerTask answers kConflict "Task {id} is paused" and
  // RunStartup skips it until ResumeTask. (`until` is kept and listed, not acted on: nothing runs
  // by itself in the mock.) A running task's pause is pending until its run returns; with
  // `cancel_run`, that run's stop token is signalled as CancelTask does. Errors: kNotFound
  // "Task {id} not found"; kConflict for a local task.
  Status PauseTask(std::string_view id, const PauseRequest& request) override;
  // Errors: kNotFound "Task {id} not found"; kConflict "Task {id} is not paused".
  Status ResumeTask(std::string_view id) override;
  // The registered tasks, one per id, in first-registration order.
  std::vector<TaskDescriptor> GetScheduledTasks() const override;
  // Every task with no task state, the worker state idle or running, and its pause.
  Result<std::vector<TaskListing>> ListTasks() const override;
  // The runs this mock executed, every one kept, as the real scheduler records them: a fresh run
  // id, trigger manual (TriggerTask) or schedule (RunStartup), attempt 1, no host, no slot; the
  // start and end on the options' clock; outcome succeeded, failed, or cancelled when CancelTask
  // or Shutdown signalled the run (its error then says so, as the engine's do); what the function
  // reported through RunControl::report. `before` is a run id (next_cursor is one).
  // Errors: kInvalidArgument naming `limit` or `before`; kNotFound "Task {id} not found" for a
  // task neither registered nor run.
  Result<RunPage> GetTaskRuns(std::string_view task_id, int limit,
                              const std::optional<std::string>& before) const override;
  // A run still going is live, with what it has reported so far. Errors: kNotFound "Run {id} does
  // not exist".
  Result<RunDetail> GetRun(std::string_view run_id) const override;

  // Returns a future that becomes ready with the outcome of the next completed run of `id`.
  std::shared_future<Status> WaitForTask(std::string_view id);

  // What Backstage's mock does in a plugin startup hook: triggers every task in parallel and waits
  // for all, skipping manual and initially delayed tasks unless the options include them.
  void RunStartup();
  // What the mock's shutdown hook does: signals every task's stop token.
  void Shutdown();

 private:
  struct Entry;
  // Runs the task inline, recording the run with `trigger`. Errors: kNotFound.
  Status Run(std::string_view id, RunTrigger trigger);
  // Returns the index in runs_ of `run_id`, or nullopt.
  std::optional<std::size_t> FindRunLocked(std::string_view run_id) const STAGEHAND_REQUIRES(mu_);

  mutable Mutex mu_;
  MockSchedulerOptions options_;
  Clock& clock_;
  std::vector<std::string> order_ STAGEHAND_GUARDED_BY(mu_);
  // An entry's run state (running, pause, stop, waiter, report) is also read and written under mu_.
  std::map<std::string, std::shared_ptr<Entry>, std::less<>> tasks_ STAGEHAND_GUARDED_BY(mu_);
  std::vector<TaskRun> runs_ STAGEHAND_GUARDED_BY(mu_);  // oldest start first
  bool shut_down_ STAGEHAND_GUARDED_BY(mu_) = false;
};

}  // namespace stagehand::testing
