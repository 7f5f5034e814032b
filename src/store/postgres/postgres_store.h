// The class behind OpenPostgresTaskStore, its definitions split by concern: postgres_task_store.cc
// (the task table), postgres_claims.cc (claims, leases and releases), postgres_run_history.cc
// (RunHistory), postgres_extensions.cc (registrations, request keys, pauses). Private to those
// files.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "stagehand/base/check.h"
#include "stagehand/base/mutex.h"
#include "stagehand/model/task_state.h"
#include "stagehand/store/postgres_task_store.h"
#include "store/next_run.h"
#include "store/postgres/connection_pool.h"
#include "store/postgres/pg_arrays.h"
#include "store/postgres/pg_connection.h"
#include "store/postgres/pg_migrations.h"
#include "store/postgres/pg_notifications.h"
#include "store/postgres/pg_shared_connections.h"
#include "store/postgres/pg_time.h"
#include "store/postgres/statements.h"
#include "store/run_history_support.h"
#include "store/task_pause.h"

namespace stagehand::store_internal {

namespace sql = pg_sql;

// SQLSTATEs the store treats specially.
constexpr std::string_view kDuplicateDatabase = "42P04";
constexpr std::string_view kDuplicateSchema = "42P06";
constexpr std::string_view kUniqueViolation = "23505";
constexpr std::string_view kUndefinedTable = "42P01";
constexpr std::string_view kStringTooLong = "22001";

// Binds `plan` as the three parameters the statements' plan expressions read.
inline void AddPlan(PgParams& params, const NextRunPlan& plan) {
  params.Add(PlanKindName(plan.kind));
  params.Add(plan.seconds);
  if (plan.kind == NextRunPlan::Kind::kInstant) {
    params.Add(store_internal::FormatPgTimestamp(plan.instant));
  } else {
    params.AddNull();
  }
}

// The session of a keyed request's transaction (ApplyOnce), which the store's statements run on
// while its `apply` runs on this thread.
struct PinnedSession {
  const void* store = nullptr;
  PgConnection* connection = nullptr;
};
inline thread_local PinnedSession pinned_session;
// Ends the pinning of its scope, however `apply` leaves it.
struct Unpin {
  Unpin() = default;
  Unpin(const Unpin&) = delete;
  Unpin& operator=(const Unpin&) = delete;
  ~Unpin() { pinned_session = PinnedSession{}; }
};

// A statement's result with the host's wall-clock times around it, to feed the DatabaseClock.
struct Executed {
  PgResult result;
  WallTime sent;
  WallTime received;
};

// Where a run's record lives: its task's ring row (ADR 0011). Plain value type.
struct RingPlace {
  std::string task_id;
  int slot = 0;
};

// The PostgreSQL TaskStore, its run history and its task registrations, on one pool. Thread-safe.
class PostgresTaskStore final : public TaskStore,
                                public RunHistory,
                                public TaskRegistrations,
                                public RequestKeys {
 public:
  PostgresTaskStore(std::string plugin_id, PgConnectParams params, std::string where,
                    store_internal::PoolOptions pool_options,
                    std::shared_ptr<PostgresConnections> connections, const Clock& clock)
      : plugin_id_(std::move(plugin_id)),
        where_(std::move(where)),
        channel_(store_internal::NotificationChannel(params.search_path)),
        clock_(clock),
        db_clock_(clock),
        schema_(params.search_path),
        connections_(std::move(connections)),
        pool_(Shared().PoolFor(params, pool_options)),
        server_change_observer_(pool_->AddServerChangeObserver([this] { OnServerChanged(); })) {}
  ~PostgresTaskStore() override { pool_->RemoveServerChangeObserver(server_change_observer_); }
  PostgresTaskStore(const PostgresTaskStore&) = delete;
  PostgresTaskStore& operator=(const PostgresTaskStore&) = delete;

  ConnectionPool& pool() { return *pool_; }
  DatabaseClock& db_clock() { return db_clock_; }

  const std::string& plugin_id() const override { return plugin_id_; }

  Status Migrate() override;
  Result<UpsertResult> Upsert(const std::string& id, const TaskSchedule& schedule) override;
  Result<std::vector<UpsertResult>> UpsertMany(std::span<const TaskUpsert> tasks) override;
  Result<PollResult> Poll(std::span<const std::string> ids, bool sweep_expired) override;
  Result<PollResult> PollChanged(std::span<const std::string> ids,
                                 std::span<const std::optional<std::int64_t>> known_versions,
                                 bool sweep_expired) override;
  Status WarmUp() override;
  Result<ClaimResult> Claim(const std::string& id, const std::string& ticket,
                            std::chrono::milliseconds timeout,
                            std::chrono::milliseconds lease) override;
  Result<std::vector<ClaimResult>> ClaimMany(std::span<const ClaimRequest> claims,
                                             std::chrono::milliseconds lease) override;
  Result<LeaseStatus> RenewLease(const std::string& id, const std::string& ticket,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds lease) override;
  Result<bool> Release(const std::string& id, const std::string& ticket,
                       const TaskSchedule& schedule,
                       const std::optional<std::string>& error_json) override;
  Result<std::vector<ReleaseResult>> ReleaseMany(std::span<const ReleaseRequest> releases) override;
  Result<SkipResult> SkipSlot(const std::string& id, std::int64_t expected_version, WallTime slot,
                              const TaskSchedule& schedule) override;
  Status Trigger(const std::string& id) override;
  Status Trigger(const std::string& id, const TraceContext& caller) override;
  Status Pause(const std::string& id, const PauseRequest& request,
               std::chrono::milliseconds hold) override;
  Status Resume(const std::string& id) override;
  Status Cancel(const std::string& id, std::chrono::milliseconds hold) override;
  void SetCallTimeout(std::chrono::milliseconds timeout) override {
    pool_->SetCallTimeout(timeout);
  }
  Result<std::vector<std::string>> SweepExpired() override;
  Result<std::vector<TaskRow>> States() override;
  Result<std::optional<RunError>> LastRunError(const std::string& id) override;
  Status Delete(const std::string& id) override;
  Result<WallTime> DatabaseNow() override;
  std::unique_ptr<Notifications> Listen(std::function<void(const StoreEvent&)> handler) override;
  DatabaseHealth Health() const override;
  RunHistory* history() override { return this; }
  TaskRegistrations* registrations() override { return this; }
  RequestKeys* request_keys() override { return this; }

  void SetLimits(const RunHistoryLimits& limits) override { limits_.Set(limits); }
  RunHistoryLimits limits() const override { return limits_.Get(); }
  Status RecordStarts(std::span<const RunStart> starts) override;
  Result<std::size_t> RecordEnds(std::span<const RunEnd> ends) override;
  Result<RunPage> ListRuns(const std::string& task_id, int limit,
                           const std::optional<std::string>& before) override;
  Result<TaskRun> GetRun(const std::string& run_id) override;
  Result<std::size_t> MarkLost(std::span<const std::string> run_ids,
                               const std::string& error_json) override;
  Result<std::size_t> PruneExpired(std::size_t max_rows) override;

  Result<std::size_t> RefreshRegistrations(std::span<const std::string> task_ids,
                                           const std::string& host) override;
  Result<std::vector<PruneCandidate>> ListPruneCandidates(WallTime cutoff) override;
  Result<std::vector<std::string>> PruneTasks(std::span<const std::string> task_ids,
                                              WallTime cutoff, PruneScope scope) override;
  Result<bool> TablesExist() override { return HistoryTablesExist(); }

  Result<KeyedOutcome> ApplyOnce(const KeyedRequest& request,
                                 const std::function<Result<KeptAnswer>()>& apply) override;

 private:
  enum HistoryTables : int { kUnknown, kPresent, kAbsent };

  // Whether stagehand_task_runs exists: known after Migrate, else looked up once (one round
  // trip), so that a store on a database migrated by an older version writes no history rather
  // than failing. Errors: kUnavailable.
  Result<bool> HistoryTablesExist();
  // Whether stagehand_task_registrations exists: known after Migrate, else looked up (one round
  // trip) once, or again when it was absent and `again_if_absent`. Errors: kUnavailable.
  Result<bool> RegistrationsTableExists(bool again_if_absent);
  // Errors: kFailedPrecondition when stagehand_task_registrations is missing (looked for again);
  // kUnavailable.
  Status RequireRegistrations();
  // Reads the run in `row` of a result with the run columns first (HistoryStatements::list_runs).
  Result<TaskRun> ReadRun(const PgResult& result, int row) const;
  // Runs the prepared statement `pick()` names (a pair of pointers: the statement, its
  // parameters) on a pooled session, or on the pinned one; `pick` is called once the session is
  // acquired. Errors: see ErrorOf.
  template <typename Pick>
  Result<Executed> RunPicked(std::string_view operation, Pick pick);
  // Runs one prepared statement on a pooled session. Errors: see ErrorOf.
  Result<Executed> Run(std::string_view operation, const PgStatement& statement,
                       const PgParams& params);
  // Returns the Status for a failed statement, naming the plugin, the database and `operation`.
  Status ErrorOf(std::string_view operation, const PgResult& result) const;
  // Turns the rows of a poll statement into a PollResult. Entries come in the order of `ids` (only
  // the ids that have a row in the result when `only_listed` is set).
  Result<PollResult> ReadPoll(const Executed& executed, std::span<const std::string> ids,
                              bool only_listed);
  // Returns column `column` of read_for_cancel for `id` (1: the ticket, 3: the last run's error);
  // nullopt when it is NULL or the row does not exist. One round trip.
  Result<std::optional<std::string>> ReadColumn(const std::string& id, int column);
  // The runs of the retried releases among `releases`, and of those whose start was recorded
  // before a server change, that the history holds: their ends close them, the others are
  // written whole (ReleaseResult::recorded). One round trip, none when no release is in doubt.
  Result<std::set<std::string, std::less<>>> RecordedRetriedRuns(
      std::span<const ReleaseRequest> releases);
  // ReadColumn's ticket.
  Result<std::optional<std::string>> StoredTicket(const std::string& id) {
    return ReadColumn(id, 1);
  }
  // Returns the ticket of `id` when it holds the row for the run `ticket` with a pending pause
  // (ADR 0013); nullopt otherwise. One round trip.
  Result<std::optional<std::string>> PendingPauseTicket(const std::string& id,
                                                        const std::string& ticket);
  // Ends the run `ticket` whose ticket carries a pending pause, leaving the row paused (free when
  // the pause's until has passed). Not released when no such ticket holds the row.
  Result<ReleaseResult> ReleaseIntoPause(const std::string& id, const std::string& ticket,
                                         const NextRunPlan& next,
                                         const std::optional<std::string>& error_json);
  // Replaces the ticket `stored` of `id` (a pause of a running task, or its resume).
  // Errors: kConflict when the row changed meanwhile.
  Status RewriteTicket(const std::string& id, const std::string& stored,
                       const std::string& replacement,
                       std::optional<std::chrono::milliseconds> hold, std::string_view operation);
  // Where this store recorded the start of a run it has not yet ended: its task and ring slot, so
  // that its end is written through the primary key. Forgets the run. Thread-safe.
  std::optional<RingPlace> TakeRecordedPlace(const std::string& run_id);
  void RememberRecordedPlace(std::string run_id, RingPlace place);
  bool IsRecorded(const std::string& run_id);
  // The pool reached another server (a failover), on the thread that opened the session. The
  // starts this store recorded may be missing there, so the releases of those runs look in the
  // history before they close a record, and write it whole where it is missing
  // (ReleaseResult::recorded). A sweep planned before the change is held back (SweepHeld).
  void OnServerChanged();
  // Whether a sweep would run within kSweepHoldAfterServerChange of a server change: a poll
  // planned with a sweep before its host learnt of the change must not sweep there, where the
  // hosts have not confirmed their claims yet (the engine holds its sweeps a lease from then on).
  bool SweepHeld() const;
  // Runs the poll `plain` with `params`, or, when `sweep` is set and no server change holds
  // sweeps back once the session is acquired, its sweeping form: `sweeping`, or
  // `sweeping_with_history` once the history tables exist, with the timed-out error and the
  // channel after `params`. Errors: see ErrorOf.
  Result<Executed> RunPoll(bool sweep, const PgParams& params, const PgStatement& plain,
                           const PgStatement& sweeping, const PgStatement& sweeping_with_history);
  // Whether `run_id`'s start was recorded before a server change (and its end not written since).
  bool IsDoubtful(const std::string& run_id);
  void ForgetDoubt(const std::string& run_id);
  // Parses the now() column at (row, column) and feeds it to the DatabaseClock.
  Result<WallTime> ObserveNow(const Executed& executed, int row, int column);
  Result<std::optional<WallTime>> TimeAt(const PgResult& result, int row, int column) const;
  // Parses the nullable time columns of `row` into their targets.
  Status ReadTimes(const PgResult& result, int row,
                   std::initializer_list<std::pair<int, std::optional<WallTime>*>> columns) const;

  // The one implementation of PostgresConnections.
  store_internal::PgSharedConnections& Shared() const {
    return static_cast<store_internal::PgSharedConnections&>(*connections_);
  }

  const std::string plugin_id_;
  const std::string where_;  // "plugin 'x', database 'y'" for messages
  const std::string channel_;
  const Clock& clock_;
  DatabaseClock db_clock_;
  const std::string schema_;  // the search_path of every session the store borrows
  // Before pool_: the pool is registered in its group until it is destroyed.
  const std::shared_ptr<PostgresConnections> connections_;
  // Shared with the other stores of the process on the same database (schema division).
  const std::shared_ptr<ConnectionPool> pool_;
  store_internal::LimitsHolder limits_;
  std::atomic<int> history_tables_{kUnknown};
  std::atomic<int> registrations_table_{kUnknown};
  Mutex recorded_mu_;
  // The runs whose start this store recorded and whose end it has not: where each one is. Bounded
  // by kMaxRecordedPlaces; a run it forgets is ended through a scan (record_ends_by_id).
  std::unordered_map<std::string, RingPlace> recorded_ STAGEHAND_GUARDED_BY(recorded_mu_);
  // The runs whose start this store recorded on a server it no longer talks to. Same bound.
  std::unordered_set<std::string> doubtful_ STAGEHAND_GUARDED_BY(recorded_mu_);
  static constexpr std::size_t kMaxRecordedPlaces = 1 << 16;
  // When the pool last reached another server (MonoTime's count), or the minimum for never.
  std::atomic<MonoTime::rep> server_changed_at_{MonoTime::min().time_since_epoch().count()};
  static constexpr std::chrono::seconds kSweepHoldAfterServerChange{1};
  // After pool_ and the fields the observer touches: removed first by the destructor.
  const int server_change_observer_;
};

}  // namespace stagehand::store_internal
