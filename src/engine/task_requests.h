// An operator's requests on an engine's tasks (TaskEngine): trigger, cancel, pause and resume.
// A local task's is answered in the planner alone; a global task's is written to the store, and
// the planner then hears of it. What a request means for a task is the Planner's (TriggerLocal,
// CancelLocal, TriggeredInStore, CancelledInStore); this class words the answers.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "engine/planner.h"
#include "engine/planner_access.h"
#include "stagehand/base/status.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand::engine_internal {

// The engine's side of the requests. Called on the requester's thread, holding no lock.
class TaskRequestsEngine : public PlannerAccess {
 public:
  // This host changed the row of global task `id`: the dispatcher polls it before any claim.
  virtual void RowChanged(const std::string& id) = 0;
};

struct TaskRequestsContext {
  TaskStore* store = nullptr;  // null when the plugin has only local tasks
  Clock* clock = nullptr;
  std::string plugin_id;
  // A cancel's or a pause's hold on a running row (EngineOptions::lease).
  std::chrono::milliseconds lease{0};
};

// Thread-safe. Errors are SchedulerService's (TriggerTask, CancelTask, PauseTask, ResumeTask).
class TaskRequests {
 public:
  TaskRequests(TaskRequestsEngine& engine, TaskRequestsContext context);

  // Local first, then the store. `caller`, when valid, is the trigger's trace context: the run
  // this host starts for it is its child.
  Status Trigger(const std::string& id, const TraceContext& caller);
  // Local first, then the store.
  Status Cancel(const std::string& id);
  // Global tasks, in the store.
  Status Pause(const std::string& id, const PauseRequest& request);
  Status Resume(const std::string& id);

 private:
  // `change` writes the row of global task `id`, then the dispatcher re-reads it. Errors:
  // kConflict for a local task; kNotFound without a store; `change`'s.
  Status ChangeInStore(const std::string& id, const std::function<Status()>& change);
  Status ShuttingDown() const;

  TaskRequestsEngine& engine_;
  TaskRequestsContext context_;
  Clock& clock_;
};

}  // namespace stagehand::engine_internal
