#include "engine/task_engine.h"

#include <algorithm>
#include <array>
#include <exception>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "stagehand/base/uuid.h"
#include "stagehand/time/duration.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::engine_internal {

namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

// Converts a database instant to this process's monotonic clock, given the database's clock
// `db_now` as observed at monotonic time `mono_ref`.
MonoTime MonoFromDb(WallTime instant, WallTime db_now, MonoTime mono_ref) {
  const auto delta = std::chrono::duration_cast<nanoseconds>(instant - db_now);
  constexpr auto kFar = std::chrono::hours(24 * 365 * 10);
  if (delta > kFar) return kMonoInfinity;
  if (delta < -kFar) return mono_ref - kFar;
  return mono_ref + delta;
}

// Backstage's registration writes a cron task's next start one second before its slot (§4.3), so
// that every-second crons are due at once. A run started then would end before its slot and be
// followed by the slot's own run. Returns the slot for such a time, so that a run never starts
// before the slot it is for; otherwise returns `next`. `cron` may be null (not a cron cadence).
WallTime SlotStart(const CronExpression* cron, const TimeZone& zone, WallTime next) {
  using std::chrono::seconds;
  if (cron == nullptr || next.time_since_epoch() % seconds(1) != nanoseconds(0)) return next;
  const WallTime slot = next + seconds(1);
  if (cron->Matches(next, zone) || !cron->Matches(slot, zone)) return next;
  return slot;
}

}  // namespace

// Why a run was asked to stop; the first reason wins and names the run's outcome.
enum class StopReason { kNone, kTimeout, kCancel, kLeaseLost, kShutdown, kUnscheduled };

struct TaskEngine::Run {
  std::string ticket;  // empty for local runs
  std::stop_source stop;
  std::stop_source kill;  // RunControl::kill
  StopReason reason = StopReason::kNone;
  TaskSchedule schedule;  // the settings to release with (the row's latest for global runs)
  MonoTime started{};     // for global runs: when the claim was sent
  MonoTime timeout_at = kMonoInfinity;
  MonoTime renew_at = kMonoInfinity;
  // Global runs: past fence_at the lease is at risk and the run is asked to stop; at kill_at, a
  // tenth of the lease before the database's expiry, it is killed and no longer renewed.
  MonoTime fence_at = kMonoInfinity;
  MonoTime kill_at = kMonoInfinity;
  // When a run still going after its timeout is reported as overdue (once).
  MonoTime overdue_at = kMonoInfinity;
  nanoseconds lag{0};
  bool ours = true;  // global: this host still holds the ticket as far as it knows
  // Global: a cancel asked the run to stop; the row stays held (its ticket marked) until this host
  // releases it, so the run keeps being renewed while its function stops.
  bool cancel_requested = false;
  bool timeout_signalled = false;
  bool fenced = false;  // fence_at passed without a renewal: the run was asked to stop
};

struct TaskEngine::Task {
  enum class Phase { kRegistering, kInitialWait, kWaiting, kRunning, kFinished };

  EngineTask def;
  Phase phase = Phase::kRegistering;
  MonoTime wake_at = kMonoInfinity;
  // The row as this host last saw it (global tasks; from its registration, a poll or its own
  // release): its version, so polls can leave it out and a due task can be claimed without a poll
  // while it is unchanged; its next start, to plan the wake-up; its settings when they differ from
  // def's (another host registered it differently).
  std::optional<std::int64_t> known_version;
  std::optional<WallTime> known_next;
  std::optional<TaskSettingsV2> known_settings;
  // The row may have changed in a way this host has not seen: poll it before claiming.
  bool poll_requested = false;
  // Releases this host sent whose notification has not come back yet: that notification announces
  // nothing new (the release's own result did), so it is not a reason to poll.
  int release_echoes = 0;
  // This host's latest claims of the row (hashes of their tickets), to tell its own claim
  // notifications, which may come after a later claim of its own, from other hosts'.
  std::array<std::size_t, 4> own_claims{};
  std::size_t next_own_claim = 0;
  // When to poll at the latest because another host released the row (a delayed poll_requested).
  MonoTime poll_at = kMonoInfinity;
  bool recurrence_stopped = false;
  std::shared_ptr<Run> run;
  // What only local tasks have (kept apart: a process may hold many thousands of global tasks).
  // The compiled cadence of a cron task (its own settings').
  std::optional<CronExpression> cron;
  struct Local {
    std::optional<milliseconds> cadence;  // duration cadence
    TaskState state;
  };
  std::unique_ptr<Local> local;
  std::unique_ptr<std::stop_callback<std::function<void()>>> caller_stop;
};

TaskEngine::TaskEngine(EngineContext context)
    : context_(std::move(context)),
      clock_(*context_.clock),
      logger_(context_.logger ? context_.logger : NullLogger()),
      observer_(context_.observer ? context_.observer : std::make_shared<SchedulerObserver>()),
      debug_logs_(logger_->Enabled(LogLevel::kDebug)),
      janitor_interval_(context_.options.janitor_interval),
      safety_interval_(context_.options.poll_interval),
      next_safety_poll_(clock_.MonoNow()),
      next_sweep_(janitor_interval_.count() > 0 ? clock_.MonoNow() : kMonoInfinity),
      claim_order_salt_(std::hash<std::string>{}(NewUuidV4())),
      executor_(context_.options.max_concurrency, [this] { Kick(); }) {
  runtime_ =
      context_.runtime != nullptr ? context_.runtime : std::make_shared<EngineRuntime>(clock_, 1);
  STAGEHAND_CHECK(&runtime_->clock() == &clock_);
  if (context_.store != nullptr) {
    // Half a lease: a renewal that gets no answer fails in time to be retried before the run
    // fences itself, and a release or poll never holds a thread (or shutdown) much longer.
    context_.store->SetCallTimeout(context_.options.lease / 2);
    notifications_ =
        context_.store->Listen([this](const StoreEvent& event) { OnStoreEvent(event); });
    store_notifies_ = notifications_ != nullptr;
  }
  std::lock_guard lock(mu_);
  handle_ = runtime_->Add(this);
}

TaskEngine::~TaskEngine() { Shutdown(); }

void TaskEngine::SetLeaseDeadlines(Run& run, MonoTime expires, MonoTime lease_sent) {
  // The claim or renewal was sent at lease_sent, so the database's expiry is no earlier than
  // `expires`. Renew a third of the way in; if renewals keep failing, ask the run to stop a fifth
  // of the span before the expiry and kill it a tenth before, so it is dead when the row lapses.
  const nanoseconds span = expires - lease_sent;
  run.renew_at = lease_sent + span / 3;
  run.fence_at = expires - span / 5;
  run.kill_at = expires - span / 10;
}

void TaskEngine::MarkStopping(Run& run, StopReason reason) {
  if (run.reason == StopReason::kNone) run.reason = reason;
}

void TaskEngine::SignalStop(Run& run, bool kill) {
  run.stop.request_stop();
  if (kill) run.kill.request_stop();
}

std::string TaskEngine::StopOutcome(const Task& task, StopReason reason) const {
  switch (reason) {
    case StopReason::kNone:
      return {};
    case StopReason::kTimeout:
      return "timed out after " + FormatShortDuration(task.def.timeout);
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

WallTime TaskEngine::RowStart(const Task& task, WallTime next) {
  const bool own_cadence =
      !task.known_settings || task.known_settings->cadence == task.def.schedule.settings.cadence;
  return SlotStart(own_cadence && task.cron ? &*task.cron : nullptr, task.def.schedule.zone, next);
}

milliseconds TaskEngine::RenewalHold(const Task& task, const Run& run, MonoTime sent) const {
  // The store writes min(started + hold, now + lease). Past (or near) its timeout a run that has
  // not returned yet is still stopping: its claim is held, now + lease, until its function returns.
  const milliseconds elapsed = std::chrono::ceil<milliseconds>(sent - run.started);
  return std::max(task.def.timeout, elapsed + context_.options.lease);
}

void TaskEngine::Kick() {
  {
    std::lock_guard lock(mu_);
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
}

void TaskEngine::KickLocked(bool timer, bool dispatcher) {
  kicked_timer_ = kicked_timer_ || timer;
  kicked_dispatcher_ = kicked_dispatcher_ || dispatcher;
  if (runtime_ != nullptr) runtime_->Wake(handle_, timer, dispatcher);
}

MonoTime TaskEngine::Step(Lane lane) {
  return lane == kTimer ? TimerStepAndAct() : DispatcherStep();
}

RunInfo TaskEngine::InfoOf(const Task& task, const Run& run) const {
  return RunInfo{context_.plugin_id, task.def.id, task.def.scope, run.ticket};
}

Result<std::shared_ptr<TaskEngine::Task>> TaskEngine::MakeTask(EngineTask def) const {
  const bool global = def.scope == TaskScope::kGlobal;
  if (global && context_.store == nullptr) {
    return UnavailableError("plugin '" + context_.plugin_id +
                            "' has no database, so it cannot schedule global task " + def.id);
  }
  auto task = std::make_shared<Task>();
  task->def = std::move(def);
  const TaskSettingsV2& settings = task->def.schedule.settings;
  if (const CronExpression* compiled = CompiledCron(task->def.schedule)) {
    task->cron = *compiled;
  } else if (settings.cadence_kind() == CadenceKind::kCron) {
    Result<CronExpression> cron = CronExpression::Parse(settings.cadence);
    if (!cron.ok()) return InvalidArgumentError("Invalid cron: " + cron.status().message());
    task->cron = *std::move(cron);
  }
  if (!global) {
    task->local = std::make_unique<Task::Local>();
    switch (settings.cadence_kind()) {
      case CadenceKind::kCron:
        break;
      case CadenceKind::kDuration: {
        Result<HumanDuration> duration = ParseIsoDuration(settings.cadence);
        if (!duration.ok()) return InvalidArgumentError(duration.status().message());
        task->local->cadence = ToChronoMilliseconds(*duration);
        break;
      }
      case CadenceKind::kManual:
        break;
    }
  }
  return task;
}

Status TaskEngine::ReserveIds(const std::vector<std::shared_ptr<Task>>& tasks) {
  std::lock_guard lock(mu_);
  if (shutting_down_) {
    return UnavailableError("the scheduler of plugin '" + context_.plugin_id +
                            "' is shutting down");
  }
  std::set<std::string_view> seen;
  for (const std::shared_ptr<Task>& task : tasks) {
    const std::string& id = task->def.id;
    auto it = tasks_.find(id);
    if ((it != tasks_.end() && it->second->phase != Task::Phase::kFinished) ||
        !seen.insert(id).second) {
      return ConflictError("Task " + id + " is already scheduled in this process");
    }
  }
  for (const std::shared_ptr<Task>& task : tasks) tasks_[task->def.id] = task;
  return Status::Ok();
}

void TaskEngine::Unreserve(const std::vector<std::shared_ptr<Task>>& tasks) {
  std::lock_guard lock(mu_);
  for (const std::shared_ptr<Task>& task : tasks) {
    auto it = tasks_.find(task->def.id);
    if (it != tasks_.end() && it->second == task) tasks_.erase(it);
  }
}

void TaskEngine::Activate(Task& task, const std::optional<WallTime>& row_next,
                          std::optional<std::int64_t> row_version, WallTime db_now,
                          MonoTime mono_ref, MonoTime now) {
  const bool global = task.def.scope == TaskScope::kGlobal;
  if (global) {
    // Polls leave the row out while it stays as written here.
    task.known_version = row_version;
    task.known_next = row_next;
    task.known_settings.reset();
  }
  if (task.def.has_initial_delay) {
    task.phase = Task::Phase::kInitialWait;
    task.wake_at = now + task.def.initial_delay;
    if (!global) {
      task.local->state = TaskState{};
      task.local->state.starts_at = FormatRestTime(clock_.Now() + task.def.initial_delay, kRestUtc);
    }
  } else {
    task.phase = Task::Phase::kWaiting;
    if (global) {
      task.wake_at =
          row_next ? MonoFromDb(RowStart(task, *row_next), db_now, mono_ref) : kMonoInfinity;
    } else {
      const bool manual = task.def.schedule.settings.cadence_kind() == CadenceKind::kManual;
      task.wake_at = manual ? kMonoInfinity : now;
    }
  }
}

void TaskEngine::WatchCallerStop(const std::shared_ptr<Task>& task) {
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
  std::vector<std::shared_ptr<Task>> tasks;
  tasks.reserve(defs.size());
  for (EngineTask& def : defs) {
    Result<std::shared_ptr<Task>> task = MakeTask(std::move(def));
    if (!task.ok()) return task.status();
    tasks.push_back(*std::move(task));
  }
  STAGEHAND_RETURN_IF_ERROR(ReserveIds(tasks));

  std::vector<TaskUpsert> upserts;
  std::vector<std::size_t> upserted_task;  // index in `tasks` of each upsert
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i]->def.scope != TaskScope::kGlobal) continue;
    upserts.push_back(TaskUpsert{tasks[i]->def.id, tasks[i]->def.schedule});
    upserted_task.push_back(i);
  }
  std::vector<std::optional<WallTime>> row_next(tasks.size());
  std::vector<std::optional<std::int64_t>> row_version(tasks.size());
  WallTime db_now{};
  // Read before the statement: a wake-up computed from it can only be early, never late.
  const MonoTime mono_ref = clock_.MonoNow();
  if (upserts.size() == 1) {
    Result<UpsertResult> upserted = context_.store->Upsert(upserts[0].id, upserts[0].schedule);
    if (!upserted.ok()) {
      Unreserve(tasks);
      return upserted.status().WithPrefix("Failed to persist task, ");
    }
    row_next[upserted_task[0]] = upserted->next_run_start_at;
    row_version[upserted_task[0]] = upserted->version;
    db_now = upserted->db_now;
  } else if (!upserts.empty()) {
    Result<std::vector<UpsertResult>> upserted = context_.store->UpsertMany(upserts);
    if (!upserted.ok()) {
      Unreserve(tasks);
      return upserted.status().WithPrefix("Failed to persist tasks, ");
    }
    for (std::size_t j = 0; j < upserted->size(); ++j) {
      row_next[upserted_task[j]] = (*upserted)[j].next_run_start_at;
      row_version[upserted_task[j]] = (*upserted)[j].version;
      db_now = (*upserted)[j].db_now;
    }
  }
  for (const std::shared_ptr<Task>& task : tasks) {
    logger_->Info(
        "Registered scheduled task: " + task->def.id + ", " + task->def.schedule.settings.ToJson(),
        {{"task", task->def.id}});
  }
  {
    std::lock_guard lock(mu_);
    const MonoTime now = clock_.MonoNow();
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      Activate(*tasks[i], row_next[i], row_version[i], db_now, mono_ref, now);
    }
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  for (const std::shared_ptr<Task>& task : tasks) WatchCallerStop(task);
  return Status::Ok();
}

void TaskEngine::StopRecurrence(const std::string& id) {
  std::stop_source to_signal;
  bool signal = false;
  bool finished_now = false;
  {
    std::lock_guard lock(mu_);
    auto it = tasks_.find(id);
    if (it == tasks_.end()) return;
    Task& task = *it->second;
    task.recurrence_stopped = true;
    if (task.run) {
      MarkStopping(*task.run, StopReason::kUnscheduled);
      to_signal = task.run->stop;
      signal = true;
    } else if (task.phase != Task::Phase::kFinished) {
      task.phase = Task::Phase::kFinished;
      finished_now = true;
    }
  }
  if (signal) to_signal.request_stop();
  if (finished_now) logger_->Info("Task worker finished: " + id, {{"task", id}});
  Kick();
}

Status TaskEngine::Trigger(const std::string& id) {
  {
    std::lock_guard lock(mu_);
    if (shutting_down_) {
      return UnavailableError("the scheduler of plugin '" + context_.plugin_id +
                              "' is shutting down");
    }
    auto it = tasks_.find(id);
    if (it != tasks_.end() && it->second->def.scope == TaskScope::kLocal &&
        it->second->phase != Task::Phase::kFinished) {
      Task& task = *it->second;
      if (task.phase == Task::Phase::kRunning || task.run) {
        return ConflictError("Task " + id + " is currently running");
      }
      task.phase = Task::Phase::kWaiting;
      task.wake_at = clock_.MonoNow();
      KickLocked(/*timer=*/true, /*dispatcher=*/false);
      cv_.notify_all();
      return Status::Ok();
    }
  }
  if (context_.store == nullptr) return NotFoundError("Task " + id + " does not exist");
  STAGEHAND_RETURN_IF_ERROR(context_.store->Trigger(id));
  {
    std::lock_guard lock(mu_);
    auto it = tasks_.find(id);
    if (it != tasks_.end() && it->second->phase == Task::Phase::kWaiting) {
      it->second->poll_requested = true;
      KickLocked(/*timer=*/false, /*dispatcher=*/true);
    }
  }
  cv_.notify_all();
  return Status::Ok();
}

Status TaskEngine::Cancel(const std::string& id) {
  {
    std::shared_ptr<Run> local_run;
    bool kill = false;
    {
      std::lock_guard lock(mu_);
      auto it = tasks_.find(id);
      if (it != tasks_.end() && it->second->def.scope == TaskScope::kLocal &&
          it->second->phase != Task::Phase::kFinished) {
        if (!it->second->run) return ConflictError("Task " + id + " is not running");
        local_run = it->second->run;
        // A cancel of a run that is already stopping (timed out, say) ends it without grace.
        kill = local_run->stop.stop_requested();
        MarkStopping(*local_run, StopReason::kCancel);
      }
    }
    if (local_run) {
      SignalStop(*local_run, kill);
      return Status::Ok();
    }
  }
  if (context_.store == nullptr) return NotFoundError("Task " + id + " does not exist");
  STAGEHAND_RETURN_IF_ERROR(context_.store->Cancel(id, context_.options.lease));
  std::shared_ptr<Run> run;
  bool kill = false;
  {
    std::lock_guard lock(mu_);
    auto it = tasks_.find(id);
    if (it != tasks_.end() && it->second->run && it->second->run->ours) {
      run = it->second->run;
      run->cancel_requested = true;
      kill = run->stop.stop_requested();
      MarkStopping(*run, StopReason::kCancel);
    }
  }
  if (run) SignalStop(*run, kill);
  return Status::Ok();
}

bool TaskEngine::HasLocalTask(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = tasks_.find(id);
  return it != tasks_.end() && it->second->def.scope == TaskScope::kLocal;
}

std::optional<TaskState> TaskEngine::LocalTaskState(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = tasks_.find(id);
  if (it == tasks_.end() || it->second->def.scope != TaskScope::kLocal) return std::nullopt;
  return it->second->local->state;
}

std::optional<WorkerStatus> TaskEngine::WorkerState(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return std::nullopt;
  switch (it->second->phase) {
    case Task::Phase::kInitialWait:
      return WorkerStatus::kInitialWait;
    case Task::Phase::kRunning:
      return WorkerStatus::kRunning;
    default:
      return it->second->run ? WorkerStatus::kRunning : WorkerStatus::kIdle;
  }
}

// ---------------------------------------------------------------------------------------------
// Dispatcher: database work for global tasks.

bool TaskEngine::DispatcherHasWork(MonoTime now) const {
  if (shutting_down_ || context_.store == nullptr) return false;
  if (executor_.busy() >= context_.options.max_concurrency) return false;
  bool any_waiting = false;
  for (const auto& [id, task] : tasks_) {
    if (task->def.scope != TaskScope::kGlobal || task->phase != Task::Phase::kWaiting) continue;
    any_waiting = true;
    if (task->poll_requested || task->wake_at <= now || task->poll_at <= now) return true;
  }
  return any_waiting && (now >= next_safety_poll_ || now >= next_sweep_);
}

MonoTime TaskEngine::NextDispatcherWake() const {
  MonoTime next = kMonoInfinity;
  const bool can_claim = !shutting_down_ && context_.store != nullptr &&
                         executor_.busy() < context_.options.max_concurrency;
  bool any_waiting = false;
  for (const auto& [id, task] : tasks_) {
    if (task->def.scope != TaskScope::kGlobal) continue;
    if (task->run && task->run->ours && !task->run->ticket.empty()) {
      next = std::min(next, task->run->renew_at);
    }
    if (can_claim && task->phase == Task::Phase::kWaiting) {
      any_waiting = true;
      next = std::min({next, task->wake_at, task->poll_at});
    }
  }
  if (any_waiting) next = std::min({next, next_safety_poll_, next_sweep_});
  return next;
}

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
  bool renew = false;
  bool poll = false;
  bool sweep = false;
  {
    std::lock_guard lock(mu_);
    if (threads_stopping_) return kMonoInfinity;
    dispatcher_parked_ = false;
    kicked_dispatcher_ = false;
    const MonoTime now = clock_.MonoNow();
    for (const auto& [id, task] : tasks_) {
      if (task->run && task->run->ours && !task->run->ticket.empty() &&
          task->run->renew_at <= now) {
        renew = true;
      }
    }
    poll = DispatcherHasWork(now);
    sweep = poll && (now >= next_sweep_ || now >= next_safety_poll_);
  }
  if (renew) RenewLeases();
  if (poll) PollAndClaim(sweep);
  std::lock_guard lock(mu_);
  dispatcher_deadline_ = NextDispatcherWake();
  dispatcher_parked_ = true;
  cv_.notify_all();
  return kicked_dispatcher_ ? clock_.MonoNow() : dispatcher_deadline_;
}

void TaskEngine::RenewLeases() {
  struct Due {
    std::shared_ptr<Task> task;
    std::shared_ptr<Run> run;
  };
  std::vector<Due> due;
  {
    std::lock_guard lock(mu_);
    const MonoTime now = clock_.MonoNow();
    for (const auto& [id, task] : tasks_) {
      const std::shared_ptr<Run>& run = task->run;
      if (run && run->ours && !run->ticket.empty() && run->renew_at <= now) {
        run->renew_at = kMonoInfinity;
        due.push_back({task, run});
      }
    }
  }
  const milliseconds lease = context_.options.lease;
  for (const Due& item : due) {
    const MonoTime sent = clock_.MonoNow();
    Result<LeaseStatus> renewed = context_.store->RenewLease(
        item.task->def.id, item.run->ticket, RenewalHold(*item.task, *item.run, sent), lease);
    const RunInfo info = InfoOf(*item.task, *item.run);
    bool lost = false;
    bool cancel_noticed = false;
    {
      std::lock_guard lock(mu_);
      if (!item.run->ours) continue;
      if (!renewed.ok()) {
        item.run->renew_at =
            clock_.MonoNow() + std::min(lease / 10, context_.options.retry_backoff);
      } else if (*renewed != LeaseStatus::kLost) {
        SetLeaseDeadlines(*item.run, sent + lease, sent);
        item.run->fenced = false;
        if (*renewed == LeaseStatus::kCancelRequested && !item.run->cancel_requested) {
          item.run->cancel_requested = true;
          cancel_noticed = true;
          MarkStopping(*item.run, StopReason::kCancel);
        }
      } else {
        item.run->ours = false;
        item.run->fence_at = kMonoInfinity;
        item.run->kill_at = kMonoInfinity;
        lost = true;
        MarkStopping(*item.run, StopReason::kLeaseLost);
      }
      KickLocked(/*timer=*/true, /*dispatcher=*/false);
    }
    cv_.notify_all();
    if (!renewed.ok()) {
      logger_->Warn("Failed to renew the lease of task \"" + item.task->def.id + "\", " +
                        renewed.status().message(),
                    {{"task", item.task->def.id}});
      observer_->OnLeaseRenewalFailed(info);
    } else if (lost) {
      logger_->Warn(
          "Task ticket for \"" + item.task->def.id + "\" is no longer valid; killing the run",
          {{"task", item.task->def.id}});
      // Another host may run the task now: this run ends at once, without grace.
      SignalStop(*item.run, /*kill=*/true);
      observer_->OnLeaseLost(info);
    } else {
      if (cancel_noticed) {
        logger_->Info("Task \"" + item.task->def.id + "\" was cancelled; stopping the run",
                      {{"task", item.task->def.id}});
        SignalStop(*item.run, /*kill=*/item.run->stop.stop_requested());
      }
      observer_->OnLeaseRenewed(info);
    }
  }
}

bool TaskEngine::Unannounced(const PollResult& polled, const std::vector<std::string>& ids,
                             const std::vector<std::optional<std::int64_t>>& known_versions) {
  if (!polled.swept_ids.empty()) return true;
  std::size_t i = 0;
  for (const PollEntry& entry : polled.entries) {
    while (i < ids.size() && ids[i] != entry.id) ++i;
    if (i == ids.size()) return true;
    // A row whose version this host knew (so it was idle) was claimed, changed or removed since.
    if (known_versions[i] &&
        (entry.readiness == Readiness::kMissing || entry.readiness == Readiness::kInvalidSettings ||
         entry.running || entry.version != *known_versions[i])) {
      return true;
    }
  }
  return false;
}

void TaskEngine::PollAndClaim(bool sweep) {
  // A safety or sweep round polls every waiting task. Otherwise only the tasks whose row may have
  // changed unseen are polled (an event, a trigger, a lost claim), and a due task whose row is
  // known is claimed directly: the claim requires the row's version to be the one known.
  std::vector<std::string> ids;
  std::vector<std::optional<std::int64_t>> known_versions;
  std::vector<std::shared_ptr<Task>> polled_tasks;
  std::vector<Candidate> candidates;
  bool full = false;
  {
    std::lock_guard lock(mu_);
    const MonoTime now = clock_.MonoNow();
    full = sweep || now >= next_safety_poll_;
    for (const auto& [id, task] : tasks_) {
      if (task->def.scope != TaskScope::kGlobal || task->phase != Task::Phase::kWaiting) continue;
      const bool unseen = task->poll_requested || task->poll_at <= now ||
                          (task->wake_at <= now && !task->known_version);
      if (full || unseen) {
        ids.push_back(id);
        known_versions.push_back(task->known_version);
        polled_tasks.push_back(task);
        task->poll_requested = false;
        task->poll_at = kMonoInfinity;
      } else if (task->wake_at <= now) {
        const std::optional<WallTime> due =
            task->known_next ? std::optional(RowStart(*task, *task->known_next)) : std::nullopt;
        candidates.push_back({task, *task->known_version, due, task->known_settings});
      }
    }
  }
  if (!ids.empty() && !Poll(ids, known_versions, polled_tasks, sweep, full, candidates)) return;
  if (candidates.empty()) return;
  // Earliest due first; ties in an order of this engine's own, so that hosts sharing a table
  // reach for different rows first.
  for (Candidate& candidate : candidates) {
    candidate.tie = std::hash<std::string>{}(candidate.task->def.id) ^ claim_order_salt_;
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.due, a.tie) < std::tie(b.due, b.tie);
  });
  std::vector<Candidate> reserved;
  reserved.reserve(candidates.size());
  for (Candidate& candidate : candidates) {
    // The others stay due and known: the next round (when a slot frees, the executor kicks)
    // claims them.
    if (!executor_.TryReserve()) break;
    reserved.push_back(std::move(candidate));
  }
  if (!reserved.empty()) ClaimAndStart(reserved);
}

bool TaskEngine::Poll(const std::vector<std::string>& ids,
                      const std::vector<std::optional<std::int64_t>>& known_versions,
                      const std::vector<std::shared_ptr<Task>>& polled_tasks, bool sweep, bool full,
                      std::vector<Candidate>& ready) {
  if (debug_logs_) {
    logger_->Debug("Polling " + std::to_string(ids.size()) + " task(s)" +
                   (sweep ? " with sweep" : ""));
  }
  // Read before the statement: a wake-up computed from it can only be early, never late.
  const MonoTime mono_ref = clock_.MonoNow();
  Result<PollResult> polled = context_.store->PollChanged(ids, known_versions, sweep);
  if (!polled.ok()) {
    logger_->Warn("Task state poll failed, " + polled.status().message());
    std::lock_guard lock(mu_);
    const MonoTime retry_at = mono_ref + context_.options.retry_backoff;
    safety_interval_ = context_.options.poll_interval;
    next_safety_poll_ = std::max(next_safety_poll_, retry_at);
    for (const std::shared_ptr<Task>& task : polled_tasks) {
      if (task->phase != Task::Phase::kWaiting) continue;
      task->poll_at = std::min(task->poll_at, retry_at);  // still unseen: polled again then
      task->wake_at = std::max(task->wake_at, retry_at);
    }
    if (sweep) next_sweep_ = retry_at;
    return false;
  }

  std::vector<std::string> finished_missing;
  std::vector<std::pair<std::string, std::string>> finished_invalid;
  {
    std::lock_guard lock(mu_);
    if (sweep)
      next_sweep_ = janitor_interval_.count() > 0 ? mono_ref + janitor_interval_ : kMonoInfinity;
    if (full) {
      const bool quiet = store_notifies_ && !Unannounced(*polled, ids, known_versions);
      safety_interval_ =
          quiet ? std::min(
                      std::max(safety_interval_ * 2, context_.options.poll_interval),
                      std::max(context_.options.max_poll_interval, context_.options.poll_interval))
                : context_.options.poll_interval;
      next_safety_poll_ = mono_ref + safety_interval_;
      if (debug_logs_) {
        logger_->Debug("Next safety-net poll in " + std::to_string(safety_interval_.count()) +
                       " ms");
      }
    }
    // Rows left out of the result are unchanged, idle and not due. A task among them whose wake-up
    // has come (it is computed to be early, never late) waits for its row's next start again.
    for (const std::shared_ptr<Task>& task_ptr : polled_tasks) {
      Task& task = *task_ptr;
      if (task.phase != Task::Phase::kWaiting || task.wake_at > mono_ref) continue;
      task.wake_at =
          task.known_next
              ? std::max(MonoFromDb(RowStart(task, *task.known_next), polled->db_now, mono_ref),
                         mono_ref + milliseconds(1))
              : kMonoInfinity;
    }
    for (PollEntry& entry : polled->entries) {
      auto it = tasks_.find(entry.id);
      if (it == tasks_.end() || it->second->phase != Task::Phase::kWaiting) continue;
      Task& task = *it->second;
      // A row running elsewhere is reported again once idle, whatever its next start then.
      task.known_version = entry.running ? std::nullopt : std::optional(entry.version);
      task.known_next = entry.next_run_start_at;
      if (entry.settings && *entry.settings != task.def.schedule.settings) {
        task.known_settings = entry.settings;
      } else {
        task.known_settings.reset();
      }
      switch (entry.readiness) {
        case Readiness::kMissing:
          task.phase = Task::Phase::kFinished;
          finished_missing.push_back(entry.id);
          break;
        case Readiness::kInvalidSettings:
          task.phase = Task::Phase::kFinished;
          finished_invalid.emplace_back(entry.id, entry.settings_error);
          break;
        case Readiness::kReady: {
          const WallTime start = RowStart(task, *entry.next_run_start_at);
          if (start > polled->db_now) {
            task.wake_at = MonoFromDb(start, polled->db_now, mono_ref);  // due at its slot
            break;
          }
          task.wake_at = mono_ref;
          ready.push_back({it->second, entry.version, start, task.known_settings});
          break;
        }
        case Readiness::kNotReady:
          if (entry.running) {
            task.wake_at = kMonoInfinity;
            if (entry.current_run_expires_at) {
              next_sweep_ = std::min(
                  next_sweep_, MonoFromDb(*entry.current_run_expires_at, polled->db_now, mono_ref) +
                                   milliseconds(1));
            }
          } else if (entry.next_run_start_at) {
            task.wake_at =
                MonoFromDb(RowStart(task, *entry.next_run_start_at), polled->db_now, mono_ref);
          } else {
            task.wake_at = kMonoInfinity;
          }
          break;
      }
    }
  }
  for (const std::string& id : finished_missing) {
    logger_->Info("No longer able to find task \"" + id +
                      "\"; aborting and assuming that it has been unregistered or expired",
                  {{"task", id}});
  }
  for (const auto& [id, why] : finished_invalid) {
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
  if (debug_logs_) logger_->Debug("Poll found " + std::to_string(ready.size()) + " ready task(s)");
  return true;
}

void TaskEngine::ClaimAndStart(const std::vector<Candidate>& candidates) {
  bool shutting_down = false;
  {
    std::lock_guard lock(mu_);
    shutting_down = shutting_down_;
    claiming_ = !shutting_down;  // Shutdown waits for this claim, so it signals the runs it starts
  }
  if (shutting_down) {
    // Not under mu_: giving a slot back kicks the engine, which takes it.
    for (std::size_t i = 0; i < candidates.size(); ++i) executor_.CancelReservation();
    return;
  }
  struct ClaimDone {
    TaskEngine* engine;
    ~ClaimDone() {
      {
        std::lock_guard lock(engine->mu_);
        engine->claiming_ = false;
      }
      engine->cv_.notify_all();
    }
  } claim_done{this};
  std::vector<ClaimRequest> claims;
  claims.reserve(candidates.size());
  for (const Candidate& candidate : candidates) {
    claims.push_back(ClaimRequest{candidate.task->def.id, NewUuidV4(), candidate.task->def.timeout,
                                  candidate.version});
  }
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      Task& task = *candidates[i].task;
      task.own_claims[task.next_own_claim++ % task.own_claims.size()] =
          std::hash<std::string>{}(claims[i].ticket);
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
    for (std::size_t i = 0; i < candidates.size(); ++i) executor_.CancelReservation();
    for (const Candidate& candidate : candidates) {
      logger_->Warn(
          "Failed to claim task \"" + candidate.task->def.id + "\", " + claimed.status().message(),
          {{"task", candidate.task->def.id}});
    }
    std::lock_guard lock(mu_);
    const MonoTime retry_at = clock_.MonoNow() + context_.options.retry_backoff;
    for (const Candidate& candidate : candidates) {
      candidate.task->wake_at = std::max(candidate.task->wake_at, retry_at);
    }
    return;
  }
  std::vector<std::pair<std::shared_ptr<Task>, std::shared_ptr<Run>>> started;
  started.reserve(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& candidate = candidates[i];
    const std::shared_ptr<Task>& task = candidate.task;
    const ClaimResult& claim = (*claimed)[i];
    if (!claim.claimed) {
      executor_.CancelReservation();
      observer_->OnClaimLost(context_.plugin_id, task->def.id);
      // Held elsewhere, changed, or not due after all: a poll tells which.
      std::lock_guard lock(mu_);
      task->known_version.reset();
      task->poll_requested = true;
      continue;
    }
    auto run = std::make_shared<Run>();
    run->ticket = claims[i].ticket;
    run->schedule = task->def.schedule;
    if (candidate.settings) run->schedule.settings = *candidate.settings;
    run->started = sent;
    run->timeout_at = sent + task->def.timeout;
    SetLeaseDeadlines(*run, sent + std::min(task->def.timeout, context_.options.lease), sent);
    if (candidate.due && claim.db_now > *candidate.due) {
      run->lag = std::chrono::duration_cast<nanoseconds>(claim.db_now - *candidate.due);
    }
    started.emplace_back(task, std::move(run));
  }
  if (started.empty()) return;
  {
    std::lock_guard lock(mu_);
    for (const auto& [task, run] : started) {
      task->run = run;
      task->phase = Task::Phase::kRunning;
      ++runs_in_flight_;
      ++runs_outside_fn_;
    }
    KickLocked(/*timer=*/true, /*dispatcher=*/false);
  }
  cv_.notify_all();
  for (auto& [task, run] : started) {
    executor_.Submit([this, task = task, run = run] { ExecuteGlobalRun(task, run); });
  }
}

TaskEngine::Outcome TaskEngine::Invoke(const Task& task, Run& run) {
  {
    std::lock_guard lock(mu_);
    --runs_outside_fn_;
  }
  cv_.notify_all();  // WaitIdleForTesting may be waiting for this run to be inside its function
  struct BackOutside {
    TaskEngine* engine;
    ~BackOutside() {
      std::lock_guard lock(engine->mu_);
      ++engine->runs_outside_fn_;
    }
  } back_outside{this};
  std::optional<std::string> message;
  std::string name = "Error";
  try {
    Status status = task.def.fn(RunControl{run.stop.get_token(), run.kill.get_token()});
    if (!status.ok()) message = status.message();
  } catch (const std::exception& error) {
    message = error.what();
  } catch (...) {
    message = "<no reason given>";
    name = "Unknown";
  }
  Outcome outcome;
  {
    std::lock_guard lock(mu_);
    outcome.reason = run.reason;
  }
  if (!message) return outcome;
  // A stopped run's failure is named by why it was stopped, then by what the function said.
  const std::string why = StopOutcome(task, outcome.reason);
  outcome.error = ErrorJson(why.empty() ? *message : why + ": " + *message, name);
  return outcome;
}

void TaskEngine::LogFailure(const Task& task, const Outcome& outcome) const {
  if (!outcome.error) return;
  const std::string line = "Task " + task.def.id + " failed, " + *outcome.error;
  // Operators alert on errors: a run that shutdown or an operator stopped is not one.
  if (outcome.reason == StopReason::kShutdown || outcome.reason == StopReason::kCancel ||
      outcome.reason == StopReason::kUnscheduled) {
    logger_->Warn(line, {{"task", task.def.id}});
  } else {
    logger_->Error(line, {{"task", task.def.id}});
  }
}

void TaskEngine::ExecuteGlobalRun(std::shared_ptr<Task> task, std::shared_ptr<Run> run) {
  const RunInfo info = InfoOf(*task, *run);
  observer_->OnRunStarted(info, run->lag);
  const MonoTime began = clock_.MonoNow();
  Outcome outcome = Invoke(*task, *run);
  const nanoseconds duration = clock_.MonoNow() - began;
  LogFailure(*task, outcome);
  bool ours = false;
  {
    std::lock_guard lock(mu_);
    ours = run->ours;
    run->ours = false;  // no more renewals: the release below ends the claim
  }
  PendingRelease ended;
  ended.task = std::move(task);
  ended.run = std::move(run);
  ended.info = info;
  ended.duration = duration;
  ended.error = std::move(outcome.error);
  if (!ours) {
    FinishGlobalRun(ended);
    return;
  }
  EnqueueRelease(std::move(ended));
}

void TaskEngine::EnqueueRelease(PendingRelease release) {
  {
    std::lock_guard lock(release_mu_);
    pending_releases_.push_back(std::move(release));
    if (releasing_) return;
    releasing_ = true;
  }
  std::vector<PendingRelease> batch;
  while (true) {
    batch.clear();
    {
      std::lock_guard lock(release_mu_);
      if (pending_releases_.empty()) {
        releasing_ = false;
        return;
      }
      batch.swap(pending_releases_);
    }
    ReleaseBatch(batch);
  }
}

void TaskEngine::ReleaseBatch(std::vector<PendingRelease>& batch) {
  std::vector<ReleaseRequest> releases;
  releases.reserve(batch.size());
  for (const PendingRelease& ended : batch) {
    releases.push_back(
        ReleaseRequest{ended.task->def.id, ended.run->ticket, ended.run->schedule, ended.error});
  }
  if (store_notifies_) {
    std::lock_guard lock(mu_);
    for (const PendingRelease& ended : batch) ++ended.task->release_echoes;
  }
  // Read before the statement: a wake-up computed from it can only be early, never late.
  const MonoTime mono_ref = clock_.MonoNow();
  Result<std::vector<ReleaseResult>> released = context_.store->ReleaseMany(releases);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    PendingRelease& ended = batch[i];
    const std::string& id = ended.task->def.id;
    const ReleaseResult* result = released.ok() ? &(*released)[i] : nullptr;
    if (debug_logs_) {
      logger_->Debug("Release of task " + id + ": " +
                         (result == nullptr  ? released.status().message()
                          : result->released ? "released"
                                             : "ticket no longer held"),
                     {{"task", id}});
    }
    if (result == nullptr) {
      logger_->Warn("Failed to release task \"" + id + "\", " + released.status().message() +
                        "; its lease will lapse",
                    {{"task", id}});
    }
    if (result != nullptr && result->released && result->version) {
      ended.row_version = result->version;
      ended.row_next = result->next_run_start_at;
      const Task& task = *ended.task;
      const bool own_cadence =
          ended.run->schedule.settings.cadence == task.def.schedule.settings.cadence;
      ended.row_wake_at =
          result->next_run_start_at
              ? MonoFromDb(SlotStart(own_cadence && task.cron ? &*task.cron : nullptr,
                                     task.def.schedule.zone, *result->next_run_start_at),
                           result->db_now, mono_ref)
              : kMonoInfinity;
    }
    if (store_notifies_ && (result == nullptr || !result->released)) {
      std::lock_guard lock(mu_);
      ended.task->release_echoes = 0;  // nothing (known) was written, so nothing echoes
    }
  }
  for (const PendingRelease& ended : batch) FinishGlobalRun(ended);
}

void TaskEngine::FinishGlobalRun(const PendingRelease& ended) {
  const std::shared_ptr<Task>& task = ended.task;
  bool finished = false;
  {
    std::lock_guard lock(mu_);
    if (task->run == ended.run) task->run.reset();
    if (task->phase == Task::Phase::kRunning) {
      finished = task->recurrence_stopped;
      task->phase = finished ? Task::Phase::kFinished : Task::Phase::kWaiting;
      if (ended.row_version) {
        task->known_version = ended.row_version;
        task->known_next = ended.row_next;
        task->wake_at = ended.row_wake_at;
      } else {
        task->known_version.reset();
        task->poll_requested = true;
      }
    }
    --runs_in_flight_;
    --runs_outside_fn_;
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  ReportRunEnd(ended.info, ended.duration, ended.error);
  if (finished) logger_->Info("Task worker finished: " + task->def.id, {{"task", task->def.id}});
}

void TaskEngine::ReportRunEnd(const RunInfo& info, std::chrono::nanoseconds duration,
                              const std::optional<std::string>& error) {
  if (error) {
    observer_->OnRunFailed(info, duration, *error);
  } else {
    observer_->OnRunCompleted(info, duration);
  }
}

// ---------------------------------------------------------------------------------------------
// Timer: local runs, timeouts and fences. No I/O.

MonoTime TaskEngine::LocalNextWake(const Task& task, MonoTime run_started,
                                   WallTime wall_now) const {
  const MonoTime now = clock_.MonoNow();
  if (task.local->cadence) return std::max(now, run_started + *task.local->cadence);
  if (task.cron) {
    Result<WallTime> next = task.cron->NextAfter(wall_now, task.def.schedule.zone);
    if (!next.ok()) return kMonoInfinity;
    return now + (*next - wall_now);
  }
  return kMonoInfinity;
}

MonoTime TaskEngine::TimerStep(MonoTime now, TimerActions* actions) {
  MonoTime next = kMonoInfinity;
  for (const auto& [id, task_ptr] : tasks_) {
    Task& task = *task_ptr;
    const bool local = task.def.scope == TaskScope::kLocal;
    if (task.phase == Task::Phase::kInitialWait) {
      if (task.wake_at <= now) {
        task.phase = Task::Phase::kWaiting;
        if (local) {
          const bool manual = task.def.schedule.settings.cadence_kind() == CadenceKind::kManual;
          task.wake_at = manual ? kMonoInfinity : now;
        } else {
          task.poll_requested = true;
          KickLocked(/*timer=*/false, /*dispatcher=*/true);
        }
      } else {
        next = std::min(next, task.wake_at);
      }
    }
    if (local && task.phase == Task::Phase::kWaiting && !shutting_down_) {
      if (task.wake_at <= now) {
        if (executor_.TryReserve()) {
          auto run = std::make_shared<Run>();
          run->schedule = task.def.schedule;
          run->started = now;
          run->timeout_at = now + task.def.timeout;
          run->lag = now - task.wake_at;
          task.run = run;
          task.phase = Task::Phase::kRunning;
          ++runs_in_flight_;
          ++runs_outside_fn_;
          const WallTime wall = clock_.Now();
          TaskState state;
          state.status = TaskState::Status::kRunning;
          state.started_at = FormatRestTime(wall, kRestUtc);
          state.times_out_at = FormatRestTime(wall + task.def.timeout, kRestUtc);
          state.last_run_ended_at = task.local->state.last_run_ended_at;
          state.last_run_error = task.local->state.last_run_error;
          task.local->state = std::move(state);
          actions->to_start.push_back(task_ptr);
        }
      } else {
        next = std::min(next, task.wake_at);
      }
    }
    if (task.run) {
      Run& run = *task.run;
      if (!run.timeout_signalled) {
        if (run.timeout_at <= now) {
          run.timeout_signalled = true;
          run.overdue_at = now + context_.options.lease;
          MarkStopping(run, StopReason::kTimeout);
          actions->to_stop.push_back(task.run);
        } else {
          next = std::min(next, run.timeout_at);
        }
      } else if (run.overdue_at <= now) {
        run.overdue_at = kMonoInfinity;
        actions->overdue.push_back({task_ptr, task.run});
      } else {
        next = std::min(next, run.overdue_at);
      }
      if (!local && run.ours) {
        // Renewals kept failing: ask the run to stop, and kill it before the claim lapses. Its
        // lease is still renewed if the database comes back in between.
        if (run.fence_at <= now && !run.fenced) {
          run.fenced = true;
          MarkStopping(run, StopReason::kLeaseLost);
          actions->to_stop.push_back(task.run);
          actions->fenced.push_back({task_ptr, task.run});
        }
        if (run.kill_at <= now) {
          run.ours = false;
          actions->to_kill.push_back(task.run);
        } else {
          next = std::min(next, run.fenced ? run.kill_at : run.fence_at);
        }
      }
    }
  }
  return next;
}

MonoTime TaskEngine::TimerStepAndAct() {
  TimerActions actions;
  MonoTime next = kMonoInfinity;
  {
    std::lock_guard lock(mu_);
    if (threads_stopping_) return kMonoInfinity;
    timer_parked_ = false;
    kicked_timer_ = false;
    next = TimerStep(clock_.MonoNow(), &actions);
  }
  cv_.notify_all();
  {
    for (const std::shared_ptr<Run>& run : actions.to_stop) SignalStop(*run, /*kill=*/false);
    for (const std::shared_ptr<Run>& run : actions.to_kill) SignalStop(*run, /*kill=*/true);
    for (const auto& [task, run] : actions.fenced) {
      logger_->Warn("Task \"" + task->def.id +
                        "\" could not renew its lease in time; stopping the run (it is killed "
                        "before the lease lapses if still running)",
                    {{"task", task->def.id}});
      observer_->OnLeaseLost(InfoOf(*task, *run));
    }
    for (const auto& [task, run] : actions.overdue) {
      logger_->Warn("Task \"" + task->def.id + "\" is overdue: its function has not returned " +
                        FormatShortDuration(context_.options.lease) + " after its timeout of " +
                        FormatShortDuration(task->def.timeout) +
                        "; its claim is held until it does",
                    {{"task", task->def.id}});
      observer_->OnRunOverdue(InfoOf(*task, *run));
    }
    for (const std::shared_ptr<Task>& task : actions.to_start) {
      std::shared_ptr<Run> run;
      {
        std::lock_guard lock(mu_);
        run = task->run;
      }
      executor_.Submit([this, task, run] { ExecuteLocalRun(task, run); });
    }
  }
  std::lock_guard lock(mu_);
  timer_deadline_ = next;
  timer_parked_ = true;
  cv_.notify_all();
  return kicked_timer_ ? clock_.MonoNow() : next;
}

void TaskEngine::ExecuteLocalRun(std::shared_ptr<Task> task, std::shared_ptr<Run> run) {
  const RunInfo info = InfoOf(*task, *run);
  observer_->OnRunStarted(info, run->lag);
  const MonoTime began = clock_.MonoNow();
  const Outcome outcome = Invoke(*task, *run);
  const std::optional<std::string>& error = outcome.error;
  const nanoseconds duration = clock_.MonoNow() - began;
  LogFailure(*task, outcome);
  bool finished = false;
  {
    std::lock_guard lock(mu_);
    const WallTime wall = clock_.Now();
    task->run.reset();
    task->local->state.last_run_ended_at = FormatRestTime(wall, kRestUtc);
    task->local->state.last_run_error = error;
    finished = task->recurrence_stopped;
    if (finished) {
      task->phase = Task::Phase::kFinished;
    } else {
      task->phase = Task::Phase::kWaiting;
      task->wake_at = LocalNextWake(*task, run->started, wall);
    }
    TaskState state;
    if (!finished && task->wake_at != kMonoInfinity) {
      state.starts_at =
          FormatRestTime(wall + (task->wake_at - clock_.MonoNow()), &context_.default_zone);
    }
    state.last_run_ended_at = task->local->state.last_run_ended_at;
    state.last_run_error = task->local->state.last_run_error;
    task->local->state = std::move(state);
    --runs_in_flight_;
    --runs_outside_fn_;
    KickLocked(/*timer=*/true, /*dispatcher=*/false);
  }
  cv_.notify_all();
  ReportRunEnd(info, duration, error);
  if (finished) logger_->Info("Task worker finished: " + task->def.id, {{"task", task->def.id}});
}

bool TaskEngine::WaitIdleForTesting(std::chrono::milliseconds real_timeout) {
  SystemClock& real = SystemClock::Instance();
  const MonoTime deadline = real.MonoNow() + real_timeout;
  const auto engine_idle = [&] {
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
      std::unique_lock lock(mu_);
      if (!real.WaitUntil(lock, cv_, deadline, {}, engine_idle)) return false;
      if (threads_stopping_) return true;
      runtime = runtime_;
    }
    const auto left = std::chrono::ceil<milliseconds>(deadline - real.MonoNow());
    if (left.count() <= 0 || !runtime->WaitIdleForTesting(left)) return false;
    std::lock_guard lock(mu_);
    if (engine_idle()) return true;
  }
}

void TaskEngine::OnStoreEvent(const StoreEvent& event) {
  {
    std::lock_guard lock(mu_);
    const MonoTime now = clock_.MonoNow();
    bool kick = false;
    const auto apply = [&](Task& task) {
      if (task.def.scope != TaskScope::kGlobal || task.phase == Task::Phase::kFinished) return;
      if (task.run && task.run->ours &&
          (event.kind == StoreEvent::Kind::kCancel || event.kind == StoreEvent::Kind::kSweep ||
           event.kind == StoreEvent::Kind::kResync || event.kind == StoreEvent::Kind::kDelete)) {
        task.run->renew_at = now;  // verify the ticket now
      }
      if (event.kind == StoreEvent::Kind::kResync) task.release_echoes = 0;
      if (event.kind == StoreEvent::Kind::kClaim) {
        const std::size_t claim = std::hash<std::string>{}(event.ticket);
        if (std::find(task.own_claims.begin(), task.own_claims.end(), claim) !=
            task.own_claims.end()) {
          return;  // this host's
        }
        if (task.phase != Task::Phase::kWaiting) return;
        // Held elsewhere: its release (or, if its host dies, the sweep) is announced later.
        task.known_version.reset();
        task.wake_at = kMonoInfinity;
        task.poll_at = kMonoInfinity;
        next_sweep_ = std::min(next_sweep_, now + context_.options.lease + milliseconds(1));
        kick = kick || !dispatcher_parked_ || next_sweep_ < dispatcher_deadline_;
        return;
      }
      if (event.kind == StoreEvent::Kind::kRelease && task.release_echoes > 0) {
        --task.release_echoes;
        return;
      }
      // Outside kWaiting the request waits: the task polls once it waits again.
      if (task.phase == Task::Phase::kWaiting && event.kind == StoreEvent::Kind::kRelease &&
          context_.options.release_poll_delay.count() > 0) {
        task.poll_at = std::min(task.poll_at, now + context_.options.release_poll_delay);
        // The parked dispatcher only needs waking when this moved its deadline earlier.
        kick = kick || !dispatcher_parked_ || task.poll_at < dispatcher_deadline_;
      } else {
        task.poll_requested = true;
        kick = true;
      }
    };
    if (event.kind == StoreEvent::Kind::kResync) {
      safety_interval_ = context_.options.poll_interval;
      next_safety_poll_ = std::min(next_safety_poll_, now + safety_interval_);
      for (const auto& [id, task] : tasks_) apply(*task);
    } else if (auto it = tasks_.find(event.task_id); it != tasks_.end()) {
      apply(*it->second);
    }
    if (event.kind != StoreEvent::Kind::kRelease && event.kind != StoreEvent::Kind::kClaim) {
      kick = true;
    }
    if (!kick) return;
    KickLocked(/*timer=*/false, /*dispatcher=*/true);
  }
  cv_.notify_all();
}

void TaskEngine::Shutdown() {
  std::vector<std::shared_ptr<Run>> to_signal;
  {
    std::unique_lock lock(mu_);
    if (shutting_down_) {
      if (stopped_) return;
    }
    shutting_down_ = true;
    // A claim in flight may start runs: they are signalled with the others. It ends within the
    // store's call timeout.
    cv_.wait(lock, [&] { return !claiming_; });
    for (const auto& [id, task] : tasks_) {
      if (!task->run) continue;
      MarkStopping(*task->run, StopReason::kShutdown);
      to_signal.push_back(task->run);
    }
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  for (const std::shared_ptr<Run>& run : to_signal) SignalStop(*run, /*kill=*/false);
  // Runs still going after the grace are killed, and their leases renewed a little longer, so
  // that a command's processes are gone before another host may take the task over.
  std::vector<std::shared_ptr<Run>> to_kill;
  std::vector<std::string> abandoned;
  {
    std::unique_lock lock(mu_);
    const MonoTime deadline = clock_.MonoNow() + context_.options.shutdown_grace;
    if (!clock_.WaitUntil(lock, cv_, deadline, {}, [&] { return runs_in_flight_ == 0; })) {
      for (const auto& [id, task] : tasks_) {
        if (task->run) to_kill.push_back(task->run);
      }
    }
  }
  for (const std::shared_ptr<Run>& run : to_kill) SignalStop(*run, /*kill=*/true);
  if (!to_kill.empty()) {
    std::unique_lock lock(mu_);
    const MonoTime deadline = clock_.MonoNow() + context_.options.lease / 5;
    if (!clock_.WaitUntil(lock, cv_, deadline, {}, [&] { return runs_in_flight_ == 0; })) {
      for (const auto& [id, task] : tasks_) {
        if (task->run) abandoned.push_back(id);
      }
    }
  }
  for (const std::string& id : abandoned) {
    logger_->Warn("Task \"" + id +
                      "\" did not return after the shutdown grace period and a kill; its lease "
                      "will lapse",
                  {{"task", id}});
  }
  {
    std::lock_guard lock(mu_);
    threads_stopping_ = true;
  }
  notifications_.reset();
  cv_.notify_all();
  std::shared_ptr<EngineRuntime> runtime;
  {
    std::lock_guard lock(mu_);
    runtime = std::exchange(runtime_, nullptr);  // runs that end from here on wake nothing
  }
  if (runtime != nullptr) runtime->Remove(handle_);
  runtime.reset();  // an engine's own runtime joins its threads here
  executor_.Stop();
  std::lock_guard lock(mu_);
  stopped_ = true;
}

}  // namespace stagehand::engine_internal
