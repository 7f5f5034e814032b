// The scheduling engine of one plugin: every task of the plugin, global and local, driven by two
// lanes of an EngineRuntime (engine_runtime.h) instead of one loop per task. A runtime's threads
// are shared by every engine of the process, so threads do not grow with plugins.
//
// - The dispatcher lane does all database work for global tasks. It knows each waiting task's
//   row (version, next start) from its registration, its own releases and polls; a due task whose
//   row it knows is claimed directly (the claim requires that version, so a row changed since is
//   never run on stale settings), and only the tasks whose row may have changed unseen (an event,
//   a trigger, a lost claim) are polled, in one statement, before claiming. Claims of tasks due
//   together go out in one statement, for as many as it has free executor slots; another host's
//   announced claim tells it the row is held until that host's release is announced. A safety-net
//   poll of every waiting task (with the janitor sweep folded in) catches writers that do not
//   notify; while the store notifies and those polls find nothing unannounced, it backs off up to
//   EngineOptions::max_poll_interval. It also renews the leases of this host's runs. It is next
//   due at the earliest due time it knows of, the next renewal, the safety-net poll, or when an
//   event wakes it: an in-process registration, trigger or cancel, or a store notification
//   (PostgreSQL NOTIFY).
// - The timer lane does no I/O: it starts local runs when due, signals runs at their timeout, and
//   fences runs whose lease could not be renewed in time, so a slow database never delays them.
// - Task functions run on a bounded executor; each run releases its own ticket when it returns.
//
// A run never outlives its claim: the claim of a run whose function has not returned is renewed
// past its timeout (the run is overdue, and reported so), so no host can start the task again
// while it is still stopping; a run whose renewals keep failing is asked to stop (RunControl::stop)
// a fifth of its lease before the database's expiry and killed (RunControl::kill) a tenth before.
// A cron row due at Backstage's "slot - 1 s" registration time is started at the slot.
//
// Shutdown order (Shutdown(), also run by the destructor):
//   1. stop claiming and stop starting local runs (leases of running tasks keep being renewed);
//   2. signal every running task's stop token;
//   3. wait up to EngineOptions::shutdown_grace for the runs to return (each releases its ticket,
//      so other hosts can take over at once), then signal the kill token of those still going and
//      wait up to a fifth of a lease more;
//   4. stop the dispatcher and timer lanes and the store subscription (a run still going then is
//      one whose function ignores both tokens: it is no longer renewed, and ends with the process);
//   5. join the executor threads.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_runtime.h"
#include "engine/executor.h"
#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"
#include "stagehand/engine/engine_options.h"
#include "stagehand/engine/observer.h"
#include "stagehand/model/task_function.h"
#include "stagehand/model/task_state.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"
#include "stagehand/time/cron.h"

namespace stagehand::engine_internal {

enum class StopReason;

// Everything the engine needs from its owner.
struct EngineContext {
  std::string plugin_id;
  TaskStore* store = nullptr;  // may be null when the plugin has only local tasks
  Clock* clock = nullptr;
  std::shared_ptr<Logger> logger;
  std::shared_ptr<SchedulerObserver> observer;
  EngineOptions options;
  // The scheduler's zone: REST times the engine shows in a zone (a local task's next start after a
  // run; see FormatRestTime) are written in it.
  TimeZone default_zone = TimeZone::Utc();
  // The threads that drive the engine, shared with other engines on the same clock; when null the
  // engine makes its own (one dispatcher thread and one timer thread).
  std::shared_ptr<EngineRuntime> runtime = nullptr;
};

// A task ready to be registered: validated, with its settings and zone resolved.
struct EngineTask {
  std::string id;
  TaskScope scope = TaskScope::kGlobal;
  TaskSchedule schedule;
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds initial_delay{0};
  bool has_initial_delay = false;
  TaskFunction fn;
  std::stop_token stop;
};

// Thread-safe. Its dispatcher and timer are the two lanes of an EngineRuntime (shared with the
// process's other engines, or its own).
class TaskEngine final : public DrivenEngine {
 public:
  explicit TaskEngine(EngineContext context);

  ~TaskEngine() override;
  TaskEngine(const TaskEngine&) = delete;
  TaskEngine& operator=(const TaskEngine&) = delete;

  // Registers a task and starts scheduling it. Global tasks are upserted first.
  // Errors: kConflict if an active task with this id exists; kUnavailable (store);
  // kInvalidArgument.
  Status Register(EngineTask task);
  // Registers several tasks at once, all or nothing: the global ones in one UpsertMany. Errors: as
  // Register, for the first task that fails (kConflict also when an id appears twice); on any
  // error no task is registered.
  Status RegisterMany(std::vector<EngineTask> tasks);
  // Local first, then the store. See SchedulerService::TriggerTask.
  Status Trigger(const std::string& id);
  // Local first, then the store. See SchedulerService::CancelTask.
  Status Cancel(const std::string& id);

  // Returns whether this process has a local task with `id`.
  bool HasLocalTask(const std::string& id) const;
  // Returns the state of a local task (nullopt if there is none).
  std::optional<TaskState> LocalTaskState(const std::string& id) const;
  // Returns this process's worker state for a task (nullopt if it has no worker for it).
  std::optional<WorkerStatus> WorkerState(const std::string& id) const;

  // Runs the shutdown order above. Idempotent.
  void Shutdown();

  // Test hook: blocks until the dispatcher and the timer are both parked with no wake-up pending
  // and every run is inside its task function (none starting or finishing), or until
  // `real_timeout` of real time passes. Returns whether that state was reached; true at once once
  // Shutdown has begun stopping the two threads.
  bool WaitIdleForTesting(std::chrono::milliseconds real_timeout = std::chrono::seconds(10));

 private:
  struct Run;
  struct Task;

  // Registration steps (RegisterMany).
  Result<std::shared_ptr<Task>> MakeTask(EngineTask def) const;
  Status ReserveIds(const std::vector<std::shared_ptr<Task>>& tasks);
  void Unreserve(const std::vector<std::shared_ptr<Task>>& tasks);
  void Activate(Task& task, const std::optional<WallTime>& row_next,
                std::optional<std::int64_t> row_version, WallTime db_now, MonoTime mono_ref,
                MonoTime now);  // requires mu_
  void WatchCallerStop(const std::shared_ptr<Task>& task);

  // The runtime's steps (DrivenEngine): each does what is due and returns when it is next due.
  MonoTime Step(Lane lane) override;
  MonoTime DispatcherStep();
  MonoTime TimerStepAndAct();

  // Dispatcher steps. Each returns having done its I/O without holding mu_.
  void RenewLeases();
  void PollAndClaim(bool sweep);
  // A due task to claim, with the row as this host knows it: the claim requires that version, and
  // the run uses those settings (nullopt: the task's own).
  struct Candidate {
    std::shared_ptr<Task> task;
    std::int64_t version = 0;
    std::optional<WallTime> due;
    std::optional<TaskSettingsV2> settings;
    std::size_t tie = 0;  // orders candidates of equal due time
  };
  // Returns whether a safety-net poll of `ids` found a change nobody announced to this host: a
  // row it knew idle that is now running, changed or gone, or an expired run it swept.
  static bool Unannounced(const PollResult& polled, const std::vector<std::string>& ids,
                          const std::vector<std::optional<std::int64_t>>& known_versions);
  // Polls `ids` (PollChanged) and updates what this host knows of their rows; appends the ready
  // ones to `ready`. `full`: every waiting task is polled (the safety-net round). Returns false
  // when the poll failed (the tasks are polled again after the retry backoff).
  bool Poll(const std::vector<std::string>& ids,
            const std::vector<std::optional<std::int64_t>>& known_versions,
            const std::vector<std::shared_ptr<Task>>& polled_tasks, bool sweep, bool full,
            std::vector<Candidate>& ready);
  // Claims every candidate in one ClaimMany and starts the runs it won; gives back the slots of
  // the others.
  void ClaimAndStart(const std::vector<Candidate>& candidates);
  void ExecuteGlobalRun(std::shared_ptr<Task> task, std::shared_ptr<Run> run);
  // A finished global run waiting for its release.
  struct PendingRelease {
    std::shared_ptr<Task> task;
    std::shared_ptr<Run> run;
    RunInfo info;
    std::chrono::nanoseconds duration{0};
    std::optional<std::string> error;
    // The row after the release, when the store reported it: the task then waits for that next
    // start without polling.
    std::optional<std::int64_t> row_version;
    std::optional<WallTime> row_next;
    MonoTime row_wake_at = kMonoInfinity;
  };
  // Queues `release`; unless another run's thread is already releasing, releases every queued run
  // (one ReleaseMany per round) until the queue is empty. So a lone release goes out at once, and
  // runs that end while a release is in flight go out together in the next statement.
  void EnqueueRelease(PendingRelease release);
  void ReleaseBatch(std::vector<PendingRelease>& batch);
  // Marks the run ended in this process's bookkeeping and reports it.
  void FinishGlobalRun(const PendingRelease& ended);
  void ExecuteLocalRun(std::shared_ptr<Task> task, std::shared_ptr<Run> run);
  // How a run's function ended: the error JSON (nullopt on success) and why it was stopped.
  struct Outcome {
    std::optional<std::string> error;
    StopReason reason{};
  };
  // Calls the task function with the run's tokens, catching exceptions. A stopped run's error
  // message starts with the reason ("timed out after 2s: ...").
  Outcome Invoke(const Task& task, Run& run);
  // Logs a failed run: at error, or at warn when shutdown, a cancel or an unschedule stopped it.
  void LogFailure(const Task& task, const Outcome& outcome) const;
  void ReportRunEnd(const RunInfo& info, std::chrono::nanoseconds duration,
                    const std::optional<std::string>& error);

  MonoTime NextDispatcherWake() const;         // requires mu_
  bool DispatcherHasWork(MonoTime now) const;  // requires mu_
  struct TimerActions {
    std::vector<std::shared_ptr<Task>> to_start;
    std::vector<std::shared_ptr<Run>> to_stop;
    std::vector<std::shared_ptr<Run>> to_kill;
    std::vector<std::pair<std::shared_ptr<Task>, std::shared_ptr<Run>>> fenced;
    std::vector<std::pair<std::shared_ptr<Task>, std::shared_ptr<Run>>> overdue;
  };
  MonoTime TimerStep(MonoTime now, TimerActions* actions);  // requires mu_
  MonoTime LocalNextWake(const Task& task, MonoTime run_started, WallTime wall_now) const;
  void StopRecurrence(const std::string& id);
  void OnStoreEvent(const StoreEvent& event);
  void Kick();  // wakes both lanes
  // Marks lanes as kicked and wakes the runtime for them. Requires mu_.
  void KickLocked(bool timer, bool dispatcher);
  RunInfo InfoOf(const Task& task, const Run& run) const;
  // Sets when `run` renews its lease, when it is asked to stop and when it is killed, after a
  // successful claim or renewal sent at `lease_sent` that holds the row until `expires` at least.
  static void SetLeaseDeadlines(Run& run, MonoTime expires, MonoTime lease_sent);
  // The `timeout` to pass to RenewLease: the task's own while the run is well within it, and past
  // (or near) it long enough that the renewal extends the claim by a whole lease.
  std::chrono::milliseconds RenewalHold(const Task& task, const Run& run, MonoTime sent) const;
  // Returns when a run of `task` due at `next` (its row's next start) may start: at `next`, or at
  // the cron slot when `next` is Backstage's "slot - 1 s" registration time. Requires mu_.
  static WallTime RowStart(const Task& task, WallTime next);
  // Records why `run` is being stopped, unless a reason is already recorded. Requires mu_.
  static void MarkStopping(Run& run, StopReason reason);
  // Requests the run's stop token and, with `kill`, its kill token too. Not under mu_ (the
  // tokens' callbacks are the task function's).
  static void SignalStop(Run& run, bool kill);
  // The text naming how a stopped run ended ("timed out after 2s"); empty for kNone.
  std::string StopOutcome(const Task& task, StopReason reason) const;

  EngineContext context_;
  Clock& clock_;
  std::shared_ptr<Logger> logger_;
  std::shared_ptr<SchedulerObserver> observer_;
  const bool debug_logs_;  // whether debug records are kept (skip building them otherwise)
  std::chrono::milliseconds janitor_interval_;

  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::map<std::string, std::shared_ptr<Task>> tasks_;
  bool kicked_dispatcher_ = false;
  bool kicked_timer_ = false;
  bool shutting_down_ = false;
  // Each lane's next due time while it is parked (not stepping); for wake-ups and the test hook.
  bool dispatcher_parked_ = false;
  bool timer_parked_ = false;
  MonoTime dispatcher_deadline_{};
  MonoTime timer_deadline_{};
  bool stopped_ = false;
  bool threads_stopping_ = false;  // Shutdown is stopping the dispatcher and the timer
  bool claiming_ = false;          // the dispatcher has a claim in flight (Shutdown waits for it)
  int runs_in_flight_ = 0;
  int runs_outside_fn_ = 0;  // runs starting or finishing (not inside the task function)
  // The wait between safety-net polls: poll_interval, doubled after every quiet one up to
  // max_poll_interval while the store notifies.
  std::chrono::milliseconds safety_interval_;
  MonoTime next_safety_poll_;
  MonoTime next_sweep_;
  // Orders due tasks of equal due time before a claim, differently on every host.
  const std::size_t claim_order_salt_;

  // Finished global runs not yet released, and whether a run's thread is releasing them. Guarded by
  // release_mu_, which is never held together with mu_.
  std::mutex release_mu_;
  std::vector<PendingRelease> pending_releases_;
  bool releasing_ = false;

  Executor executor_;
  std::unique_ptr<Notifications> notifications_;  // reset by Shutdown while the dispatcher runs
  bool store_notifies_ = false;                   // whether Listen subscribed; set before threads
  // Null once Shutdown has left it; guarded by mu_ from then on.
  std::shared_ptr<EngineRuntime> runtime_;
  EngineRuntime::Handle handle_ = 0;  // set under mu_ once the engine is built
  bool warmed_up_ = false;            // dispatcher lane only
};

}  // namespace stagehand::engine_internal
