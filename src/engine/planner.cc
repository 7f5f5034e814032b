#include "engine/planner.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "engine/planner_internal.h"
#include "stagehand/time/duration.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::engine_internal {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using Phase = PlannedTask::Phase;

std::string StopOutcome(StopReason reason, milliseconds timeout) {
  switch (reason) {
    case StopReason::kNone:
      return {};
    case StopReason::kTimeout:
      return "timed out after " + FormatShortDuration(timeout);
    case StopReason::kCancel:
      return "cancelled";
    case StopReason::kLeaseLost:
      return "lost its claim";
    case StopReason::kShutdown:
      return "interrupted by shutdown";
    case StopReason::kUnscheduled:
      return "stopped because the task was unscheduled";
  }
  return {};
}

bool SlotMissed(const std::optional<milliseconds>& window, nanoseconds late) {
  return window && late > *window + kCatchUpGrace;
}

std::optional<milliseconds> RetryAfter(const std::optional<RetryPolicy>& policy, StopReason reason,
                                       int attempt, std::uint64_t seed) {
  if (!policy || (reason != StopReason::kNone && reason != StopReason::kTimeout) ||
      attempt > policy->attempts) {
    return std::nullopt;
  }
  return RetryDelay(*policy, attempt, seed);
}

RunOutcome OutcomeOf(StopReason reason, bool failed) {
  if (!failed) return RunOutcome::kSucceeded;
  switch (reason) {
    case StopReason::kNone:
      return RunOutcome::kFailed;
    case StopReason::kTimeout:
      return RunOutcome::kTimedOut;
    case StopReason::kCancel:
    case StopReason::kShutdown:
    case StopReason::kUnscheduled:
      return RunOutcome::kCancelled;
    case StopReason::kLeaseLost:
      return RunOutcome::kFenced;
  }
  return RunOutcome::kFailed;
}

Planner::Planner(Options options, RunSlots& slots, MonoTime now)
    : options_(std::move(options)),
      slots_(slots),
      safety_interval_(options_.engine.poll_interval),
      next_safety_poll_(now),
      next_sweep_(options_.engine.janitor_interval.count() > 0 ? now : kMonoInfinity),
      next_prune_(now + options_.first_prune_delay),
      next_registration_refresh_(now + options_.registration_refresh_interval) {}

bool Planner::PruneDue(MonoTime now) {
  if (now < next_prune_) return false;
  next_prune_ = now + options_.prune_interval;
  return true;
}

std::vector<std::string> Planner::RegistrationRefreshDue(MonoTime now) {
  std::vector<std::string> ids;
  if (now < next_registration_refresh_) return ids;
  next_registration_refresh_ = now + options_.registration_refresh_interval;
  for (const auto& [id, task] : tasks_) {
    if (task->global() && task->phase != Phase::kRegistering && task->phase != Phase::kFinished) {
      ids.push_back(id);
    }
  }
  return ids;
}

// ---------------------------------------------------------------------------------------------
// Registration.

Result<TaskPtr> Planner::MakeTask(EngineTask def, const std::string& plugin_id) const {
  const bool global = def.scope == TaskScope::kGlobal;
  if (global && !options_.has_store) {
    return UnavailableError("plugin '" + plugin_id +
                            "' has no database, so it cannot schedule global task " + def.id);
  }
  auto task = std::make_shared<PlannedTask>();
  task->def = std::move(def);
  if (!global) task->local = std::make_unique<PlannedTask::Local>();
  return task;
}

Result<TaskPtr> Planner::MakeSuccessor(EngineTask def, const std::string& plugin_id) const {
  if (shutting_down_) {
    return UnavailableError("the scheduler of plugin '" + plugin_id + "' is shutting down");
  }
  const PlannedTask* current = Find(def.id);
  if (current == nullptr || current->phase == Phase::kRegistering ||
      current->phase == Phase::kFinished) {
    return NotFoundError("Task " + def.id + " is not scheduled in this process");
  }
  if (current->def.scope != def.scope) {
    return FailedPreconditionError("Task " + def.id + " is " +
                                   std::string(TaskScopeName(current->def.scope)) +
                                   "; its scope cannot change while it is scheduled");
  }
  return MakeTask(std::move(def), plugin_id);
}

Status Planner::Reserve(const std::vector<TaskPtr>& tasks, const std::string& plugin_id) {
  if (shutting_down_) {
    return UnavailableError("the scheduler of plugin '" + plugin_id + "' is shutting down");
  }
  std::set<std::string_view> seen;
  for (const TaskPtr& task : tasks) {
    const std::string& id = task->def.id;
    auto it = tasks_.find(id);
    if ((it != tasks_.end() && it->second->phase != Phase::kFinished) || !seen.insert(id).second) {
      return ConflictError("Task " + id + " is already scheduled in this process");
    }
  }
  for (const TaskPtr& task : tasks) tasks_[task->def.id] = task;
  return Status::Ok();
}

void Planner::Unreserve(const std::vector<TaskPtr>& tasks) {
  for (const TaskPtr& task : tasks) {
    auto it = tasks_.find(task->def.id);
    if (it != tasks_.end() && it->second == task) tasks_.erase(it);
  }
}

void Planner::Activate(PlannedTask& task, const std::optional<WallTime>& row_next,
                       std::optional<std::int64_t> row_version, WallTime db_now, MonoTime mono_ref,
                       MonoTime now, WallTime wall_now) {
  if (task.global()) {
    // Polls leave the row out while it stays as written here.
    task.known_version = row_version;
    task.known_next = row_next;
    task.known_settings.reset();
  }
  if (task.def.has_initial_delay) {
    task.phase = Phase::kInitialWait;
    task.wake_at = now + task.def.initial_delay;
    if (!task.global()) {
      task.local->state = TaskState{};
      task.local->state.starts_at = FormatRestTime(wall_now + task.def.initial_delay, kRestUtc);
    }
    return;
  }
  task.phase = Phase::kWaiting;
  if (task.global()) {
    task.wake_at =
        row_next ? MonoFromDb(RowStart(task, *row_next), db_now, mono_ref) : kMonoInfinity;
  } else {
    const bool manual = task.def.schedule.settings.cadence.is_manual();
    task.wake_at = manual ? kMonoInfinity : now + task.def.schedule.jitter_offset;
  }
}

// ---------------------------------------------------------------------------------------------
// Queries and operator requests.

PlannedTask* Planner::Find(const std::string& id) const {
  auto it = tasks_.find(id);
  return it == tasks_.end() ? nullptr : it->second.get();
}

bool Planner::IsLocal(const std::string& id) const {
  const PlannedTask* task = Find(id);
  return task != nullptr && !task->global();
}

std::optional<TaskState> Planner::LocalTaskState(const std::string& id) const {
  const PlannedTask* task = Find(id);
  if (task == nullptr || task->global()) return std::nullopt;
  return task->local->state;
}

std::optional<WorkerStatus> Planner::WorkerState(const std::string& id) const {
  const PlannedTask* task = Find(id);
  if (task == nullptr) return std::nullopt;
  if (task->phase == Phase::kInitialWait) return WorkerStatus::kInitialWait;
  return task->phase == Phase::kRunning || task->run ? WorkerStatus::kRunning : WorkerStatus::kIdle;
}

std::shared_ptr<RunReport> Planner::ReportOf(const std::string& run_id) const {
  for (const auto& [id, task] : tasks_) {
    if (task->run && task->run->run_id == run_id) return task->run->report;
  }
  return nullptr;
}

std::vector<std::pair<TaskPtr, RunPtr>> Planner::Runs() const {
  std::vector<std::pair<TaskPtr, RunPtr>> runs;
  for (const auto& [id, task] : tasks_) {
    if (task->run) runs.emplace_back(task, task->run);
  }
  return runs;
}

TraceContext NewRunTrace(const std::optional<SamplerConfig>& sampler, const TraceContext& caller) {
  if (!sampler) return {};
  const TraceContext* parent = caller.valid() ? &caller : nullptr;
  TraceContext trace;
  trace.trace_id = parent != nullptr ? parent->trace_id : NewTraceId();
  trace.span_id = NewSpanId();
  trace.flags = ShouldSample(*sampler, trace.trace_id, parent) ? 0x01 : 0x00;
  if (parent != nullptr) trace.trace_state = parent->trace_state;
  return trace;
}

TraceContext Planner::TriggerCaller(const PlannedTask& task, MonoTime now) {
  return now - task.trigger_caller_at <= kTriggerCallerLifetime ? task.trigger_caller
                                                                : TraceContext{};
}

Planner::LocalRequest Planner::TriggerLocal(const std::string& id, MonoTime now,
                                            const TraceContext& caller) {
  if (shutting_down_) return LocalRequest::kShuttingDown;
  PlannedTask* task = Find(id);
  if (task == nullptr || task->global() || task->phase == Phase::kFinished) {
    return LocalRequest::kNotLocal;
  }
  if (task->phase == Phase::kRunning || task->run) return LocalRequest::kRunning;
  task->phase = Phase::kWaiting;
  task->wake_at = now;
  task->manual_pending = true;
  task->trigger_caller = caller;
  task->trigger_caller_at = now;
  return LocalRequest::kDone;
}

void Planner::NoteTriggerCaller(const std::string& id, const TraceContext& caller, MonoTime now) {
  PlannedTask* task = Find(id);
  if (task == nullptr) return;
  task->trigger_caller = caller;
  task->trigger_caller_at = now;
}

bool Planner::TriggeredInStore(const std::string& id) {
  PlannedTask* task = Find(id);
  if (task == nullptr) return false;
  task->manual_pending = true;
  if (task->phase != Phase::kWaiting) return false;
  task->poll_requested = true;
  return true;
}

Planner::LocalRequest Planner::CancelLocal(const std::string& id, RunPtr* run, bool* kill) {
  PlannedTask* task = Find(id);
  if (task == nullptr || task->global() || task->phase == Phase::kFinished) {
    return LocalRequest::kNotLocal;
  }
  if (!task->run) return LocalRequest::kNotRunning;
  *run = task->run;
  // A cancel of a run that is already stopping (timed out, say) ends it without grace.
  *kill = task->run->stop.stop_requested();
  MarkStopping(*task->run, StopReason::kCancel);
  return LocalRequest::kDone;
}

RunPtr Planner::CancelledInStore(const std::string& id, bool* kill) {
  PlannedTask* task = Find(id);
  if (task == nullptr || !task->run || !task->run->ours) return nullptr;
  RunPtr run = task->run;
  run->cancel_requested = true;
  *kill = run->stop.stop_requested();
  MarkStopping(*run, StopReason::kCancel);
  return run;
}

RunPtr Planner::StopRecurrence(const std::string& id, bool* finished_now) {
  *finished_now = false;
  PlannedTask* task = Find(id);
  if (task == nullptr) return nullptr;
  task->recurrence_stopped = true;
  if (task->run) {
    MarkStopping(*task->run, StopReason::kUnscheduled);
    return task->run;
  }
  if (task->phase != Phase::kFinished) {
    task->phase = Phase::kFinished;
    *finished_now = true;
  }
  return nullptr;
}

bool Planner::Retire(const std::string& id, bool* finished_now) {
  *finished_now = false;
  PlannedTask* task = Find(id);
  if (task == nullptr || task->recurrence_stopped || task->phase == Phase::kRegistering ||
      task->phase == Phase::kFinished) {
    return false;
  }
  task->recurrence_stopped = true;
  task->successor.reset();
  if (!task->run) {
    task->phase = Phase::kFinished;
    *finished_now = true;
  }
  return true;
}

void Planner::Redefine(PlannedTask& task, TaskPtr successor,
                       const std::optional<WallTime>& row_next,
                       std::optional<std::int64_t> row_version, WallTime db_now, MonoTime mono_ref,
                       MonoTime now, WallTime wall_now) {
  task.recurrence_stopped = false;
  task.successor = std::move(successor);
  if (task.global()) {
    task.known_version = row_version;
    task.known_next = row_next;
  }
  if (task.run) return;
  AdoptSuccessor(task);
  if (task.phase == Phase::kInitialWait) return;
  task.phase = Phase::kWaiting;
  if (task.global()) {
    task.wake_at =
        row_next ? MonoFromDb(RowStart(task, *row_next), db_now, mono_ref) : kMonoInfinity;
    return;
  }
  task.wake_at = std::min(task.wake_at, LocalNextWake(task, now, now, wall_now));
  task.local->state.starts_at =
      task.wake_at == kMonoInfinity
          ? std::nullopt
          : std::optional(FormatRestTime(wall_now + (task.wake_at - now), &options_.default_zone));
}

// ---------------------------------------------------------------------------------------------
// Shutdown.

std::vector<RunPtr> Planner::BeginShutdown() {
  shutting_down_ = true;
  std::vector<RunPtr> runs;
  for (const auto& [id, task] : tasks_) {
    if (!task->run) continue;
    MarkStopping(*task->run, StopReason::kShutdown);
    runs.push_back(task->run);
  }
  return runs;
}

WallTime Planner::RowStart(const PlannedTask& task, WallTime next) const {
  const Cadence& own = task.def.schedule.settings.cadence;
  const bool own_cadence = !task.known_settings || task.known_settings->cadence == own;
  return SlotStart(own_cadence ? own.cron() : nullptr, task.def.schedule.zone, next,
                   task.def.schedule.jitter_offset);
}

}  // namespace stagehand::engine_internal
