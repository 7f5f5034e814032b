#include "stagehand/store/postgres_task_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "stagehand/base/check.h"
#include "stagehand/model/task_state.h"
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
#include "store/settings_cache.h"
#include "store/task_pause.h"

namespace stagehand {

namespace {

using store_internal::ConnectionPool;
using store_internal::DatabaseClock;
using store_internal::NextRunPlan;
using store_internal::PgArray;
using store_internal::PgConnection;
using store_internal::PgConnectParams;
using store_internal::PgParams;
using store_internal::PgResult;
using store_internal::PgStatement;
using store_internal::PlanArrays;
using store_internal::PlanKindName;
using store_internal::RunCursor;
using store_internal::RunFinishArrays;
using store_internal::RunOriginArrays;
using store_internal::TextArray;

namespace sql = store_internal::pg_sql;

// SQLSTATEs the store treats specially.
constexpr std::string_view kDuplicateDatabase = "42P04";
constexpr std::string_view kDuplicateSchema = "42P06";
constexpr std::string_view kUniqueViolation = "23505";
constexpr std::string_view kUndefinedTable = "42P01";
constexpr std::string_view kStringTooLong = "22001";

// Binds `plan` as the three parameters the statements' plan expressions read.
void AddPlan(PgParams& params, const NextRunPlan& plan) {
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
thread_local PinnedSession pinned_session;
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
  Result<std::optional<std::string>> LastRunError(const std::string& id) override;
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
  // Runs the poll `plain`, or `sweeping` (with its parameters) when `sweep` is set and no server
  // change holds sweeps back once the session is acquired. Errors: see ErrorOf.
  Result<Executed> RunPoll(bool sweep, const PgStatement& plain, const PgParams& plain_params,
                           const PgStatement& sweeping, const PgParams& sweeping_params);
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
  store_internal::SettingsCache settings_cache_;
  const std::string schema_;  // the search_path of every session the store borrows
  // Before pool_: the pool is registered in its group until it is destroyed.
  const std::shared_ptr<PostgresConnections> connections_;
  // Shared with the other stores of the process on the same database (schema division).
  const std::shared_ptr<ConnectionPool> pool_;
  store_internal::LimitsHolder limits_;
  std::atomic<int> history_tables_{kUnknown};
  std::atomic<int> registrations_table_{kUnknown};
  std::mutex recorded_mu_;
  // The runs whose start this store recorded and whose end it has not: where each one is. Bounded
  // by kMaxRecordedPlaces; a run it forgets is ended through a scan (record_ends_by_id).
  std::unordered_map<std::string, RingPlace> recorded_;  // guarded by recorded_mu_
  // The runs whose start this store recorded on a server it no longer talks to. Same bound.
  std::unordered_set<std::string> doubtful_;  // guarded by recorded_mu_
  static constexpr std::size_t kMaxRecordedPlaces = 1 << 16;
  // When the pool last reached another server (MonoTime's count), or the minimum for never.
  std::atomic<MonoTime::rep> server_changed_at_{MonoTime::min().time_since_epoch().count()};
  static constexpr std::chrono::seconds kSweepHoldAfterServerChange{1};
  // After pool_ and the fields the observer touches: removed first by the destructor.
  const int server_change_observer_;
};

std::optional<RingPlace> PostgresTaskStore::TakeRecordedPlace(const std::string& run_id) {
  std::lock_guard lock(recorded_mu_);
  const auto found = recorded_.find(run_id);
  if (found == recorded_.end()) return std::nullopt;
  RingPlace place = std::move(found->second);
  recorded_.erase(found);
  return place;
}

bool PostgresTaskStore::IsRecorded(const std::string& run_id) {
  std::lock_guard lock(recorded_mu_);
  return recorded_.contains(run_id);
}

void PostgresTaskStore::OnServerChanged() {
  server_changed_at_.store(clock_.MonoNow().time_since_epoch().count());
  std::lock_guard lock(recorded_mu_);
  for (auto& [run_id, place] : recorded_) {
    if (doubtful_.size() >= kMaxRecordedPlaces) break;
    doubtful_.insert(run_id);
  }
  recorded_.clear();
}

bool PostgresTaskStore::SweepHeld() const {
  const MonoTime changed{MonoTime::duration(server_changed_at_.load())};
  return changed != MonoTime::min() && clock_.MonoNow() - changed < kSweepHoldAfterServerChange;
}

bool PostgresTaskStore::IsDoubtful(const std::string& run_id) {
  std::lock_guard lock(recorded_mu_);
  return doubtful_.contains(run_id);
}

void PostgresTaskStore::ForgetDoubt(const std::string& run_id) {
  std::lock_guard lock(recorded_mu_);
  doubtful_.erase(run_id);
}

void PostgresTaskStore::RememberRecordedPlace(std::string run_id, RingPlace place) {
  std::lock_guard lock(recorded_mu_);
  if (recorded_.size() >= kMaxRecordedPlaces) recorded_.clear();
  recorded_.insert_or_assign(std::move(run_id), std::move(place));
}

Status PostgresTaskStore::ErrorOf(std::string_view operation, const PgResult& result) const {
  const std::string state = result.SqlState();
  const std::string message =
      state.empty() ? fmt::format("{}: {} failed: {}", where_, operation, result.error())
                    : fmt::format("{}: {} failed: {} (SQLSTATE {})", where_, operation,
                                  result.error(), state);
  if (result.connection_lost()) return UnavailableError(message);
  if (state == kUndefinedTable) {
    return FailedPreconditionError(
        message + "; the tasks table or the run history is missing (run the migrations)");
  }
  if (state == kStringTooLong) return InvalidArgumentError(message);
  // 40: transaction rollback (serialization, deadlock); 53: insufficient resources; 55: object not
  // in prerequisite state (lock not available); 57: operator intervention (statement timeout,
  // shutdown).
  const std::string_view state_class = std::string_view(state).substr(0, 2);
  if (state.empty() || state_class == "40" || state_class == "53" || state_class == "55" ||
      state_class == "57") {
    return UnavailableError(message);
  }
  return InternalError(message);
}

template <typename Pick>
Result<Executed> PostgresTaskStore::RunPicked(std::string_view operation, Pick pick) {
  std::optional<ConnectionPool::Lease> lease;
  PgConnection* session = nullptr;
  if (pinned_session.store == this) {
    session = pinned_session.connection;
  } else {
    Result<ConnectionPool::Lease> acquired = pool_->Acquire(schema_);
    if (!acquired.ok()) {
      return UnavailableError(fmt::format("{}: {} failed: cannot connect: {}", where_, operation,
                                          acquired.status().message()));
    }
    lease.emplace(*std::move(acquired));
    session = &**lease;
  }
  const auto [statement, params] = pick();
  const WallTime sent = clock_.Now();
  PgResult result = session->Execute(*statement, *params);
  const WallTime received = clock_.Now();
  if (!result.ok()) return ErrorOf(operation, result);
  return Executed{std::move(result), sent, received};
}

Result<Executed> PostgresTaskStore::Run(std::string_view operation, const PgStatement& statement,
                                        const PgParams& params) {
  return RunPicked(operation, [&] { return std::pair(&statement, &params); });
}

Result<std::optional<WallTime>> PostgresTaskStore::TimeAt(const PgResult& result, int row,
                                                          int column) const {
  if (result.IsNull(row, column)) return std::optional<WallTime>();
  Result<WallTime> parsed = store_internal::ParsePgTimestamp(result.Get(row, column));
  if (!parsed.ok()) {
    return InternalError(fmt::format("{}: {}", where_, parsed.status().message()));
  }
  return std::optional<WallTime>(*parsed);
}

Status PostgresTaskStore::ReadTimes(
    const PgResult& result, int row,
    std::initializer_list<std::pair<int, std::optional<WallTime>*>> columns) const {
  for (const auto& [column, target] : columns) {
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> parsed, TimeAt(result, row, column));
    *target = parsed;
  }
  return Status::Ok();
}

Result<WallTime> PostgresTaskStore::ObserveNow(const Executed& executed, int row, int column) {
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> now, TimeAt(executed.result, row, column));
  if (!now.has_value()) return InternalError(fmt::format("{}: now() returned NULL", where_));
  db_clock_.Observe(executed.sent, executed.received, *now);
  return *now;
}

Status PostgresTaskStore::Migrate() {
  {
    // Returned to the pool before the warm-up, which borrows sessions of its own.
    Result<ConnectionPool::Lease> lease = pool_->Acquire(schema_);
    if (!lease.ok()) {
      return UnavailableError(fmt::format("{}: migration failed: cannot connect: {}", where_,
                                          lease.status().message()));
    }
    const auto error_of = [this](std::string_view operation, const PgResult& result) {
      return ErrorOf(operation, result);
    };
    STAGEHAND_RETURN_IF_ERROR(store_internal::MigratePostgres(**lease, where_, error_of));
    STAGEHAND_RETURN_IF_ERROR(store_internal::MigratePostgresHistory(**lease, where_, error_of));
    history_tables_ = kPresent;
    registrations_table_ = kPresent;
  }
  // Best effort: statements prepare themselves on first use otherwise.
  (void)WarmUp();
  return Status::Ok();
}

Result<UpsertResult> PostgresTaskStore::Upsert(const std::string& id,
                                               const TaskSchedule& schedule) {
  STAGEHAND_RETURN_IF_ERROR(ValidateTaskSchedule(schedule));
  const WallTime db_now = db_clock_.Now();
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan start, store_internal::PlanInsertStart(schedule, db_now));
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan next,
                             store_internal::PlanReregisterStart(schedule, db_now));

  PgParams params;
  params.Add(id).Add(schedule.settings.ToJson());
  AddPlan(params, start);
  AddPlan(params, next);
  params.Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("upsert", sql::TaskStatements().upsert, params));
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> stored, TimeAt(executed.result, 0, 0));
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 1));
  return UpsertResult{stored, now, executed.result.GetInt(0, 3)};
}

Result<std::vector<UpsertResult>> PostgresTaskStore::UpsertMany(std::span<const TaskUpsert> tasks) {
  if (tasks.empty()) return std::vector<UpsertResult>();
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<store_internal::PlannedUpsert> planned,
                             store_internal::PlanUpserts(tasks, db_clock_.Now()));
  PgArray ids;
  PgArray settings;
  PlanArrays start;
  PlanArrays next;
  std::unordered_map<std::string_view, std::size_t> index_of;
  index_of.reserve(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    ids.Add(tasks[i].id);
    settings.Add(planned[i].settings_json);
    start.Add(planned[i].insert);
    next.Add(planned[i].reregister);
    index_of.emplace(tasks[i].id, i);
  }
  PgParams params;
  params.Add(std::move(ids).Finish()).Add(std::move(settings).Finish());
  std::move(start).AddTo(params);
  std::move(next).AddTo(params);
  params.Add(channel_);
  bool registering = std::any_of(tasks.begin(), tasks.end(), [](const TaskUpsert& task) {
    return task.registered_by.has_value();
  });
  if (registering) {
    STAGEHAND_ASSIGN_OR_RETURN(bool exists, RegistrationsTableExists(/*again_if_absent=*/false));
    registering = exists;
  }
  if (registering) {
    PgArray hosts;
    for (const TaskUpsert& task : tasks) hosts.AddOrNull(task.registered_by);
    params.Add(std::move(hosts).Finish());
  }
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("upsert",
                                 registering ? sql::RegistrationStatements().upsert_many
                                             : sql::TaskStatements().upsert_many,
                                 params));
  const PgResult& result = executed.result;
  if (result.rows() != static_cast<int>(tasks.size())) {
    return InternalError(
        fmt::format("{}: upsert of {} tasks wrote {} rows", where_, tasks.size(), result.rows()));
  }
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 2));
  std::vector<UpsertResult> results(tasks.size(), UpsertResult{std::nullopt, now});
  for (int row = 0; row < result.rows(); ++row) {
    const auto found = index_of.find(result.Get(row, 0));
    if (found == index_of.end()) {
      return InternalError(fmt::format("{}: upsert returned an unknown task", where_));
    }
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> stored, TimeAt(result, row, 1));
    results[found->second].next_run_start_at = stored;
    results[found->second].version = result.GetInt(row, 4);
  }
  return results;
}

Result<PollResult> PostgresTaskStore::Poll(std::span<const std::string> ids, bool sweep_expired) {
  PgParams params;
  params.Add(TextArray(ids));
  PgParams sweeping = params;
  bool history = false;
  if (sweep_expired) {
    sweeping.Add(ErrorJson("Task timed out")).Add(channel_);
    STAGEHAND_ASSIGN_OR_RETURN(bool exists, HistoryTablesExist());
    history = exists;
  }
  const sql::Statements& statements = sql::TaskStatements();
  STAGEHAND_ASSIGN_OR_RETURN(
      Executed executed,
      RunPoll(sweep_expired, statements.poll, params,
              history ? sql::RunStatements().poll_and_sweep : statements.poll_and_sweep, sweeping));
  return ReadPoll(executed, ids, /*only_listed=*/false);
}

Result<Executed> PostgresTaskStore::RunPoll(bool sweep, const PgStatement& plain,
                                            const PgParams& plain_params,
                                            const PgStatement& sweeping,
                                            const PgParams& sweeping_params) {
  // Decided once the session is there: acquiring it is what finds a new server.
  return RunPicked("poll", [&] {
    return sweep && !SweepHeld() ? std::pair(&sweeping, &sweeping_params)
                                 : std::pair(&plain, &plain_params);
  });
}

Result<PollResult> PostgresTaskStore::PollChanged(
    std::span<const std::string> ids, std::span<const std::optional<std::int64_t>> known_versions,
    bool sweep_expired) {
  STAGEHAND_CHECK(ids.size() == known_versions.size());
  PgArray versions;
  for (const std::optional<std::int64_t>& version : known_versions) versions.AddInt(version);
  PgParams params;
  params.Add(TextArray(ids)).Add(std::move(versions).Finish());
  PgParams sweeping = params;
  bool history = false;
  if (sweep_expired) {
    sweeping.Add(ErrorJson("Task timed out")).Add(channel_);
    STAGEHAND_ASSIGN_OR_RETURN(bool exists, HistoryTablesExist());
    history = exists;
  }
  const sql::Statements& statements = sql::TaskStatements();
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             RunPoll(sweep_expired, statements.poll_changed, params,
                                     history ? sql::RunStatements().poll_changed_and_sweep
                                             : statements.poll_changed_and_sweep,
                                     sweeping));
  return ReadPoll(executed, ids, /*only_listed=*/true);
}

Result<PollResult> PostgresTaskStore::ReadPoll(const Executed& executed,
                                               std::span<const std::string> ids, bool only_listed) {
  const PgResult& result = executed.result;
  PollResult poll;
  std::unordered_map<std::string_view, int> rows_by_id;
  std::unordered_set<std::string_view> missing;
  for (int row = 0; row < result.rows(); ++row) {
    const std::string_view kind = result.Get(row, 0);
    if (kind == "clock") {
      STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, row, 7));
      poll.db_now = now;
    } else if (kind == "swept") {
      poll.swept_ids.emplace_back(result.Get(row, 1));
    } else if (kind == "missing") {
      missing.insert(result.Get(row, 1));
    } else {
      rows_by_id.emplace(result.Get(row, 1), row);
    }
  }

  poll.entries.reserve(only_listed ? rows_by_id.size() + missing.size() : ids.size());
  for (const std::string& id : ids) {
    const auto found = rows_by_id.find(id);
    if (found == rows_by_id.end()) {
      if (only_listed && missing.count(id) == 0) continue;
      PollEntry& entry = poll.entries.emplace_back();
      entry.id = id;
      entry.readiness = Readiness::kMissing;
      continue;
    }
    PollEntry& entry = poll.entries.emplace_back();
    entry.id = id;
    const int row = found->second;
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> next, TimeAt(result, row, 3));
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> expires, TimeAt(result, row, 5));
    entry.next_run_start_at = next;
    entry.running = result.GetBool(row, 4);
    entry.current_run_expires_at = expires;
    entry.version = result.GetInt(row, 8);
    if (!entry.running && entry.next_run_start_at &&
        (!poll.earliest_next || *entry.next_run_start_at < *poll.earliest_next)) {
      poll.earliest_next = entry.next_run_start_at;
    }
    Result<TaskSettingsV2> settings = settings_cache_.Parse(result.Get(row, 2));
    if (!settings.ok()) {
      entry.readiness = Readiness::kInvalidSettings;
      entry.settings_error = settings.status().message();
      continue;
    }
    entry.settings = std::move(*settings);
    entry.readiness = result.GetBool(row, 6) ? Readiness::kReady : Readiness::kNotReady;
  }
  return poll;
}

Status PostgresTaskStore::WarmUp() {
  const sql::Statements& s = sql::TaskStatements();
  const PgStatement* const statements[] = {
      &s.upsert,
      &s.upsert_many,
      &s.poll,
      &s.poll_changed,
      &s.poll_changed_and_sweep,
      &s.poll_and_sweep,
      &s.claim,
      &s.claim_many,
      &s.renew_lease,
      &s.release,
      &s.release_many,
      &s.trigger,
      &s.read_for_cancel,
      &s.mark_cancelled,
      &s.sweep,
      &s.states,
      &s.remove,
      &s.now,
  };
  // The first execution of a statement in a session also pays for loading the table's and its
  // index's catalog entries and for planning. Run the hot ones once on an id no row can have (ids
  // are varchar(255)), so they change nothing and notify nobody.
  const std::string no_such_id(256, '-');
  PgParams one_id;
  one_id.Add(no_such_id);
  PgParams empty_poll;
  empty_poll.Add("{}").Add("{}");
  PgParams claim;  // id, ticket, timeout ms, lease ms
  claim.Add(no_such_id).Add("warm-up").Add(1LL).Add(1LL);
  PgParams renew = claim;
  renew.Add(CancelRequestedTicket("warm-up"));
  PgParams release;
  release.Add(no_such_id).Add("warm-up");
  AddPlan(release, NextRunPlan{NextRunPlan::Kind::kNull});
  release.AddNull().Add(channel_).Add("release").Add(CancelRequestedTicket("warm-up")).AddNull();
  PgParams trigger;  // id, channel, traceparent, tracestate
  trigger.Add(no_such_id).Add(channel_).Add("").Add("");
  const std::string ids = TextArray(std::span<const std::string>(&no_such_id, 1));
  PgParams claim_many;  // ids, tickets, timeouts ms, lease ms, expected versions, channel
  claim_many.Add(ids).Add("{warm-up}").Add("{1}").Add(1LL).Add("{NULL}").Add(channel_);
  PgParams release_many;  // ids, tickets, next plans, error JSONs, marked tickets, ...
  release_many.Add(ids)
      .Add("{warm-up}")
      .Add("{" + std::string(sql::kPlanNull) + "}")
      .Add("{0}")
      .Add("{NULL}")
      .Add("{NULL}")
      .Add("{" + CancelRequestedTicket("warm-up") + "}")
      .AddNull()
      .Add(channel_);
  const std::pair<const PgStatement*, const PgParams*> runs[] = {
      {&s.poll_changed, &empty_poll}, {&s.claim, &claim},
      {&s.claim_many, &claim_many},   {&s.renew_lease, &renew},
      {&s.release, &release},         {&s.release_many, &release_many},
      {&s.trigger, &trigger},         {&s.read_for_cancel, &one_id},
  };
  const sql::HistoryStatements& h = sql::RunStatements();
  const PgStatement* const history_statements[] = {
      &h.claim_many,    &h.release_many, &h.sweep, &h.poll_and_sweep, &h.poll_changed_and_sweep,
      &h.record_starts, &h.record_ends,
  };
  const bool history = history_tables_.load() == kPresent;
  return pool_->WarmUp(schema_, [&](PgConnection& connection) -> Status {
    if (connection.warmed()) return Status::Ok();
    for (const PgStatement* statement : statements) {
      if (std::optional<PgResult> failed = connection.Prepare(*statement)) {
        return ErrorOf("prepare", *failed);
      }
    }
    if (history) {
      for (const PgStatement* statement : history_statements) {
        if (std::optional<PgResult> failed = connection.Prepare(*statement)) {
          return ErrorOf("prepare", *failed);
        }
      }
    }
    for (const auto& [statement, params] : runs) {
      if (PgResult result = connection.Execute(*statement, *params); !result.ok()) {
        return ErrorOf("warm-up", result);
      }
    }
    // Planning any statement on the history loads its table's and indexes' catalog entries.
    if (history) {
      if (PgResult result = connection.Execute(h.get_run, one_id); !result.ok()) {
        return ErrorOf("warm-up", result);
      }
    }
    connection.MarkWarmed();
    return Status::Ok();
  });
}

Result<ClaimResult> PostgresTaskStore::Claim(const std::string& id, const std::string& ticket,
                                             std::chrono::milliseconds timeout,
                                             std::chrono::milliseconds lease) {
  PgParams params;
  params.Add(id)
      .Add(ticket)
      .Add(static_cast<long long>(timeout.count()))
      .Add(static_cast<long long>(lease.count()));
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed, Run("claim", sql::TaskStatements().claim, params));
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 0));
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> expires, TimeAt(executed.result, 0, 1));
  return ClaimResult{expires.has_value(), now, expires};
}

Result<std::vector<ClaimResult>> PostgresTaskStore::ClaimMany(std::span<const ClaimRequest> claims,
                                                              std::chrono::milliseconds lease) {
  if (claims.empty()) return std::vector<ClaimResult>();
  PgArray ids;
  PgArray tickets;
  PgArray timeouts;
  PgArray versions;
  std::unordered_map<std::string_view, std::size_t> index_of;
  index_of.reserve(claims.size());
  for (std::size_t i = 0; i < claims.size(); ++i) {
    ids.Add(claims[i].id);
    tickets.Add(claims[i].ticket);
    timeouts.AddInt(claims[i].timeout.count());
    versions.AddInt(claims[i].expected_version);
    index_of.emplace(claims[i].id, i);
  }
  PgParams params;
  params.Add(std::move(ids).Finish())
      .Add(std::move(tickets).Finish())
      .Add(std::move(timeouts).Finish())
      .Add(static_cast<long long>(lease.count()))
      .Add(std::move(versions).Finish())
      .Add(channel_);
  bool history = std::any_of(claims.begin(), claims.end(),
                             [](const ClaimRequest& claim) { return claim.history.has_value(); });
  if (history) {
    STAGEHAND_ASSIGN_OR_RETURN(bool exists, HistoryTablesExist());
    history = exists;
  }
  if (history) {
    RunOriginArrays origins(/*with_starts=*/false);
    for (const ClaimRequest& claim : claims) {
      if (claim.history) {
        origins.Add(*claim.history, std::nullopt);
      } else {
        origins.AddNull();
      }
    }
    std::move(origins).AddTo(params);
    params.Add(static_cast<long long>(limits_.Get().max_runs_per_task));
  }
  STAGEHAND_ASSIGN_OR_RETURN(
      Executed executed,
      Run("claim", history ? sql::RunStatements().claim_many : sql::TaskStatements().claim_many,
          params));
  const PgResult& result = executed.result;
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 2));
  std::vector<ClaimResult> results(claims.size(), ClaimResult{false, now, std::nullopt});
  for (int row = 0; row < result.rows(); ++row) {
    if (result.IsNull(row, 0)) continue;
    const auto found = index_of.find(result.Get(row, 0));
    if (found == index_of.end()) {
      return InternalError(fmt::format("{}: claim returned an unknown task", where_));
    }
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> expires, TimeAt(result, row, 1));
    results[found->second].claimed = true;
    results[found->second].expires_at = expires;
    if (history && !result.IsNull(row, 4)) {
      const ClaimRequest& claim = claims[found->second];
      RememberRecordedPlace(claim.ticket,
                            RingPlace{claim.id, static_cast<int>(result.GetInt(row, 4))});
    }
  }
  return results;
}

Result<LeaseStatus> PostgresTaskStore::RenewLease(const std::string& id, const std::string& ticket,
                                                  std::chrono::milliseconds timeout,
                                                  std::chrono::milliseconds lease) {
  PgParams params;
  params.Add(id)
      .Add(ticket)
      .Add(static_cast<long long>(timeout.count()))
      .Add(static_cast<long long>(lease.count()))
      .Add(CancelRequestedTicket(ticket));
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("renew lease", sql::TaskStatements().renew_lease, params));
  if (executed.result.rows() == 0) {
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> pending, PendingPauseTicket(id, ticket));
    if (!pending) return LeaseStatus::kLost;
    const std::string& stored = *pending;
    PgParams again;
    again.Add(id)
        .Add(stored)
        .Add(static_cast<long long>(timeout.count()))
        .Add(static_cast<long long>(lease.count()))
        .Add(stored.starts_with(kCancelRequestedPrefix) ? stored : CancelRequestedTicket(stored));
    STAGEHAND_ASSIGN_OR_RETURN(executed,
                               Run("renew lease", sql::TaskStatements().renew_lease, again));
    if (executed.result.rows() == 0) return LeaseStatus::kLost;
  }
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 0));
  return executed.result.GetBool(0, 1) ? LeaseStatus::kCancelRequested : LeaseStatus::kHeld;
}

Result<std::optional<std::string>> PostgresTaskStore::ReadColumn(const std::string& id,
                                                                 int column) {
  PgParams params;
  params.Add(id);
  STAGEHAND_ASSIGN_OR_RETURN(Executed read,
                             Run("read task", sql::TaskStatements().read_for_cancel, params));
  if (read.result.rows() == 0) return std::optional<std::string>();
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(read, 0, 2));
  return read.result.GetOptional(0, column);
}

Result<std::optional<std::string>> PostgresTaskStore::LastRunError(const std::string& id) {
  return ReadColumn(id, 3);
}

Result<std::optional<std::string>> PostgresTaskStore::PendingPauseTicket(
    const std::string& id, const std::string& ticket) {
  Result<std::optional<std::string>> stored = StoredTicket(id);
  if (!stored.ok() || !*stored) return stored;
  const std::optional<store_internal::HeldTicket> held = store_internal::ParseHeldTicket(**stored);
  if (!held || held->run_ticket != ticket || !held->pending_pause) {
    return std::optional<std::string>();
  }
  return stored;
}

Result<ReleaseResult> PostgresTaskStore::ReleaseIntoPause(
    const std::string& id, const std::string& ticket, const NextRunPlan& next,
    const std::optional<std::string>& error_json) {
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> stored, PendingPauseTicket(id, ticket));
  ReleaseResult result;
  result.db_now = db_clock_.Now();
  if (!stored) return result;
  const std::optional<store_internal::HeldTicket> held = store_internal::ParseHeldTicket(*stored);
  const std::optional<store_internal::PauseAfterRun> pause =
      store_internal::PauseLeftBy(*held, result.db_now);
  PgParams params;
  params.Add(id).Add(*stored);
  AddPlan(params, next);
  params.Add(held->cancel_requested ? std::optional(ErrorJson("Task was cancelled")) : error_json)
      .Add(channel_)
      .Add("release")
      .Add(pause ? std::optional(pause->ticket) : std::nullopt);
  if (pause && pause->until) {
    params.Add(store_internal::FormatPgTimestamp(store_internal::ToMillis(*pause->until)));
  } else {
    params.AddNull();
  }
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("release", sql::TaskStatements().release_into_pause, params));
  if (executed.result.rows() == 0) return result;
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 0));
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> next_start, TimeAt(executed.result, 0, 2));
  result.released = true;
  result.db_now = now;
  result.next_run_start_at = next_start;
  result.version = executed.result.GetInt(0, 3);
  return result;
}

Status PostgresTaskStore::RewriteTicket(const std::string& id, const std::string& stored,
                                        const std::string& replacement,
                                        std::optional<std::chrono::milliseconds> hold,
                                        std::string_view operation) {
  PgParams params;
  params.Add(id).Add(stored).Add(replacement).Add(channel_);
  if (hold) {
    params.Add(static_cast<long long>(hold->count()));
  } else {
    params.AddNull();
  }
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run(operation, sql::TaskStatements().rewrite_ticket, params));
  if (executed.result.rows() == 0) {
    return ConflictError(fmt::format("Task {} changed while it was being {}; try again", id,
                                     operation == "pause" ? "paused" : "resumed"));
  }
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 0));
  return Status::Ok();
}

Result<bool> PostgresTaskStore::Release(const std::string& id, const std::string& ticket,
                                        const TaskSchedule& schedule,
                                        const std::optional<std::string>& error_json) {
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan next,
                             store_internal::PlanReleaseNext(schedule, db_clock_.Now()));
  PgParams params;
  params.Add(id).Add(ticket);
  AddPlan(params, next);
  params.Add(error_json)
      .Add(channel_)
      .Add("release")
      .Add(CancelRequestedTicket(ticket))
      .Add(ErrorJson("Task was cancelled"));
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("release", sql::TaskStatements().release, params));
  if (executed.result.rows() == 0) {
    STAGEHAND_ASSIGN_OR_RETURN(ReleaseResult paused,
                               ReleaseIntoPause(id, ticket, next, error_json));
    return paused.released;
  }
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 0));
  return true;
}

Result<std::vector<ReleaseResult>> PostgresTaskStore::ReleaseMany(
    std::span<const ReleaseRequest> releases) {
  if (releases.empty()) return std::vector<ReleaseResult>();
  PgArray ids;
  PgArray tickets;
  PgArray errors;
  PgArray marked;
  PlanArrays next;
  std::unordered_map<std::string_view, std::size_t> index_of;
  index_of.reserve(releases.size());
  std::vector<NextRunPlan> plans;
  plans.reserve(releases.size());
  const WallTime db_now = db_clock_.Now();
  for (std::size_t i = 0; i < releases.size(); ++i) {
    const ReleaseRequest& release = releases[i];
    STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan plan, store_internal::PlanRelease(release, db_now));
    plans.push_back(plan);
    ids.Add(release.id);
    tickets.Add(release.ticket);
    errors.AddOrNull(release.error_json);
    marked.Add(CancelRequestedTicket(release.ticket));
    next.Add(plan);
    index_of.emplace(release.id, i);
  }
  PgParams params;
  params.Add(std::move(ids).Finish()).Add(std::move(tickets).Finish());
  std::move(next).AddTo(params);
  params.Add(std::move(errors).Finish())
      .Add(std::move(marked).Finish())
      .Add(ErrorJson("Task was cancelled"))
      .Add(channel_);
  bool history = std::any_of(releases.begin(), releases.end(), [](const ReleaseRequest& release) {
    return release.history.has_value();
  });
  if (history) {
    STAGEHAND_ASSIGN_OR_RETURN(bool exists, HistoryTablesExist());
    history = exists;
  }
  // The runs whose start this store recorded, or that a retried release finds recorded, closed
  // where they are once the rows are released; the others are written whole.
  std::vector<RunEnd> closes;
  std::set<std::string, std::less<>> found_recorded;
  std::vector<bool> written_whole(releases.size(), false);
  if (history) {
    STAGEHAND_ASSIGN_OR_RETURN(found_recorded, RecordedRetriedRuns(releases));
  }
  if (history) {
    const RunHistoryLimits limits = limits_.Get();
    RunFinishArrays finishes(limits.max_output_bytes);
    RunOriginArrays origins(/*with_starts=*/true);
    for (std::size_t i = 0; i < releases.size(); ++i) {
      const ReleaseRequest& release = releases[i];
      if (!release.history || IsRecorded(release.ticket) ||
          found_recorded.contains(release.ticket)) {
        finishes.AddNull();
        origins.AddNull();
        if (release.history) {
          closes.push_back(RunEnd{release.ticket, release.history->finish, std::nullopt});
        }
        continue;
      }
      finishes.Add(release.history->finish);
      origins.Add(release.history->origin, release.history->started_at);
      written_whole[i] = release.retried || IsDoubtful(release.ticket);
    }
    std::move(finishes).AddTo(params);
    std::move(origins).AddTo(params);
    params.Add(static_cast<long long>(limits.max_runs_per_task));
  }
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed, Run("release",
                                                    history ? sql::RunStatements().release_many
                                                            : sql::TaskStatements().release_many,
                                                    params));
  const PgResult& result = executed.result;
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 1));
  ReleaseResult unreleased;
  unreleased.db_now = now;
  std::vector<ReleaseResult> results(releases.size(), unreleased);
  for (std::size_t i = 0; i < releases.size(); ++i) {
    results[i].recorded = written_whole[i];
    ForgetDoubt(releases[i].ticket);
  }
  for (int row = 0; row < result.rows(); ++row) {
    if (result.IsNull(row, 0)) continue;
    const auto found = index_of.find(result.Get(row, 0));
    if (found == index_of.end()) {
      return InternalError(fmt::format("{}: release returned an unknown task", where_));
    }
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> next_start, TimeAt(result, row, 3));
    ReleaseResult& released = results[found->second];
    released.released = true;
    released.next_run_start_at = next_start;
    released.version = result.GetInt(row, 4);
  }
  if (!closes.empty()) {
    for (RunEnd& end : closes) end.ended_at = now;
    STAGEHAND_RETURN_IF_ERROR(RecordEnds(closes));
  }
  // A run whose ticket a pause marked meanwhile (rare) is released into the pause.
  for (std::size_t i = 0; i < releases.size(); ++i) {
    if (results[i].released) continue;
    STAGEHAND_ASSIGN_OR_RETURN(
        ReleaseResult paused,
        ReleaseIntoPause(releases[i].id, releases[i].ticket, plans[i], releases[i].error_json));
    if (paused.released) results[i] = paused;
  }
  return results;
}

Result<std::set<std::string, std::less<>>> PostgresTaskStore::RecordedRetriedRuns(
    std::span<const ReleaseRequest> releases) {
  std::vector<std::string> task_ids;
  std::vector<std::string> run_ids;
  for (const ReleaseRequest& release : releases) {
    if (!release.history || IsRecorded(release.ticket)) continue;
    if (!release.retried && !IsDoubtful(release.ticket)) continue;
    task_ids.push_back(release.id);
    run_ids.push_back(release.ticket);
  }
  std::set<std::string, std::less<>> recorded;
  if (run_ids.empty()) return recorded;
  PgParams params;
  params.Add(TextArray(task_ids)).Add(TextArray(run_ids));
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("release", sql::RunStatements().recorded_runs, params));
  for (int row = 0; row < executed.result.rows(); ++row) {
    recorded.emplace(executed.result.Get(row, 0));
  }
  return recorded;
}

Result<KeyedOutcome> PostgresTaskStore::ApplyOnce(
    const KeyedRequest& request, const std::function<Result<KeptAnswer>()>& apply) {
  STAGEHAND_CHECK(pinned_session.store != this);
  constexpr std::string_view kOperation = "keeping an idempotency key";
  Result<ConnectionPool::Lease> lease = pool_->Acquire(schema_);
  if (!lease.ok()) {
    return UnavailableError(fmt::format("{}: {} failed: cannot connect: {}", where_, kOperation,
                                        lease.status().message()));
  }
  PgConnection& session = **lease;
  const auto roll_back = [&] {
    if (PgResult rolled = session.ExecuteScript(sql::kRollback); !rolled.ok()) {
      (void)ErrorOf(kOperation, rolled);
    }
  };
  if (PgResult begun = session.ExecuteScript(sql::kBegin); !begun.ok()) {
    return ErrorOf(kOperation, begun);
  }
  PgParams key;
  key.Add(request.key).Add(request.fingerprint).Add(static_cast<double>(request.retention.count()));
  PgResult kept = session.ExecuteText(sql::kKeepRequestKey, key);
  if (!kept.ok()) {
    roll_back();
    return ErrorOf(kOperation, kept);
  }
  if (kept.rows() == 0) {
    // Kept, and not expired: the first request with the key committed (its statement waited
    // for that commit), so its answer is there.
    PgParams read;
    read.Add(request.key);
    PgResult earlier = session.ExecuteText(sql::kReadRequestKey, read);
    roll_back();
    if (!earlier.ok()) return ErrorOf(kOperation, earlier);
    if (earlier.rows() == 0) {
      return UnavailableError(
          fmt::format("{}: the idempotency key {} went while it was read: send the request again",
                      where_, request.key));
    }
    if (earlier.Get(0, 0) != request.fingerprint) {
      return ConflictError(
          fmt::format("the idempotency key {} was first sent with another request", request.key));
    }
    return KeyedOutcome{
        KeptAnswer{static_cast<int>(earlier.GetInt(0, 1)), std::string(earlier.Get(0, 2))},
        /*replayed=*/true};
  }
  Result<KeptAnswer> answer = [&] {
    pinned_session = PinnedSession{this, &session};
    const Unpin unpin;
    return apply();
  }();
  if (!answer.ok()) {
    roll_back();
    return answer.status();
  }
  PgParams answered;
  answered.Add(request.key).Add(static_cast<long long>(answer->status)).Add(answer->body);
  if (PgResult written = session.ExecuteText(sql::kAnswerRequestKey, answered); !written.ok()) {
    roll_back();
    return ErrorOf(kOperation, written);
  }
  if (PgResult committed = session.ExecuteScript(sql::kCommit); !committed.ok()) {
    return UnavailableError(fmt::format(
        "{}: {}: the commit's outcome is unknown ({}): send the request again with its key", where_,
        kOperation, committed.error()));
  }
  return KeyedOutcome{*std::move(answer), /*replayed=*/false};
}

Result<SkipResult> PostgresTaskStore::SkipSlot(const std::string& id, std::int64_t expected_version,
                                               WallTime slot, const TaskSchedule& schedule) {
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan next,
                             store_internal::PlanSkipNext(schedule, slot, db_clock_.Now()));
  STAGEHAND_CHECK(next.kind == NextRunPlan::Kind::kInstant ||
                  next.kind == NextRunPlan::Kind::kNull);
  PgParams params;
  params.Add(id).Add(static_cast<long long>(expected_version));
  if (next.kind == NextRunPlan::Kind::kInstant) {
    params.Add(store_internal::FormatPgTimestamp(next.instant));
  } else {
    params.AddNull();
  }
  params.Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("skip slot", sql::TaskStatements().skip_slot, params));
  SkipResult result;
  if (executed.result.rows() == 0) {
    result.db_now = db_clock_.Now();
    return result;
  }
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> stored, TimeAt(executed.result, 0, 0));
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 2));
  result.skipped = true;
  result.next_run_start_at = stored;
  result.version = executed.result.GetInt(0, 1);
  result.db_now = now;
  return result;
}

Status PostgresTaskStore::Trigger(const std::string& id) { return Trigger(id, TraceContext{}); }

Status PostgresTaskStore::Trigger(const std::string& id, const TraceContext& caller) {
  PgParams params;
  params.Add(id).Add(channel_);
  params.Add(caller.valid() ? FormatTraceparent(caller) : std::string()).Add(caller.trace_state);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("trigger", sql::TaskStatements().trigger, params));
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 2));
  if (!executed.result.GetBool(0, 0)) {
    return NotFoundError(fmt::format("Task {} does not exist", id));
  }
  if (!executed.result.GetBool(0, 1)) {
    if (executed.result.GetBool(0, 3)) return store_internal::PausedError(id);
    return ConflictError(fmt::format("Task {} is currently running", id));
  }
  return Status::Ok();
}

Status PostgresTaskStore::Pause(const std::string& id, const PauseRequest& request,
                                std::chrono::milliseconds hold) {
  // The statement compares `until` with the database's clock; the texts are checked here.
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePauseTexts(request));
  PgParams params;
  params.Add(id).Add(PausedTicket(request));
  if (request.until) {
    params.Add(store_internal::FormatPgTimestamp(store_internal::ToMillis(*request.until)));
  } else {
    params.AddNull();
  }
  params.Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed, Run("pause", sql::TaskStatements().pause, params));
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 2));
  if (!executed.result.GetBool(0, 0)) {
    return NotFoundError(fmt::format("Task {} does not exist", id));
  }
  if (executed.result.GetBool(0, 3)) return store_internal::PauseUntilPassedError();
  if (executed.result.GetBool(0, 1)) return Status::Ok();
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> stored, StoredTicket(id));
  const std::optional<store_internal::HeldTicket> held =
      stored ? store_internal::ParseHeldTicket(*stored) : std::nullopt;
  if (!held) return ConflictError(fmt::format("Task {} changed while it was being paused", id));
  return RewriteTicket(id, *stored, store_internal::PausePendingTicket(*held, request), hold,
                       "pause");
}

Status PostgresTaskStore::Resume(const std::string& id) {
  PgParams params;
  params.Add(id).Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("resume", sql::TaskStatements().resume, params));
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 2));
  if (!executed.result.GetBool(0, 0)) {
    return NotFoundError(fmt::format("Task {} does not exist", id));
  }
  if (executed.result.GetBool(0, 1)) return Status::Ok();
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> stored, StoredTicket(id));
  const std::optional<store_internal::HeldTicket> held =
      stored ? store_internal::ParseHeldTicket(*stored) : std::nullopt;
  if (!held || !held->pending_pause) return store_internal::NotPausedError(id);
  return RewriteTicket(id, *stored, store_internal::WithoutPendingPause(*held), std::nullopt,
                       "resume");
}

Status PostgresTaskStore::Cancel(const std::string& id, std::chrono::milliseconds hold) {
  const sql::Statements& statements = sql::TaskStatements();
  PgParams read_params;
  read_params.Add(id);
  STAGEHAND_ASSIGN_OR_RETURN(Executed read, Run("cancel", statements.read_for_cancel, read_params));
  if (read.result.rows() == 0) return NotFoundError(fmt::format("Task {} does not exist", id));
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(read, 0, 2));
  const std::optional<std::string> ticket = read.result.GetOptional(0, 1);
  if (!ticket || ticket->empty() || store_internal::IsPausedTicket(*ticket)) {
    return ConflictError(fmt::format("Task {} is not running", id));
  }
  Result<TaskSettingsV2> settings = TaskSettingsV2::FromJson(read.result.Get(0, 0));
  if (!settings.ok()) {
    return InvalidArgumentError(fmt::format("{}: task {} has invalid settings_json: {}", where_, id,
                                            settings.status().message()));
  }
  if (ticket->starts_with(kCancelRequestedPrefix)) return Status::Ok();

  PgParams params;
  params.Add(id)
      .Add(*ticket)
      .Add(CancelRequestedTicket(*ticket))
      .Add(static_cast<long long>(hold.count()))
      .Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed, Run("cancel", statements.mark_cancelled, params));
  if (executed.result.rows() == 0) {
    return ConflictError(fmt::format("Task {} is not running", id));
  }
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 0));
  return Status::Ok();
}

Result<std::vector<std::string>> PostgresTaskStore::SweepExpired() {
  PgParams params;
  params.Add(ErrorJson("Task timed out")).Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryTablesExist());
  STAGEHAND_ASSIGN_OR_RETURN(
      Executed executed,
      Run("sweep", history ? sql::RunStatements().sweep : sql::TaskStatements().sweep, params));
  std::vector<std::string> ids;
  ids.reserve(static_cast<size_t>(executed.result.rows()));
  for (int row = 0; row < executed.result.rows(); ++row) {
    ids.emplace_back(executed.result.Get(row, 0));
  }
  if (!ids.empty()) {
    STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 1));
  }
  return ids;
}

Result<std::vector<TaskRow>> PostgresTaskStore::States() {
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("states", sql::TaskStatements().states, PgParams()));
  const PgResult& result = executed.result;
  std::vector<TaskRow> rows;
  rows.reserve(static_cast<size_t>(result.rows()));
  for (int row = 0; row < result.rows(); ++row) {
    TaskRow& out = rows.emplace_back();
    out.id = result.Get(row, 0);
    out.settings_json = result.Get(row, 1);
    out.current_run_ticket = result.GetOptional(row, 3);
    out.last_run_error_json = result.GetOptional(row, 6);
    STAGEHAND_RETURN_IF_ERROR(ReadTimes(result, row,
                                        {{2, &out.next_run_start_at},
                                         {4, &out.current_run_started_at},
                                         {5, &out.current_run_expires_at},
                                         {7, &out.last_run_ended_at}}));
  }
  if (!rows.empty()) {
    STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 8));
  }
  return rows;
}

Status PostgresTaskStore::Delete(const std::string& id) {
  PgParams params;
  params.Add(id).Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("delete", sql::TaskStatements().remove, params));
  if (executed.result.rows() > 0) {
    STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 0));
  }
  return Status::Ok();
}

Result<WallTime> PostgresTaskStore::DatabaseNow() {
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("read the clock", sql::TaskStatements().now, PgParams()));
  return ObserveNow(executed, 0, 0);
}

namespace {

// A store's subscription: its channel on the LISTEN hub (none behind a transaction pooler
// without a notify connection), and the pool's server changes.
class PgSubscription final : public Notifications {
 public:
  PgSubscription(std::unique_ptr<Notifications> channel, std::shared_ptr<ConnectionPool> pool,
                 int observer)
      : channel_(std::move(channel)), pool_(std::move(pool)), observer_(observer) {}
  ~PgSubscription() override { pool_->RemoveServerChangeObserver(observer_); }
  PgSubscription(const PgSubscription&) = delete;
  PgSubscription& operator=(const PgSubscription&) = delete;
  bool announces_writes() const override { return channel_ != nullptr; }

 private:
  std::unique_ptr<Notifications> channel_;
  std::shared_ptr<ConnectionPool> pool_;
  int observer_;
};

}  // namespace

std::unique_ptr<Notifications> PostgresTaskStore::Listen(
    std::function<void(const StoreEvent&)> handler) {
  auto shared = std::make_shared<std::function<void(const StoreEvent&)>>(std::move(handler));
  const int observer = pool_->AddServerChangeObserver([shared] {
    (*shared)(StoreEvent{StoreEvent::Kind::kServerChanged, ""});
  });
  const store_internal::PgConnectParams& params = pool_->params();
  if (params.transaction_pooler && params.notify_conninfo.empty()) {
    // A pooler in transaction mode cannot hold a LISTEN: the engine polls alone.
    return std::make_unique<PgSubscription>(nullptr, pool_, observer);
  }
  std::unique_ptr<Notifications> channel = Shared().hub().Subscribe(
      pool_->params(), channel_,
      [shared, pool = pool_](const StoreEvent& event) {
        // The LISTEN session is back: so is the server, whatever the pool's backoff says.
        if (event.kind == StoreEvent::Kind::kResync) pool->RetryNow();
        (*shared)(event);
      },
      // The server stopped answering the LISTEN session: the statements in flight on the pool's
      // sessions would wait out their call timeout on it.
      [pool = pool_] { pool->SeverLent("the server stopped answering"); });
  return std::make_unique<PgSubscription>(std::move(channel), pool_, observer);
}

DatabaseHealth PostgresTaskStore::Health() const {
  const store_internal::PoolHealth pool = pool_->Health();
  DatabaseHealth health{pool.reachable, pool.unreachable_since, pool.reason, pool.reconnects,
                        pool.server_changes};
  const std::optional<store_internal::PgNotificationHub::ListenHealth> listen =
      Shared().hub().Health(pool_->params());
  // A LISTEN session found down says the server is, unless a statement was answered since (the
  // session is then only slower to come back).
  if (listen && !listen->up && !(pool.reachable && pool.answered_at > listen->noticed_at)) {
    if (health.reachable || listen->down_since < health.unreachable_since) {
      health.unreachable_since = listen->down_since;
    }
    if (health.reachable) health.reason = listen->reason;
    health.reachable = false;
  }
  return health;
}

Result<bool> PostgresTaskStore::HistoryTablesExist() {
  const int known = history_tables_.load();
  if (known != kUnknown) return known == kPresent;
  Result<ConnectionPool::Lease> lease = pool_->Acquire(schema_);
  if (!lease.ok()) {
    return UnavailableError(
        fmt::format("{}: looking for the run history failed: cannot connect: {}", where_,
                    lease.status().message()));
  }
  PgResult result = (*lease)->ExecuteText(sql::kHistoryTableExists, PgParams());
  if (!result.ok()) return ErrorOf("looking for the run history", result);
  const bool exists = result.rows() > 0 && result.GetBool(0, 0);
  int expected = kUnknown;
  history_tables_.compare_exchange_strong(expected, exists ? kPresent : kAbsent);
  return history_tables_.load() == kPresent;
}

Status PostgresTaskStore::RecordStarts(std::span<const RunStart> starts) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateStarts(starts));
  if (starts.empty()) return Status::Ok();
  PgArray run_ids;
  PgArray task_ids;
  RunOriginArrays origins(/*with_starts=*/true);
  bool any = false;
  for (const RunStart& start : starts) {
    if (IsRecorded(start.run_id)) continue;  // a start recorded before: ignored
    any = true;
    run_ids.Add(start.run_id);
    task_ids.Add(start.task_id);
    origins.Add(start.origin, start.started_at);
  }
  if (!any) return Status::Ok();
  PgParams params;
  params.Add(std::move(run_ids).Finish()).Add(std::move(task_ids).Finish());
  std::move(origins).AddTo(params);
  params.Add(static_cast<long long>(limits_.Get().max_runs_per_task));
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("record run starts", sql::RunStatements().record_starts, params));
  const PgResult& result = executed.result;
  for (int row = 0; row < result.rows(); ++row) {
    RememberRecordedPlace(
        std::string(result.Get(row, 2)),
        RingPlace{std::string(result.Get(row, 0)), static_cast<int>(result.GetInt(row, 1))});
  }
  return Status::Ok();
}

Result<std::size_t> PostgresTaskStore::RecordEnds(std::span<const RunEnd> ends) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateEnds(ends));
  if (ends.empty()) return std::size_t{0};
  const RunHistoryLimits limits = limits_.Get();
  // The runs whose place this store knows are closed through the primary key, the others found
  // by their id.
  struct Finishes {
    explicit Finishes(std::size_t max_output_bytes) : finish(max_output_bytes) {}
    PgArray task_ids;
    PgArray ring_slots;
    PgArray run_ids;
    PgArray ended;
    RunFinishArrays finish;
    bool empty = true;
  };
  Finishes placed(limits.max_output_bytes);
  Finishes unplaced(limits.max_output_bytes);
  for (const RunEnd& end : ends) {
    const std::optional<RingPlace> place = TakeRecordedPlace(end.run_id);
    Finishes& finishes = place ? placed : unplaced;
    finishes.empty = false;
    if (place) {
      finishes.task_ids.Add(place->task_id);
      finishes.ring_slots.AddInt(place->slot);
    }
    finishes.run_ids.Add(end.run_id);
    if (end.ended_at) {
      finishes.ended.Add(
          store_internal::FormatPgTimestamp(store_internal::ToMillis(*end.ended_at)));
    } else {
      finishes.ended.AddNull();
    }
    finishes.finish.Add(end.finish);
  }
  std::size_t closed = 0;
  for (Finishes* finishes : {&placed, &unplaced}) {
    if (finishes->empty) continue;
    PgParams params;
    if (finishes == &placed) {
      params.Add(std::move(finishes->task_ids).Finish())
          .Add(std::move(finishes->ring_slots).Finish());
    }
    params.Add(std::move(finishes->run_ids).Finish()).Add(std::move(finishes->ended).Finish());
    std::move(finishes->finish).AddTo(params);
    const sql::HistoryStatements& statements = sql::RunStatements();
    STAGEHAND_ASSIGN_OR_RETURN(
        Executed executed,
        Run("record run ends",
            finishes == &placed ? statements.record_ends : statements.record_ends_by_id, params));
    closed += static_cast<std::size_t>(executed.result.GetInt(0, 0));
  }
  return closed;
}

Result<TaskRun> PostgresTaskStore::ReadRun(const PgResult& result, int row) const {
  TaskRun run;
  run.run_id = result.Get(row, 0);
  run.task_id = result.Get(row, 1);
  run.origin.host = result.Get(row, 2);
  run.origin.pid = result.GetInt(row, 3);
  const std::string_view trigger = result.Get(row, 4);
  const std::optional<RunTrigger> parsed_trigger = ParseRunTrigger(trigger);
  if (!parsed_trigger) return store_internal::UnknownNameError(run.run_id, "trigger", trigger);
  run.origin.trigger = *parsed_trigger;
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> slot, TimeAt(result, row, 5));
  run.origin.slot = slot;
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> started, TimeAt(result, row, 6));
  run.started_at = started.value_or(WallTime{});
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> ended, TimeAt(result, row, 7));
  run.ended_at = ended;
  const std::string_view outcome = result.Get(row, 8);
  const std::optional<RunOutcome> parsed_outcome = ParseRunOutcome(outcome);
  if (!parsed_outcome) return store_internal::UnknownNameError(run.run_id, "outcome", outcome);
  run.finish.outcome = *parsed_outcome;
  run.finish.error_json = result.GetOptional(row, 9);
  const auto optional_int = [&](int column) -> std::optional<int> {
    if (result.IsNull(row, column)) return std::nullopt;
    return static_cast<int>(result.GetInt(row, column));
  };
  run.finish.exit_code = optional_int(10);
  run.finish.signal = optional_int(11);
  run.finish.http_status = optional_int(12);
  run.origin.attempt = static_cast<int>(result.GetInt(row, 13));
  run.origin.trace_id = result.GetOptional(row, 14);
  return run;
}

Result<RunPage> PostgresTaskStore::ListRuns(const std::string& task_id, int limit,
                                            const std::optional<std::string>& before) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePageSize(limit));
  const sql::HistoryStatements& statements = sql::RunStatements();
  std::optional<RunCursor> after;
  if (before) {
    after = store_internal::DecodeRunCursor(*before);
    if (!after) {
      PgParams anchor_params;
      anchor_params.Add(*before).Add(task_id);
      STAGEHAND_ASSIGN_OR_RETURN(Executed anchor,
                                 Run("list runs", statements.run_start, anchor_params));
      if (anchor.result.rows() == 0) {
        return InvalidArgumentError(
            fmt::format("before: '{}' is neither a page cursor nor a run id", *before));
      }
      STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> started, TimeAt(anchor.result, 0, 0));
      after = RunCursor{started.value_or(WallTime{}), *before};
    }
  }
  PgParams params;
  params.Add(task_id).Add(static_cast<long long>(limit) + 1);
  if (after) params.Add(store_internal::FormatPgTimestamp(after->started_at)).Add(after->run_id);
  STAGEHAND_ASSIGN_OR_RETURN(
      Executed executed,
      Run("list runs", after ? statements.list_runs_before : statements.list_runs, params));
  const PgResult& result = executed.result;
  RunPage page;
  const int count = std::min(result.rows(), limit);
  page.runs.reserve(static_cast<std::size_t>(count));
  for (int row = 0; row < count; ++row) {
    STAGEHAND_ASSIGN_OR_RETURN(TaskRun run, ReadRun(result, row));
    page.runs.push_back(std::move(run));
  }
  if (result.rows() > limit) {
    page.next_cursor =
        store_internal::EncodeRunCursor(page.runs.back().started_at, page.runs.back().run_id);
  }
  return page;
}

Result<TaskRun> PostgresTaskStore::GetRun(const std::string& run_id) {
  PgParams params;
  params.Add(run_id);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("get run", sql::RunStatements().get_run, params));
  if (executed.result.rows() == 0) {
    return NotFoundError(fmt::format("Run {} does not exist", run_id));
  }
  STAGEHAND_ASSIGN_OR_RETURN(TaskRun run, ReadRun(executed.result, 0));
  if (!executed.result.IsNull(0, 15)) {
    std::optional<std::string> output = store_internal::BytesOfHex(executed.result.Get(0, 15));
    if (!output) return InternalError(fmt::format("{}: run {}: unreadable output", where_, run_id));
    run.finish.output_tail = std::move(*output);
  }
  return run;
}

Result<std::size_t> PostgresTaskStore::MarkLost(std::span<const std::string> run_ids,
                                                const std::string& error_json) {
  if (run_ids.empty()) return std::size_t{0};
  PgParams params;
  params.Add(TextArray(run_ids)).Add(error_json);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("mark runs lost", sql::RunStatements().mark_lost, params));
  return static_cast<std::size_t>(executed.result.affected());
}

Result<std::size_t> PostgresTaskStore::PruneExpired(std::size_t max_rows) {
  PgParams params;
  const RunHistoryLimits limits = limits_.Get();
  params.Add(std::chrono::duration<double>(limits.max_age).count())
      .Add(static_cast<long long>(max_rows))
      .Add(static_cast<long long>(limits.max_runs_per_task));
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("prune runs", sql::RunStatements().prune_expired, params));
  return static_cast<std::size_t>(executed.result.affected());
}

Result<bool> PostgresTaskStore::RegistrationsTableExists(bool again_if_absent) {
  const int known = registrations_table_.load();
  if (known == kPresent || (known == kAbsent && !again_if_absent)) return known == kPresent;
  Result<ConnectionPool::Lease> lease = pool_->Acquire(schema_);
  if (!lease.ok()) {
    return UnavailableError(
        fmt::format("{}: looking for the task registrations failed: cannot connect: {}", where_,
                    lease.status().message()));
  }
  PgResult result = (*lease)->ExecuteText(sql::kRegistrationsTableExists, PgParams());
  if (!result.ok()) return ErrorOf("looking for the task registrations", result);
  const bool exists = result.rows() > 0 && result.GetBool(0, 0);
  if (exists) {
    registrations_table_ = kPresent;
  } else {
    int expected = known;
    registrations_table_.compare_exchange_strong(expected, kAbsent);
  }
  return registrations_table_.load() == kPresent;
}

Status PostgresTaskStore::RequireRegistrations() {
  STAGEHAND_ASSIGN_OR_RETURN(bool exists, RegistrationsTableExists(/*again_if_absent=*/true));
  if (exists) return Status::Ok();
  return FailedPreconditionError(
      fmt::format("{}: the database has no stagehand_task_registrations table (it was migrated by "
                  "an older stagehand); run the migrations (stagehand db migrate)",
                  where_));
}

Result<std::size_t> PostgresTaskStore::RefreshRegistrations(std::span<const std::string> task_ids,
                                                            const std::string& host) {
  if (task_ids.empty()) return std::size_t{0};
  STAGEHAND_ASSIGN_OR_RETURN(bool exists, RegistrationsTableExists(/*again_if_absent=*/true));
  if (!exists) return std::size_t{0};
  PgParams params;
  params.Add(TextArray(task_ids)).Add(host);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed, Run("refresh task registrations",
                                                    sql::RegistrationStatements().refresh, params));
  return static_cast<std::size_t>(executed.result.affected());
}

Result<std::vector<PruneCandidate>> PostgresTaskStore::ListPruneCandidates(WallTime cutoff) {
  STAGEHAND_RETURN_IF_ERROR(RequireRegistrations());
  PgParams params;
  params.Add(store_internal::FormatPgTimestamp(cutoff));
  STAGEHAND_ASSIGN_OR_RETURN(
      Executed executed,
      Run("list prune candidates", sql::RegistrationStatements().prune_candidates, params));
  const PgResult& result = executed.result;
  std::vector<PruneCandidate> candidates;
  candidates.reserve(static_cast<std::size_t>(result.rows()));
  for (int row = 0; row < result.rows(); ++row) {
    PruneCandidate& candidate = candidates.emplace_back();
    candidate.task_id = result.Get(row, 0);
    candidate.host = result.GetOptional(row, 1);
    STAGEHAND_RETURN_IF_ERROR(ReadTimes(result, row,
                                        {{2, &candidate.last_seen_at},
                                         {3, &candidate.last_run_ended_at},
                                         {4, &candidate.next_run_start_at}}));
  }
  return candidates;
}

Result<std::vector<std::string>> PostgresTaskStore::PruneTasks(
    std::span<const std::string> task_ids, WallTime cutoff, PruneScope scope) {
  STAGEHAND_RETURN_IF_ERROR(RequireRegistrations());
  if (task_ids.empty()) return std::vector<std::string>();
  PgParams params;
  params.Add(TextArray(task_ids))
      .Add(store_internal::FormatPgTimestamp(cutoff))
      .Add(scope == PruneScope::kIncludeUnregistered)
      .Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("prune tasks", sql::RegistrationStatements().prune_tasks, params));
  std::vector<std::string> deleted;
  deleted.reserve(static_cast<std::size_t>(executed.result.rows()));
  for (int row = 0; row < executed.result.rows(); ++row) {
    deleted.emplace_back(executed.result.Get(row, 0));
  }
  return deleted;
}

// Creates `database` through the connection's own database when it does not exist. Another
// process creating it at the same moment is fine.
Status EnsureDatabase(const PgConnectParams& params, const std::string& where) {
  PgConnectParams admin = params;
  admin.database.clear();
  admin.search_path.clear();
  Result<std::unique_ptr<PgConnection>> opened = PgConnection::Open(admin);
  if (!opened.ok()) {
    return UnavailableError(
        fmt::format("{}: cannot connect: {}", where, opened.status().message()));
  }
  PgConnection& connection = **opened;
  PgParams name;
  name.Add(params.database);
  PgResult exists = connection.ExecuteText(sql::kDatabaseExists, name);
  if (!exists.ok()) {
    return UnavailableError(
        fmt::format("{}: cannot look up the database: {}", where, exists.error()));
  }
  if (exists.rows() > 0) return Status::Ok();
  Result<std::string> quoted = connection.QuoteIdentifier(params.database);
  if (!quoted.ok()) return quoted.status().WithPrefix(where + ": ");
  PgResult created = connection.ExecuteScript(sql::CreateDatabase(*quoted).c_str());
  const std::string state = created.SqlState();
  if (created.ok() || state == kDuplicateDatabase || state == kUniqueViolation) {
    return Status::Ok();
  }
  return UnavailableError(
      fmt::format("{}: cannot create the database: {}", where, created.error()));
}

}  // namespace

Result<std::unique_ptr<TaskStore>> OpenPostgresTaskStore(const std::string& plugin_id,
                                                         const PostgresStoreOptions& options,
                                                         const Clock& clock) {
  PgConnectParams params;
  params.conninfo = options.connection;
  params.database = options.database;
  params.search_path = options.schema;
  params.connect_timeout = options.connect_timeout;
  params.statement_timeout = options.statement_timeout;
  params.call_timeout = options.call_timeout;
  params.transaction_pooler = options.transaction_pooler;
  params.notify_conninfo = options.notify_connection;
  std::string where =
      fmt::format("plugin '{}', database '{}'", plugin_id, store_internal::DatabaseNameOf(params));
  if (!options.schema.empty()) where += fmt::format(", schema '{}'", options.schema);

  WallTime sent = clock.Now();
  WallTime db_now{};
  Result<std::unique_ptr<PgConnection>> first = PgConnection::Open(params, &db_now);
  if (!first.ok() && !options.database.empty()) {
    STAGEHAND_RETURN_IF_ERROR(EnsureDatabase(params, where));
    sent = clock.Now();
    first = PgConnection::Open(params, &db_now);
  }
  if (!first.ok()) {
    return UnavailableError(fmt::format("{}: cannot connect: {}", where, first.status().message()));
  }
  const WallTime received = clock.Now();

  if (!options.schema.empty()) {
    Result<std::string> quoted = (*first)->QuoteIdentifier(options.schema);
    if (!quoted.ok()) return quoted.status().WithPrefix(where + ": ");
    PgResult created = (*first)->ExecuteScript(sql::CreateSchema(*quoted).c_str());
    const std::string state = created.SqlState();
    if (!created.ok() && state != kDuplicateSchema && state != kUniqueViolation) {
      return UnavailableError(
          fmt::format("{}: cannot create the schema: {}", where, created.error()));
    }
  }

  std::shared_ptr<PostgresConnections> connections = options.connections;
  if (!connections) {
    PostgresConnections::Options own;
    own.max_statement_connections = 0;  // the pool's own maximum is the only cap
    connections = PostgresConnections::CreateWithoutCloser(clock, own);
  }
  store_internal::PoolOptions pool_options;
  pool_options.min = options.pool_min;
  pool_options.max = options.pool_size;
  pool_options.idle_timeout = options.idle_timeout;
  auto store = std::make_unique<PostgresTaskStore>(plugin_id, params, std::move(where),
                                                   pool_options, std::move(connections), clock);
  store->db_clock().Observe(sent, received, db_now);
  store->pool().Adopt(std::move(*first));
  return std::unique_ptr<TaskStore>(std::move(store));
}

}  // namespace stagehand
