// The decisions of one plugin's scheduling engine, with no I/O, no locks and no threads: the task
// table, and what to renew, poll, claim, start, signal and release, as functions of the table, an
// event (a poll's result, a claim's, a store notification, a run's end) and the time. TaskEngine
// (task_engine.h) is the shell around it: it holds the lock, calls the store, runs the functions
// on the executor, and carries out the actions the planner returns. Tests drive the planner step
// by step (tests/unit/engine/planner_test.cc).
//
// Time: every method takes the monotonic `now` it decides at; database instants are converted
// with the database clock (db_now) observed at a monotonic reference (mono_ref), read before the
// statement, so a wake-up computed from them can only be early, never late.
//
// Not thread-safe: the shell calls it under its one mutex.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/engine/engine_options.h"
#include "stagehand/model/run_report.h"
#include "stagehand/model/schedule.h"
#include "stagehand/model/task_function.h"
#include "stagehand/model/task_run.h"
#include "stagehand/model/task_state.h"
#include "stagehand/store/task_registrations.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"
#include "stagehand/time/cron.h"
#include "stagehand/trace/sampler.h"

namespace stagehand::engine_internal {

// A task ready to be registered: validated, with its settings and zone resolved.
struct EngineTask {
  std::string id;
  TaskScope scope = TaskScope::kGlobal;
  TaskSchedule schedule;
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds initial_delay{0};
  bool has_initial_delay = false;
  // A scheduled slot missed by more than this (plus kCatchUpGrace) is skipped rather than run
  // (ADR 0014); nullopt: every missed slot runs once, at once (Backstage's behaviour). The jitter
  // is schedule.jitter_offset.
  std::optional<std::chrono::milliseconds> catchup_window;
  // Retries of a failed or timed-out run (docs/adr/0015-retries.md); nullopt: none.
  std::optional<RetryPolicy> retry;
  TaskFunction fn;
  std::stop_token stop;
};

// Why a run was asked to stop; the first reason wins and names the run's outcome.
enum class StopReason { kNone, kTimeout, kCancel, kLeaseLost, kShutdown, kUnscheduled };

// One run of a task, from its start (a local run) or claim (a global run) to its end. The stop
// sources are the run's RunControl; the planner never signals them itself, it returns the runs to
// signal.
struct PlannedRun {
  std::string ticket;  // empty for local runs
  // The run's id in the history: the ticket of a global run; a local run's is set by the shell.
  std::string run_id;
  RunTrigger trigger = RunTrigger::kSchedule;
  std::optional<WallTime> slot;  // the time the run was due for; none when triggered
  int attempt = 1;
  std::shared_ptr<RunReport> report;  // what the function tells of its run (RunControl::report)
  std::stop_source stop;
  std::stop_source kill;  // RunControl::kill
  StopReason reason = StopReason::kNone;
  TaskSchedule schedule;  // the settings to release with (the row's latest for global runs)
  MonoTime started{};     // for global runs: when the claim was sent
  WallTime claimed_at{};  // global runs: the database's time of the claim, the run's start
  // Global runs: whether the run's start was sent to the history, by its claim or after
  // kShortRun (else its release writes the run whole).
  bool start_recorded = false;
  // Global runs whose claim recorded no start: when to record it if the run is still going, so a
  // run that takes long (or whose host dies) shows in the history while it runs.
  MonoTime record_start_at = kMonoInfinity;
  MonoTime timeout_at = kMonoInfinity;
  MonoTime renew_at = kMonoInfinity;
  // Global runs: past fence_at the lease is at risk and the run is asked to stop; at kill_at, a
  // tenth of the lease before the database's expiry, it is killed and no longer renewed.
  MonoTime fence_at = kMonoInfinity;
  MonoTime kill_at = kMonoInfinity;
  // When a run still going after its timeout is reported as overdue (once).
  MonoTime overdue_at = kMonoInfinity;
  std::chrono::nanoseconds lag{0};
  TraceContext trace;   // the run's span context; invalid when runs are not traced
  TraceContext caller;  // the trigger's context, when the run was triggered with one
  bool ours = true;     // global: this host still holds the ticket as far as it knows
  // Global: a cancel asked the run to stop; the row stays held (its ticket marked) until this host
  // releases it, so the run keeps being renewed while its function stops.
  bool cancel_requested = false;
  bool timeout_signalled = false;
  bool fenced = false;  // fence_at passed without a renewal: the run was asked to stop
  // Global runs: the row's version the claim required (PollEntry::version), by which the run's
  // claim is established again on a new primary that lacks it (Reclaim).
  std::int64_t claimed_version = 0;
  // Global runs: the claim is not confirmed since the database came back (an outage, a new
  // server): until a renewal confirms it, this host is not ready.
  bool unconfirmed = false;
  // Global runs: the database's server changed since the last renewal: a renewal that fails now
  // stops and kills the run at once (the new server's view of the claim is unknown).
  bool server_changed = false;
};

// One registered task and what this host knows of it.
struct PlannedTask {
  enum class Phase { kRegistering, kInitialWait, kWaiting, kRunning, kFinished };

  EngineTask def;
  Phase phase = Phase::kRegistering;
  // Its last run on this host ended within kShortRun: the next run's claim records no start in the
  // history, and its release writes the run once, whole.
  bool short_runs = false;
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
  // A trigger (this host's, or one another stagehand host announced) made the task due: its next
  // run is a manual one.
  bool manual_pending = false;
  // The trace context of the TriggerTask call on this host that asked for a manual run, and when;
  // another host may take that run, so it is forgotten after kTriggerCallerLifetime.
  TraceContext trigger_caller;
  MonoTime trigger_caller_at{};
  // The attempt number of the task's next run when it is a retry this host scheduled, and the
  // start its release wrote for it (global tasks: a claim of the row at another start is not
  // that retry); 0 when there is none. Another host's retry is counted from the row, but
  // labelled as scheduled.
  int retry_attempt = 0;
  std::optional<WallTime> retry_due;
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
  // A new definition of the task (Redefine) waiting for its run to end; built by MakeTask.
  std::shared_ptr<PlannedTask> successor;
  std::shared_ptr<PlannedRun> run;
  // What only local tasks have (kept apart: a process may hold many thousands of global tasks).
  struct Local {
    TaskState state;
  };
  std::unique_ptr<Local> local;
  // Owned by the shell: stops the task's recurrence when the caller's stop token fires.
  std::unique_ptr<std::stop_callback<std::function<void()>>> caller_stop;

  bool global() const { return def.scope == TaskScope::kGlobal; }
};

using TaskPtr = std::shared_ptr<PlannedTask>;
using RunPtr = std::shared_ptr<PlannedRun>;

// The process-wide bound on runs, beyond each plugin's own: slots of the executor that every
// plugin shares. The planner takes a slot for every run it starts and every claim it sends. A slot
// whose run started is freed by the executor when the run's job returns; one whose claim was lost
// or failed is returned.
class RunSlots {
 public:
  virtual ~RunSlots() = default;
  // Takes a slot; false when none is free (the owner is then woken when one frees).
  virtual bool TryTake() = 0;
  // Returns a slot whose run will not start.
  virtual void Return() = 0;
  // Whether a slot is free now (when not, as for TryTake).
  virtual bool Available() = 0;
};

// How late a slot may start before a catch-up window counts it as missed, on top of the window:
// the latency of noticing and claiming a due row (a poll, a notification, a claim's round trip),
// so that a window of zero skips only slots that were really missed.
inline constexpr std::chrono::milliseconds kCatchUpGrace{2000};

// Returns whether a slot `late` past due is missed under `window` (nullopt: never).
bool SlotMissed(const std::optional<std::chrono::milliseconds>& window,
                std::chrono::nanoseconds late);

// A run shorter than this makes its task's next run write its history once, at its release; a
// run whose claim recorded no start has it recorded once it has run this long.
inline constexpr std::chrono::seconds kShortRun{1};

// The resolution at which due candidates are claimed earliest first (ReserveClaims); within one,
// each host has its own order.
using ClaimOrderGrain = std::chrono::duration<std::int64_t, std::deci>;  // 100 ms

// Returns the task function's view of a stopped run's end ("timed out after 2s"); empty for kNone.
std::string StopOutcome(StopReason reason, std::chrono::milliseconds timeout);

// Returns a starting run's span context when runs are traced (`sampler`): a child of `caller`'s
// when that is valid, else the root of a new trace; without a sampler, an invalid context.
TraceContext NewRunTrace(const std::optional<SamplerConfig>& sampler, const TraceContext& caller);

// Returns how a run ended, for the history: why it was stopped, if it failed.
RunOutcome OutcomeOf(StopReason reason, bool failed);

// Returns the delay before retrying a failed run of attempt `attempt` (1 for the first) of a task
// with `policy` (docs/adr/0015-retries.md): nullopt without a policy, for a run stopped for a
// reason other than its timeout (a cancel, a shutdown, a lost lease), or once its retries are used
// up. `seed` picks the point in the jittered range (RetryDelay).
std::optional<std::chrono::milliseconds> RetryAfter(const std::optional<RetryPolicy>& policy,
                                                    StopReason reason, int attempt,
                                                    std::uint64_t seed);

// How long the trace context of a trigger waits for the manual run it asked for on this host.
inline constexpr std::chrono::minutes kTriggerCallerLifetime{1};

// The first wait after a failed store call (Planner::DatabaseFailed).
inline constexpr std::chrono::milliseconds kFirstRetryBackoff{100};

class Planner {
 public:
  struct Options {
    EngineOptions engine;
    bool has_store = false;
    bool store_notifies = false;  // the store announces writes (Notifications::announces_writes)
    // The zone a local task's next start after a run is shown in (see FormatRestTime).
    TimeZone default_zone = TimeZone::Utc();
    // Orders due tasks of equal due time before a claim, differently on every host.
    std::size_t claim_order_salt = 0;
    // Whether runs get a RunReport (where a run history records it; without one, executors log
    // what their runs print), and the output each keeps.
    bool report_runs = true;
    std::size_t max_output_bytes = kDefaultRunOutputTailBytes;
    // How often expired history is pruned, and how long after start the first prune waits (a
    // prune holds the dispatcher for a statement: never while a host starts its first runs).
    std::chrono::milliseconds prune_interval = std::chrono::minutes(10);
    std::chrono::milliseconds first_prune_delay = std::chrono::minutes(1);
    // How often the registrations of this host's global tasks are refreshed (their registration
    // records them first).
    std::chrono::milliseconds registration_refresh_interval = kRegistrationRefreshInterval;
  };

  // `slots` must outlive the planner.
  Planner(Options options, RunSlots& slots, MonoTime now);

  const Options& options() const { return options_; }
  bool shutting_down() const { return shutting_down_; }

  // --- Registration ---------------------------------------------------------------------------

  // Builds a task from its definition. Errors: kUnavailable (a global task without a store).
  Result<TaskPtr> MakeTask(EngineTask def, const std::string& plugin_id) const;
  // Builds the successor of registered task `def.id` for Redefine. Errors: kUnavailable while
  // shutting down (or as MakeTask); kNotFound when no such task is scheduled (still registering,
  // or finished); kFailedPrecondition when the scope differs.
  Result<TaskPtr> MakeSuccessor(EngineTask def, const std::string& plugin_id) const;
  // Enters the tasks in the table (phase kRegistering), all or none. Errors: kUnavailable while
  // shutting down; kConflict if an id is active or appears twice.
  Status Reserve(const std::vector<TaskPtr>& tasks, const std::string& plugin_id);
  // Removes tasks Reserve entered (registration failed).
  void Unreserve(const std::vector<TaskPtr>& tasks);
  // Starts scheduling a reserved task, with its row as the registration wrote it (global tasks).
  void Activate(PlannedTask& task, const std::optional<WallTime>& row_next,
                std::optional<std::int64_t> row_version, WallTime db_now, MonoTime mono_ref,
                MonoTime now, WallTime wall_now);

  // --- Queries --------------------------------------------------------------------------------

  PlannedTask* Find(const std::string& id) const;
  // Whether `id` is a local task of this process.
  bool IsLocal(const std::string& id) const;
  // The state of local task `id` (nullopt when it is not one).
  std::optional<TaskState> LocalTaskState(const std::string& id) const;
  // This process's worker state for task `id` (nullopt when it has none).
  std::optional<WorkerStatus> WorkerState(const std::string& id) const;
  // The report of the run with `run_id` still going here (null when none is).
  std::shared_ptr<RunReport> ReportOf(const std::string& run_id) const;
  // Every task that has a run, and its run.
  std::vector<std::pair<TaskPtr, RunPtr>> Runs() const;

  // --- Operator requests ----------------------------------------------------------------------

  enum class LocalRequest { kNotLocal, kDone, kRunning, kNotRunning, kShuttingDown };
  // A trigger of a local task: due now (kDone), or kRunning, kShuttingDown, kNotLocal. `caller`
  // is the trigger's trace context (PlannedRun::caller of the run it starts), or invalid.
  LocalRequest TriggerLocal(const std::string& id, MonoTime now, const TraceContext& caller = {});
  // A trigger of a global task by a traced caller is about to be written to the store: the
  // manual run this host claims for it (within kTriggerCallerLifetime) is the caller's child.
  void NoteTriggerCaller(const std::string& id, const TraceContext& caller, MonoTime now);
  // A global task was made due in the store: polls it before claiming. Returns whether the
  // dispatcher must step.
  bool TriggeredInStore(const std::string& id);
  // A cancel. Local: the run to signal (kDone; `*kill`: it was already stopping, so no grace), or
  // kNotRunning, kNotLocal. Global, after the store marked the ticket: the run this host holds.
  LocalRequest CancelLocal(const std::string& id, RunPtr* run, bool* kill);
  RunPtr CancelledInStore(const std::string& id, bool* kill);
  // The caller's stop token fired: no further runs. Returns the run to signal (if any);
  // `*finished_now` when the task had none and is finished.
  RunPtr StopRecurrence(const std::string& id, bool* finished_now);
  // An operator removed the task: no further runs, but a run in progress is left to end on its own
  // (the task then finishes). Returns false when `id` has no active task (none, still
  // registering, finished or already retired); `*finished_now` when it had no run.
  bool Retire(const std::string& id, bool* finished_now);
  // Gives active task `task` the definition of `successor` (built by MakeTask for the same id and
  // scope): at once when it has no run, else when its run ends (FinishGlobalRun, FinishLocalRun);
  // a retired task whose run goes on is scheduled again. The task keeps its id and its caller's
  // stop token. Unlike Activate there is no initial delay (a task still in its initial wait keeps
  // it): a global task waits for the row as the redefinition wrote it (`row_next`, `row_version`,
  // read with `db_now` at `mono_ref`); a local one for its new cadence's next start from `now`, or
  // its current wake-up when that is earlier. The shell must not be claiming (it reads a claimed
  // task's definition outside its lock).
  void Redefine(PlannedTask& task, TaskPtr successor, const std::optional<WallTime>& row_next,
                std::optional<std::int64_t> row_version, WallTime db_now, MonoTime mono_ref,
                MonoTime now, WallTime wall_now);

  // --- Dispatcher: database work for global tasks ---------------------------------------------

  // A due task to claim, with the row as this host knows it: the claim requires that version, and
  // the run uses those settings (nullopt: the task's own).
  struct Candidate {
    TaskPtr task;
    std::int64_t version = 0;
    std::optional<WallTime> due;
    std::optional<TaskSettingsV2> settings;
    std::size_t tie = 0;                         // orders candidates of equal due time
    RunTrigger trigger = RunTrigger::kSchedule;  // set by ReserveClaims
    int attempt = 1;                             // set by ReserveClaims
    // The row's next_run_start_at as stored, and how late the task was when found due.
    std::optional<WallTime> row_next = std::nullopt;
    std::chrono::nanoseconds late{0};
    // The run's span context, chosen by ReserveClaims (the claim records its trace id); invalid
    // when runs are not traced.
    TraceContext trace{};
    // Whether the claim records the run's start in the history (set by ReserveClaims): with a
    // history, unless the task's last run here was short (kShortRun).
    bool record_start = false;
  };
  // What the dispatcher does in one step, in this order.
  struct DispatchPlan {
    std::vector<std::pair<TaskPtr, RunPtr>> renewals;  // leases to renew now
    // Runs of this host whose start is to be recorded in the history now (record_start_at).
    std::vector<std::pair<TaskPtr, RunPtr>> start_records;
    // The rows to poll (PollChanged) before claiming, with the versions this host knows of them.
    std::vector<std::string> poll_ids;
    std::vector<std::optional<std::int64_t>> known_versions;
    std::vector<TaskPtr> polled_tasks;
    bool poll = false;   // a poll goes out (poll_ids is not empty)
    bool sweep = false;  // the poll sweeps expired runs (the janitor)
    bool full = false;   // a safety-net round: every waiting task is polled
    // Due tasks whose rows are known: claimed without a poll.
    std::vector<Candidate> candidates;
  };
  // Returns the dispatcher's work due at `now`. The renewals and polled tasks are marked as taken
  // (a step that fails hands them back through its result).
  DispatchPlan PlanDispatch(MonoTime now);

  enum class RenewalOutcome { kRetry, kRenewed, kCancelNoticed, kLost, kReclaim, kStale };
  // The result of renewing `run`'s lease (sent at `sent`): kRetry (the store failed; renewed again
  // after the backoff, or, after a server change, the run is stopped and killed at once),
  // kRenewed, kCancelNoticed (renewed, and a cancel asks the run to stop: signal it), kLost (kill
  // it at once), kReclaim (the ticket is not on the new server: try TaskStore::Reclaim, then
  // ApplyReclaim), kStale (the run is no longer this host's; nothing to do).
  RenewalOutcome ApplyRenewal(PlannedRun& run, const Result<LeaseStatus>& renewed, MonoTime sent,
                              MonoTime now);
  // The result of a Reclaim of `run` (sent at `sent`) after kReclaim: kRenewed when the claim is
  // held again, else kLost (kill it at once: another host may run the task now).
  RenewalOutcome ApplyReclaim(PlannedRun& run, const Result<bool>& reclaimed, MonoTime sent,
                              MonoTime now);
  // The signals a run gets after a renewal came to `outcome`, `stop_requested` whether it was
  // asked to stop before: a lost claim kills it at once, without grace (another host may run the
  // task now); a noticed cancel stops it, and kills it when it was asked to stop already.
  enum class RunSignal { kNone, kStop, kKill };
  static RunSignal SignalAfterRenewal(RenewalOutcome outcome, bool stop_requested);
  // The `timeout` to pass to RenewLease: the task's own while the run is well within it, and past
  // (or near) it long enough that the renewal extends the claim by a whole lease.
  std::chrono::milliseconds RenewalHold(const PlannedTask& task, const PlannedRun& run,
                                        MonoTime sent) const;

  // What a poll changed that the shell reports.
  struct PollOutcome {
    std::vector<std::string> finished_missing;  // rows gone: their workers finished
    std::vector<std::pair<std::string, std::string>> finished_invalid;  // id, why
  };
  // Applies a poll's result: what this host knows of each row, when each task is next due, the
  // safety-net interval; appends the ready tasks to `plan.candidates`.
  PollOutcome ApplyPoll(DispatchPlan& plan, const PollResult& polled, MonoTime mono_ref);
  // The poll failed: its tasks are polled again after the retry backoff.
  void PollFailed(const DispatchPlan& plan, MonoTime mono_ref);

  // A missed slot to skip: the task, the row's version and next start, the schedule to compute
  // the next slot with, and how late it is.
  struct Skip {
    TaskPtr task;
    std::int64_t version = 0;
    WallTime slot;
    TaskSchedule schedule;
    std::chrono::nanoseconds late{0};
  };
  // Removes from `plan.candidates` the tasks whose slot was missed beyond their catch-up window
  // and returns them as skips (none while shutting down). A run a trigger asked for is never
  // skipped.
  std::vector<Skip> TakeMissedSlots(DispatchPlan& plan);
  // Applies the result of skipping a slot (the statement sent at mono_ref): the row as the skip
  // left it, or a poll when another host changed it first. A store that cannot skip
  // (kUnimplemented) returns the skip's candidate, to be run as Backstage would; any other error
  // retries after the backoff.
  std::optional<Candidate> ApplySkip(const Skip& skip, const Result<SkipResult>& result,
                                     MonoTime mono_ref);

  // Orders the candidates (earliest due first; ties in this host's own order), takes a run slot
  // for as many as it can in that order, and returns those, with a ticket from `new_ticket` for
  // each in `tickets` (same order), recorded as this host's claims. The others stay due: a slot
  // freeing wakes the dispatcher. Nothing is reserved while shutting down.
  std::vector<Candidate> ReserveClaims(std::vector<Candidate> candidates,
                                       const std::function<std::string()>& new_ticket, MonoTime now,
                                       std::vector<std::string>* tickets);
  // The claim statement failed: gives the slots back and retries after the backoff.
  void ClaimFailed(const std::vector<Candidate>& reserved, MonoTime now);
  // Whether a ClaimMany that failed with `status` may have been committed with its answer lost
  // (the database did not answer): its rows are then given back (GiveBackOf).
  static bool ClaimMayHaveCommitted(const Status& status);
  // The release that gives back the row of `task` that a claim with `ticket` may have taken
  // without its answer coming back: due again at once, so that the slot, trigger or retry it was
  // claimed for is not lost (ticket-guarded: a claim that was not committed changes nothing).
  static ReleaseRequest GiveBackOf(const PlannedTask& task, const std::string& ticket);
  // A run the planner started (a claim won, a local task due), with its task.
  struct Started {
    TaskPtr task;
    RunPtr run;
  };
  // Applies the claims' results (claims sent at `sent`): starts a run for each claim won and gives
  // back the others' slots (their rows are polled before the next claim). `lost` receives the
  // tasks whose claim was lost.
  std::vector<Started> ApplyClaims(const std::vector<Candidate>& reserved,
                                   const std::vector<std::string>& tickets,
                                   const std::vector<ClaimResult>& results, MonoTime sent,
                                   std::vector<TaskPtr>* lost);

  // Whether the run history's expired runs are to be pruned at `now` (then not again for a
  // prune interval).
  bool PruneDue(MonoTime now);

  // Returns the ids of the global tasks this host runs (registered and not finished), in id order,
  // when their registrations are due to be refreshed at `now` (then not again for a refresh
  // interval); none otherwise. The dispatcher wakes for it while it has waiting tasks.
  std::vector<std::string> RegistrationRefreshDue(MonoTime now);

  // Whether the dispatcher has work at `now`, and when it is next due.
  bool DispatcherHasWork(MonoTime now);
  MonoTime NextDispatcherWake();

  // --- The database ---------------------------------------------------------------------------

  // A store call failed at `now`: the dispatcher's database work waits for the backoff, from
  // kFirstRetryBackoff doubling up to the longest (EngineOptions::retry_backoff, at most a tenth
  // of a lease, so that renewals keep their pace), each wait drawn from its upper half so that
  // hosts that lost the database together do not come back in step. Returns when the work is
  // tried again.
  MonoTime DatabaseFailed(MonoTime now);
  // A store call was answered (or the database is known to be back): the backoff ends. After
  // failures, every claim this host holds is to be confirmed again, at once (PlannedRun::
  // unconfirmed).
  void DatabaseAnswered(MonoTime now);
  // Whether the dispatcher's database work waits for the backoff at `now`.
  bool BackingOff(MonoTime now) const { return db_failures_ > 0 && now < db_retry_at_; }
  // Since when store calls keep failing (monotonic), or nullopt while they are answered.
  std::optional<MonoTime> DatabaseFailingSince() const {
    return db_failures_ > 0 ? std::optional(db_failing_since_) : std::nullopt;
  }
  // When the dispatcher's database work is tried again: the end of the backoff, or `now`.
  MonoTime DatabaseRetryAt(MonoTime now) const { return BackingOff(now) ? db_retry_at_ : now; }
  // `health` (the store's view of its database) with this planner's failing calls folded in.
  DatabaseHealth WithFailingCalls(DatabaseHealth health) const;
  // This host's readiness for its database at `now` (TaskEngine::Readiness): not ready once the
  // database (WithFailingCalls(store_health)) has been unreachable for longer than `grace`, and
  // from then on until it answers and every claim this host holds is confirmed again.
  struct DatabaseReadiness {
    enum class State { kReady, kUnreachable, kConfirmingClaims };
    State state = State::kReady;
    DatabaseHealth health;
    std::chrono::nanoseconds down{0};  // kUnreachable: for how long
    bool step_dispatcher = false;      // kConfirmingClaims: the claims wait for a renewal
  };
  DatabaseReadiness Readiness(DatabaseHealth store_health, MonoTime now,
                              std::chrono::milliseconds grace);
  // Whether a run of this host holds a claim not confirmed since the database came back.
  bool ClaimsUnconfirmed() const;
  // Asks every claim this host holds to be confirmed again at once (PlannedRun::unconfirmed).
  // Returns whether there was any.
  bool RequireConfirmation(MonoTime now);
  // Whether the dispatcher is to register every global task again (after a server change: the
  // new server may lack the last registrations), and the ids to register; then not again until
  // the next change, unless RegistrationsFailed.
  std::vector<TaskPtr> TakeReregistration();
  void ReregistrationFailed() { reregister_due_ = true; }

  // A store notification arrived at `now`. `parked_deadline`: the dispatcher's deadline while it
  // is parked (nullopt while it steps). Returns whether the dispatcher must step.
  bool OnStoreEvent(const StoreEvent& event, MonoTime now, std::optional<MonoTime> parked_deadline);

  // --- Run ends -------------------------------------------------------------------------------

  // Whether `run` starts its function at `now` (the shell's Invoke): a global run whose claim is
  // lost or at risk by now (the host was paused or starved between the claim and this start) does
  // not start, since the row may be another host's, nor does a run whose claim answered after this
  // host began to shut down. A run that starts has its timeout counted from now, as in Backstage: a
  // run whose start a busy host delayed still gets all of it.
  enum class StartVerdict { kStart, kClaimAtRisk, kShuttingDown };
  StartVerdict StartRun(const PlannedTask& task, PlannedRun& run, MonoTime now);
  // Returns why a run with `verdict` is not started, as its error message; nullopt for kStart.
  static std::optional<std::string> NotStartedWhy(StartVerdict verdict);
  // Returns the error JSON of a run whose function (or its not being started) said `message`
  // (`name`: the error's), named first by why it was stopped ("timed out after 2s: ...").
  static std::string RunErrorJson(StopReason reason, std::chrono::milliseconds timeout,
                                  const std::string& message, const std::string& name);
  // Whether a run stopped for `reason` was stopped by shutdown or an operator (a cancel, an
  // unschedule): its failure is then no error to alert on.
  static bool StoppedByOperator(StopReason reason);

  // A global run's function returned: no more renewals. Returns whether this host still held the
  // ticket (so the run is to be released).
  bool GlobalRunReturned(PlannedRun& run);
  // Whether the end of the global run `run` (failed when `failed`) waits for the attempt its
  // predecessor recorded in the row (RunError::retried_attempt), which the shell reads for
  // PlanGlobalRunEnd: the run failed and its task retries such a failure.
  bool RetryNeedsRecordedAttempt(const PlannedTask& task, const PlannedRun& run, bool failed) const;
  // What follows the end of a global run: when its release makes the task due again, and the
  // error it releases with.
  struct GlobalRunEnd {
    // The release's next start is now + this: the slot of a run that never started because the
    // host shut down (at once), a retry, or a duration slot after the slots the run outlasted.
    std::optional<std::chrono::milliseconds> next_in;
    std::optional<std::string> error;  // with the retried attempt recorded (RunError::Retried)
    int retried_attempt = 0;           // a retry is scheduled: this attempt failed (else 0)
    // The first slot the run outlasted beyond the catch-up window: skipped, how late it was, and
    // the slot the task waits for instead.
    struct Skipped {
      WallTime slot;
      std::chrono::nanoseconds late{0};
      WallTime next;
    };
    std::optional<Skipped> skipped;
  };
  // Decides the end of global run `run` of `task` at `wall_now`: `started` whether its function
  // was called, `error` its failure, `recorded_attempt` the attempt its row records (when
  // RetryNeedsRecordedAttempt). Records the retry's attempt on the task.
  GlobalRunEnd PlanGlobalRunEnd(PlannedTask& task, const PlannedRun& run, bool started,
                                std::optional<std::string> error, int recorded_attempt,
                                WallTime wall_now);
  // Releases are about to be sent for `tasks`: their notifications will echo.
  void ReleasesSent(const std::vector<TaskPtr>& tasks);
  // A release of `task` wrote nothing known (failed, or the ticket no longer held the row): no
  // echo will come.
  void ReleaseEchoCleared(PlannedTask& task);
  // The database answered the release of `run` of `task`, which took `duration`, with `result`
  // (read at mono_ref). Returns when the row it left is next due (ReleasedRowWake), kMonoInfinity
  // when the release wrote nothing or the row's next start is unknown.
  MonoTime ApplyRelease(PlannedTask& task, const PlannedRun& run, std::chrono::nanoseconds duration,
                        const ReleaseResult& result, MonoTime mono_ref);
  // The monotonic time at which a released row, next due at `next` (the database's clock at
  // db_now, read at mono_ref), is to be started.
  MonoTime ReleasedRowWake(const PlannedTask& task, const PlannedRun& run, WallTime next,
                           WallTime db_now, MonoTime mono_ref) const;
  // A global run ended, released (with the row after the release) or not. Returns whether the
  // task is finished (its recurrence was stopped).
  bool FinishGlobalRun(PlannedTask& task, const RunPtr& run,
                       std::optional<std::int64_t> row_version, std::optional<WallTime> row_next,
                       MonoTime row_wake_at);
  // Whether the release of a run guards on its claim's version as well as its ticket, so that it
  // still releases a row nobody has claimed or changed since: from its second attempt (an earlier
  // answer may have been lost after it was written), and when this host no longer knew the claim
  // to hold when the run returned (`held` false: it lapsed, or a new server lacks it).
  static bool ReleaseGuardsOnVersion(int attempts, bool held);
  // What the database's answer to a release (a run's, one written again after a server change, or
  // a claim given back) says: released; not released because it had been already; or not
  // released while neither it nor its run's record had been written and the row has changed
  // since (the run may be done twice or go unrecorded: it is at risk).
  enum class ReleaseVerdict { kReleased, kAlreadyReleased, kAtRisk };
  static ReleaseVerdict JudgeRelease(const ReleaseResult& result);
  // What becomes of writes sent again (replays, claims given back) that failed with `status`:
  // sent again at the next step when the database did not answer, else dropped for good (sending
  // them again would only stop the dispatcher).
  enum class FailedWrite { kSendAgain, kDrop };
  static FailedWrite OnFailedWrite(const Status& status);
  // A local run ended at `now` / `wall_now`; a failed run that its task retries (RetryAfter) is
  // started again after the retry's delay rather than at its next slot.
  struct LocalRunEnd {
    bool finished = false;  // the task is finished (its recurrence was stopped)
    std::optional<std::chrono::milliseconds> retry_in;  // the failed run is retried after this
  };
  LocalRunEnd FinishLocalRun(PlannedTask& task, const RunPtr& run,
                             const std::optional<std::string>& error, MonoTime now,
                             WallTime wall_now);

  // --- Timer: local starts, timeouts and fences -------------------------------------------------

  struct TimerActions {
    std::vector<Started> to_start;  // local runs started
    std::vector<RunPtr> to_stop;
    std::vector<RunPtr> to_kill;
    std::vector<Started> fenced;
    std::vector<Started> overdue;
    // Local slots missed beyond the catch-up window: the task, the slot and how late it was.
    struct Skipped {
      TaskPtr task;
      WallTime slot;
      std::chrono::nanoseconds late{0};
      WallTime next;  // the slot it waits for instead
    };
    std::vector<Skipped> skipped;
  };
  // Does the timer's work due at `now`; returns when the timer is next due. `*kick_dispatcher`
  // is set when a global task's initial wait ended.
  MonoTime TimerStep(MonoTime now, WallTime wall_now, TimerActions* actions, bool* kick_dispatcher);

  // --- Shutdown -------------------------------------------------------------------------------

  // Starts no claim from now on; the runs of claims still in flight are marked as stopped for
  // shutdown when they answer (they never start). Shutdown calls it, then BeginShutdown.
  void StopClaiming() { shutting_down_ = true; }

  // Stops claiming and starting; returns the runs to signal.
  std::vector<RunPtr> BeginShutdown();

  // Returns the trigger caller of `task`'s manual run starting at `now`, unless it is too old.
  // Requires the shell's lock.
  static TraceContext TriggerCaller(const PlannedTask& task, MonoTime now);

 private:
  // Returns when a run of `task` due at `next` (its row's next start) may start: at `next`, or at
  // the cron slot when `next` is Backstage's "slot - 1 s" registration time.
  WallTime RowStart(const PlannedTask& task, WallTime next) const;
  // Sets when `run` renews its lease, when it is asked to stop and when it is killed, after a
  // claim or renewal sent at `lease_sent` that holds the row until `expires` at least.
  static void SetLeaseDeadlines(PlannedRun& run, MonoTime expires, MonoTime lease_sent);
  // Whether a safety-net poll found a change nobody announced to this host: a row it knew idle
  // that is now running, changed or gone, or an expired run it swept.
  static bool Unannounced(const PollResult& polled, const DispatchPlan& plan);
  // When a local task runs next after a run started at run_started ends at now: a duration's
  // slot may be in the past (a long run), to be run at once or skipped (SkipLocalSlot).
  MonoTime LocalNextWake(const PlannedTask& task, MonoTime run_started, MonoTime now,
                         WallTime wall_now) const;
  // Skips a due local task's missed slot, if its catch-up window says so: moves wake_at to its
  // next slot after now and returns the skipped slot (its wall time) and lateness.
  std::optional<TimerActions::Skipped> SkipLocalSlot(const TaskPtr& task, MonoTime now,
                                                     WallTime wall_now);
  bool CanClaim();
  bool TakeSlot();
  // A slot taken for a claim that was lost or failed.
  void ReturnSlot();
  // A run's function returned: its plugin slot frees (its executor slot frees with its job).
  void RunEnded();

  Options options_;
  RunSlots& slots_;
  std::map<std::string, TaskPtr> tasks_;
  bool shutting_down_ = false;
  int slots_taken_ = 0;  // runs of this plugin running or being claimed
  // The wait between safety-net polls: poll_interval, doubled after every quiet one up to
  // max_poll_interval while the store notifies.
  std::chrono::milliseconds safety_interval_;
  MonoTime next_safety_poll_;
  MonoTime next_sweep_;
  MonoTime next_prune_;
  MonoTime next_registration_refresh_;
  // The database backoff: consecutive failures, and when work is tried again.
  int db_failures_ = 0;
  MonoTime db_retry_at_{};
  // Readiness, latched off by an outage until the claims are confirmed again, and whether their
  // confirmation was asked for since.
  bool unready_ = false;
  bool confirmation_requested_ = false;
  MonoTime db_failing_since_{};
  // After a server change no expired run is swept before this: the hosts that hold claims get a
  // lease to confirm them on the new server first.
  MonoTime no_sweep_before_{};
  bool reregister_due_ = false;
};

}  // namespace stagehand::engine_internal
