#include "engine/task_engine.h"

#include <unistd.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "stagehand/base/host_name.h"
#include "stagehand/base/uuid.h"
#include "stagehand/time/duration.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::engine_internal {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using Phase = PlannedTask::Phase;

bool TaskEngine::RuntimeSlots::TryTake() {
  return engine_.runtime_->TryTakeRunSlot(engine_.handle_);
}

void TaskEngine::RuntimeSlots::Return() { engine_.runtime_->ReturnRunSlot(); }

bool TaskEngine::RuntimeSlots::Available() {
  return engine_.runtime_->RunSlotAvailable(engine_.handle_);
}

TaskEngine::TaskEngine(EngineContext context)
    : context_(std::move(context)),
      clock_(*context_.clock),
      reporter_(context_.logger ? context_.logger : NullLogger(),
                context_.observer ? context_.observer : std::make_shared<SchedulerObserver>(),
                context_.plugin_id) {
  runtime_ = context_.runtime != nullptr
                 ? context_.runtime
                 : std::make_shared<EngineRuntime>(clock_, 1, context_.options.max_concurrency);
  STAGEHAND_CHECK(&runtime_->clock() == &clock_);
  host_ = context_.host.empty() ? LocalHostName() : context_.host;
  pid_ = static_cast<std::int64_t>(getpid());
  Planner::Options options;
  options.engine = context_.options;
  options.has_store = context_.store != nullptr;
  options.default_zone = context_.default_zone;
  options.claim_order_salt = std::hash<std::string>{}(NewUuidV4());
  if (context_.store != nullptr) {
    // Half a lease: a renewal that gets no answer fails in time to be retried before the run
    // fences itself, and a release or poll never holds a thread (or shutdown) much longer.
    context_.store->SetCallTimeout(context_.options.lease / 2);
    notifications_ =
        context_.store->Listen([this](const StoreEvent& event) { OnStoreEvent(event); });
    options.store_notifies = notifications_ != nullptr && notifications_->announces_writes();
    history_ = context_.options.record_history ? context_.store->history() : nullptr;
    if (history_ != nullptr) options.max_output_bytes = history_->limits().max_output_bytes;
  }
  options.report_runs = history_ != nullptr;
  history_queue_ = std::make_unique<HistoryQueue>(history_, reporter_.shared_log());
  ReleaseEngine& self = *this;
  releaser_ = std::make_unique<Releaser>(
      self, ReleaserContext{context_.store, &clock_, &reporter_, context_.options.replay_window,
                            history_ != nullptr, host_, pid_});
  rounds_ = std::make_unique<DispatchRounds>(
      self, DispatchRoundsContext{context_.store, &clock_, &reporter_, releaser_.get(),
                                  context_.options.lease, host_, pid_});
  registrar_ = std::make_unique<Registrar>(
      self, context_.store, context_.store ? context_.store->registrations() : nullptr, clock_,
      reporter_, host_);
  MutexLock lock(mu_);
  planner_ = std::make_unique<Planner>(std::move(options), slots_, clock_.MonoNow());
  handle_ = runtime_->Add(this);
}

TaskEngine::~TaskEngine() { Shutdown(); }

void TaskEngine::KickLocked(bool timer, bool dispatcher) {
  kicked_timer_ = kicked_timer_ || timer;
  kicked_dispatcher_ = kicked_dispatcher_ || dispatcher;
  if (runtime_ != nullptr) runtime_->Wake(handle_, timer, dispatcher);
}

MonoTime TaskEngine::Step(Lane lane) { return lane == kTimer ? TimerStep() : DispatcherStep(); }

TraceContext TaskEngine::TraceOf(const TraceContext& caller) const {
  const std::optional<SamplerConfig>& sampler = context_.options.trace_runs;
  if (!sampler) return {};
  const TraceContext* parent = caller.valid() ? &caller : nullptr;
  TraceContext trace;
  trace.trace_id = parent != nullptr ? parent->trace_id : NewTraceId();
  trace.span_id = NewSpanId();
  trace.flags = ShouldSample(*sampler, trace.trace_id, parent) ? 0x01 : 0x00;
  if (parent != nullptr) trace.trace_state = parent->trace_state;
  return trace;
}

RunFinish TaskEngine::FinishOf(const PlannedRun& run, const Outcome& outcome) {
  RunFinish finish;
  finish.outcome = OutcomeOf(outcome.reason, outcome.error.has_value());
  finish.error_json = outcome.error;
  if (run.report != nullptr) {
    RunReport::Snapshot report = run.report->Read();
    finish.exit_code = report.exit_code;
    finish.signal = report.signal;
    finish.http_status = report.http_status;
    finish.output_tail = std::move(report.output_tail);
  }
  return finish;
}

void TaskEngine::QueueHistory(std::optional<RunStart> start, std::optional<RunEnd> end) {
  if (!history_queue_->Queue(std::move(start), std::move(end))) return;
  MutexLock lock(mu_);
  KickLocked(/*timer=*/false, /*dispatcher=*/true);
}

bool TaskEngine::FlushHistory(bool prune) {
  if (history_queue_->Flush(prune)) return true;
  MutexLock lock(mu_);
  planner_->DatabaseFailed(clock_.MonoNow());
  return false;
}

std::optional<RunReport::Snapshot> TaskEngine::LiveRunReport(const std::string& run_id) const {
  std::shared_ptr<RunReport> report;
  {
    MutexLock lock(mu_);
    for (const auto& [task, run] : planner_->Runs()) {
      if (run->run_id == run_id) report = run->report;
    }
  }
  if (report == nullptr) return std::nullopt;
  return report->Read();
}

void TaskEngine::WatchCallerStop(const TaskPtr& task) {
  if (!task->def.stop.stop_possible()) return;
  // Constructed outside mu_: it runs the callback at once if stop was already requested.
  const std::string id = task->def.id;
  task->caller_stop = std::make_unique<std::stop_callback<std::function<void()>>>(
      task->def.stop, std::function<void()>([this, id] { StopRecurrence(id); }));
}

Status TaskEngine::Register(EngineTask def) {
  std::vector<EngineTask> one;
  one.push_back(std::move(def));
  return RegisterMany(std::move(one));
}

Status TaskEngine::RegisterMany(std::vector<EngineTask> defs) {
  std::vector<TaskPtr> tasks;
  tasks.reserve(defs.size());
  {
    MutexLock lock(mu_);
    for (EngineTask& def : defs) {
      STAGEHAND_ASSIGN_OR_RETURN(TaskPtr task,
                                 planner_->MakeTask(std::move(def), context_.plugin_id));
      tasks.push_back(std::move(task));
    }
    STAGEHAND_RETURN_IF_ERROR(planner_->Reserve(tasks, context_.plugin_id));
  }
  const auto unreserve = [&] {
    MutexLock lock(mu_);
    planner_->Unreserve(tasks);
  };

  // Read before the statement: a wake-up computed from it can only be early, never late.
  const MonoTime mono_ref = clock_.MonoNow();
  Result<Registrar::Rows> rows = registrar_->Upsert(tasks);
  if (!rows.ok()) {
    unreserve();
    return rows.status();
  }
  for (const TaskPtr& task : tasks) {
    reporter_.log().Info(
        "Registered scheduled task: " + task->def.id + ", " + task->def.schedule.settings.ToJson(),
        {{"task", task->def.id}});
  }
  {
    MutexLock lock(mu_);
    const MonoTime now = clock_.MonoNow();
    const WallTime wall_now = clock_.Now();
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      planner_->Activate(*tasks[i], rows->next[i], rows->version[i], rows->db_now, mono_ref, now,
                         wall_now);
    }
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  for (const TaskPtr& task : tasks) WatchCallerStop(task);
  return Status::Ok();
}

void TaskEngine::StopRecurrence(const std::string& id) {
  RunPtr run;
  bool finished_now = false;
  {
    MutexLock lock(mu_);
    run = planner_->StopRecurrence(id, &finished_now);
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  if (run) run->stop.request_stop();
  if (finished_now) reporter_.TaskFinished(id);
}

Status TaskEngine::Redefine(EngineTask def) {
  const std::string id = def.id;
  TaskPtr successor;
  {
    MutexLock lock(mu_);
    if (planner_->shutting_down()) {
      return UnavailableError("the scheduler of plugin '" + context_.plugin_id +
                              "' is shutting down");
    }
    const PlannedTask* current = planner_->Find(id);
    if (current == nullptr || current->phase == PlannedTask::Phase::kRegistering ||
        current->phase == PlannedTask::Phase::kFinished) {
      return NotFoundError("Task " + id + " is not scheduled in this process");
    }
    if (current->def.scope != def.scope) {
      return FailedPreconditionError("Task " + id + " is " +
                                     std::string(TaskScopeName(current->def.scope)) +
                                     "; its scope cannot change while it is scheduled");
    }
    STAGEHAND_ASSIGN_OR_RETURN(successor, planner_->MakeTask(std::move(def), context_.plugin_id));
  }
  const MonoTime mono_ref = clock_.MonoNow();
  STAGEHAND_ASSIGN_OR_RETURN(const Registrar::Rows rows, registrar_->Upsert({successor}));
  const std::string settings = successor->def.schedule.settings.ToJson();
  {
    MutexLock lock(mu_);
    // A claim in flight reads its tasks' definitions outside the lock.
    cv_.wait(lock.unique_lock(), [&]() STAGEHAND_REQUIRES(mu_) { return !claiming_; });
    PlannedTask* current = planner_->Find(id);
    if (current == nullptr || current->phase == PlannedTask::Phase::kFinished) {
      return NotFoundError("Task " + id + " is not scheduled in this process");
    }
    planner_->Redefine(*current, std::move(successor), rows.next[0], rows.version[0], rows.db_now,
                       mono_ref, clock_.MonoNow(), clock_.Now());
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  reporter_.log().Info("Redefined scheduled task: " + id + ", " + settings, {{"task", id}});
  return Status::Ok();
}

Status TaskEngine::Retire(const std::string& id) {
  bool found = false;
  bool finished_now = false;
  {
    MutexLock lock(mu_);
    found = planner_->Retire(id, &finished_now);
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  if (!found) return NotFoundError("Task " + id + " is not scheduled in this process");
  reporter_.log().Info(finished_now ? "Task worker finished: " + id
                                    : "Task " + id + " unscheduled; its run in progress goes on",
                       {{"task", id}});
  return Status::Ok();
}

Status TaskEngine::Trigger(const std::string& id, const TraceContext& caller) {
  {
    MutexLock lock(mu_);
    switch (planner_->TriggerLocal(id, clock_.MonoNow(), caller)) {
      case Planner::LocalRequest::kShuttingDown:
        return UnavailableError("the scheduler of plugin '" + context_.plugin_id +
                                "' is shutting down");
      case Planner::LocalRequest::kRunning:
        return ConflictError("Task " + id + " is currently running");
      case Planner::LocalRequest::kDone:
        KickLocked(/*timer=*/true, /*dispatcher=*/false);
        cv_.notify_all();
        return Status::Ok();
      default:
        break;
    }
  }
  if (context_.store == nullptr) return NotFoundError("Task " + id + " does not exist");
  {
    // Before the store's trigger: this host may claim the run before Trigger returns. An
    // untraced trigger clears an earlier caller whose run another host took.
    MutexLock lock(mu_);
    planner_->NoteTriggerCaller(id, caller, clock_.MonoNow());
  }
  STAGEHAND_RETURN_IF_ERROR(context_.store->Trigger(id, caller));
  {
    MutexLock lock(mu_);
    if (planner_->TriggeredInStore(id)) KickLocked(/*timer=*/false, /*dispatcher=*/true);
  }
  cv_.notify_all();
  return Status::Ok();
}

Status TaskEngine::Pause(const std::string& id, const PauseRequest& request) {
  STAGEHAND_RETURN_IF_ERROR(ChangeInStore(
      id, [&] { return context_.store->Pause(id, request, context_.options.lease); }));
  if (!request.cancel_run) return Status::Ok();
  const Status cancelled = Cancel(id);
  // No run in progress (or it ended meanwhile): the task is paused, which is all that is left.
  return cancelled.code() == StatusCode::kConflict ? Status::Ok() : cancelled;
}

Status TaskEngine::Resume(const std::string& id) {
  return ChangeInStore(id, [&] { return context_.store->Resume(id); });
}

Status TaskEngine::ChangeInStore(const std::string& id, const std::function<Status()>& change) {
  if (HasLocalTask(id)) {
    return ConflictError("Task " + id +
                         " is local: it runs on every host by itself, so only global tasks can "
                         "be paused and resumed");
  }
  if (context_.store == nullptr) return NotFoundError("Task " + id + " does not exist");
  STAGEHAND_RETURN_IF_ERROR(change());
  // The row changed under what this host knows of it: it is polled before any claim.
  OnStoreEvent(StoreEvent{StoreEvent::Kind::kUpsert, id});
  return Status::Ok();
}

Status TaskEngine::Cancel(const std::string& id) {
  RunPtr run;
  bool kill = false;
  {
    MutexLock lock(mu_);
    switch (planner_->CancelLocal(id, &run, &kill)) {
      case Planner::LocalRequest::kNotRunning:
        return ConflictError("Task " + id + " is not running");
      case Planner::LocalRequest::kDone:
        break;
      default:
        run = nullptr;
        break;
    }
  }
  if (run) {
    DispatchRounds::SignalStop(*run, kill);
    return Status::Ok();
  }
  if (context_.store == nullptr) return NotFoundError("Task " + id + " does not exist");
  STAGEHAND_RETURN_IF_ERROR(context_.store->Cancel(id, context_.options.lease));
  {
    MutexLock lock(mu_);
    run = planner_->CancelledInStore(id, &kill);
  }
  if (run) DispatchRounds::SignalStop(*run, kill);
  return Status::Ok();
}

bool TaskEngine::HasLocalTask(const std::string& id) const {
  MutexLock lock(mu_);
  const PlannedTask* task = planner_->Find(id);
  return task != nullptr && !task->global();
}

std::optional<TaskState> TaskEngine::LocalTaskState(const std::string& id) const {
  MutexLock lock(mu_);
  const PlannedTask* task = planner_->Find(id);
  if (task == nullptr || task->global()) return std::nullopt;
  return task->local->state;
}

std::optional<WorkerStatus> TaskEngine::WorkerState(const std::string& id) const {
  MutexLock lock(mu_);
  const PlannedTask* task = planner_->Find(id);
  if (task == nullptr) return std::nullopt;
  switch (task->phase) {
    case Phase::kInitialWait:
      return WorkerStatus::kInitialWait;
    case Phase::kRunning:
      return WorkerStatus::kRunning;
    default:
      return task->run ? WorkerStatus::kRunning : WorkerStatus::kIdle;
  }
}

bool TaskEngine::WaitIdleForTesting(std::chrono::milliseconds real_timeout) {
  SystemClock& real = SystemClock::Instance();
  const MonoTime deadline = real.MonoNow() + real_timeout;
  const auto engine_idle = [&]() STAGEHAND_REQUIRES(mu_) {
    if (threads_stopping_) return true;
    const MonoTime now = clock_.MonoNow();
    return dispatcher_parked_ && timer_parked_ && !kicked_dispatcher_ && !kicked_timer_ &&
           runs_outside_fn_ == 0 && dispatcher_deadline_ > now && timer_deadline_ > now;
  };
  // The engine is idle when its lanes are parked and the runtime's threads wait on the clock for
  // their deadlines (so that a manual clock knows them); checked in turn until both hold at once.
  while (true) {
    std::shared_ptr<EngineRuntime> runtime;
    {
      MutexLock lock(mu_);
      if (!real.WaitUntil(lock.unique_lock(), cv_, deadline, {}, engine_idle)) return false;
      if (threads_stopping_) return true;
      runtime = runtime_;
    }
    const auto left = std::chrono::ceil<milliseconds>(deadline - real.MonoNow());
    if (left.count() <= 0 || !runtime->WaitIdleForTesting(left)) return false;
    MutexLock lock(mu_);
    if (engine_idle()) return true;
  }
}

void TaskEngine::OnStoreEvent(const StoreEvent& event) {
  {
    MutexLock lock(mu_);
    // Events can come while the constructor still builds the planner (the subscription delivers
    // other hosts' notifications at once); no task is registered yet, so none concerns this host.
    if (planner_ == nullptr) return;
    const std::optional<MonoTime> parked =
        dispatcher_parked_ ? std::optional(dispatcher_deadline_) : std::nullopt;
    if (event.kind == StoreEvent::Kind::kServerChanged) replay_due_ = true;
    if (!planner_->OnStoreEvent(event, clock_.MonoNow(), parked)) return;
    KickLocked(/*timer=*/false, /*dispatcher=*/true);
  }
  cv_.notify_all();
  if (event.kind == StoreEvent::Kind::kServerChanged) {
    reporter_.log().Warn(
        "The database of plugin '" + context_.plugin_id +
        "' is served by another server than before (a failover): every claim of this "
        "host is confirmed again there, and its last releases are written again where "
        "they are missing");
  }
}

DatabaseHealth TaskEngine::Database() const {
  if (context_.store == nullptr) return {};
  DatabaseHealth health = context_.store->Health();
  MutexLock lock(mu_);
  return planner_->WithFailingCalls(std::move(health));
}

TaskEngine::DatabaseStatus TaskEngine::Readiness(milliseconds grace) {
  using State = Planner::DatabaseReadiness::State;
  if (context_.store == nullptr) return {};
  DatabaseHealth store_health = context_.store->Health();
  const MonoTime now = clock_.MonoNow();
  Planner::DatabaseReadiness readiness;
  {
    MutexLock lock(mu_);
    readiness = planner_->Readiness(std::move(store_health), now, grace);
    if (readiness.step_dispatcher) KickLocked(/*timer=*/false, /*dispatcher=*/true);
  }
  DatabaseStatus status{readiness.state == State::kReady, "", std::move(readiness.health)};
  const std::string database = "the database of plugin '" + context_.plugin_id + "'";
  if (readiness.state == State::kUnreachable) {
    status.reason = database + " has been unreachable for " +
                    FormatShortDuration(std::chrono::duration_cast<milliseconds>(readiness.down)) +
                    (status.health.reason.empty() ? "" : ": " + status.health.reason);
  } else if (readiness.state == State::kConfirmingClaims) {
    status.reason = database + " is back; this host is confirming its claims there";
  }
  return status;
}

int TaskEngine::UndeliveredWrites() const {
  return undelivered_.load() + history_queue_->dropped();
}

void TaskEngine::DeliverBeforeExit() {
  // The releases of the runs that returned after the dispatcher stopped, the ends of the last
  // runs, and whatever the database did not take before: sent again, after the backoff, for up to
  // a lease (the claims lapse then anyway).
  const MonoTime give_up = clock_.MonoNow() + context_.options.lease;
  while (true) {
    bool done = releaser_->ReleasePending();
    if (history_ != nullptr) done = FlushHistory(/*prune=*/false) && done;
    if (done) return;
    MutexLock lock(mu_);
    const MonoTime retry_at = planner_->DatabaseRetryAt(clock_.MonoNow());
    if (retry_at >= give_up) break;
    clock_.WaitUntil(lock.unique_lock(), cv_, retry_at, {}, [] { return false; });
  }
  int left = releaser_->DropPending();
  left += history_queue_->DropQueued();
  undelivered_ += left;
}

void TaskEngine::Shutdown() {
  std::vector<RunPtr> to_signal;
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    // A claim in flight ends within the store's call timeout; the runs it claims never start
    // (released for another host at once).
    planner_->StopClaiming();
    cv_.wait(lock.unique_lock(), [&]() STAGEHAND_REQUIRES(mu_) { return !claiming_; });
    to_signal = planner_->BeginShutdown();
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  for (const RunPtr& run : to_signal) DispatchRounds::SignalStop(*run, /*kill=*/false);
  // Runs still going after the grace are killed, and their leases renewed a little longer, so
  // that a command's processes are gone before another host may take the task over.
  std::vector<std::pair<TaskPtr, RunPtr>> to_kill;
  std::vector<std::pair<TaskPtr, RunPtr>> abandoned;
  {
    MutexLock lock(mu_);
    const MonoTime deadline = clock_.MonoNow() + context_.options.shutdown_grace;
    if (!clock_.WaitUntil(lock.unique_lock(), cv_, deadline, {},
                          [&]() STAGEHAND_REQUIRES(mu_) { return runs_in_flight_ == 0; })) {
      to_kill = planner_->Runs();
    }
  }
  for (const auto& [task, run] : to_kill) DispatchRounds::SignalStop(*run, /*kill=*/true);
  if (!to_kill.empty()) {
    MutexLock lock(mu_);
    const MonoTime deadline = clock_.MonoNow() + context_.options.lease / 5;
    if (!clock_.WaitUntil(lock.unique_lock(), cv_, deadline, {},
                          [&]() STAGEHAND_REQUIRES(mu_) { return runs_in_flight_ == 0; })) {
      abandoned = planner_->Runs();
    }
  }
  for (const auto& [task, run] : abandoned) reporter_.RunAbandoned(*task, *run);
  {
    MutexLock lock(mu_);
    threads_stopping_ = true;
  }
  notifications_.reset();
  cv_.notify_all();
  std::shared_ptr<EngineRuntime> runtime;
  {
    MutexLock lock(mu_);
    runtime = runtime_;
  }
  if (runtime != nullptr) runtime->Remove(handle_);
  // The runs' jobs use this engine until they return (an abandoned one, with the process).
  {
    MutexLock lock(mu_);
    cv_.wait(lock.unique_lock(), [&]() STAGEHAND_REQUIRES(mu_) { return jobs_active_ == 0; });
    runtime_ = nullptr;  // runs that end from here on wake nothing
  }
  DeliverBeforeExit();
  runtime.reset();  // an engine's own runtime joins its threads here
  MutexLock lock(mu_);
  stopped_ = true;
}

}  // namespace stagehand::engine_internal
