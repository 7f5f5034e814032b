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
  RunJobsEngine& jobs_side = *this;
  run_jobs_ = std::make_unique<RunJobs>(
      jobs_side, RunJobsContext{&clock_, &reporter_, releaser_.get(), context_.options.span_sink});
  TaskRequestsEngine& requests_side = *this;
  requests_ = std::make_unique<TaskRequests>(
      requests_side,
      TaskRequestsContext{context_.store, &clock_, context_.plugin_id, context_.options.lease});
  registrar_ = std::make_unique<Registrar>(
      self, context_.store, context_.store ? context_.store->registrations() : nullptr, clock_,
      reporter_, host_);
  MutexLock lock(mu_);
  planner_ = std::make_unique<Planner>(std::move(options), slots_, clock_.MonoNow());
  handle_ = runtime_->Add(this);
}

TaskEngine::~TaskEngine() { Shutdown(); }

void TaskEngine::KickLocked(bool timer, bool dispatcher) {
  timer_.kicked = timer_.kicked || timer;
  dispatcher_.kicked = dispatcher_.kicked || dispatcher;
  if (runtime_ != nullptr) runtime_->Wake(handle_, timer, dispatcher);
}

MonoTime TaskEngine::Step(Lane lane) { return lane == kTimer ? TimerStep() : DispatcherStep(); }

void TaskEngine::QueueHistory(std::optional<RunStart> start, std::optional<RunEnd> end) {
  if (!history_queue_->Queue(std::move(start), std::move(end))) return;
  MutexLock lock(mu_);
  KickLocked(/*timer=*/false, /*dispatcher=*/true);
}

void TaskEngine::CountRuns(int in_flight, int outside_function) {
  {
    MutexLock lock(mu_);
    runs_in_flight_ += in_flight;
    runs_outside_fn_ += outside_function;
  }
  cv_.notify_all();
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
    report = planner_->ReportOf(run_id);
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
  // Read before the statement: a wake-up computed from it can only be early, never late.
  const MonoTime mono_ref = clock_.MonoNow();
  Result<Registrar::Rows> rows = registrar_->Upsert(tasks);
  if (!rows.ok()) {
    WithPlanner([&](Planner& planner) { planner.Unreserve(tasks); }, Wake::kNone);
    return rows.status();
  }
  reporter_.TasksRegistered(tasks);
  WithPlanner(
      [&](Planner& planner) {
        const MonoTime now = clock_.MonoNow();
        const WallTime wall_now = clock_.Now();
        for (std::size_t i = 0; i < tasks.size(); ++i) {
          planner.Activate(*tasks[i], rows->next[i], rows->version[i], rows->db_now, mono_ref, now,
                           wall_now);
        }
      },
      Wake::kBoth);
  for (const TaskPtr& task : tasks) WatchCallerStop(task);
  return Status::Ok();
}

void TaskEngine::StopRecurrence(const std::string& id) {
  RunPtr run;
  bool finished_now = false;
  WithPlanner([&](Planner& planner) { run = planner.StopRecurrence(id, &finished_now); },
              Wake::kBoth);
  if (run) run->stop.request_stop();
  if (finished_now) reporter_.TaskFinished(id);
}

Status TaskEngine::Redefine(EngineTask def) {
  const std::string id = def.id;
  TaskPtr successor;
  {
    MutexLock lock(mu_);
    STAGEHAND_ASSIGN_OR_RETURN(successor,
                               planner_->MakeSuccessor(std::move(def), context_.plugin_id));
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
  reporter_.TaskRedefined(id, settings);
  return Status::Ok();
}

Status TaskEngine::Retire(const std::string& id) {
  bool found = false;
  bool finished_now = false;
  WithPlanner([&](Planner& planner) { found = planner.Retire(id, &finished_now); }, Wake::kBoth);
  if (!found) return NotFoundError("Task " + id + " is not scheduled in this process");
  reporter_.TaskRetired(id, finished_now);
  return Status::Ok();
}

Status TaskEngine::Trigger(const std::string& id, const TraceContext& caller) {
  return requests_->Trigger(id, caller);
}

Status TaskEngine::Cancel(const std::string& id) { return requests_->Cancel(id); }

Status TaskEngine::Pause(const std::string& id, const PauseRequest& request) {
  return requests_->Pause(id, request);
}

Status TaskEngine::Resume(const std::string& id) { return requests_->Resume(id); }

void TaskEngine::RowChanged(const std::string& id) {
  OnStoreEvent(StoreEvent{StoreEvent::Kind::kUpsert, id});
}

bool TaskEngine::HasLocalTask(const std::string& id) const {
  MutexLock lock(mu_);
  return planner_->IsLocal(id);
}

std::optional<TaskState> TaskEngine::LocalTaskState(const std::string& id) const {
  MutexLock lock(mu_);
  return planner_->LocalTaskState(id);
}

std::optional<WorkerStatus> TaskEngine::WorkerState(const std::string& id) const {
  MutexLock lock(mu_);
  return planner_->WorkerState(id);
}

bool TaskEngine::WaitIdleForTesting(std::chrono::milliseconds real_timeout) {
  SystemClock& real = SystemClock::Instance();
  const MonoTime deadline = real.MonoNow() + real_timeout;
  const auto engine_idle = [&]() STAGEHAND_REQUIRES(mu_) {
    if (threads_stopping_) return true;
    const MonoTime now = clock_.MonoNow();
    return dispatcher_.Idle(now) && timer_.Idle(now) && runs_outside_fn_ == 0;
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
        dispatcher_.parked ? std::optional(dispatcher_.deadline) : std::nullopt;
    if (event.kind == StoreEvent::Kind::kServerChanged) replay_due_ = true;
    if (!planner_->OnStoreEvent(event, clock_.MonoNow(), parked)) return;
    KickLocked(/*timer=*/false, /*dispatcher=*/true);
  }
  cv_.notify_all();
  if (event.kind == StoreEvent::Kind::kServerChanged) reporter_.ServerChanged();
}

DatabaseHealth TaskEngine::Database() const {
  if (context_.store == nullptr) return {};
  DatabaseHealth health = context_.store->Health();
  MutexLock lock(mu_);
  return planner_->WithFailingCalls(std::move(health));
}

TaskEngine::DatabaseStatus TaskEngine::Readiness(milliseconds grace) {
  if (context_.store == nullptr) return {};
  DatabaseHealth store_health = context_.store->Health();
  const MonoTime now = clock_.MonoNow();
  Planner::DatabaseReadiness readiness;
  {
    MutexLock lock(mu_);
    readiness = planner_->Readiness(std::move(store_health), now, grace);
    if (readiness.step_dispatcher) KickLocked(/*timer=*/false, /*dispatcher=*/true);
  }
  return DatabaseStatus{readiness.state == Planner::DatabaseReadiness::State::kReady,
                        reporter_.NotReadyWhy(readiness), std::move(readiness.health)};
}

int TaskEngine::UndeliveredWrites() const {
  return undelivered_.load() + history_queue_->dropped();
}

std::vector<std::pair<TaskPtr, RunPtr>> TaskEngine::RunsLeftAfter(milliseconds wait) {
  MutexLock lock(mu_);
  if (clock_.WaitUntil(lock.unique_lock(), cv_, clock_.MonoNow() + wait, {},
                       [&]() STAGEHAND_REQUIRES(mu_) { return runs_in_flight_ == 0; })) {
    return {};
  }
  return planner_->Runs();
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
  const std::vector<std::pair<TaskPtr, RunPtr>> to_kill =
      RunsLeftAfter(context_.options.shutdown_grace);
  for (const auto& [task, run] : to_kill) DispatchRounds::SignalStop(*run, /*kill=*/true);
  if (!to_kill.empty()) {
    for (const auto& [task, run] : RunsLeftAfter(context_.options.lease / 5)) {
      reporter_.RunAbandoned(*task, *run);
    }
  }
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
  // The releases and history records of the last runs, and what the database did not take.
  const int dropped = releaser_->DeliverBeforeExit(
      [&] { return history_ == nullptr || FlushHistory(/*prune=*/false); }, context_.options.lease);
  undelivered_ += dropped + history_queue_->DropQueued();
  runtime.reset();  // an engine's own runtime joins its threads here
  MutexLock lock(mu_);
  stopped_ = true;
}

}  // namespace stagehand::engine_internal
