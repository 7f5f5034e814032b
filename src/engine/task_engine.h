// The scheduling engine of one plugin: every task of the plugin, global and local, driven by two
// lanes of an EngineRuntime (engine_runtime.h) instead of one loop per task. A runtime's threads
// are shared by every engine of the process, so threads do not grow with plugins. Every decision
// below is the Planner's (planner.h); this class is its shell: the lock, the store calls, the
// executor, the logs and the observer.
//
// - The dispatcher lane does all database work for global tasks. It releases the runs that ended
//   since its last step, in one statement, before anything else, so the slots they free are claimed
//   together in the same step. It knows each waiting task's row (version, next start) from its
//   registration, its own releases and polls; a due task whose row it knows is claimed directly
//   (the claim requires that version, so a row changed since is never run on stale settings), and
//   only the tasks whose row may have changed unseen (an event, a trigger, a lost claim) are
//   polled, in one statement, before claiming. Claims of tasks due together go out in one
//   statement, for as many as it has free run slots; another host's announced claim tells it the
//   row is held until that host's release is announced. A safety-net poll of every waiting task
//   (with the janitor sweep folded in) catches writers that do not notify; while the store notifies
//   and those polls find nothing unannounced, it backs off up to EngineOptions::max_poll_interval.
//   It also renews the leases of this host's runs. It is next due at the earliest due time it knows
//   of, the next renewal, the safety-net poll, or when an event wakes it: an in-process
//   registration, trigger or cancel, or a store notification (PostgreSQL NOTIFY).
// - The timer lane does no I/O: it starts local runs when due, signals runs at their timeout, and
//   fences runs whose lease could not be renewed in time, so a slow database never delays them.
// - Task functions run on a bounded executor; a run's job hands its end to the dispatcher, which
//   releases the ticket, and returns, so its executor slot frees at once.
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
//   3. wait up to EngineOptions::shutdown_grace for the runs to return (the dispatcher releases
//      their tickets, so other hosts can take over at once), then signal the kill token of those
//      still going and wait up to a fifth of a lease more;
//   4. stop the dispatcher and timer lanes and the store subscription (a run still going then is
//      one whose function ignores both tokens: it is no longer renewed, and ends with the process);
//   5. wait for the executor's jobs, and release the runs that ended after the dispatcher stopped.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include "engine/engine_runtime.h"
#include "engine/history_queue.h"
#include "engine/planner.h"
#include "engine/release_queue.h"
#include "stagehand/base/logger.h"
#include "stagehand/base/mutex.h"
#include "stagehand/base/status.h"
#include "stagehand/engine/engine_options.h"
#include "stagehand/engine/observer.h"
#include "stagehand/model/task_function.h"
#include "stagehand/model/task_state.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"
#include "stagehand/time/cron.h"

namespace stagehand::engine_internal {

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
  // This host as the run history names it: the host name (gethostname when empty) and process.
  std::string host = {};
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
  // Replaces the definition of registered task `task.id` (SchedulerService::RescheduleTask): a
  // global task's row is upserted as a registration does (settings_json rewritten; its next start
  // moves earlier only if the new cadence's is earlier); the new definition applies at once when
  // no run is going, else from the next run (the run goes on with the old one). A task retired
  // while its run goes on is scheduled again. Errors: kNotFound when no task with that id is
  // registered or it has finished; kFailedPrecondition when the scope differs; kInvalidArgument;
  // kUnavailable (store, or shutting down).
  Status Redefine(EngineTask task);
  // Stops scheduling task `id` (SchedulerService::UnscheduleTask); a run in progress is not
  // interrupted, and the task finishes when it ends. Errors: kNotFound when no task with that id
  // is scheduled.
  Status Retire(const std::string& id);
  // Local first, then the store. See SchedulerService::TriggerTask. `caller`, when valid, is the
  // trigger's trace context: the run this host starts for it is its child.
  Status Trigger(const std::string& id, const TraceContext& caller = {});
  // Local first, then the store. See SchedulerService::CancelTask.
  Status Cancel(const std::string& id);
  // Global tasks, in the store; the dispatcher re-reads the row. See SchedulerService::PauseTask
  // and ResumeTask.
  Status Pause(const std::string& id, const PauseRequest& request);
  Status Resume(const std::string& id);

  // Returns whether this process has a local task with `id`.
  bool HasLocalTask(const std::string& id) const;
  // Returns the state of a local task (nullopt if there is none).
  std::optional<TaskState> LocalTaskState(const std::string& id) const;
  // Returns this process's worker state for a task (nullopt if it has no worker for it).
  std::optional<WorkerStatus> WorkerState(const std::string& id) const;
  // Returns what a run of this process that is still going has reported so far (its output), or
  // nullopt when no run with that id is going here.
  std::optional<RunReport::Snapshot> LiveRunReport(const std::string& run_id) const;

  // This plugin's part of readiness (GET /.backstage/health/v1/readiness): not ready while its
  // database has been unreachable for longer than `grace` (as its store saw it, or its own calls
  // failing), and from then until the database answers again and every claim this host holds is
  // confirmed again; `reason` says why. Thread-safe; no database operation.
  struct DatabaseStatus {
    bool ready = true;
    std::string reason;
    DatabaseHealth health;  // the store's, with the engine's own failures folded in
  };
  DatabaseStatus Readiness(std::chrono::milliseconds grace);
  // What the store knows of its database, with the engine's own failing calls folded in (as in
  // Readiness, without its latch). Thread-safe; no database operation.
  DatabaseHealth Database() const;

  // Runs the shutdown order above. Idempotent.
  void Shutdown();

  // After Shutdown: how many writes (releases of runs, history records) could not be delivered
  // to the database before the engine stopped (each was logged). Their rows are swept as lost
  // once their claims lapse.
  int UndeliveredWrites() const;

  // Test hook: blocks until the dispatcher and the timer are both parked with no wake-up pending
  // and every run is inside its task function (none starting or finishing), or until
  // `real_timeout` of real time passes. Returns whether that state was reached; true at once once
  // Shutdown has begun stopping the two threads.
  bool WaitIdleForTesting(std::chrono::milliseconds real_timeout = std::chrono::seconds(10));

 private:
  // Registration steps (RegisterMany).
  void WatchCallerStop(const TaskPtr& task);

  // The runtime's steps (DrivenEngine): each does what is due and returns when it is next due.
  MonoTime Step(Lane lane) override;
  MonoTime DispatcherStep();
  MonoTime TimerStep();

  // Dispatcher steps. Each does its I/O without holding mu_.
  void RenewLeases(const std::vector<std::pair<TaskPtr, RunPtr>>& due);
  // Polls the plan's rows when it says so, then claims its candidates. Returns false when the
  // poll failed.
  bool Poll(Planner::DispatchPlan& plan);
  // Claims every candidate in one ClaimMany and starts the runs it won.
  // Skips the slots of plan.candidates missed beyond their catch-up window (ADR 0014): one
  // SkipSlot each, logged and counted; a candidate whose store cannot skip stays to be claimed.
  void SkipMissedSlots(Planner::DispatchPlan& plan);
  // Logs a skipped slot at info and reports it to the observer.
  void LogSkippedSlot(const PlannedTask& task, WallTime slot, std::chrono::nanoseconds late,
                      const std::optional<WallTime>& next) const;
  void ClaimAndStart(std::vector<Planner::Candidate> candidates);
  // Pause and Resume: `change` writes the row of global task `id`; then the dispatcher re-reads
  // it. Errors: kConflict for a local task; kNotFound without a store; `change`'s.
  Status ChangeInStore(const std::string& id, const std::function<Status()>& change);
  void ExecuteGlobalRun(TaskPtr task, RunPtr run);
  // Queues `release` for the dispatcher and wakes it (any thread).
  void EnqueueRelease(PendingRelease release);
  // Releases every queued run in one ReleaseMany (the dispatcher, or Shutdown once it stopped).
  // A batch the database did not answer stays queued, in order, to be sent again once the
  // backoff allows. Returns whether nothing is left queued.
  bool ReleasePending();
  // Sends `batch`; returns it when the database did not answer (to be queued again), else
  // finishes its runs and returns nothing.
  std::vector<PendingRelease> ReleaseBatch(std::vector<PendingRelease> batch);
  // The ReleaseRequest of a finished run (retried from its second attempt).
  ReleaseRequest RequestOf(const PendingRelease& ended) const;
  // Dispatcher, after a server change: sends every release delivered within the replay window
  // again; one the new server lacked is written there (OnWriteReplayed), one it lacked whose row
  // another host has changed since is a run at risk (OnRunAtRisk). Kept for the next step when
  // the database does not answer; dropped, with their runs at risk, when it refuses them.
  void ReplayReleases();
  // Dispatcher: releases the rows that claims without an answer took (ticket-guarded: a claim
  // that was not committed changes nothing), due again at once, so that the slot, trigger or
  // retry they were claimed for runs; kept for the next step when the database does not answer.
  void GiveBackDoubtfulClaims();
  // Reports what the new server made of one replayed batch.
  void ApplyReplayedReleases(const std::vector<ReleaseRequest>& batch,
                             const std::vector<ReleaseResult>& replayed);
  // Logs and reports that run `run_id` of `task_id` is at risk (see OnRunAtRisk), once per run
  // (its renewal and its release may both find its claim gone). Not under mu_.
  void ReportAtRisk(const std::string& task_id, const std::string& run_id,
                    std::optional<WallTime> slot, const std::string& why);
  // Dispatcher, after a server change: registers every global task again, in case the new server
  // lacks the last registrations.
  void Reregister(const std::vector<TaskPtr>& tasks);
  // Shutdown, once the dispatcher has stopped: delivers the queued releases and history records,
  // sending again after the backoff for up to a lease; logs and counts what is left.
  void DeliverBeforeExit();
  // Marks the released runs ended in the planner, under one lock and with one wake-up of the
  // dispatcher (which then sees every freed slot at once and claims them in one statement), and
  // reports those not reported yet.
  void FinishGlobalRuns(std::span<PendingRelease> ended);
  // Reports the ends of the runs not reported yet (the observer's, the engine's run counts): at
  // their release, or at its first attempt the database did not answer.
  void ReportGlobalRunEnds(std::span<PendingRelease> ended);
  void ExecuteLocalRun(TaskPtr task, RunPtr run);
  // Decides what follows the global run `ended` (Planner::PlanGlobalRunEnd: a retry, skipped
  // slots, a slot given back at shutdown), after reading the attempt its predecessor recorded in
  // the row when a retry depends on it. Runs on the run's thread, and again on the dispatcher's
  // when the row could not be read (ended.end_undecided); returns false then.
  bool PlanGlobalRunEnd(PendingRelease& ended, bool started);
  // Logs and reports a retry of `run` (attempt `attempt` failed) in `delay`.
  void ReportRetry(const PlannedTask& task, const RunInfo& run, int attempt,
                   std::chrono::milliseconds delay);
  // Runs `body` (a run's job) on the runtime's executor, counted in jobs_.
  void SubmitRun(std::function<void()> body);
  // How a run's function ended: the error JSON (nullopt on success) and why it was stopped.
  struct Outcome {
    std::optional<std::string> error;
    StopReason reason{};
    bool started = true;  // false: the function was never called
  };
  // Calls the task function with the run's tokens, catching exceptions, and reports the start
  // (`info`) just before; a run whose claim is at risk, or whose host began to shut down, is not
  // started (nor reported as started). A stopped run's error message starts with the reason
  // ("timed out after 2s: ...").
  Outcome Invoke(const PlannedTask& task, PlannedRun& run, const RunInfo& info);
  // Logs a failed run: at error, or at warn when shutdown, a cancel or an unschedule stopped it.
  void LogFailure(const PlannedTask& task, const PlannedRun& run, const Outcome& outcome) const;
  void ReportRunEnd(const RunInfo& info, std::chrono::nanoseconds duration,
                    const RunFinish& finish);
  // The history's account of how `run` ended.
  static RunFinish FinishOf(const PlannedRun& run, const Outcome& outcome);
  RunOrigin OriginOf(const PlannedRun& run) const;
  // The start of a global run whose claim did not record it, for a history write that no release
  // carries; nullopt when the claim recorded it.
  std::optional<RunStart> UnrecordedStart(const PlannedTask& task, const PlannedRun& run) const;
  // Queues history writes that no claim or release carries (HistoryQueue) and wakes the
  // dispatcher.
  void QueueHistory(std::optional<RunStart> start, std::optional<RunEnd> end);
  // Dispatcher: HistoryQueue::Flush, counting a database that did not answer as failing.
  bool FlushHistory(bool prune);
  // Dispatcher: records that this host still runs the global tasks `ids` (the registrations'
  // heartbeat, about once an hour).
  void RefreshRegistrations(const std::vector<std::string>& ids);
  void StopRecurrence(const std::string& id);
  void OnStoreEvent(const StoreEvent& event);
  // Marks lanes as kicked and wakes the runtime for them.
  void KickLocked(bool timer, bool dispatcher) STAGEHAND_REQUIRES(mu_);
  RunInfo InfoOf(const PlannedTask& task, const PlannedRun& run) const;
  // Returns a starting run's span context when runs are traced (EngineOptions::trace_runs): a
  // child of `caller`'s when that is valid, else the root of a new trace; otherwise an invalid
  // context.
  TraceContext TraceOf(const TraceContext& caller) const;
  // The trace id the run history keeps: only a sampled trace's, whose spans a collector has.
  static std::optional<std::string> HistoryTraceId(const TraceContext& trace);
  // The fields of a log line about one run: its task, and its trace and span ids when traced.
  static LogFields RunFields(const std::string& task_id, const TraceContext& trace);
  // Requests the run's stop token and, with `kill`, its kill token too. Not under mu_ (the
  // tokens' callbacks are the task function's).
  static void SignalStop(PlannedRun& run, bool kill);

  // The planner's run slots: the runtime's executor, for this engine.
  class RuntimeSlots final : public RunSlots {
   public:
    explicit RuntimeSlots(TaskEngine& engine) : engine_(engine) {}
    bool TryTake() override;
    void Return() override;
    bool Available() override;

   private:
    TaskEngine& engine_;
  };
  // The run jobs of this engine on the shared executor; Shutdown waits for them. Shared with the
  // jobs, so that the last one's count outlives the engine's wait.
  struct Jobs {
    Mutex mu;
    std::condition_variable cv;
    int active STAGEHAND_GUARDED_BY(mu) = 0;
  };

  EngineContext context_;
  Clock& clock_;
  std::shared_ptr<Logger> logger_;
  std::shared_ptr<SchedulerObserver> observer_;
  const bool debug_logs_;  // whether debug records are kept (skip building them otherwise)

  mutable Mutex mu_;
  std::condition_variable_any cv_;
  RuntimeSlots slots_{*this};
  std::unique_ptr<Planner> planner_ STAGEHAND_GUARDED_BY(mu_);
  bool kicked_dispatcher_ STAGEHAND_GUARDED_BY(mu_) = false;
  bool kicked_timer_ STAGEHAND_GUARDED_BY(mu_) = false;
  // Each lane's next due time while it is parked (not stepping); for wake-ups and the test hook.
  bool dispatcher_parked_ STAGEHAND_GUARDED_BY(mu_) = false;
  bool timer_parked_ STAGEHAND_GUARDED_BY(mu_) = false;
  MonoTime dispatcher_deadline_ STAGEHAND_GUARDED_BY(mu_) = {};
  MonoTime timer_deadline_ STAGEHAND_GUARDED_BY(mu_) = {};
  bool stopped_ STAGEHAND_GUARDED_BY(mu_) = false;
  // Shutdown is stopping the dispatcher and the timer.
  bool threads_stopping_ STAGEHAND_GUARDED_BY(mu_) = false;
  // The dispatcher has a claim in flight (Shutdown waits for it).
  bool claiming_ STAGEHAND_GUARDED_BY(mu_) = false;
  int runs_in_flight_ STAGEHAND_GUARDED_BY(mu_) = 0;
  // Runs starting or finishing (not inside the task function).
  int runs_outside_fn_ STAGEHAND_GUARDED_BY(mu_) = 0;

  ReleaseQueue releases_{context_.options.replay_window};
  // Set by a server change (under mu_): the dispatcher replays the delivered releases.
  bool replay_due_ STAGEHAND_GUARDED_BY(mu_) = false;
  // Writes given up on: what Shutdown could not deliver (with history_queue_'s dropped records).
  std::atomic<int> undelivered_{0};

  std::shared_ptr<Jobs> jobs_ = std::make_shared<Jobs>();
  RunHistory* history_ = nullptr;  // the store's; null without a store or history
  // The store's; null without a store, or when it keeps no registrations.
  TaskRegistrations* registrations_ = nullptr;
  std::string host_;
  std::int64_t pid_ = 0;
  std::unique_ptr<HistoryQueue> history_queue_;
  std::unique_ptr<Notifications> notifications_;  // reset by Shutdown while the dispatcher runs
  // Null once Shutdown has left it; guarded by mu_ from then on.
  std::shared_ptr<EngineRuntime> runtime_;
  EngineRuntime::Handle handle_ = 0;  // set under mu_ once the engine is built
  bool warmed_up_ = false;            // dispatcher lane only
};

}  // namespace stagehand::engine_internal
