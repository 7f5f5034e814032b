// The task store: the one place where SQL lives. It holds a plugin's
// `backstage_backend_tasks__tasks` table, through which every host (stagehand or Backstage)
// coordinates that plugin's global tasks, and (history()) the plugin's run history beside it.
// Every operation is one database round trip unless its comment says otherwise. The database's
// clock is the authority: readiness, claims, expiry and duration cadences use the database's
// now().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/model/run_error.h"
#include "stagehand/model/task_pause.h"
#include "stagehand/model/task_run.h"
#include "stagehand/model/task_settings.h"
#include "stagehand/model/task_state.h"
#include "stagehand/store/request_keys.h"
#include "stagehand/store/row_ticket.h"
#include "stagehand/store/run_history.h"
#include "stagehand/store/task_registrations.h"
#include "stagehand/time/clock.h"
#include "stagehand/time/cron.h"
#include "stagehand/time/time_zone.h"
#include "stagehand/trace/trace_context.h"

namespace stagehand {

// One row of the tasks table, as stored. Times are UTC instants.
struct TaskRow {
  std::string id;
  std::string settings_json;
  std::optional<WallTime> next_run_start_at;
  std::optional<std::string> current_run_ticket;
  std::optional<WallTime> current_run_started_at;
  std::optional<WallTime> current_run_expires_at;
  std::optional<std::string> last_run_error_json;
  std::optional<WallTime> last_run_ended_at;

  friend bool operator==(const TaskRow&, const TaskRow&) = default;
};

// The outcome of RenewLease.
enum class LeaseStatus {
  kHeld,             // the ticket holds the row; its expiry was extended
  kCancelRequested,  // as kHeld, but a cancel asked the run to stop (the marked ticket)
  kLost,             // the ticket no longer holds the row (swept, deleted, taken over)
};

// What the store needs to compute a task's next start: its settings (the cadence typed, parsed
// where the settings entered: a registration, or the row they were decoded from) and the zone a
// cron cadence is evaluated in.
struct TaskSchedule {
  TaskSettingsV2 settings;
  TimeZone zone = TimeZone::Utc();
  // The task's fixed start offset (JitterOffset of its jitter; stagehand's extension, not in
  // settings): every scheduled next start the store computes is the unjittered one plus this.
  // Zero: none.
  std::chrono::milliseconds jitter_offset{0};
};

// The outcome of Upsert: the row's next start after the write, and the database's clock.
struct UpsertResult {
  std::optional<WallTime> next_run_start_at;
  WallTime db_now;
  std::int64_t version = 0;  // the row's PollEntry::version after the write
};

// One registration of a batch (UpsertMany).
struct TaskUpsert {
  std::string id;
  TaskSchedule schedule;
  // The stagehand host registering the task. When set, and the store keeps registrations
  // (registrations() is not null and its table exists), the write also records that this host
  // registered it, in the same round trip (see task_registrations.h).
  std::optional<std::string> registered_by = std::nullopt;
};

// Readiness of one polled task.
enum class Readiness {
  kReady,            // next_run_start_at <= now and no ticket: claim it.
  kNotReady,         // Not due yet, manual, or running.
  kMissing,          // No row: the task was unregistered; its worker stops.
  kInvalidSettings,  // The row's settings_json does not parse or validate; its worker stops.
};

struct PollEntry {
  std::string id;
  Readiness readiness = Readiness::kNotReady;
  std::optional<TaskSettingsV2> settings;  // kReady and kNotReady: the row's (latest) settings
  std::string settings_error;              // kInvalidSettings: why
  std::optional<WallTime> next_run_start_at;
  bool running = false;  // the row holds a ticket
  std::optional<WallTime> current_run_expires_at;
  // Identifies the row's next_run_start_at and settings_json: equal versions of one row mean
  // neither changed. Store-defined; only ever compared with versions the same store returned
  // (PollChanged, ClaimRequest::expected_version).
  std::int64_t version = 0;
};

// The outcome of Poll.
struct PollResult {
  std::vector<PollEntry> entries;         // one per requested id, in request order
  std::optional<WallTime> earliest_next;  // earliest next_run_start_at among idle polled rows
  std::vector<std::string> swept_ids;     // ids whose expired run the sweep reset (if requested)
  WallTime db_now;                        // the database's clock when the statement ran
};

// The outcome of Claim.
struct ClaimResult {
  bool claimed = false;
  WallTime db_now;                     // the database's clock at the claim
  std::optional<WallTime> expires_at;  // current_run_expires_at written (when claimed)
};

// One claim of a batch (ClaimMany): the task, the fresh ticket its run is to hold, and the run's
// timeout.
struct ClaimRequest {
  std::string id;
  std::string ticket;
  std::chrono::milliseconds timeout{0};
  // When set, the claim also requires the row's version (PollEntry::version) to equal this one:
  // the row is still as the caller last saw it (same next start, same settings), so the caller may
  // run it with the settings it knows without polling first.
  std::optional<std::int64_t> expected_version;
  // When set, and the store keeps a run history, a successful claim also records its run as
  // running (run id = `ticket`, started at the claim's time), in the same round trip.
  std::optional<RunOrigin> history = std::nullopt;
};

// A released run as the run history records it (ReleaseRequest::history): how it ended, and where
// and when it started, so that a release can write the run whole when its claim recorded no start.
struct ReleasedRun {
  RunFinish finish{};
  RunOrigin origin{};
  WallTime started_at{};  // the claim's time (ClaimResult::db_now)
};

// One release of a batch (ReleaseMany), with Release's arguments.
struct ReleaseRequest {
  std::string id;
  std::string ticket;
  TaskSchedule schedule;
  std::optional<std::string> error_json;
  // When set, and the store keeps a run history, the release also records the run `ticket` as
  // ended with this finish, at the release's time, whether or not the ticket still held the row:
  // it writes the run whole in the same round trip when its start was not recorded (one write for
  // a run whose claim carried no ClaimRequest::history), or closes the run's record (as
  // RunHistory::RecordEnds; on PostgreSQL in a second round trip, through the record's key). The
  // task keeps its newest runs as RunHistoryLimits says.
  std::optional<ReleasedRun> history = std::nullopt;
  // When set, the next start is the database's now + this rather than the schedule's next slot:
  // a retry's delay (docs/adr/0015-retries.md), or the wait for the next slot of a duration task
  // whose run outlasted its catch-up window (ADR 0014).
  std::optional<std::chrono::milliseconds> next_in = std::nullopt;
  // A release sent again: its first attempt's answer was lost (the database may have written
  // it), or the database's server changed since it was written (the new server may lack it). The
  // run's history is then written only where it is missing (ReleaseResult::recorded), never twice.
  bool retried = false;
  // With `retried`, after a server change: the row's version its claim required. When the row
  // holds no ticket and still has that version (the new server lacks the claim as well as the
  // release, and nobody claimed the row since), the release applies as if the ticket held it.
  std::optional<std::int64_t> claimed_version = std::nullopt;
};

// The outcome of one release of a batch (ReleaseMany).
struct ReleaseResult {
  bool released = false;  // whether the ticket still held the row (else nothing changed)
  std::optional<WallTime> next_run_start_at;  // the row's next start after the release
  // The row's PollEntry::version after the release; nullopt when not released, or when the store
  // cannot tell (TaskStore's default ReleaseMany).
  std::optional<std::int64_t> version;
  WallTime db_now;  // the database's clock when the statement ran
  // For a release with history that was retried, or whose run's start was recorded before a
  // failover to another server: the run's record was missing and this call wrote it (on
  // PostgreSQL and in memory; false where the store cannot tell).
  bool recorded = false;
};

// The outcome of SkipSlot.
struct SkipResult {
  bool skipped = false;  // the row was idle and of the expected version, and was moved
  std::optional<WallTime> next_run_start_at;  // the row's next start after the skip
  std::optional<std::int64_t> version;        // the row's PollEntry::version after the skip
  WallTime db_now;                            // the database's clock when the statement ran
};

// A change announced by a writer, delivered to listeners (PostgreSQL LISTEN/NOTIFY; in-process
// for the memory store).
struct StoreEvent {
  enum class Kind {
    kUpsert,   // a task was registered or its schedule changed
    kTrigger,  // a task was made due now
    kCancel,   // a cancel asked a running task's run to stop (its ticket is marked)
    kRelease,  // a run ended and the task was rescheduled
    kClaim,    // a host claimed the task for a run (ClaimMany); `ticket` is the run's
    kSweep,    // an expired run was reset by the janitor
    kDelete,   // a row was deleted
    kResync,   // notifications may have been lost (e.g. reconnect): re-poll everything
    // The database is now served by another server than before, with another history of writes
    // (a standby promoted by a failover): the last writes before it, this host's and others', may
    // be missing there (asynchronous replication), so every claim is to be confirmed again.
    kServerChanged,
  };
  StoreEvent() = default;
  StoreEvent(Kind event_kind, std::string event_task_id, std::string event_ticket = {})
      : kind(event_kind), task_id(std::move(event_task_id)), ticket(std::move(event_ticket)) {}

  Kind kind = Kind::kResync;
  std::string task_id;  // empty for kResync
  std::string ticket;   // kClaim only
  TraceContext caller;  // kTrigger only: the trigger's trace context, when it had one
};

// What a store knows of its database's reachability (TaskStore::Health). Plain value type.
struct DatabaseHealth {
  // False while the database cannot be reached, as far as the store has seen: a connection that
  // failed or broke, or (PostgreSQL) a LISTEN session whose server stopped answering its pings.
  bool reachable = true;
  MonoTime unreachable_since{};     // monotonic; when `reachable` is false
  std::string reason;               // the last failure, when `reachable` is false
  std::int64_t reconnects = 0;      // connections opened again after a failure
  std::int64_t server_changes = 0;  // kServerChanged events
};

// A live subscription to a store's events. Destroying it stops delivery; after the destructor
// returns the handler is never called again. Not thread-safe.
class Notifications {
 public:
  virtual ~Notifications() = default;
  // Whether writes are announced (kChanged, kReleased, ...); false when only the store's own
  // conditions are (kServerChanged), and the caller must poll for other writers' changes.
  virtual bool announces_writes() const { return true; }
};

// One plugin's task table. Implementations are thread-safe: any thread may call any method; each
// call borrows a connection for its duration.
class TaskStore {
 public:
  virtual ~TaskStore() = default;

  // Returns the plugin id this store serves (used in every error message).
  virtual const std::string& plugin_id() const = 0;

  // Creates or updates the schema exactly as Backstage's knex migrations do, under knex's lock
  // protocol, so that neither side re-runs the other's migrations; then stagehand's own tables
  // (the run history and the task registrations), with their own bookkeeping
  // (stagehand_migrations) under a lock of their own, never touching knex's. Several round trips.
  // Errors: kFailedPrecondition if either bookkeeping table lists a migration this version does
  // not know (a newer Backstage or stagehand migrated this database); kUnavailable if the database
  // cannot be reached or the lock is held for too long.
  virtual Status Migrate() = 0;

  // Registers a task (Backstage's persistTask, §4.3). A new row starts at: now + initial delay if
  // one is set; else the next cron time (Backstage: that time - 1 s, see
  // docs/backstage-differences.md); NULL for manual; now for durations. An existing row keeps its
  // next start unless the new cadence's next start (the next cron time, NULL for manual, now +
  // cadence) is earlier, or it had none. The settings must be valid.
  // Errors: kInvalidArgument (invalid settings), kUnavailable.
  virtual Result<UpsertResult> Upsert(const std::string& id, const TaskSchedule& schedule) = 0;

  // Registers every task of `tasks` in one transaction, each row by Upsert's rules; returns the
  // results in the same order. All or nothing: on any error no row is written. Ids must be
  // distinct. One round trip on PostgreSQL; one transaction on SQLite. A task's registered_by, when
  // the store keeps registrations, is recorded in the same round trip. The default runs Upsert for
  // each task (not atomically) and records no registration. Errors: kInvalidArgument (invalid
  // settings, naming the task), kUnavailable.
  virtual Result<std::vector<UpsertResult>> UpsertMany(std::span<const TaskUpsert> tasks);

  // Reports the readiness of every id in one statement (§5). When `sweep_expired` is set, the same
  // round trip first resets expired runs (as SweepExpired) and counts them as unclaimed.
  // Errors: kUnavailable.
  virtual Result<PollResult> Poll(std::span<const std::string> ids, bool sweep_expired) = 0;

  // Like Poll, but may leave out the ids whose rows are idle, not due and unchanged: every row that
  // is missing, holds a ticket, is due, or has a version other than `known_versions[i]` (nullopt:
  // never seen) is reported, in request order. So a poll of many quiet tasks returns almost
  // nothing. A row whose settings alone changed has a new version, so it is reported.
  // `known_versions` has one element per id. The default filters Poll's result.
  // Errors: kUnavailable.
  virtual Result<PollResult> PollChanged(
      std::span<const std::string> ids, std::span<const std::optional<std::int64_t>> known_versions,
      bool sweep_expired);

  // Claims a due, unclaimed task for a run with `ticket`: sets the ticket, started = now and
  // expires = now + min(timeout, lease). Succeeds iff the row exists, is due
  // (next_run_start_at <= now) and holds no ticket. Errors: kUnavailable.
  virtual Result<ClaimResult> Claim(const std::string& id, const std::string& ticket,
                                    std::chrono::milliseconds timeout,
                                    std::chrono::milliseconds lease) = 0;

  // Claims several tasks at once, each by Claim's rules with its own ticket and timeout and the
  // shared `lease`, and, for a request with an expected_version, only if the row's version equals
  // it; returns one ClaimResult per request, in request order (claimed false for a row that is
  // missing, not due, held, of another version, or being written by another statement at that
  // moment). Ids must be distinct. Where the store notifies, each claimed row is announced
  // (kClaim, with its ticket), so other hosts know it is held without polling it. One round trip
  // on PostgreSQL (rows another session has locked are skipped rather than waited for, so
  // concurrent batches never deadlock); one transaction on SQLite. The default runs Claim for each
  // request and ignores expected versions. A request's history origin, when the store keeps a
  // history (history() is not null), records its run as running in the same round trip if it is
  // claimed; requests without one cost what they cost before history existed. The default ignores
  // history origins. Errors: kUnavailable (then no result is known; a claim may have been
  // written, and its lease lapses).
  virtual Result<std::vector<ClaimResult>> ClaimMany(std::span<const ClaimRequest> claims,
                                                     std::chrono::milliseconds lease);

  // Extends the run's expiry to min(started + timeout, now + lease) while `ticket`, plain or marked
  // by a cancel (CancelRequestedTicket), still holds the row. (The engine passes a `timeout` of at
  // least the run's elapsed time + lease once the run is near or past its own timeout, so the
  // claim of a run that is still stopping is held.) Returns kCancelRequested when the
  // marked form holds it (the run must stop, and still release), kLost if neither does
  // (swept, deleted, taken over). Errors: kUnavailable.
  virtual Result<LeaseStatus> RenewLease(const std::string& id, const std::string& ticket,
                                         std::chrono::milliseconds timeout,
                                         std::chrono::milliseconds lease) = 0;

  // Holds the row again for the run `ticket` on a new server that lacks its claim (a failover to
  // an asynchronous standby): if the row holds no ticket and its PollEntry::version is still
  // `claimed_version` (the claim's: nobody claimed or changed the row since), claims it with that
  // same ticket, started now and expiring at min(now + `timeout`, now + `lease`), as RenewLease
  // holds a claim. Announced as a claim. Returns whether it did. The default cannot (false).
  // Errors: kUnavailable.
  virtual Result<bool> Reclaim(const std::string& id, const std::string& ticket,
                               std::int64_t claimed_version, std::chrono::milliseconds timeout,
                               std::chrono::milliseconds lease);

  // Ends the run held by `ticket`, plain or marked by a cancel (§4.6): clears the ticket and run
  // times, sets last_run_ended_at = now and last_run_error_json = `error_json` (NULL on success),
  // or {"name":"Error","message":"Task was cancelled"} when a cancel marked the ticket, and moves
  // next_run_start_at to the next cron time, NULL for manual, or greatest(next + cadence, now) for
  // durations; so a cancelled run ends with the row Backstage's cancel (§4.9) leaves. Returns
  // false, changing nothing, if the ticket no longer holds the row. Errors: kUnavailable.
  virtual Result<bool> Release(const std::string& id, const std::string& ticket,
                               const TaskSchedule& schedule,
                               const std::optional<std::string>& error_json) = 0;

  // Ends several runs at once, each by Release's rules (a cancelled run records the cancel);
  // returns one result per request, in request order: whether its ticket still held the row and,
  // if so, the row's next start and version after the release (so the caller knows when it is
  // due without polling it). Ids must be distinct. One round trip on PostgreSQL (rows locked in id
  // order); one transaction on SQLite. A request's history finish, when the store keeps a history,
  // records its run's end (see ReleaseRequest::history). The default runs Release for each request
  // (without versions or history). Errors: kUnavailable.
  virtual Result<std::vector<ReleaseResult>> ReleaseMany(std::span<const ReleaseRequest> releases);

  // Skips the missed slot `slot` of an idle task (a catch-up window, ADR 0014): if the row holds
  // no ticket and its PollEntry::version is still `expected_version` (so `slot` is still its next
  // start), moves next_run_start_at to store_internal::PlanSkipNext's time after the database's
  // now (cron: the next fire; duration: the next point of the slot's grid) and leaves everything
  // else, including the last run's end and error, as it was. Announced as a release. Returns
  // skipped false, changing nothing, when the row is missing, held or of another version (another
  // host skipped or claimed it first). A stagehand extension: Backstage never calls it. The
  // default is kUnimplemented. Errors: kInvalidArgument (the schedule's cadence does not parse),
  // kUnavailable.
  virtual Result<SkipResult> SkipSlot(const std::string& id, std::int64_t expected_version,
                                      WallTime slot, const TaskSchedule& schedule);

  // Makes a task due now (§4.8). Errors: kNotFound "Task {id} does not exist"; kConflict
  // "Task {id} is paused" or "Task {id} is currently running"; kUnavailable.
  virtual Status Trigger(const std::string& id) = 0;
  // Trigger on behalf of a traced caller: a store that announces its writes hands `caller` to
  // the other hosts with the kTrigger event (StoreEvent::caller), so that whichever host runs the
  // task makes its run a span of the caller's trace. The default drops `caller`.
  virtual Status Trigger(const std::string& id, const TraceContext& caller);

  // Pauses a task that has no run, or changes the pause of a paused one (ADR 0013): its ticket
  // becomes PausedTicket(request), started = now, expires = request.until. A task whose run is in
  // progress keeps it: its ticket takes the pending form (RowTicket::WithPendingPause) and its
  // expiry comes forward to at most now + `hold`, as a cancel's does, so that a run whose owner no
  // longer renews it (a Backstage worker, which stops a run whose ticket changed) is swept into the
  // pause within `hold`. Announced as an upsert. Errors: kNotFound "Task {id} does not exist";
  // kConflict when the row changed meanwhile; kInvalidArgument (a text too long, `until` not after
  // the database's now); kUnavailable. The default is kUnimplemented.
  virtual Status Pause(const std::string& id, const PauseRequest& request,
                       std::chrono::milliseconds hold);

  // Resumes a paused task: clears its ticket and run times (its next start is kept, so a slot
  // missed while paused runs at once). Announced as a release. Errors: kNotFound "Task {id} does
  // not exist"; kConflict "Task {id} is not paused"; kUnavailable. The default is kUnimplemented.
  virtual Status Resume(const std::string& id);

  // Asks a task's current run to stop. Unlike Backstage's cancel (§4.9), which frees the row at
  // once, the row stays held until the run's owner releases it: the ticket is rewritten to
  // CancelRequestedTicket(ticket), current_run_expires_at becomes min(expires, now + `hold`) so
  // that a dead owner's row is swept soon, and the owner learns of it through a kCancel event or
  // its next RenewLease; its Release then records the cancel. While the row is so marked, Trigger
  // answers kConflict "is currently running" and no host can claim it. Cancelling a run already
  // marked succeeds and changes nothing (idempotent). Two round trips. Errors: kNotFound "Task
  // {id} does not exist"; kConflict "Task {id} is not running" (no ticket, or the run ended in
  // between, or the task is paused); kInvalidArgument if the row's settings do not parse (as
  // Backstage); kUnavailable.
  virtual Status Cancel(const std::string& id, std::chrono::milliseconds hold) = 0;

  // Resets every run whose expiry has passed (the janitor, §7), recording
  // {"name":"Error","message":"Task timed out"}; next_run_start_at is kept so the task is due
  // again at once. An expired pause is cleared too, recording nothing and left out of the
  // returned ids (announced as a release). Where the store keeps a history, the reset runs (by
  // their tickets) are closed as lost with that error in the same round trip; so is every sweep of
  // Poll and PollChanged. Returns the reset ids. Errors: kUnavailable.
  virtual Result<std::vector<std::string>> SweepExpired() = 0;

  // Returns every row, ordered by id. Errors: kUnavailable.
  virtual Result<std::vector<TaskRow>> States() = 0;

  // Returns the row's last_run_error_json, decoded: nullopt when it has none or the row does not
  // exist. The default reads States(). Errors: kUnavailable.
  virtual Result<std::optional<RunError>> LastRunError(const std::string& id);

  // Deletes a task's row. Deleting a missing row is not an error. Errors: kUnavailable.
  virtual Status Delete(const std::string& id) = 0;

  // Returns the database's current time. Errors: kUnavailable.
  virtual Result<WallTime> DatabaseNow() = 0;

  // Returns the plugin's run history, kept in the same database through the same connections, or
  // nullptr if this store keeps none. Owned by the store.
  virtual RunHistory* history() { return nullptr; }

  // Returns which hosts registered the plugin's tasks and when they were last seen, kept in the
  // same database through the same connections, or nullptr if this store keeps none. Owned by
  // the store.
  virtual TaskRegistrations* registrations() { return nullptr; }

  // Returns where the plugin's idempotency keys are kept, in the same database, or nullptr if
  // this store keeps none. Its ApplyOnce's `apply` may call this store's operations, which then
  // run in its transaction. Owned by the store.
  virtual RequestKeys* request_keys() { return nullptr; }

  // Opens the store's connections and prepares its statements ahead of use, so that the first
  // operations are as fast as later ones. Optional: every operation works without it. Several
  // round trips; a no-op where there is nothing to prepare. Errors: kUnavailable.
  virtual Status WarmUp() { return Status::Ok(); }

  // Bounds how long any later operation waits for the database to answer a statement, where the
  // store can (PostgreSQL: client-side, whatever the network does); an operation past the bound
  // fails kUnavailable. Zero removes the bound. The engine sets it from its lease, so that a
  // renewal, release or poll never blocks for longer than a fraction of a lease. A no-op where
  // calls are bounded otherwise (SQLite's busy timeout) or cannot block (memory).
  virtual void SetCallTimeout(std::chrono::milliseconds /*timeout*/) {}

  // Returns what the store knows of its database's reachability; the default says reachable (a
  // store that cannot lose its database, or cannot tell). Not a database operation.
  virtual DatabaseHealth Health() const { return {}; }

  // Starts delivering this store's events (and other writers' where the database can tell) to
  // `handler`, on a thread owned by the returned object. `handler` must not block. Returns
  // nullptr if this store cannot notify (SQLite): callers then rely on polling alone.
  virtual std::unique_ptr<Notifications> Listen(std::function<void(const StoreEvent&)> handler) = 0;
};

}  // namespace stagehand
