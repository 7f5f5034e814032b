#include "engine/task_requests.h"

#include <utility>

#include "engine/dispatch_rounds.h"

namespace stagehand::engine_internal {

using Wake = PlannerAccess::Wake;
using LocalRequest = Planner::LocalRequest;

TaskRequests::TaskRequests(TaskRequestsEngine& engine, TaskRequestsContext context)
    : engine_(engine), context_(std::move(context)), clock_(*context_.clock) {}

Status TaskRequests::ShuttingDown() const {
  return UnavailableError("the scheduler of plugin '" + context_.plugin_id + "' is shutting down");
}

Status TaskRequests::Trigger(const std::string& id, const TraceContext& caller) {
  LocalRequest local = LocalRequest::kNotLocal;
  engine_.WithPlanner(
      [&](Planner& planner) {
        local = planner.TriggerLocal(id, clock_.MonoNow(), caller);
        // Before the store's trigger: this host may claim the run before Trigger returns. An
        // untraced trigger clears an earlier caller whose run another host took.
        if (local == LocalRequest::kNotLocal && context_.store != nullptr) {
          planner.NoteTriggerCaller(id, caller, clock_.MonoNow());
        }
      },
      Wake::kNone);
  switch (local) {
    case LocalRequest::kShuttingDown:
      return ShuttingDown();
    case LocalRequest::kRunning:
      return ConflictError("Task " + id + " is currently running");
    case LocalRequest::kDone:
      engine_.WithPlanner([](Planner&) {}, Wake::kTimer);
      return Status::Ok();
    default:
      break;
  }
  if (context_.store == nullptr) return NotFoundError("Task " + id + " does not exist");
  STAGEHAND_RETURN_IF_ERROR(context_.store->Trigger(id, caller));
  bool poll = false;
  engine_.WithPlanner([&](Planner& planner) { poll = planner.TriggeredInStore(id); }, Wake::kNone);
  if (poll) engine_.WithPlanner([](Planner&) {}, Wake::kDispatcher);
  return Status::Ok();
}

Status TaskRequests::Cancel(const std::string& id) {
  RunPtr run;
  bool kill = false;
  LocalRequest local = LocalRequest::kNotLocal;
  engine_.WithPlanner([&](Planner& planner) { local = planner.CancelLocal(id, &run, &kill); },
                      Wake::kNone);
  if (local == LocalRequest::kNotRunning) return ConflictError("Task " + id + " is not running");
  if (local == LocalRequest::kDone && run) {
    DispatchRounds::SignalStop(*run, kill);
    return Status::Ok();
  }
  if (context_.store == nullptr) return NotFoundError("Task " + id + " does not exist");
  STAGEHAND_RETURN_IF_ERROR(context_.store->Cancel(id, context_.lease));
  run = nullptr;
  engine_.WithPlanner([&](Planner& planner) { run = planner.CancelledInStore(id, &kill); },
                      Wake::kNone);
  if (run) DispatchRounds::SignalStop(*run, kill);
  return Status::Ok();
}

Status TaskRequests::Pause(const std::string& id, const PauseRequest& request) {
  STAGEHAND_RETURN_IF_ERROR(
      ChangeInStore(id, [&] { return context_.store->Pause(id, request, context_.lease); }));
  if (!request.cancel_run) return Status::Ok();
  const Status cancelled = Cancel(id);
  // No run in progress (or it ended meanwhile): the task is paused, which is all that is left.
  return cancelled.code() == StatusCode::kConflict ? Status::Ok() : cancelled;
}

Status TaskRequests::Resume(const std::string& id) {
  return ChangeInStore(id, [&] { return context_.store->Resume(id); });
}

Status TaskRequests::ChangeInStore(const std::string& id, const std::function<Status()>& change) {
  bool local = false;
  engine_.WithPlanner([&](Planner& planner) { local = planner.IsLocal(id); }, Wake::kNone);
  if (local) {
    return ConflictError("Task " + id +
                         " is local: it runs on every host by itself, so only global tasks can "
                         "be paused and resumed");
  }
  if (context_.store == nullptr) return NotFoundError("Task " + id + " does not exist");
  STAGEHAND_RETURN_IF_ERROR(change());
  engine_.RowChanged(id);
  return Status::Ok();
}

}  // namespace stagehand::engine_internal
