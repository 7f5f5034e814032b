// A scheduler for testing plugins, with the semantics of Backstage's MockSchedulerService: nothing
// runs by itself; TriggerTask runs a task inline on the calling thread; WaitForTask waits for the
// next completed run; cancelling hands the next run a fresh stop token.
#pragma once

#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "stagehand/service/scheduler.h"

namespace stagehand::testing {

struct MockSchedulerOptions {
  // RunStartup() does nothing when set.
  bool skip_task_run_on_startup = false;
  // RunStartup() also runs tasks with a manual frequency.
  bool include_manual_tasks_on_startup = false;
  // RunStartup() also runs tasks that have an initial delay.
  bool include_initial_delayed_tasks_on_startup = false;
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
  // Signals the running invocation's stop token; the next trigger gets a fresh one.
  // Errors: kNotFound "Task {id} not found"; kConflict "Task {id} is not running".
  Status CancelTask(std::string_view id) override;
  // The registered tasks, one per id, in first-registration order.
  std::vector<TaskDescriptor> GetScheduledTasks() const override;
  // Every task with no task state and the worker state idle or running.
  Result<std::vector<TaskListing>> ListTasks() const override;

  // Returns a future that becomes ready with the outcome of the next completed run of `id`.
  std::shared_future<Status> WaitForTask(std::string_view id);

  // What Backstage's mock does in a plugin startup hook: triggers every task in parallel and waits
  // for all, skipping manual and initially delayed tasks unless the options include them.
  void RunStartup();
  // What the mock's shutdown hook does: signals every task's stop token.
  void Shutdown();

 private:
  struct Entry;
  mutable std::mutex mu_;
  MockSchedulerOptions options_;
  std::vector<std::string> order_;
  std::map<std::string, std::shared_ptr<Entry>, std::less<>> tasks_;
};

}  // namespace stagehand::testing
