// The class behind OpenMySqlTaskStore and the SQL it speaks, its definitions split by concern:
// mysql_task_store.cc (the task table), mysql_run_history.cc (RunHistory), mysql_extensions.cc
// (registrations, request keys, pauses). Private to those files.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <map>
#include <mutex>
#include <utility>

#include "stagehand/model/task_state.h"
#include "stagehand/store/mysql_task_store.h"
#include "stagehand/trace/trace_context.h"
#include "store/mysql/my_change_listener.h"
#include "store/mysql/my_connection.h"
#include "store/mysql/my_migrations.h"
#include "store/mysql/my_pool.h"
#include "store/mysql/my_run_table.h"
#include "store/mysql/my_wake_sender.h"
#include "store/mysql/my_wakeups.h"
#include "store/next_run.h"
#include "store/prune_rule.h"
#include "store/row_rules.h"
#include "store/run_history_support.h"
#include "store/task_pause.h"

namespace stagehand::store_internal {

// ---- SQL ----
// Times cross the wire as UTC epoch seconds. The columns hold the session's local time, as
// Backstage writes them; CONVERT_TZ between the session's zone and UTC is exact over the whole
// datetime range (unlike UNIX_TIMESTAMP and FROM_UNIXTIME, which stop in 2038 on older servers).

// The epoch seconds of the datetime column or expression `column`.
inline std::string SecondsOf(std::string_view column) {
  return fmt::format(
      "TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', CONVERT_TZ({}, @@session.time_zone, "
      "'+00:00'))",
      column);
}

// The datetime of a `?` holding epoch seconds (NULL stays NULL).
constexpr std::string_view kDatetimeOf =
    "CONVERT_TZ(TIMESTAMPADD(SECOND, ?, '1970-01-01 00:00:00'), '+00:00', @@session.time_zone)";

// The database's now in microseconds since the epoch.
constexpr std::string_view kNowMicros =
    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

// The columns of a TaskRow, in its order, with times as epoch seconds.
inline std::string RowColumns() {
  return fmt::format(
      "t.id, t.settings_json, {}, t.current_run_ticket, {}, {}, t.last_run_error_json, {}",
      SecondsOf("t.next_run_start_at"), SecondsOf("t.current_run_started_at"),
      SecondsOf("t.current_run_expires_at"), SecondsOf("t.last_run_ended_at"));
}
constexpr int kRowColumnCount = 8;

// How a read locks the rows it returns.
enum class Lock {
  kNone,        // a consistent read
  kWait,        // FOR UPDATE: waits for rows other sessions are writing
  kSkipLocked,  // FOR UPDATE SKIP LOCKED: leaves them out
};

// Reads the database's now (column 0) and the rows matching `condition` (columns 1 to 8; a single
// row of NULLs when none matches), in id order, locked as `lock` says.
inline std::string ReadRowsSql(std::string_view condition, Lock lock) {
  return fmt::format(
      "SELECT clock.now, {} FROM (SELECT {} AS now) AS clock "
      "LEFT JOIN backstage_backend_tasks__tasks AS t ON {} ORDER BY t.id{}",
      RowColumns(), kNowMicros, condition,
      lock == Lock::kNone   ? ""
      : lock == Lock::kWait ? " FOR UPDATE"
                            : " FOR UPDATE SKIP LOCKED");
}

// `t.id IN (?, ...)` for `count` ids; FALSE for none.
inline std::string IdsCondition(std::size_t count) {
  if (count == 0) return "FALSE";
  std::string condition = "t.id IN (?";
  for (std::size_t i = 1; i < count; ++i) condition += ", ?";
  return condition + ")";
}

// Writes whole rows back (rows that exist: each was read FOR UPDATE in the same transaction).
inline std::string WriteRowsSql(std::size_t count) {
  const std::string values = fmt::format("(?, ?, {0}, ?, {0}, {0}, ?, {0})", kDatetimeOf);
  std::string sql =
      "INSERT INTO backstage_backend_tasks__tasks (id, settings_json, next_run_start_at, "
      "current_run_ticket, current_run_started_at, current_run_expires_at, last_run_error_json, "
      "last_run_ended_at) VALUES ";
  for (std::size_t i = 0; i < count; ++i) {
    if (i > 0) sql += ", ";
    sql += values;
  }
  return sql +
         " ON DUPLICATE KEY UPDATE settings_json = VALUES(settings_json), "
         "next_run_start_at = VALUES(next_run_start_at), "
         "current_run_ticket = VALUES(current_run_ticket), "
         "current_run_started_at = VALUES(current_run_started_at), "
         "current_run_expires_at = VALUES(current_run_expires_at), "
         "last_run_error_json = VALUES(last_run_error_json), "
         "last_run_ended_at = VALUES(last_run_ended_at)";
}

// Registration (Backstage §4.3) of `count` tasks in one statement, in id order (as releases lock
// rows): per task its id, settings, the new row's start and the re-registration's start (epoch
// seconds or NULL). An existing row takes the new settings and keeps its start unless it has none
// or the re-registration's is earlier.
inline std::string RegisterSql(std::size_t count) {
  std::string source;
  for (std::size_t i = 0; i < count; ++i) {
    source += i == 0 ? fmt::format(
                           "SELECT ? AS task_id, ? AS task_settings, {0} AS start_at, "
                           "{0} AS again_at",
                           kDatetimeOf)
                     : fmt::format(" UNION ALL SELECT ?, ?, {0}, {0}", kDatetimeOf);
  }
  return fmt::format(
      "INSERT INTO backstage_backend_tasks__tasks (id, settings_json, next_run_start_at) "
      "SELECT s.task_id, s.task_settings, s.start_at FROM ({}) AS s ORDER BY s.task_id "
      "ON DUPLICATE KEY UPDATE next_run_start_at = CASE "
      "WHEN backstage_backend_tasks__tasks.next_run_start_at IS NULL "
      "OR s.again_at < backstage_backend_tasks__tasks.next_run_start_at THEN s.again_at "
      "ELSE backstage_backend_tasks__tasks.next_run_start_at END, settings_json = s.task_settings",
      source);
}

// The most tasks one registration statement carries (a few hundred kilobytes of settings).
constexpr std::size_t kRegisterChunk = 500;

constexpr std::string_view kBegin = "START TRANSACTION";
constexpr std::string_view kCommit = "COMMIT";
constexpr std::string_view kRollback = "ROLLBACK";
constexpr std::string_view kDelete = "DELETE FROM backstage_backend_tasks__tasks WHERE id = ?";
// Idempotency keys (ApplyOnce): a few expired keys removed; a key's row read and locked while it
// is kept; its placeholder (status 0) inserted with ? retention in microseconds; its answer.
constexpr std::string_view kRemoveExpiredKeys =
    "DELETE FROM stagehand_request_keys WHERE expires_at < UTC_TIMESTAMP(3) ORDER BY expires_at "
    "LIMIT 16";
constexpr std::string_view kLockKey =
    "SELECT fingerprint, status, body FROM stagehand_request_keys WHERE request_key = ? AND "
    "expires_at >= UTC_TIMESTAMP(3) FOR UPDATE";
constexpr std::string_view kInsertKey =
    "REPLACE INTO stagehand_request_keys (request_key, fingerprint, status, body, created_at, "
    "expires_at) VALUES (?, ?, 0, '', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL ? "
    "MICROSECOND)";
constexpr std::string_view kAnswerKey =
    "UPDATE stagehand_request_keys SET status = ?, body = ? WHERE request_key = ?";
constexpr std::string_view kDeleteRegistration =
    "DELETE FROM stagehand_task_registrations WHERE task_id = ?";

constexpr std::string_view kTableExists =
    "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
    "AND TABLE_NAME = ?";

// The database's now (column 0), every task row matching `condition` (columns 1 to 8) and its
// registration's host and last sighting (UTC epoch microseconds), for the prune rule.
inline std::string PruneRowsSql(std::string_view condition, Lock lock) {
  return fmt::format(
      "SELECT clock.now, {}, r.host, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', "
      "r.last_seen_at) FROM (SELECT {} AS now) AS clock "
      "JOIN backstage_backend_tasks__tasks AS t ON {} "
      "LEFT JOIN stagehand_task_registrations AS r ON r.task_id = t.id{}",
      RowColumns(), kNowMicros, condition, lock == Lock::kWait ? " FOR UPDATE" : "");
}

// InnoDB's "Deadlock found when trying to get lock": the transaction was rolled back; run again.
constexpr unsigned kDeadlock = 1213;
// How often an operation is tried when InnoDB picks it as a deadlock's victim.
constexpr int kDeadlockAttempts = 3;

// ---- times ----

inline WallTime FromMicros(std::int64_t micros) {
  return WallTime(std::chrono::microseconds(micros));
}

inline std::int64_t ParseInt(std::string_view text) {
  std::int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

// A time as the columns keep it, whole seconds: one not after `now` is rounded down (it stays due
// or past), a later one up (a run never starts before its slot; an expiry is never earlier than
// the one the engine fences against).
inline std::optional<WallTime> StoredTime(const std::optional<WallTime>& time, WallTime now) {
  if (!time) return std::nullopt;
  return *time <= now ? std::chrono::floor<std::chrono::seconds>(*time)
                      : std::chrono::ceil<std::chrono::seconds>(*time);
}

inline void RoundForStorage(TaskRow& row, WallTime now) {
  for (std::optional<WallTime>* time : {&row.next_run_start_at, &row.current_run_started_at,
                                        &row.current_run_expires_at, &row.last_run_ended_at}) {
    *time = StoredTime(*time, now);
  }
}

inline MyParams& AddTime(MyParams& params, const std::optional<WallTime>& time) {
  if (!time) return params.AddNull();
  return params.Add(std::chrono::floor<std::chrono::seconds>(time->time_since_epoch()).count());
}

// The change log's name of each kind of event.
constexpr std::pair<StoreEvent::Kind, std::string_view> kChangeKinds[] = {
    {StoreEvent::Kind::kUpsert, "upsert"}, {StoreEvent::Kind::kTrigger, "trigger"},
    {StoreEvent::Kind::kCancel, "cancel"}, {StoreEvent::Kind::kRelease, "release"},
    {StoreEvent::Kind::kClaim, "claim"},   {StoreEvent::Kind::kSweep, "sweep"},
    {StoreEvent::Kind::kDelete, "delete"},
};

inline store_internal::ChangeRecord RecordOf(const StoreEvent& event) {
  store_internal::ChangeRecord record;
  for (const auto& [kind, name] : kChangeKinds) {
    if (kind == event.kind) record.kind = name;
  }
  record.task_id = event.task_id;
  record.ticket = event.ticket;
  if (event.caller.valid()) {
    record.caller = FormatTraceparent(event.caller) + "\n" + event.caller.trace_state;
  }
  return record;
}

// The event a change record announces; nullopt for a kind this version does not know (a newer
// stagehand's), which the caller answers with a resynchronisation.
inline std::optional<StoreEvent> EventOf(const store_internal::ChangeRecord& record) {
  for (const auto& [kind, name] : kChangeKinds) {
    if (name != record.kind) continue;
    StoreEvent event(kind, record.task_id, record.ticket);
    if (!record.caller.empty()) {
      const std::size_t newline = record.caller.find('\n');
      Result<TraceContext> caller = ParseTraceparent(
          std::string_view(record.caller).substr(0, newline),
          newline == std::string::npos ? std::string_view()
                                       : std::string_view(record.caller).substr(newline + 1));
      if (caller.ok()) event.caller = *std::move(caller);
    }
    return event;
  }
  return std::nullopt;
}

// One transaction of an operation: its session, and the events it announces when it commits.
struct Transaction {
  MyConnection& session;
  std::vector<StoreEvent> events;

  void Announce(StoreEvent::Kind kind, const std::string& task_id, std::string ticket = {}) {
    events.emplace_back(kind, task_id, std::move(ticket));
  }
};

// The rows read by a ReadRowsSql statement, by id, and the database's now.
struct ReadRows {
  WallTime now;
  std::map<std::string, TaskRow> rows;
};

// The MySQL TaskStore, its run history and its task registrations. Thread-safe: each operation
// borrows a session from the pool.
class MySqlTaskStore final : public TaskStore,
                             public RunHistory,
                             public TaskRegistrations,
                             public RequestKeys {
 public:
  MySqlTaskStore(std::string plugin_id, const MySqlStoreOptions& options,
                 store_internal::MyConnectParams params, const Clock& clock)
      : plugin_id_(std::move(plugin_id)),
        params_(params),
        where_(fmt::format("plugin {} (MySQL database {})", plugin_id_, options.database)),
        clock_(clock),
        db_clock_(clock),
        pool_(std::move(params), options.pool_size,
              {"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
               fmt::format("SET SESSION innodb_lock_wait_timeout = {}",
                           std::max<long long>(options.lock_wait_timeout.count(), 1))}) {}

  const std::string& plugin_id() const override { return plugin_id_; }

  Status Migrate() override;

  Result<UpsertResult> Upsert(const std::string& id, const TaskSchedule& schedule) override;

  Result<std::vector<UpsertResult>> UpsertMany(std::span<const TaskUpsert> tasks) override;

  Result<PollResult> Poll(std::span<const std::string> ids, bool sweep_expired) override;

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

  Status Trigger(const std::string& id) override { return Trigger(id, TraceContext{}); }

  Status Trigger(const std::string& id, const TraceContext& caller) override;

  Status Pause(const std::string& id, const PauseRequest& request,
               std::chrono::milliseconds hold) override;

  Status Resume(const std::string& id) override;

  Status Cancel(const std::string& id, std::chrono::milliseconds hold) override;

  Result<std::vector<std::string>> SweepExpired() override;

  Result<std::vector<TaskRow>> States() override;

  Status Delete(const std::string& id) override;

  Result<WallTime> DatabaseNow() override;

  Status WarmUp() override { return Borrow().status(); }

  void SetCallTimeout(std::chrono::milliseconds timeout) override { pool_.SetCallTimeout(timeout); }

  std::unique_ptr<Notifications> Listen(std::function<void(const StoreEvent&)> handler) override;

  RunHistory* history() override { return this; }

  TaskRegistrations* registrations() override { return this; }

  RequestKeys* request_keys() override { return this; }

  // One transaction: the key's row locked (or its placeholder inserted) first, then `apply`,
  // whose own transactions run inside this one (InTransaction, OnSession), then the answer.
  Result<KeyedOutcome> ApplyOnce(const KeyedRequest& request,
                                 const std::function<Result<KeptAnswer>()>& apply) override;

  void SetLimits(const RunHistoryLimits& limits) override { limits_.Set(limits); }

  RunHistoryLimits limits() const override { return limits_.Get(); }

  Status RecordStarts(std::span<const RunStart> starts) override;

  Result<std::size_t> RecordEnds(std::span<const RunEnd> ends) override;

  Result<RunPage> ListRuns(const std::string& task_id, int limit,
                           const std::optional<std::string>& before) override;

  Result<TaskRun> GetRun(const std::string& run_id) override;

  Result<std::size_t> MarkLost(std::span<const std::string> run_ids,
                               const std::string& error_json) override;

  Result<bool> TablesExist() override;

  Result<std::size_t> PruneExpired(std::size_t max_rows) override;

  Result<std::size_t> RefreshRegistrations(std::span<const std::string> task_ids,
                                           const std::string& host) override;

  Result<std::vector<PruneCandidate>> ListPruneCandidates(WallTime cutoff) override;

  Result<std::vector<std::string>> PruneTasks(std::span<const std::string> task_ids,
                                              WallTime cutoff, PruneScope scope) override;

 private:
  Result<MyPool::Lease> Borrow();

  // The Status of a failed statement of `what`: kUnavailable, naming the plugin and database.
  Status Failure(std::string_view what, const MyResult& result) const;

  // Runs one statement; remembers whether it failed by a deadlock (see InTransaction).
  Result<MyResult> Run(MyConnection& session, std::string_view sql, const MyParams& params,
                       std::string_view what);

  // Closes a session whose statement failed in a way that leaves it unusable or in an unknown
  // transaction state.
  void DiscardIfLost(MyPool::Lease& session);

  // Runs `body` in a transaction on a borrowed session and commits; rolls back when it fails.
  // Runs it again when InnoDB ended it as a deadlock's victim.
  template <typename T, typename Body>
  Result<T> InTransaction(std::string_view what, Body&& body) {
    if (pinned_.store == this) return body(*pinned_.tx);
    for (int attempt = 1;; ++attempt) {
      STAGEHAND_ASSIGN_OR_RETURN(MyPool::Lease session, Borrow());
      last_error_ = 0;
      lost_ = false;
      Result<T> result = [&]() -> Result<T> {
        STAGEHAND_RETURN_IF_ERROR(Run(*session, kBegin, {}, what).status());
        Transaction tx{*session, {}};
        STAGEHAND_ASSIGN_OR_RETURN(T done, body(tx));
        STAGEHAND_ASSIGN_OR_RETURN(std::int64_t first_change, Announce(tx));
        STAGEHAND_RETURN_IF_ERROR(Run(*session, kCommit, {}, what).status());
        if (first_change > 0) WakeWaiters(first_change);
        return done;
      }();
      if (result.ok()) return result;
      const bool deadlocked = last_error_ == kDeadlock;
      if (lost_ || !session->Execute(kRollback).ok()) session.Discard();
      if (!deadlocked || attempt == kDeadlockAttempts) return result;
    }
  }

  // The error mapping of the migrations', the change log's and the run table's statements; like
  // Run, it remembers a deadlock or a lost session for InTransaction.
  store_internal::MyErrorOf ErrorOf() const;

  // Runs `body` on a borrowed session (outside a transaction); closes the session when it was
  // lost.
  template <typename T, typename Body>
  Result<T> OnSession(Body&& body) {
    if (pinned_.store == this) return body(pinned_.tx->session);
    STAGEHAND_ASSIGN_OR_RETURN(MyPool::Lease session, Borrow());
    lost_ = false;
    Result<T> result = body(*session);
    if (!result.ok()) DiscardIfLost(session);
    return result;
  }

  MyRunTable Runs(MyConnection& session) { return MyRunTable(session, ErrorOf()); }

  enum class Table { kUnknown, kPresent, kAbsent };

  // Whether the table `name` exists per `known`: known after Migrate, else looked up, and looked
  // up again while absent when `again_if_absent`.
  Result<bool> TablePresent(MyConnection& session, std::atomic<Table>& known, std::string_view name,
                            bool again_if_absent);

  Result<bool> HistoryPresent(MyConnection& session);

  Result<bool> RegistrationsPresent(MyConnection& session, bool again_if_absent);

  // Errors: kFailedPrecondition when `present` says the table `name` is missing.
  Status RequireTable(const Result<bool>& present, std::string_view name) const;

  Status RequireHistory(MyConnection& session);

  Status RequireRegistrations(MyConnection& session);

  // Records (task id, host) registrations as seen now, inside the caller's transaction.
  Status WriteRegistrations(MyConnection& session,
                            std::span<const std::pair<std::string, std::string>> registrations);

  // Records the registrations `tasks` carry, inside the caller's transaction; nothing when none
  // carries one or the table is missing.
  Status RecordRegistrations(MyConnection& session, std::span<const TaskUpsert> tasks);

  // Writes what releases record of their runs (starts of runs their claims did not record, then
  // the ends), inside the caller's transaction, where the history exists.
  Status RecordReleasedRuns(MyConnection& session,
                            std::span<const store_internal::MyRunStart> starts,
                            std::span<const store_internal::MyRunEnd> ends);

  // Closes the runs of `ends` and trims their tasks to the limits. Returns how many it closed.
  Result<std::size_t> CloseAndTrim(MyConnection& session,
                                   std::span<const store_internal::MyRunEnd> ends);

  // A task row with its registration, as the prune rule reads them, and the database's now.
  struct PruneRow {
    TaskRow task;
    std::optional<std::string> host;
    std::optional<WallTime> last_seen_at;
    WallTime now;
  };

  // Every task row with its registration, or those of `ids` (locked), ordered by id bytewise.
  Result<std::vector<PruneRow>> PruneRows(MyConnection& session,
                                          std::optional<std::span<const std::string>> ids);

  // Whether the change log exists: known after Migrate, else looked up (once it is found).
  Result<bool> ChangeLogPresent(MyConnection& session);

  // Appends the transaction's events to the change log, when it has one. Returns the first new
  // sequence number, or 0 when nothing was appended.
  Result<std::int64_t> Announce(Transaction& tx);

  // Has the hosts waiting for changes that have not seen `change` woken (this host's too, so that
  // its engine hears of its own writes at once), without waiting for it.
  void WakeWaiters(std::int64_t change) { wake_sender_.Send(change); }

  // Runs `change(row or nullptr when missing, now)` on the row of `id`, locked, and writes the
  // row back if it changed, announcing `announce` then, in one transaction (rolled back when
  // `change` fails).
  template <typename T, typename Change>
  Result<T> ChangeRow(std::string_view what, const std::string& id,
                      std::optional<StoreEvent> announce, Change&& change) {
    return InTransaction<T>(what, [&](Transaction& tx) -> Result<T> {
      MyConnection& session = tx.session;
      const std::string ids[] = {id};
      STAGEHAND_ASSIGN_OR_RETURN(ReadRows read, Read(session, ids, Lock::kWait));
      auto it = read.rows.find(id);
      if (it == read.rows.end()) return change(nullptr, read.now);
      const TaskRow before = it->second;
      STAGEHAND_ASSIGN_OR_RETURN(T result, change(&it->second, read.now));
      RoundForStorage(it->second, read.now);
      if (it->second != before) {
        STAGEHAND_RETURN_IF_ERROR(Write(session, std::span(&it->second, 1)));
        if (announce) tx.events.push_back(*announce);
      }
      return result;
    });
  }

  Result<std::vector<ClaimResult>> ClaimRows(std::span<const ClaimRequest> claims,
                                             std::chrono::milliseconds lease, Lock lock);

  // Resets the expired runs and pauses (inside the caller's transaction). Returns the ids of the
  // reset runs.
  Result<std::vector<std::string>> SweepOn(Transaction& tx);

  // Reads the rows of `ids` and the database's now.
  Result<ReadRows> Read(MyConnection& session, std::span<const std::string> ids, Lock lock);

  // The rows of a ReadRowsSql result.
  static Result<ReadRows> RowsOf(const MyResult& result);

  // The TaskRow in columns first..first+7 of row `i` of `result`.
  static TaskRow RowAt(const MyResult& result, int i, int first);

  // Writes `rows` (locked by the caller's transaction) back whole.
  Status Write(MyConnection& session, std::span<const TaskRow> rows);

  Result<WallTime> NowOn(MyConnection& session);

  PollEntry Entry(const std::string& id, const std::map<std::string, TaskRow>& rows, WallTime now);

  static Status Missing(const std::string& id);

  enum class ChangeLog { kUnknown, kPresent, kAbsent };

  const std::string plugin_id_;
  const store_internal::MyConnectParams params_;  // for the listeners' sessions
  const std::string where_;                       // "plugin X (MySQL database D)", for messages
  const Clock& clock_;
  DatabaseClock db_clock_;
  MyPool pool_;
  std::atomic<ChangeLog> change_log_{ChangeLog::kUnknown};
  std::atomic<Table> history_table_{Table::kUnknown};
  std::atomic<Table> registrations_table_{Table::kUnknown};
  store_internal::LimitsHolder limits_;
  store_internal::WakeSender wake_sender_{params_};
  // The last failed statement's error number and whether it lost its session, per thread.
  static thread_local unsigned last_error_;
  static thread_local bool lost_;
  // The transaction of a keyed request (ApplyOnce) that this thread's `apply` runs in.
  struct Pinned {
    const MySqlTaskStore* store = nullptr;
    Transaction* tx = nullptr;
  };
  static thread_local Pinned pinned_;
  // Ends the pinning of its scope, however `apply` leaves it.
  struct Unpin {
    Unpin() = default;
    Unpin(const Unpin&) = delete;
    Unpin& operator=(const Unpin&) = delete;
    ~Unpin() { pinned_ = Pinned{}; }
  };
};

}  // namespace stagehand::store_internal
