#include "engine/task_engine.h"

#include <unistd.h>

#include <algorithm>
#include <exception>
#include <set>
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
      logger_(context_.logger ? context_.logger : NullLogger()),
      observer_(context_.observer ? context_.observer : std::make_shared<SchedulerObserver>()),
      debug_logs_(logger_->Enabled(LogLevel::kDebug)) {
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
    registrations_ = context_.store->registrations();
    if (history_ != nullptr) options.max_output_bytes = history_->limits().max_output_bytes;
  }
  options.report_runs = history_ != nullptr;
  MutexLock lock(mu_);
  planner_ = std::make_unique<Planner>(std::move(options), slots_, clock_.MonoNow());
  handle_ = runtime_->Add(this);
}

TaskEngine::~TaskEngine() { Shutdown(); }

void TaskEngine::SignalStop(PlannedRun& run, bool kill) {
  run.stop.request_stop();
  if (kill) run.kill.request_stop();
}

void TaskEngine::KickLocked(bool timer, bool dispatcher) {
  kicked_timer_ = kicked_timer_ || timer;
  kicked_dispatcher_ = kicked_dispatcher_ || dispatcher;
  if (runtime_ != nullptr) runtime_->Wake(handle_, timer, dispatcher);
}

MonoTime TaskEngine::Step(Lane lane) { return lane == kTimer ? TimerStep() : DispatcherStep(); }

RunInfo TaskEngine::InfoOf(const PlannedTask& task, const PlannedRun& run) const {
  return RunInfo{context_.plugin_id,
                 task.def.id,
                 task.def.scope,
                 run.ticket,
                 run.run_id,
                 run.trigger,
                 run.attempt,
                 run.slot,
                 run.lag,
                 run.trace.valid() ? &run.trace : nullptr,
                 run.caller.valid() ? &run.caller : nullptr};
}

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

namespace {

// The trace id the run history keeps: only a sampled trace's, whose spans a collector has.
std::optional<std::string> HistoryTraceId(const TraceContext& trace) {
  if (!trace.valid() || !trace.sampled()) return std::nullopt;
  return HexOf(trace.trace_id);
}

// The fields of a log line about one run: its task, and its trace and span ids when it is traced.
LogFields RunFields(const std::string& task_id, const TraceContext& trace) {
  LogFields fields = {{"task", task_id}};
  AddTraceFields(trace, fields);
  return fields;
}

}  // namespace

RunOrigin TaskEngine::OriginOf(const PlannedRun& run) const {
  return RunOrigin{host_, pid_, run.trigger, run.slot, run.attempt, HistoryTraceId(run.trace)};
}

std::optional<RunStart> TaskEngine::UnrecordedStart(const PlannedTask& task,
                                                    const PlannedRun& run) const {
  if (run.start_recorded) return std::nullopt;
  return RunStart{run.run_id, task.def.id, OriginOf(run), run.claimed_at};
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
  if (history_ == nullptr || history_missing_) return;
  {
    MutexLock lock(history_mu_);
    if (start) pending_starts_.push_back(*std::move(start));
    if (end) pending_ends_.push_back(*std::move(end));
  }
  MutexLock lock(mu_);
  KickLocked(/*timer=*/false, /*dispatcher=*/true);
}

void TaskEngine::QueueHistoryStart(RunStart start) {
  if (history_ == nullptr || history_missing_) return;
  MutexLock lock(history_mu_);
  pending_starts_.push_back(std::move(start));
}

bool TaskEngine::FlushHistory(bool prune) {
  std::vector<RunStart> starts;
  std::vector<RunEnd> ends;
  {
    MutexLock lock(history_mu_);
    starts.swap(pending_starts_);
    ends.swap(pending_ends_);
  }
  bool unanswered = false;
  // A database nobody migrated to this version has no history tables: said once, not per run.
  // One that does not answer gets the records again later.
  const auto failed = [&](const Status& status, std::size_t count, const char* what) {
    if (status.code() == StatusCode::kFailedPrecondition) {
      if (!history_missing_.exchange(true)) {
        logger_->Warn("Runs are not recorded in the run history: " + status.message());
      }
      return false;
    }
    if (status.code() == StatusCode::kUnavailable) {
      if (!unanswered && debug_logs_) {
        logger_->Debug("Recording " + std::to_string(count) + " run " + what +
                       "(s) in the run history failed, " + status.message() +
                       "; recorded when the database answers");
      }
      unanswered = true;
      return true;
    }
    logger_->Warn("Failed to record " + std::to_string(count) + " run " + what +
                  "(s) in the run history, " + status.message());
    return false;
  };
  // Starts first: a run that started and ended since the last flush is recorded, then closed.
  if (!starts.empty()) {
    if (Status written = history_->RecordStarts(starts);
        written.ok() || !failed(written, starts.size(), "start")) {
      starts.clear();
    }
  }
  if (!ends.empty() && starts.empty()) {
    if (Result<std::size_t> written = history_->RecordEnds(ends);
        written.ok() || !failed(written.status(), ends.size(), "end")) {
      ends.clear();
    }
  }
  if (!starts.empty() || !ends.empty()) {
    {
      MutexLock lock(mu_);
      planner_->DatabaseFailed(clock_.MonoNow());
    }
    MutexLock lock(history_mu_);
    pending_starts_.insert(pending_starts_.begin(), std::make_move_iterator(starts.begin()),
                           std::make_move_iterator(starts.end()));
    pending_ends_.insert(pending_ends_.begin(), std::make_move_iterator(ends.begin()),
                         std::make_move_iterator(ends.end()));
    // Bounded while the database is away: the oldest records go first.
    const std::size_t queued = pending_starts_.size() + pending_ends_.size();
    if (queued > kMaxQueuedHistory) {
      const std::size_t excess = queued - kMaxQueuedHistory;
      const std::size_t from_starts = std::min(excess, pending_starts_.size());
      pending_starts_.erase(pending_starts_.begin(),
                            pending_starts_.begin() + static_cast<std::ptrdiff_t>(from_starts));
      pending_ends_.erase(
          pending_ends_.begin(),
          pending_ends_.begin() + static_cast<std::ptrdiff_t>(excess - from_starts));
      if (undelivered_.fetch_add(static_cast<int>(excess)) == 0) {
        logger_->Warn("The run history keeps at most " + std::to_string(kMaxQueuedHistory) +
                      " records while the database is unreachable; the oldest are dropped");
      }
    }
    return false;
  }
  if (!prune || history_missing_) return true;
  // In bounded batches, so a large backlog never holds the dispatcher for long.
  constexpr std::size_t kPruneBatch = 1000;
  for (int round = 0; round < 10; ++round) {
    Result<std::size_t> pruned = history_->PruneExpired(kPruneBatch);
    if (!pruned.ok()) {
      logger_->Warn("Failed to prune the run history, " + pruned.status().message());
      return true;
    }
    if (*pruned < kPruneBatch) return true;
  }
  return true;
}

void TaskEngine::RefreshRegistrations(const std::vector<std::string>& ids) {
  Result<std::size_t> refreshed = registrations_->RefreshRegistrations(ids, host_);
  if (!refreshed.ok()) {
    logger_->Warn("Failed to refresh the registrations of " + std::to_string(ids.size()) +
                  " task(s), " + refreshed.status().message());
  } else if (debug_logs_) {
    logger_->Debug("Refreshed the registrations of " + std::to_string(*refreshed) + " task(s)");
  }
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
      Result<TaskPtr> task = planner_->MakeTask(std::move(def), context_.plugin_id);
      if (!task.ok()) return task.status();
      tasks.push_back(*std::move(task));
    }
    STAGEHAND_RETURN_IF_ERROR(planner_->Reserve(tasks, context_.plugin_id));
  }
  const auto unreserve = [&] {
    MutexLock lock(mu_);
    planner_->Unreserve(tasks);
  };

  std::vector<TaskUpsert> upserts;
  std::vector<std::size_t> upserted_task;  // index in `tasks` of each upsert
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (!tasks[i]->global()) continue;
    upserts.push_back(TaskUpsert{tasks[i]->def.id, tasks[i]->def.schedule, host_});
    upserted_task.push_back(i);
  }
  std::vector<std::optional<WallTime>> row_next(tasks.size());
  std::vector<std::optional<std::int64_t>> row_version(tasks.size());
  WallTime db_now{};
  // Read before the statement: a wake-up computed from it can only be early, never late.
  const MonoTime mono_ref = clock_.MonoNow();
  if (!upserts.empty()) {
    // UpsertMany even for one task: it records the registration in the same round trip.
    Result<std::vector<UpsertResult>> upserted = context_.store->UpsertMany(upserts);
    if (!upserted.ok()) {
      unreserve();
      return upserted.status().WithPrefix(upserts.size() == 1 ? "Failed to persist task, "
                                                              : "Failed to persist tasks, ");
    }
    for (std::size_t j = 0; j < upserted->size(); ++j) {
      row_next[upserted_task[j]] = (*upserted)[j].next_run_start_at;
      row_version[upserted_task[j]] = (*upserted)[j].version;
      db_now = (*upserted)[j].db_now;
    }
  }
  for (const TaskPtr& task : tasks) {
    logger_->Info(
        "Registered scheduled task: " + task->def.id + ", " + task->def.schedule.settings.ToJson(),
        {{"task", task->def.id}});
  }
  {
    MutexLock lock(mu_);
    const MonoTime now = clock_.MonoNow();
    const WallTime wall_now = clock_.Now();
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      planner_->Activate(*tasks[i], row_next[i], row_version[i], db_now, mono_ref, now, wall_now);
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
  if (finished_now) logger_->Info("Task worker finished: " + id, {{"task", id}});
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
    Result<TaskPtr> made = planner_->MakeTask(std::move(def), context_.plugin_id);
    if (!made.ok()) return made.status();
    successor = *std::move(made);
  }
  std::optional<WallTime> row_next;
  std::optional<std::int64_t> row_version;
  WallTime db_now{};
  const MonoTime mono_ref = clock_.MonoNow();
  if (successor->global()) {
    const TaskUpsert upsert{id, successor->def.schedule, host_};
    Result<std::vector<UpsertResult>> upserted = context_.store->UpsertMany({&upsert, 1});
    if (!upserted.ok()) return upserted.status().WithPrefix("Failed to persist task, ");
    row_next = upserted->front().next_run_start_at;
    row_version = upserted->front().version;
    db_now = upserted->front().db_now;
  }
  const std::string settings = successor->def.schedule.settings.ToJson();
  {
    MutexLock lock(mu_);
    // A claim in flight reads its tasks' definitions outside the lock.
    cv_.wait(lock.unique_lock(), [&]() STAGEHAND_REQUIRES(mu_) { return !claiming_; });
    PlannedTask* current = planner_->Find(id);
    if (current == nullptr || current->phase == PlannedTask::Phase::kFinished) {
      return NotFoundError("Task " + id + " is not scheduled in this process");
    }
    planner_->Redefine(*current, std::move(successor), row_next, row_version, db_now, mono_ref,
                       clock_.MonoNow(), clock_.Now());
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  logger_->Info("Redefined scheduled task: " + id + ", " + settings, {{"task", id}});
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
  logger_->Info(finished_now ? "Task worker finished: " + id
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
  {
    // The row changed under what this host knows of it: it is polled before any claim.
    MutexLock lock(mu_);
    const std::optional<MonoTime> parked =
        dispatcher_parked_ ? std::optional(dispatcher_deadline_) : std::nullopt;
    if (planner_->OnStoreEvent(StoreEvent{StoreEvent::Kind::kUpsert, id}, clock_.MonoNow(),
                               parked)) {
      KickLocked(/*timer=*/false, /*dispatcher=*/true);
    }
  }
  cv_.notify_all();
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
    SignalStop(*run, kill);
    return Status::Ok();
  }
  if (context_.store == nullptr) return NotFoundError("Task " + id + " does not exist");
  STAGEHAND_RETURN_IF_ERROR(context_.store->Cancel(id, context_.options.lease));
  {
    MutexLock lock(mu_);
    run = planner_->CancelledInStore(id, &kill);
  }
  if (run) SignalStop(*run, kill);
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

// ---------------------------------------------------------------------------------------------
// Dispatcher: database work for global tasks.

MonoTime TaskEngine::DispatcherStep() {
  if (!warmed_up_) {
    // First uses are slow (connections, prepared statements, the ticket generator): pay for them
    // now rather than on the first trigger.
    warmed_up_ = true;
    (void)NewUuidV4();
    if (context_.store != nullptr) {
      if (Status warmed = context_.store->WarmUp(); !warmed.ok() && debug_logs_) {
        logger_->Debug("Store warm-up failed (statements prepare on first use), " +
                       warmed.message());
      }
    }
  }
  bool replay = false;
  bool backing_off = false;
  std::vector<TaskPtr> reregister;
  {
    MutexLock lock(mu_);
    if (threads_stopping_) return kMonoInfinity;
    const MonoTime now = clock_.MonoNow();
    backing_off = planner_->BackingOff(now);
    if (!backing_off) {
      replay = std::exchange(replay_due_, false);
      reregister = planner_->TakeReregistration();
    }
  }
  bool releases_left = false;
  if (!backing_off) {
    if (replay) {
      // The releases of the replay window go out again before anything else: the new server
      // may lack them.
      MutexLock lock(release_mu_);
      for (const DeliveredRelease& delivered : delivered_) replays_.push_back(delivered.request);
      delivered_.clear();
    }
    if (!reregister.empty()) Reregister(reregister);
    ReplayReleases();
    GiveBackDoubtfulClaims();
    releases_left = !ReleasePending();
    MutexLock lock(release_mu_);
    releases_left = releases_left || !replays_.empty() || !doubtful_claims_.empty();
  } else {
    // Waiting for the backoff: the runs queued meanwhile have ended all the same.
    std::vector<PendingRelease> waiting;
    {
      MutexLock lock(release_mu_);
      waiting.swap(pending_releases_);
      releases_left = !waiting.empty() || !replays_.empty() || !doubtful_claims_.empty();
    }
    ReportGlobalRunEnds(waiting);
    MutexLock lock(release_mu_);
    pending_releases_.insert(pending_releases_.begin(), std::make_move_iterator(waiting.begin()),
                             std::make_move_iterator(waiting.end()));
  }
  Planner::DispatchPlan plan;
  bool prune = false;
  std::vector<std::string> refresh;
  {
    MutexLock lock(mu_);
    if (threads_stopping_) return kMonoInfinity;
    dispatcher_parked_ = false;
    kicked_dispatcher_ = false;
    const MonoTime now = clock_.MonoNow();
    plan = planner_->PlanDispatch(now);
    for (const auto& [task, run] : plan.start_records) {
      if (std::optional<RunStart> start = UnrecordedStart(*task, *run)) {
        run->start_recorded = true;
        QueueHistoryStart(*std::move(start));
      }
    }
    prune = history_ != nullptr && planner_->PruneDue(now);
    if (registrations_ != nullptr) refresh = planner_->RegistrationRefreshDue(now);
  }
  bool history_left = false;
  if (history_ != nullptr) {
    if (backing_off) {
      MutexLock lock(history_mu_);
      history_left = !pending_starts_.empty() || !pending_ends_.empty();
    } else {
      history_left = !FlushHistory(prune);
    }
  }
  if (!refresh.empty()) RefreshRegistrations(refresh);
  if (!plan.renewals.empty()) RenewLeases(plan.renewals);
  if (!plan.poll || Poll(plan)) {
    if (!plan.candidates.empty()) SkipMissedSlots(plan);
    if (!plan.candidates.empty()) ClaimAndStart(std::move(plan.candidates));
  }
  MutexLock lock(mu_);
  dispatcher_deadline_ = planner_->NextDispatcherWake();
  if (releases_left || history_left) {
    // Writes the database did not take are sent again once the backoff allows.
    dispatcher_deadline_ =
        std::min(dispatcher_deadline_, planner_->DatabaseRetryAt(clock_.MonoNow()));
  }
  dispatcher_parked_ = true;
  cv_.notify_all();
  return kicked_dispatcher_ ? clock_.MonoNow() : dispatcher_deadline_;
}

void TaskEngine::RenewLeases(const std::vector<std::pair<TaskPtr, RunPtr>>& due) {
  for (const auto& [task, run] : due) {
    const std::string& id = task->def.id;
    const MonoTime sent = clock_.MonoNow();
    milliseconds hold{0};
    bool after_server_change = false;
    {
      MutexLock lock(mu_);
      hold = planner_->RenewalHold(*task, *run, sent);
      after_server_change = run->server_changed;
    }
    Result<LeaseStatus> renewed =
        context_.store->RenewLease(id, run->ticket, hold, context_.options.lease);
    Planner::RenewalOutcome outcome{};
    {
      MutexLock lock(mu_);
      outcome = planner_->ApplyRenewal(*run, renewed, sent, clock_.MonoNow());
      if (outcome == Planner::RenewalOutcome::kStale) continue;
      KickLocked(/*timer=*/true, /*dispatcher=*/false);
    }
    bool reclaimed = false;
    if (outcome == Planner::RenewalOutcome::kReclaim) {
      // The new server lacks this run's claim: held again with the same ticket if nobody has
      // claimed or changed the row since.
      const MonoTime again = clock_.MonoNow();
      Result<bool> held = context_.store->Reclaim(id, run->ticket, run->claimed_version, hold,
                                                  context_.options.lease);
      MutexLock lock(mu_);
      outcome = planner_->ApplyReclaim(*run, held, again, clock_.MonoNow());
      reclaimed = outcome == Planner::RenewalOutcome::kRenewed;
      KickLocked(/*timer=*/true, /*dispatcher=*/false);
    }
    cv_.notify_all();
    const RunInfo info = InfoOf(*task, *run);
    switch (outcome) {
      case Planner::RenewalOutcome::kRetry:
        if (after_server_change) {
          logger_->Warn("Task \"" + id + "\" could not confirm its claim on the new database " +
                            "server, " + renewed.status().message() + "; stopping the run",
                        RunFields(id, run->trace));
          ReportAtRisk(id, run->run_id, run->slot,
                       "its claim could not be confirmed on the new database server");
        } else {
          logger_->Warn(
              "Failed to renew the lease of task \"" + id + "\", " + renewed.status().message(),
              RunFields(id, run->trace));
        }
        observer_->OnLeaseRenewalFailed(info);
        break;
      case Planner::RenewalOutcome::kLost:
        if (after_server_change) {
          logger_->Warn("Task \"" + id + "\": its claim is missing on the new database server " +
                            "and the task's row has changed since; killing the run",
                        RunFields(id, run->trace));
          ReportAtRisk(id, run->run_id, run->slot,
                       "its claim was missing on the new database server, where another host "
                       "has claimed or changed the task since");
        } else {
          logger_->Warn("Task ticket for \"" + id + "\" is no longer valid; killing the run",
                        RunFields(id, run->trace));
        }
        // Another host may run the task now: this run ends at once, without grace.
        SignalStop(*run, /*kill=*/true);
        observer_->OnLeaseLost(info);
        break;
      case Planner::RenewalOutcome::kCancelNoticed:
        logger_->Info("Task \"" + id + "\" was cancelled; stopping the run",
                      RunFields(id, run->trace));
        SignalStop(*run, /*kill=*/run->stop.stop_requested());
        observer_->OnLeaseRenewed(info);
        break;
      case Planner::RenewalOutcome::kRenewed:
        if (reclaimed) {
          logger_->Info("Task \"" + id + "\": its claim was missing on the new database " +
                            "server; claimed again there with the same ticket, the run goes on",
                        RunFields(id, run->trace));
          observer_->OnWriteReplayed(context_.plugin_id, id);
        }
        observer_->OnLeaseRenewed(info);
        break;
      case Planner::RenewalOutcome::kReclaim:
      case Planner::RenewalOutcome::kStale:
        break;
    }
  }
}

void TaskEngine::ReportAtRisk(const std::string& task_id, const std::string& run_id,
                              std::optional<WallTime> slot, const std::string& why) {
  {
    MutexLock lock(release_mu_);
    if (std::find(reported_at_risk_.begin(), reported_at_risk_.end(), run_id) !=
        reported_at_risk_.end()) {
      return;
    }
    if (reported_at_risk_.size() >= kMaxReportedAtRisk) reported_at_risk_.pop_front();
    reported_at_risk_.push_back(run_id);
  }
  logger_->Warn("Run " + run_id + " of task \"" + task_id + "\"" +
                    (slot ? " (slot " + FormatRestTime(*slot, kRestUtc) + ")" : "") +
                    " may be done twice or go unrecorded: " + why +
                    " (a failover to a standby that lacked the last writes)",
                {{"task", task_id}, {"run", run_id}});
  observer_->OnRunAtRisk(context_.plugin_id, task_id, run_id, slot, why);
}

bool TaskEngine::Poll(Planner::DispatchPlan& plan) {
  if (debug_logs_) {
    logger_->Debug("Polling " + std::to_string(plan.poll_ids.size()) + " task(s)" +
                   (plan.sweep ? " with sweep" : ""));
  }
  // Read before the statement: a wake-up computed from it can only be early, never late.
  const MonoTime mono_ref = clock_.MonoNow();
  Result<PollResult> polled =
      context_.store->PollChanged(plan.poll_ids, plan.known_versions, plan.sweep);
  if (!polled.ok()) {
    logger_->Warn("Task state poll failed, " + polled.status().message());
    MutexLock lock(mu_);
    planner_->PollFailed(plan, mono_ref);
    return false;
  }
  const std::size_t known_candidates = plan.candidates.size();
  Planner::PollOutcome outcome;
  {
    MutexLock lock(mu_);
    outcome = planner_->ApplyPoll(plan, *polled, mono_ref);
  }
  for (const std::string& id : outcome.finished_missing) {
    logger_->Info("No longer able to find task \"" + id +
                      "\"; aborting and assuming that it has been unregistered or expired",
                  {{"task", id}});
  }
  for (const auto& [id, why] : outcome.finished_invalid) {
    logger_->Info("Task \"" + id +
                      "\" is no longer able to parse task settings; aborting and assuming that a "
                      "newer version of the task has been issued and is being handled by other "
                      "workers, " +
                      why,
                  {{"task", id}});
  }
  for (const std::string& id : polled->swept_ids) {
    logger_->Warn("Task timed out and was lost: " + id, {{"task", id}});
    observer_->OnReclaimed(context_.plugin_id, id);
  }
  if (debug_logs_) {
    logger_->Debug("Poll found " + std::to_string(plan.candidates.size() - known_candidates) +
                   " ready task(s)");
  }
  return true;
}

void TaskEngine::SkipMissedSlots(Planner::DispatchPlan& plan) {
  std::vector<Planner::Skip> skips;
  {
    MutexLock lock(mu_);
    skips = planner_->TakeMissedSlots(plan);
    std::vector<TaskPtr> tasks;
    for (const Planner::Skip& skip : skips) tasks.push_back(skip.task);
    planner_->ReleasesSent(tasks);  // a skip is announced as a release
  }
  for (const Planner::Skip& skip : skips) {
    const std::string& id = skip.task->def.id;
    const MonoTime mono_ref = clock_.MonoNow();
    Result<SkipResult> skipped =
        context_.store->SkipSlot(id, skip.version, skip.slot, skip.schedule);
    {
      MutexLock lock(mu_);
      if (!skipped.ok() || !skipped->skipped) planner_->ReleaseEchoCleared(*skip.task);
      if (std::optional<Planner::Candidate> run = planner_->ApplySkip(skip, skipped, mono_ref)) {
        plan.candidates.push_back(*std::move(run));
      }
    }
    if (!skipped.ok()) {
      if (skipped.status().code() != StatusCode::kUnimplemented) {
        logger_->Warn(
            "Failed to skip a missed slot of task \"" + id + "\", " + skipped.status().message(),
            {{"task", id}});
      }
    } else if (skipped->skipped) {
      LogSkippedSlot(*skip.task, skip.slot, skip.late, skipped->next_run_start_at);
    }
  }
}

void TaskEngine::LogSkippedSlot(const PlannedTask& task, WallTime slot, nanoseconds late,
                                const std::optional<WallTime>& next) const {
  const std::string& id = task.def.id;
  logger_->Info("Skipped the slot of task \"" + id + "\" due at " + FormatRestTime(slot, kRestUtc) +
                    ": it was " +
                    FormatShortDuration(std::chrono::duration_cast<milliseconds>(late)) +
                    " late, beyond its catch-up window of " +
                    FormatShortDuration(task.def.catchup_window.value_or(milliseconds(0))) +
                    "; next run at " + (next ? FormatRestTime(*next, kRestUtc) : "none"),
                {{"task", id}});
  observer_->OnSlotSkipped(context_.plugin_id, id, slot, late);
}

void TaskEngine::ClaimAndStart(std::vector<Planner::Candidate> candidates) {
  std::vector<std::string> tickets;
  std::vector<Planner::Candidate> reserved;
  {
    MutexLock lock(mu_);
    reserved = planner_->ReserveClaims(std::move(candidates), NewUuidV4, &tickets);
    if (reserved.empty()) return;
    // Chosen before the claim, which records the run's start with its trace id.
    const MonoTime now = clock_.MonoNow();
    for (Planner::Candidate& candidate : reserved) {
      candidate.trace = TraceOf(candidate.trigger == RunTrigger::kManual
                                    ? Planner::TriggerCaller(*candidate.task, now)
                                    : TraceContext{});
    }
    claiming_ = true;  // Shutdown waits for this claim, so it signals the runs it starts
  }
  struct ClaimDone {
    TaskEngine* engine;
    ~ClaimDone() {
      {
        MutexLock lock(engine->mu_);
        engine->claiming_ = false;
      }
      engine->cv_.notify_all();
    }
  } claim_done{this};
  std::vector<ClaimRequest> claims;
  claims.reserve(reserved.size());
  for (std::size_t i = 0; i < reserved.size(); ++i) {
    ClaimRequest& claim = claims.emplace_back(ClaimRequest{
        reserved[i].task->def.id, tickets[i], reserved[i].task->def.timeout, reserved[i].version});
    if (history_ != nullptr && !reserved[i].task->short_runs) {
      const bool slotted = reserved[i].trigger == RunTrigger::kSchedule;
      claim.history = RunOrigin{host_,
                                pid_,
                                reserved[i].trigger,
                                slotted ? reserved[i].due : std::nullopt,
                                reserved[i].attempt,
                                HistoryTraceId(reserved[i].trace)};
    }
  }
  const MonoTime sent = clock_.MonoNow();
  Result<std::vector<ClaimResult>> claimed =
      context_.store->ClaimMany(claims, context_.options.lease);
  if (debug_logs_) {
    std::size_t won = 0;
    if (claimed.ok()) {
      for (const ClaimResult& result : *claimed) won += result.claimed ? 1 : 0;
    }
    logger_->Debug("Claim of " + std::to_string(claims.size()) + " task(s): " +
                   (claimed.ok() ? std::to_string(won) + " claimed" : claimed.status().message()));
  }
  if (!claimed.ok()) {
    for (const ClaimRequest& claim : claims) {
      logger_->Warn("Failed to claim task \"" + claim.id + "\", " + claimed.status().message(),
                    {{"task", claim.id}});
    }
    if (claimed.status().code() == StatusCode::kUnavailable) {
      // The statement may have been committed with its answer lost: its rows are given back.
      MutexLock lock(release_mu_);
      for (std::size_t i = 0; i < reserved.size(); ++i) {
        const std::string& id = reserved[i].task->def.id;
        const auto same = [&](const ReleaseRequest& r) { return r.id == id; };
        if (std::count_if(doubtful_claims_.begin(), doubtful_claims_.end(), same) >=
            kMaxDoubtfulClaimsPerTask) {
          continue;
        }
        // Due again at once: the slot, trigger or retry it was claimed for is not lost.
        ReleaseRequest give_back{
            id, tickets[i], reserved[i].task->def.schedule,
            ErrorJson("not started: the database's answer to its claim was lost")};
        give_back.next_in = std::chrono::milliseconds(0);
        doubtful_claims_.push_back(std::move(give_back));
      }
    }
    MutexLock lock(mu_);
    planner_->ClaimFailed(reserved, clock_.MonoNow());
    return;
  }
  std::vector<Planner::Started> started;
  std::vector<TaskPtr> lost;
  {
    MutexLock lock(mu_);
    started = planner_->ApplyClaims(reserved, tickets, *claimed, sent, &lost);
    for (const Planner::Started& run : started) {
      run.run->claimed_at = claimed->front().db_now;
      run.run->start_recorded = history_ != nullptr && !run.task->short_runs;
      if (history_ != nullptr && !run.run->start_recorded) {
        run.run->record_start_at = sent + kShortRun;
      }
    }
    runs_in_flight_ += static_cast<int>(started.size());
    runs_outside_fn_ += static_cast<int>(started.size());
    if (!started.empty()) KickLocked(/*timer=*/true, /*dispatcher=*/false);
  }
  cv_.notify_all();
  for (const TaskPtr& task : lost) observer_->OnClaimLost(context_.plugin_id, task->def.id);
  for (Planner::Started& run : started) {
    SubmitRun([this, task = std::move(run.task), run = std::move(run.run)] {
      ExecuteGlobalRun(task, run);
    });
  }
}

void TaskEngine::SubmitRun(std::function<void()> body) {
  {
    MutexLock lock(jobs_->mu);
    ++jobs_->active;
  }
  runtime_->SubmitRun([jobs = jobs_, body = std::move(body)] {
    body();
    MutexLock lock(jobs->mu);
    --jobs->active;
    jobs->cv.notify_all();
  });
}

TaskEngine::Outcome TaskEngine::Invoke(const PlannedTask& task, PlannedRun& run,
                                       const RunInfo& info) {
  bool claim_at_risk = false;
  bool shutting_down = false;
  {
    MutexLock lock(mu_);
    // A global run whose claim is lost or at risk by now (the host was paused or starved between
    // the claim and this start) does not start at all: the row may be another host's.
    const MonoTime now = clock_.MonoNow();
    if (!run.ticket.empty() && (!run.ours || now >= run.fence_at)) {
      claim_at_risk = true;
      if (run.reason == StopReason::kNone) run.reason = StopReason::kLeaseLost;
    }
    // A run whose claim answered after this host began to shut down does not start either.
    shutting_down = run.reason == StopReason::kShutdown;
    // As in Backstage, the timeout counts from the function's start, not from the claim: a
    // run whose start a busy host delayed still gets all of it. Its lease is renewed meanwhile.
    if (!run.timeout_signalled) run.timeout_at = now + task.def.timeout;
  }
  // Only a run whose function is called is reported as started, and before it is inside it.
  if (!claim_at_risk && !shutting_down) observer_->OnRunStarted(info, run.lag);
  {
    MutexLock lock(mu_);
    --runs_outside_fn_;
  }
  cv_.notify_all();  // WaitIdleForTesting may be waiting for this run to be inside its function
  struct BackOutside {
    TaskEngine* engine;
    ~BackOutside() {
      MutexLock lock(engine->mu_);
      ++engine->runs_outside_fn_;
    }
  } back_outside{this};
  std::optional<std::string> message;
  std::string name = "Error";
  Outcome outcome;
  if (claim_at_risk) {
    message = "not started: its claim was about to lapse before the run could start";
    outcome.started = false;
  } else if (shutting_down) {
    message = "not started: its host was shutting down";
    outcome.started = false;
  } else {
    try {
      SpanSink* spans = run.trace.sampled() ? context_.options.span_sink.get() : nullptr;
      Status status = task.def.fn(RunControl{run.stop.get_token(), run.kill.get_token(), run.report,
                                             run.trace, spans, run.run_id});
      if (!status.ok()) message = status.message();
    } catch (const std::exception& error) {
      message = error.what();
    } catch (...) {
      message = "<no reason given>";
      name = "Unknown";
    }
  }
  {
    MutexLock lock(mu_);
    outcome.reason = run.reason;
  }
  if (!message) return outcome;
  // A stopped run's failure is named by why it was stopped, then by what the function said.
  const std::string why = StopOutcome(outcome.reason, task.def.timeout);
  outcome.error = ErrorJson(why.empty() ? *message : why + ": " + *message, name);
  return outcome;
}

void TaskEngine::LogFailure(const PlannedTask& task, const PlannedRun& run,
                            const Outcome& outcome) const {
  if (!outcome.error) return;
  const std::string line = "Task " + task.def.id + " failed, " + *outcome.error;
  LogFields fields = RunFields(task.def.id, run.trace);
  // Operators alert on errors: a run that shutdown or an operator stopped is not one.
  if (outcome.reason == StopReason::kShutdown || outcome.reason == StopReason::kCancel ||
      outcome.reason == StopReason::kUnscheduled) {
    logger_->Warn(line, fields);
  } else {
    logger_->Error(line, fields);
  }
}

void TaskEngine::ExecuteGlobalRun(TaskPtr task, RunPtr run) {
  const RunInfo info = InfoOf(*task, *run);
  const MonoTime began = clock_.MonoNow();
  Outcome outcome = Invoke(*task, *run, info);
  const nanoseconds duration = clock_.MonoNow() - began;
  LogFailure(*task, *run, outcome);
  bool held = false;
  {
    MutexLock lock(mu_);
    held = planner_->GlobalRunReturned(*run);
  }
  // Every run is released, whether or not this host still knew its claim to hold: the release is
  // guarded by the ticket (and by the claim's version, for a row whose claim lapsed or went
  // missing and that nobody took since), and it carries the run's history.
  PendingRelease ended;
  ended.finish = FinishOf(*run, outcome);
  ended.task = std::move(task);
  ended.run = std::move(run);
  ended.info = info;
  ended.duration = duration;
  ended.error = std::move(outcome.error);
  ended.held = held;
  if (!outcome.started && outcome.reason == StopReason::kShutdown) {
    // The slot it was claimed for is still to run: due at once, for another host to take.
    ended.next_in = milliseconds::zero();
  } else if (PlanGlobalRetry(ended) && !ended.next_in) {
    SkipSlotsMissedByARun(ended);
  }
  EnqueueRelease(std::move(ended));
}

void TaskEngine::SkipSlotsMissedByARun(PendingRelease& ended) {
  const PlannedTask& task = *ended.task;
  const TaskSettingsV2& settings = ended.run->schedule.settings;
  if (!task.def.catchup_window || !ended.run->slot ||
      settings.cadence_kind() != CadenceKind::kDuration) {
    return;
  }
  Result<HumanDuration> cadence = ParseIsoDuration(settings.cadence);
  if (!cadence.ok()) return;
  const auto step = std::chrono::duration_cast<milliseconds>(
      std::chrono::duration<double, std::milli>(ToMillisecondsCasual(*cadence)));
  if (step <= milliseconds::zero()) return;
  const WallTime slot = *ended.run->slot;
  const WallTime next_slot = slot + step;
  const WallTime now = clock_.Now();
  if (!SlotMissed(task.def.catchup_window, now - next_slot)) return;
  const WallTime next = FirstSlotAfter(slot, step, now);
  ended.next_in = std::chrono::ceil<milliseconds>(next - now);
  LogSkippedSlot(task, next_slot, now - next_slot, next);
}

bool TaskEngine::PlanGlobalRetry(PendingRelease& ended) {
  ended.retry_undecided = false;
  const PlannedTask& task = *ended.task;
  if (!ended.error || !task.def.retry) return true;
  StopReason reason = StopReason::kNone;
  {
    MutexLock lock(mu_);
    reason = ended.run->reason;
  }
  if (!RetryAfter(task.def.retry, reason, 1, 0)) return true;
  Result<std::optional<std::string>> previous = context_.store->LastRunError(task.def.id);
  if (!previous.ok()) {
    // Decided again before the release is sent, once the database answers.
    if (debug_logs_) {
      logger_->Debug("Task " + task.def.id + ": cannot read its last attempt yet, " +
                         previous.status().message(),
                     {{"task", task.def.id}});
    }
    ended.retry_undecided = true;
    return false;
  }
  const int attempt = RetriedAttemptOf(*previous) + 1;
  const std::optional<milliseconds> delay =
      RetryAfter(task.def.retry, reason, attempt, std::hash<std::string>{}(ended.run->run_id));
  if (!delay) return true;
  ended.next_in = delay;
  ended.error = RecordRetriedAttempt(*ended.error, attempt);
  ended.finish.error_json = ended.error;
  {
    MutexLock lock(mu_);
    ended.task->retry_attempt = attempt + 1;
  }
  ReportRetry(task, ended.info, attempt, *delay);
  return true;
}

void TaskEngine::ReportRetry(const PlannedTask& task, const RunInfo& run, int attempt,
                             milliseconds delay) {
  observer_->OnRetryScheduled(run, attempt, delay);
  logger_->Info("Task " + task.def.id + " failed on attempt " + std::to_string(attempt) + " of " +
                    std::to_string(task.def.retry->attempts + 1) + "; retrying in " +
                    FormatShortDuration(delay),
                RunFields(task.def.id, run.trace != nullptr ? *run.trace : TraceContext{}));
}

void TaskEngine::EnqueueRelease(PendingRelease release) {
  {
    MutexLock lock(release_mu_);
    pending_releases_.push_back(std::move(release));
  }
  {
    MutexLock lock(mu_);
    KickLocked(/*timer=*/false, /*dispatcher=*/true);
  }
  cv_.notify_all();
}

bool TaskEngine::ReleasePending() {
  std::vector<PendingRelease> batch;
  {
    MutexLock lock(release_mu_);
    batch.swap(pending_releases_);
  }
  if (batch.empty()) return true;
  std::vector<PendingRelease> ready;
  std::vector<PendingRelease> unsent;
  for (PendingRelease& ended : batch) {
    if (ended.retry_undecided && !PlanGlobalRetry(ended)) {
      unsent.push_back(std::move(ended));
      continue;
    }
    ready.push_back(std::move(ended));
  }
  if (!unsent.empty()) {
    {
      MutexLock lock(mu_);
      planner_->DatabaseFailed(clock_.MonoNow());
    }
    ReportGlobalRunEnds(unsent);
  }
  if (!ready.empty()) {
    std::vector<PendingRelease> unanswered = ReleaseBatch(std::move(ready));
    unsent.insert(unsent.end(), std::make_move_iterator(unanswered.begin()),
                  std::make_move_iterator(unanswered.end()));
  }
  if (unsent.empty()) return true;
  MutexLock lock(release_mu_);
  // Older than those queued meanwhile: they go first.
  pending_releases_.insert(pending_releases_.begin(), std::make_move_iterator(unsent.begin()),
                           std::make_move_iterator(unsent.end()));
  return false;
}

ReleaseRequest TaskEngine::RequestOf(const PendingRelease& ended) const {
  ReleaseRequest release{ended.task->def.id, ended.run->ticket, ended.run->schedule, ended.error};
  release.next_in = ended.next_in;
  if (history_ != nullptr) {
    release.history = ReleasedRun{ended.finish, OriginOf(*ended.run), ended.run->claimed_at};
  }
  release.retried = ended.attempts > 1;
  // A run whose claim may no longer hold the row (it lapsed, or a new server lacks it) is still
  // released when nobody has claimed or changed the row since.
  if (release.retried || !ended.held) release.claimed_version = ended.run->claimed_version;
  return release;
}

std::vector<TaskEngine::PendingRelease> TaskEngine::ReleaseBatch(
    std::vector<PendingRelease> batch) {
  std::vector<ReleaseRequest> releases;
  std::vector<TaskPtr> tasks;
  releases.reserve(batch.size());
  tasks.reserve(batch.size());
  for (PendingRelease& ended : batch) {
    ++ended.attempts;
    releases.push_back(RequestOf(ended));
    tasks.push_back(ended.task);
  }
  {
    MutexLock lock(mu_);
    planner_->ReleasesSent(tasks);
  }
  // Read before the statement: a wake-up computed from it can only be early, never late.
  const MonoTime mono_ref = clock_.MonoNow();
  Result<std::vector<ReleaseResult>> released = context_.store->ReleaseMany(releases);
  if (!released.ok()) {
    {
      MutexLock lock(mu_);
      planner_->DatabaseFailed(clock_.MonoNow());
      for (const PendingRelease& ended : batch) planner_->ReleaseEchoCleared(*ended.task);
    }
    for (const PendingRelease& ended : batch) {
      const std::string& id = ended.task->def.id;
      if (ended.attempts == 1) {
        logger_->Warn("Failed to release task \"" + id + "\", " + released.status().message() +
                          "; the release is sent again when the database answers",
                      {{"task", id}});
      } else if (debug_logs_) {
        logger_->Debug("Release of task " + id + " failed again (attempt " +
                           std::to_string(ended.attempts) + "), " + released.status().message(),
                       {{"task", id}});
      }
    }
    // The runs have ended, whenever their releases get through.
    ReportGlobalRunEnds(batch);
    return batch;
  }
  std::vector<ReleaseRequest> delivered;
  {
    MutexLock lock(mu_);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      PendingRelease& ended = batch[i];
      const ReleaseResult& result = (*released)[i];
      ended.task->short_runs = ended.duration < kShortRun;
      if (!result.released) {
        planner_->ReleaseEchoCleared(*ended.task);  // nothing (known) was written
        continue;
      }
      delivered.push_back(releases[i]);
      if (!result.version) continue;
      ended.row_version = result.version;
      ended.row_next = result.next_run_start_at;
      ended.row_wake_at =
          result.next_run_start_at
              ? planner_->ReleasedRowWake(*ended.task, *ended.run, *result.next_run_start_at,
                                          result.db_now, mono_ref)
              : kMonoInfinity;
    }
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const std::string& id = batch[i].task->def.id;
    const ReleaseResult& result = (*released)[i];
    if (!result.released && result.recorded) {
      // Neither the run's release nor its record had been written (or they went with a failover),
      // and the row has changed.
      ReportAtRisk(id, batch[i].run->run_id, batch[i].run->slot,
                   "its release could not be written before another host claimed or changed the "
                   "task");
    } else if (batch[i].attempts > 1) {
      logger_->Info("Released task \"" + id + "\" after " + std::to_string(batch[i].attempts) +
                        " attempts" + (result.released ? "" : " (it had been released already)"),
                    {{"task", id}});
    }
    if (debug_logs_) {
      logger_->Debug(
          "Release of task " + id + ": " + (result.released ? "released" : "ticket no longer held"),
          {{"task", id}});
    }
  }
  RememberDelivered(std::move(delivered));
  FinishGlobalRuns(batch);
  return {};
}

void TaskEngine::RememberDelivered(std::vector<ReleaseRequest> requests) {
  const MonoTime now = clock_.MonoNow();
  MutexLock lock(release_mu_);
  for (ReleaseRequest& request : requests) {
    request.retried = true;
    if (request.history && request.history->finish.output_tail.size() > kReplayOutputBytes) {
      std::string& tail = request.history->finish.output_tail;
      tail.erase(0, tail.size() - kReplayOutputBytes);
    }
    delivered_.push_back(DeliveredRelease{std::move(request), now});
  }
  while (!delivered_.empty() &&
         (delivered_.size() > kMaxDeliveredReleases ||
          now - delivered_.front().delivered_at > context_.options.replay_window)) {
    delivered_.pop_front();
  }
}

std::vector<std::vector<ReleaseRequest>> TaskEngine::BatchesNamingEachTaskOnce(
    std::vector<ReleaseRequest> requests) {
  std::vector<std::vector<ReleaseRequest>> batches;
  std::set<std::string, std::less<>> ids;
  for (ReleaseRequest& request : requests) {
    if (batches.empty() || !ids.insert(request.id).second) {
      batches.emplace_back();
      ids = {request.id};
    }
    batches.back().push_back(std::move(request));
  }
  return batches;
}

void TaskEngine::ReplayReleases() {
  std::vector<ReleaseRequest> queued;
  {
    MutexLock lock(release_mu_);
    queued.swap(replays_);
  }
  std::vector<std::vector<ReleaseRequest>> batches = BatchesNamingEachTaskOnce(std::move(queued));
  for (std::size_t next = 0; next < batches.size(); ++next) {
    // A task released twice in the replay window has its releases written in the order they
    // were first made.
    const std::vector<ReleaseRequest>& batch = batches[next];
    Result<std::vector<ReleaseResult>> replayed = context_.store->ReleaseMany(batch);
    if (!replayed.ok() && replayed.status().code() == StatusCode::kUnavailable) {
      {
        MutexLock lock(mu_);
        planner_->DatabaseFailed(clock_.MonoNow());
      }
      MutexLock lock(release_mu_);
      auto at = replays_.begin();
      for (std::size_t left = next; left < batches.size(); ++left) {
        at = replays_.insert(at, std::make_move_iterator(batches[left].begin()),
                             std::make_move_iterator(batches[left].end()));
        at += static_cast<std::ptrdiff_t>(batches[left].size());
      }
      return;
    }
    if (!replayed.ok()) {
      // The new server refuses these writes for good: sending them again would only stop the
      // dispatcher. Their runs are reported at risk, since nobody can tell what the server holds.
      logger_->Warn("Writing the last releases again on the new database server failed, " +
                    replayed.status().ToString());
      for (const ReleaseRequest& request : batch) {
        ReportAtRisk(request.id, request.ticket,
                     request.history ? request.history->origin.slot : std::nullopt,
                     "its release could not be written again on the new database server");
      }
      continue;
    }
    ApplyReplayedReleases(batch, *replayed);
  }
}

void TaskEngine::GiveBackDoubtfulClaims() {
  std::vector<ReleaseRequest> doubtful;
  {
    MutexLock lock(release_mu_);
    doubtful.swap(doubtful_claims_);
  }
  std::vector<std::vector<ReleaseRequest>> batches = BatchesNamingEachTaskOnce(std::move(doubtful));
  for (std::size_t next = 0; next < batches.size(); ++next) {
    Result<std::vector<ReleaseResult>> given = context_.store->ReleaseMany(batches[next]);
    if (!given.ok()) {
      if (given.status().code() != StatusCode::kUnavailable) {
        logger_->Warn("Giving back the claims whose answer was lost failed, " +
                      given.status().ToString());
        continue;
      }
      {
        MutexLock lock(mu_);
        planner_->DatabaseFailed(clock_.MonoNow());
      }
      MutexLock lock(release_mu_);
      for (std::size_t left = next; left < batches.size(); ++left) {
        doubtful_claims_.insert(doubtful_claims_.end(),
                                std::make_move_iterator(batches[left].begin()),
                                std::make_move_iterator(batches[left].end()));
      }
      return;
    }
    for (std::size_t i = 0; i < batches[next].size(); ++i) {
      if (!(*given)[i].released) continue;
      const ReleaseRequest& request = batches[next][i];
      logger_->Info("Task \"" + request.id + "\" was claimed by a statement whose answer was " +
                        "lost: the claim is given back, so the task is free again",
                    {{"task", request.id}});
    }
  }
}

void TaskEngine::ApplyReplayedReleases(const std::vector<ReleaseRequest>& batch,
                                       const std::vector<ReleaseResult>& replayed) {
  std::vector<std::string> polled;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const ReleaseRequest& request = batch[i];
    const ReleaseResult& result = replayed[i];
    const std::optional<WallTime> slot =
        request.history ? request.history->origin.slot : std::nullopt;
    if (result.released) {
      logger_->Info("The release of run " + request.ticket + " of task \"" + request.id +
                        "\" was missing on the new database server: written again there",
                    {{"task", request.id}});
      observer_->OnWriteReplayed(context_.plugin_id, request.id);
      polled.push_back(request.id);
    } else if (result.recorded) {
      ReportAtRisk(request.id, request.ticket, slot,
                   "its claim and release were missing on the new database server, where another "
                   "host has claimed or changed the task since");
    }
  }
  MutexLock lock(mu_);
  for (const std::string& id : polled) {
    planner_->OnStoreEvent(StoreEvent{StoreEvent::Kind::kUpsert, id}, clock_.MonoNow(),
                           std::nullopt);
  }
}

void TaskEngine::Reregister(const std::vector<TaskPtr>& tasks) {
  std::vector<TaskUpsert> upserts;
  {
    MutexLock lock(mu_);
    upserts.reserve(tasks.size());
    for (const TaskPtr& task : tasks) {
      upserts.push_back(TaskUpsert{task->def.id, task->def.schedule, host_});
    }
  }
  Result<std::vector<UpsertResult>> upserted = context_.store->UpsertMany(upserts);
  if (!upserted.ok()) {
    MutexLock lock(mu_);
    planner_->ReregistrationFailed();
    planner_->DatabaseFailed(clock_.MonoNow());
    return;
  }
  logger_->Info("Registered " + std::to_string(upserts.size()) +
                " task(s) again on the new database server");
}

void TaskEngine::FinishGlobalRuns(std::span<PendingRelease> ended) {
  std::vector<bool> finished(ended.size());
  {
    MutexLock lock(mu_);
    for (std::size_t i = 0; i < ended.size(); ++i) {
      const PendingRelease& run = ended[i];
      finished[i] = planner_->FinishGlobalRun(*run.task, run.run, run.row_version, run.row_next,
                                              run.row_wake_at);
    }
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  ReportGlobalRunEnds(ended);
  for (std::size_t i = 0; i < ended.size(); ++i) {
    const std::string& id = ended[i].task->def.id;
    if (finished[i]) logger_->Info("Task worker finished: " + id, {{"task", id}});
  }
}

void TaskEngine::ReportGlobalRunEnds(std::span<PendingRelease> ended) {
  int newly = 0;
  for (const PendingRelease& run : ended) newly += run.reported ? 0 : 1;
  if (newly == 0) return;
  {
    MutexLock lock(mu_);
    runs_in_flight_ -= newly;
    runs_outside_fn_ -= newly;
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  for (PendingRelease& run : ended) {
    if (std::exchange(run.reported, true)) continue;
    ReportRunEnd(run.info, run.duration, run.finish);
  }
}

void TaskEngine::ReportRunEnd(const RunInfo& info, std::chrono::nanoseconds duration,
                              const RunFinish& finish) {
  if (finish.error_json) {
    observer_->OnRunFailed(info, duration, *finish.error_json);
  } else {
    observer_->OnRunCompleted(info, duration);
  }
  observer_->OnRunFinished(info, finish, duration);
}

// ---------------------------------------------------------------------------------------------
// Timer: local runs, timeouts and fences. No I/O.

MonoTime TaskEngine::TimerStep() {
  Planner::TimerActions actions;
  std::vector<RunStart> local_starts;
  MonoTime next = kMonoInfinity;
  {
    MutexLock lock(mu_);
    if (threads_stopping_) return kMonoInfinity;
    timer_parked_ = false;
    kicked_timer_ = false;
    bool kick_dispatcher = false;
    const WallTime wall_now = clock_.Now();
    next = planner_->TimerStep(clock_.MonoNow(), wall_now, &actions, &kick_dispatcher);
    for (Planner::Started& start : actions.to_start) {
      start.run->trace = TraceOf(start.run->caller);
      start.run->run_id = NewUuidV4();
      if (history_ != nullptr) {
        local_starts.push_back(
            RunStart{start.run->run_id, start.task->def.id, OriginOf(*start.run), wall_now});
      }
    }
    if (kick_dispatcher) KickLocked(/*timer=*/false, /*dispatcher=*/true);
    runs_in_flight_ += static_cast<int>(actions.to_start.size());
    runs_outside_fn_ += static_cast<int>(actions.to_start.size());
  }
  cv_.notify_all();
  for (RunStart& start : local_starts) QueueHistory(std::move(start), std::nullopt);
  for (const Planner::TimerActions::Skipped& skipped : actions.skipped) {
    LogSkippedSlot(*skipped.task, skipped.slot, skipped.late, skipped.next);
  }
  for (const RunPtr& run : actions.to_stop) SignalStop(*run, /*kill=*/false);
  for (const RunPtr& run : actions.to_kill) SignalStop(*run, /*kill=*/true);
  for (const auto& [task, run] : actions.fenced) {
    logger_->Warn("Task \"" + task->def.id +
                      "\" could not renew its lease in time; stopping the run (it is killed "
                      "before the lease lapses if still running)",
                  RunFields(task->def.id, run->trace));
    observer_->OnLeaseLost(InfoOf(*task, *run));
  }
  for (const auto& [task, run] : actions.overdue) {
    logger_->Warn("Task \"" + task->def.id + "\" is overdue: its function has not returned " +
                      FormatShortDuration(context_.options.lease) + " after its timeout of " +
                      FormatShortDuration(task->def.timeout) + "; its claim is held until it does",
                  RunFields(task->def.id, run->trace));
    observer_->OnRunOverdue(InfoOf(*task, *run));
  }
  for (Planner::Started& start : actions.to_start) {
    SubmitRun([this, task = std::move(start.task), run = std::move(start.run)] {
      ExecuteLocalRun(task, run);
    });
  }
  MutexLock lock(mu_);
  timer_deadline_ = next;
  timer_parked_ = true;
  cv_.notify_all();
  return kicked_timer_ ? clock_.MonoNow() : next;
}

void TaskEngine::ExecuteLocalRun(TaskPtr task, RunPtr run) {
  const RunInfo info = InfoOf(*task, *run);
  const MonoTime began = clock_.MonoNow();
  const Outcome outcome = Invoke(*task, *run, info);
  const nanoseconds duration = clock_.MonoNow() - began;
  LogFailure(*task, *run, outcome);
  const RunFinish finish = FinishOf(*run, outcome);
  QueueHistory(std::nullopt, RunEnd{run->run_id, finish, clock_.Now()});
  bool finished = false;
  std::optional<milliseconds> next_in;
  {
    MutexLock lock(mu_);
    if (outcome.error) {
      next_in = RetryAfter(task->def.retry, run->reason, run->attempt,
                           std::hash<std::string>{}(run->run_id));
    }
    finished = planner_->FinishLocalRun(*task, run, outcome.error, clock_.MonoNow(), clock_.Now(),
                                        next_in);
    --runs_in_flight_;
    --runs_outside_fn_;
    KickLocked(/*timer=*/true, /*dispatcher=*/false);
  }
  cv_.notify_all();
  ReportRunEnd(info, duration, finish);
  if (next_in && !finished) ReportRetry(*task, info, run->attempt, *next_in);
  if (finished) logger_->Info("Task worker finished: " + task->def.id, {{"task", task->def.id}});
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
    logger_->Warn("The database of plugin '" + context_.plugin_id +
                  "' is served by another server than before (a failover): every claim of this "
                  "host is confirmed again there, and its last releases are written again where "
                  "they are missing");
  }
}

DatabaseHealth TaskEngine::DatabaseHealthLocked(DatabaseHealth health) const {
  if (const std::optional<MonoTime> failing = planner_->DatabaseFailingSince()) {
    if (health.reachable || *failing < health.unreachable_since) {
      health.unreachable_since = *failing;
    }
    if (health.reachable) health.reason = "its statements fail";
    health.reachable = false;
  }
  return health;
}

DatabaseHealth TaskEngine::Database() const {
  if (context_.store == nullptr) return {};
  DatabaseHealth health = context_.store->Health();
  MutexLock lock(mu_);
  return DatabaseHealthLocked(std::move(health));
}

TaskEngine::DatabaseStatus TaskEngine::Readiness(milliseconds grace) {
  DatabaseStatus status;
  if (context_.store == nullptr) return status;
  DatabaseHealth store_health = context_.store->Health();
  const MonoTime now = clock_.MonoNow();
  MutexLock lock(mu_);
  status.health = DatabaseHealthLocked(std::move(store_health));
  DatabaseHealth& health = status.health;
  if (!health.reachable) {
    const nanoseconds down = now - health.unreachable_since;
    if (down > grace && !unready_) {
      unready_ = true;
      confirmation_requested_ = false;
    }
    if (unready_) {
      status.ready = false;
      status.reason = "the database of plugin '" + context_.plugin_id +
                      "' has been unreachable for " +
                      FormatShortDuration(std::chrono::duration_cast<milliseconds>(down)) +
                      (health.reason.empty() ? "" : ": " + health.reason);
    }
    return status;
  }
  if (unready_ && planner_->ClaimsUnconfirmed()) {
    status.ready = false;
    status.reason = "the database of plugin '" + context_.plugin_id +
                    "' is back; this host is confirming its claims there";
    KickLocked(/*timer=*/false, /*dispatcher=*/true);
    return status;
  }
  if (unready_ && !confirmation_requested_ &&
      (confirmation_requested_ = true, planner_->RequireConfirmation(now))) {
    // The outage was seen by the store alone (no call of the engine failed): its claims are
    // confirmed before the host says it is ready again.
    status.ready = false;
    status.reason = "the database of plugin '" + context_.plugin_id +
                    "' is back; this host is confirming its claims there";
    KickLocked(/*timer=*/false, /*dispatcher=*/true);
    return status;
  }
  unready_ = false;
  return status;
}

int TaskEngine::UndeliveredWrites() const { return undelivered_.load(); }

void TaskEngine::DeliverBeforeExit() {
  // The releases of the runs that returned after the dispatcher stopped, the ends of the last
  // runs, and whatever the database did not take before: sent again, after the backoff, for up to
  // a lease (the claims lapse then anyway).
  const MonoTime give_up = clock_.MonoNow() + context_.options.lease;
  while (true) {
    bool done = ReleasePending();
    if (history_ != nullptr) done = FlushHistory(/*prune=*/false) && done;
    if (done) return;
    MutexLock lock(mu_);
    const MonoTime retry_at = planner_->DatabaseRetryAt(clock_.MonoNow());
    if (retry_at >= give_up) break;
    clock_.WaitUntil(lock.unique_lock(), cv_, retry_at, {}, [] { return false; });
  }
  int left = 0;
  {
    MutexLock lock(release_mu_);
    for (const PendingRelease& ended : pending_releases_) {
      logger_->Error("The end of run " + ended.run->run_id + " of task \"" + ended.task->def.id +
                         "\" (" + std::string(RunOutcomeName(ended.finish.outcome)) +
                         ") could not be written to the database before exit; its claim lapses "
                         "and the janitor records the run as lost",
                     {{"task", ended.task->def.id}});
    }
    left += static_cast<int>(pending_releases_.size());
    pending_releases_.clear();
  }
  {
    MutexLock lock(history_mu_);
    const std::size_t records = pending_starts_.size() + pending_ends_.size();
    if (records > 0) {
      logger_->Error(std::to_string(records) +
                     " run history record(s) could not be written to the database before exit");
    }
    left += static_cast<int>(records);
    pending_starts_.clear();
    pending_ends_.clear();
  }
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
  for (const RunPtr& run : to_signal) SignalStop(*run, /*kill=*/false);
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
  for (const auto& [task, run] : to_kill) SignalStop(*run, /*kill=*/true);
  if (!to_kill.empty()) {
    MutexLock lock(mu_);
    const MonoTime deadline = clock_.MonoNow() + context_.options.lease / 5;
    if (!clock_.WaitUntil(lock.unique_lock(), cv_, deadline, {},
                          [&]() STAGEHAND_REQUIRES(mu_) { return runs_in_flight_ == 0; })) {
      abandoned = planner_->Runs();
    }
  }
  for (const auto& [task, run] : abandoned) {
    logger_->Warn("Task \"" + task->def.id +
                      "\" did not return after the shutdown grace period and a kill; its lease "
                      "will lapse",
                  RunFields(task->def.id, run->trace));
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
    MutexLock lock(jobs_->mu);
    jobs_->cv.wait(lock.unique_lock(),
                   [&]() STAGEHAND_REQUIRES(jobs_->mu) { return jobs_->active == 0; });
  }
  {
    MutexLock lock(mu_);
    runtime_ = nullptr;  // runs that end from here on wake nothing
  }
  DeliverBeforeExit();
  runtime.reset();  // an engine's own runtime joins its threads here
  MutexLock lock(mu_);
  stopped_ = true;
}

}  // namespace stagehand::engine_internal
