// The scheduling engine of one plugin: every task of the plugin, global and local, driven by two
// lanes of an EngineRuntime (engine_runtime.h) instead of one loop per task. A runtime's threads
// are shared by every engine of the process, so threads do not grow with plugins. Every decision
// below is the Planner's (planner.h); this class is its shell: the lock, the threads and the
// executor's jobs. Its round trips to the store are its Releaser, DispatchRounds, Registrar and
// TaskRequests; its runs' jobs, RunJobs; its logs and observer calls, its EngineReporter.
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

#include "engine/dispatch_rounds.h"
#include "engine/engine_reporter.h"
#include "engine/engine_runtime.h"
#include "engine/history_queue.h"
#include "engine/planner.h"
#include "engine/registrar.h"
#include "engine/releaser.h"
#include "engine/run_jobs.h"
#include "engine/task_requests.h"
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
class TaskEngine final : public DrivenEngine,
                         private ReleaseEngine,
                         private RunJobsEngine,
                         private TaskRequestsEngine {
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
  void WatchCallerStop(const TaskPtr& task);

  // The runtime's steps (DrivenEngine): each does what is due and returns when it is next due.
  MonoTime Step(Lane lane) override;
  MonoTime DispatcherStep();
  MonoTime TimerStep();
  // Dispatcher: reserves `candidates` in the planner, claims them in one ClaimMany and starts
  // the runs it won.
  void ClaimAndStart(std::vector<Planner::Candidate> candidates);
  // Runs `body` (a run's job) on the runtime's executor, counted in jobs_active_.
  void SubmitRun(std::function<void()> body);
  // TaskRequestsEngine: OnStoreEvent, as if the store had announced the change.
  void RowChanged(const std::string& id) override;
  // RunJobsEngine.
  void CountRuns(int in_flight, int outside_function) override;
  void QueueHistory(std::optional<RunStart> start, std::optional<RunEnd> end) override;
  // Dispatcher: HistoryQueue::Flush, counting a database that did not answer as failing.
  bool FlushHistory(bool prune);
  // Shutdown: waits up to `wait` for every run to end; returns those still going.
  std::vector<std::pair<TaskPtr, RunPtr>> RunsLeftAfter(std::chrono::milliseconds wait);

  // PlannerAccess, for the Releaser, DispatchRounds, Registrar and RunJobs.
  void WithPlanner(const std::function<void(Planner&)>& step, Wake wake) override;
  // Marks the released runs ended in the planner, under one lock and with one wake-up of the
  // dispatcher (which then sees every freed slot at once and claims them in one statement), and
  // reports those not reported yet.
  void RunsReleased(std::span<PendingRelease> ended) override;
  // Reports the ends of the runs not reported yet (the observer's, the engine's run counts): at
  // their release, or at its first attempt the database did not answer.
  void RunsEnded(std::span<PendingRelease> ended) override;

  void StopRecurrence(const std::string& id);
  void OnStoreEvent(const StoreEvent& event);
  // Marks lanes as kicked and wakes the runtime for them.
  void KickLocked(bool timer, bool dispatcher) STAGEHAND_REQUIRES(mu_);

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

  EngineContext context_;
  Clock& clock_;
  EngineReporter reporter_;

  // The engine's one lock: the planner, the lanes' state and the counts of runs and jobs.
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  RuntimeSlots slots_{*this};
  std::unique_ptr<Planner> planner_ STAGEHAND_GUARDED_BY(mu_);
  // A lane's state, for wake-ups and the test hook: kicked (a step is asked for), and parked (not
  // stepping) until its next due time.
  struct LaneState {
    bool kicked = false;
    bool parked = false;
    MonoTime deadline = {};
    void Unpark() { parked = kicked = false; }
    // Parks until `next`; returns when the lane is next due (now, when it was kicked meanwhile).
    MonoTime Park(MonoTime next, MonoTime now) {
      deadline = next;
      parked = true;
      return kicked ? now : next;
    }
    bool Idle(MonoTime now) const { return parked && !kicked && deadline > now; }
  };
  LaneState dispatcher_ STAGEHAND_GUARDED_BY(mu_);
  LaneState timer_ STAGEHAND_GUARDED_BY(mu_);
  bool stopped_ STAGEHAND_GUARDED_BY(mu_) = false;
  // Shutdown is stopping the dispatcher and the timer.
  bool threads_stopping_ STAGEHAND_GUARDED_BY(mu_) = false;
  // The dispatcher has a claim in flight (Shutdown waits for it).
  bool claiming_ STAGEHAND_GUARDED_BY(mu_) = false;
  int runs_in_flight_ STAGEHAND_GUARDED_BY(mu_) = 0;
  // Runs starting or finishing (not inside the task function).
  int runs_outside_fn_ STAGEHAND_GUARDED_BY(mu_) = 0;
  // The run jobs of this engine on the shared executor; Shutdown waits for them.
  int jobs_active_ STAGEHAND_GUARDED_BY(mu_) = 0;
  // Set by a server change: the dispatcher replays the delivered releases.
  bool replay_due_ STAGEHAND_GUARDED_BY(mu_) = false;
  // Writes given up on: what Shutdown could not deliver (with history_queue_'s dropped records).
  std::atomic<int> undelivered_{0};

  RunHistory* history_ = nullptr;  // the store's; null without a store or history
  std::string host_;
  std::int64_t pid_ = 0;
  std::unique_ptr<HistoryQueue> history_queue_;
  std::unique_ptr<Releaser> releaser_;
  std::unique_ptr<DispatchRounds> rounds_;
  std::unique_ptr<Registrar> registrar_;
  std::unique_ptr<RunJobs> run_jobs_;
  std::unique_ptr<TaskRequests> requests_;
  std::unique_ptr<Notifications> notifications_;  // reset by Shutdown while the dispatcher runs
  // Null once Shutdown has left it; guarded by mu_ from then on.
  std::shared_ptr<EngineRuntime> runtime_;
  EngineRuntime::Handle handle_ = 0;  // set under mu_ once the engine is built
  bool warmed_up_ = false;            // dispatcher lane only
};

}  // namespace stagehand::engine_internal
