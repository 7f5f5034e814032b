#include "stagehand/store/mysql_task_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <map>
#include <mutex>
#include <utility>

#include "stagehand/model/task_state.h"
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
#include "store/settings_cache.h"
#include "store/task_pause.h"

namespace stagehand {

namespace {

using store_internal::DatabaseClock;
using store_internal::MyConnection;
using store_internal::MyParams;
using store_internal::MyPool;
using store_internal::MyResult;
using store_internal::MyRunTable;
using store_internal::NextRunPlan;

// ---- SQL ----
// Times cross the wire as UTC epoch seconds. The columns hold the session's local time, as
// Backstage writes them; CONVERT_TZ between the session's zone and UTC is exact over the whole
// datetime range (unlike UNIX_TIMESTAMP and FROM_UNIXTIME, which stop in 2038 on older servers).

// The epoch seconds of the datetime column or expression `column`.
std::string SecondsOf(std::string_view column) {
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
std::string RowColumns() {
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
std::string ReadRowsSql(std::string_view condition, Lock lock) {
  return fmt::format(
      "SELECT clock.now, {} FROM (SELECT {} AS now) AS clock "
      "LEFT JOIN backstage_backend_tasks__tasks AS t ON {} ORDER BY t.id{}",
      RowColumns(), kNowMicros, condition,
      lock == Lock::kNone   ? ""
      : lock == Lock::kWait ? " FOR UPDATE"
                            : " FOR UPDATE SKIP LOCKED");
}

// `t.id IN (?, ...)` for `count` ids; FALSE for none.
std::string IdsCondition(std::size_t count) {
  if (count == 0) return "FALSE";
  std::string condition = "t.id IN (?";
  for (std::size_t i = 1; i < count; ++i) condition += ", ?";
  return condition + ")";
}

// Writes whole rows back (rows that exist: each was read FOR UPDATE in the same transaction).
std::string WriteRowsSql(std::size_t count) {
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
std::string RegisterSql(std::size_t count) {
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
std::string PruneRowsSql(std::string_view condition, Lock lock) {
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

WallTime FromMicros(std::int64_t micros) { return WallTime(std::chrono::microseconds(micros)); }

std::int64_t ParseInt(std::string_view text) {
  std::int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

// A time as the columns keep it, whole seconds: one not after `now` is rounded down (it stays due
// or past), a later one up (a run never starts before its slot; an expiry is never earlier than
// the one the engine fences against).
std::optional<WallTime> StoredTime(const std::optional<WallTime>& time, WallTime now) {
  if (!time) return std::nullopt;
  return *time <= now ? std::chrono::floor<std::chrono::seconds>(*time)
                      : std::chrono::ceil<std::chrono::seconds>(*time);
}

void RoundForStorage(TaskRow& row, WallTime now) {
  for (std::optional<WallTime>* time : {&row.next_run_start_at, &row.current_run_started_at,
                                        &row.current_run_expires_at, &row.last_run_ended_at}) {
    *time = StoredTime(*time, now);
  }
}

MyParams& AddTime(MyParams& params, const std::optional<WallTime>& time) {
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

store_internal::ChangeRecord RecordOf(const StoreEvent& event) {
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
std::optional<StoreEvent> EventOf(const store_internal::ChangeRecord& record) {
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

  Status Migrate() override {
    STAGEHAND_ASSIGN_OR_RETURN(MyPool::Lease session, Borrow());
    const store_internal::MyErrorOf error_of = ErrorOf();
    STAGEHAND_RETURN_IF_ERROR(store_internal::MigrateMySql(*session, where_, error_of));
    STAGEHAND_RETURN_IF_ERROR(store_internal::MigrateMySqlStagehand(*session, where_, error_of));
    change_log_ = ChangeLog::kPresent;
    history_table_ = Table::kPresent;
    registrations_table_ = Table::kPresent;
    return Status::Ok();
  }

  Result<UpsertResult> Upsert(const std::string& id, const TaskSchedule& schedule) override {
    const TaskUpsert task{id, schedule, std::nullopt};
    STAGEHAND_ASSIGN_OR_RETURN(std::vector<UpsertResult> results, UpsertMany(std::span(&task, 1)));
    return results.front();
  }

  Result<std::vector<UpsertResult>> UpsertMany(std::span<const TaskUpsert> tasks) override {
    if (tasks.empty()) return std::vector<UpsertResult>();
    STAGEHAND_ASSIGN_OR_RETURN(std::vector<store_internal::PlannedUpsert> planned,
                               store_internal::PlanUpserts(tasks, db_clock_.Now()));
    std::vector<std::string> ids;
    for (const TaskUpsert& task : tasks) ids.push_back(task.id);
    return InTransaction<std::vector<UpsertResult>>(
        "registering tasks", [&](Transaction& tx) -> Result<std::vector<UpsertResult>> {
          MyConnection& session = tx.session;
          STAGEHAND_ASSIGN_OR_RETURN(WallTime now, NowOn(session));
          for (std::size_t first = 0; first < tasks.size(); first += kRegisterChunk) {
            const std::size_t count = std::min(kRegisterChunk, tasks.size() - first);
            MyParams params;
            for (std::size_t i = first; i < first + count; ++i) {
              const store_internal::PlannedUpsert& plan = planned[i];
              const std::optional<WallTime> start =
                  StoredTime(store_internal::EvaluatePlan(plan.insert, now, std::nullopt), now);
              const std::optional<WallTime> again =
                  StoredTime(store_internal::EvaluatePlan(plan.reregister, now, std::nullopt), now);
              params.Add(tasks[i].id).Add(plan.settings_json);
              AddTime(params, start);
              AddTime(params, again);
            }
            STAGEHAND_RETURN_IF_ERROR(
                Run(session, RegisterSql(count), params, "registering tasks").status());
          }
          STAGEHAND_RETURN_IF_ERROR(RecordRegistrations(session, tasks));
          STAGEHAND_ASSIGN_OR_RETURN(ReadRows read, Read(session, ids, Lock::kNone));
          std::vector<UpsertResult> results;
          for (const TaskUpsert& task : tasks) {
            tx.Announce(StoreEvent::Kind::kUpsert, task.id);
            const TaskRow& row = read.rows.at(task.id);
            results.push_back(
                UpsertResult{row.next_run_start_at, now, store_internal::RowVersion(row)});
          }
          return results;
        });
  }

  Result<PollResult> Poll(std::span<const std::string> ids, bool sweep_expired) override {
    const std::vector<std::string> wanted(ids.begin(), ids.end());
    const auto poll = [&](Transaction& tx) -> Result<PollResult> {
      MyConnection& session = tx.session;
      PollResult result;
      if (sweep_expired) {
        STAGEHAND_ASSIGN_OR_RETURN(std::vector<std::string> swept, SweepOn(tx));
        result.swept_ids = std::move(swept);
      }
      STAGEHAND_ASSIGN_OR_RETURN(ReadRows read, Read(session, wanted, Lock::kNone));
      result.db_now = read.now;
      for (const std::string& id : wanted) {
        result.entries.push_back(Entry(id, read.rows, read.now));
      }
      result.earliest_next = store_internal::EarliestIdleNext(result.entries);
      return result;
    };
    if (sweep_expired) return InTransaction<PollResult>("polling tasks", poll);
    STAGEHAND_ASSIGN_OR_RETURN(MyPool::Lease session, Borrow());
    Transaction read_only{*session, {}};
    Result<PollResult> result = poll(read_only);
    if (!result.ok()) DiscardIfLost(session);
    return result;
  }

  Result<ClaimResult> Claim(const std::string& id, const std::string& ticket,
                            std::chrono::milliseconds timeout,
                            std::chrono::milliseconds lease) override {
    ClaimRequest claim;
    claim.id = id;
    claim.ticket = ticket;
    claim.timeout = timeout;
    STAGEHAND_ASSIGN_OR_RETURN(std::vector<ClaimResult> results,
                               ClaimRows(std::span(&claim, 1), lease, Lock::kWait));
    return results.front();
  }

  Result<std::vector<ClaimResult>> ClaimMany(std::span<const ClaimRequest> claims,
                                             std::chrono::milliseconds lease) override {
    return ClaimRows(claims, lease, Lock::kSkipLocked);
  }

  Result<LeaseStatus> RenewLease(const std::string& id, const std::string& ticket,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds lease) override {
    return ChangeRow<LeaseStatus>(
        "renewing a lease", id, std::nullopt, [&](TaskRow* row, WallTime now) {
          if (row == nullptr) return Result<LeaseStatus>(LeaseStatus::kLost);
          return Result<LeaseStatus>(store_internal::RenewRow(*row, ticket, timeout, lease, now));
        });
  }

  Result<bool> Release(const std::string& id, const std::string& ticket,
                       const TaskSchedule& schedule,
                       const std::optional<std::string>& error_json) override {
    ReleaseRequest release;
    release.id = id;
    release.ticket = ticket;
    release.schedule = schedule;
    release.error_json = error_json;
    STAGEHAND_ASSIGN_OR_RETURN(std::vector<ReleaseResult> results,
                               ReleaseMany(std::span(&release, 1)));
    return results.front().released;
  }

  Result<std::vector<ReleaseResult>> ReleaseMany(
      std::span<const ReleaseRequest> releases) override {
    if (releases.empty()) return std::vector<ReleaseResult>();
    std::vector<NextRunPlan> plans;
    const WallTime estimate = db_clock_.Now();
    for (const ReleaseRequest& release : releases) {
      STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan plan, store_internal::PlanRelease(release, estimate));
      plans.push_back(plan);
    }
    std::vector<std::string> ids;
    for (const ReleaseRequest& release : releases) ids.push_back(release.id);
    return InTransaction<std::vector<ReleaseResult>>(
        "releasing tasks", [&](Transaction& tx) -> Result<std::vector<ReleaseResult>> {
          MyConnection& session = tx.session;
          STAGEHAND_ASSIGN_OR_RETURN(ReadRows read, Read(session, ids, Lock::kWait));
          std::vector<ReleaseResult> results(releases.size());
          std::vector<TaskRow> changed;
          std::vector<store_internal::MyRunStart> starts;
          std::vector<store_internal::MyRunEnd> ends;
          for (std::size_t i = 0; i < releases.size(); ++i) {
            ReleaseResult& result = results[i];
            result.db_now = read.now;
            if (const std::optional<ReleasedRun>& run = releases[i].history) {
              starts.push_back({&releases[i].ticket, &releases[i].id, &run->origin,
                                std::optional(run->started_at)});
              ends.push_back({&releases[i].ticket, &run->finish, read.now});
            }
            auto it = read.rows.find(releases[i].id);
            if (it == read.rows.end()) continue;
            TaskRow& row = it->second;
            if (!store_internal::ReleaseRow(row, releases[i].ticket, plans[i],
                                            releases[i].error_json, read.now)) {
              continue;
            }
            RoundForStorage(row, read.now);
            tx.Announce(StoreEvent::Kind::kRelease, row.id);
            result.released = true;
            result.next_run_start_at = row.next_run_start_at;
            result.version = store_internal::RowVersion(row);
            changed.push_back(row);
          }
          STAGEHAND_RETURN_IF_ERROR(Write(session, changed));
          STAGEHAND_RETURN_IF_ERROR(RecordReleasedRuns(session, starts, ends));
          return results;
        });
  }

  Result<SkipResult> SkipSlot(const std::string& id, std::int64_t expected_version, WallTime slot,
                              const TaskSchedule& schedule) override {
    STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan plan,
                               store_internal::PlanSkipNext(schedule, slot, db_clock_.Now()));
    return ChangeRow<SkipResult>(
        "skipping a missed slot", id, StoreEvent(StoreEvent::Kind::kRelease, id),
        [&](TaskRow* row, WallTime now) {
          SkipResult result;
          result.db_now = now;
          if (row == nullptr || !store_internal::SkipRow(*row, expected_version, plan, now)) {
            return Result<SkipResult>(result);
          }
          RoundForStorage(*row, now);
          result.skipped = true;
          result.next_run_start_at = row->next_run_start_at;
          result.version = store_internal::RowVersion(*row);
          return Result<SkipResult>(result);
        });
  }

  Status Trigger(const std::string& id) override { return Trigger(id, TraceContext{}); }

  Status Trigger(const std::string& id, const TraceContext& caller) override {
    StoreEvent triggered(StoreEvent::Kind::kTrigger, id);
    triggered.caller = caller;
    return ChangeRow<bool>("triggering a task", id, triggered,
                           [&](TaskRow* row, WallTime now) -> Result<bool> {
                             if (row == nullptr) return Missing(id);
                             STAGEHAND_RETURN_IF_ERROR(store_internal::TriggerRow(*row, now));
                             return true;
                           })
        .status();
  }

  Status Pause(const std::string& id, const PauseRequest& request,
               std::chrono::milliseconds hold) override {
    STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePauseTexts(request));
    return ChangeRow<bool>("pausing a task", id, StoreEvent(StoreEvent::Kind::kUpsert, id),
                           [&](TaskRow* row, WallTime now) -> Result<bool> {
                             if (row == nullptr) return Missing(id);
                             STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePause(request, now));
                             store_internal::PauseRow(*row, request, hold, now);
                             return true;
                           })
        .status();
  }

  Status Resume(const std::string& id) override {
    return ChangeRow<bool>("resuming a task", id, StoreEvent(StoreEvent::Kind::kRelease, id),
                           [&](TaskRow* row, WallTime) -> Result<bool> {
                             if (row == nullptr) return Missing(id);
                             STAGEHAND_RETURN_IF_ERROR(store_internal::ResumeRow(*row));
                             return true;
                           })
        .status();
  }

  Status Cancel(const std::string& id, std::chrono::milliseconds hold) override {
    return ChangeRow<bool>("cancelling a task", id, StoreEvent(StoreEvent::Kind::kCancel, id),
                           [&](TaskRow* row, WallTime now) -> Result<bool> {
                             if (row == nullptr) return Missing(id);
                             if (!row->current_run_ticket || row->current_run_ticket->empty() ||
                                 store_internal::IsPausedTicket(*row->current_run_ticket)) {
                               return ConflictError(fmt::format("Task {} is not running", id));
                             }
                             Result<TaskSettingsV2> settings =
                                 TaskSettingsV2::FromJson(row->settings_json);
                             if (!settings.ok()) {
                               return InvalidArgumentError(
                                   fmt::format("{}: task '{}' has unparsable settings: {}", where_,
                                               id, settings.status().message()));
                             }
                             STAGEHAND_RETURN_IF_ERROR(store_internal::CancelRow(*row, hold, now));
                             return true;
                           })
        .status();
  }

  Result<std::vector<std::string>> SweepExpired() override {
    return InTransaction<std::vector<std::string>>(
        "resetting expired runs", [&](Transaction& tx) -> Result<std::vector<std::string>> {
          if (change_log_ == ChangeLog::kPresent) {
            STAGEHAND_RETURN_IF_ERROR(store_internal::PruneChanges(tx.session, ErrorOf()));
          }
          return SweepOn(tx);
        });
  }

  Result<std::vector<TaskRow>> States() override {
    STAGEHAND_ASSIGN_OR_RETURN(MyPool::Lease session, Borrow());
    Result<MyResult> result =
        Run(*session,
            fmt::format("SELECT {} FROM backstage_backend_tasks__tasks AS t ORDER BY t.id",
                        RowColumns()),
            {}, "listing tasks");
    if (!result.ok()) {
      DiscardIfLost(session);
      return result.status();
    }
    std::vector<TaskRow> rows;
    for (int i = 0; i < result->rows(); ++i) rows.push_back(RowAt(*result, i, 0));
    return rows;
  }

  Status Delete(const std::string& id) override {
    return InTransaction<bool>("deleting a task",
                               [&](Transaction& tx) -> Result<bool> {
                                 STAGEHAND_ASSIGN_OR_RETURN(
                                     MyResult deleted, Run(tx.session, kDelete, MyParams().Add(id),
                                                           "deleting a task"));
                                 if (deleted.affected() > 0)
                                   tx.Announce(StoreEvent::Kind::kDelete, id);
                                 return true;
                               })
        .status();
  }

  Result<WallTime> DatabaseNow() override {
    STAGEHAND_ASSIGN_OR_RETURN(MyPool::Lease session, Borrow());
    Result<WallTime> now = NowOn(*session);
    if (!now.ok()) DiscardIfLost(session);
    return now;
  }

  Status WarmUp() override { return Borrow().status(); }

  void SetCallTimeout(std::chrono::milliseconds timeout) override { pool_.SetCallTimeout(timeout); }

  std::unique_ptr<Notifications> Listen(std::function<void(const StoreEvent&)> handler) override {
    // Every change committed after this point is delivered.
    std::optional<std::int64_t> seen;
    if (Result<MyPool::Lease> session = Borrow(); session.ok()) {
      (void)ChangeLogPresent(**session);
      if (change_log_ == ChangeLog::kPresent) {
        if (Result<std::int64_t> latest = store_internal::LatestChange(**session); latest.ok()) {
          seen = *latest;
        }
      }
    }
    // A database an older stagehand migrated (with migrations skipped since) has no change log:
    // the hosts then rely on their polls alone, as on SQLite.
    if (change_log_ == ChangeLog::kAbsent) return nullptr;
    return std::make_unique<store_internal::MyChangeListener>(
        params_, store_internal::ProcessWaiterName(), seen,
        [handler](const store_internal::ChangeRecord& change) {
          std::optional<StoreEvent> event = EventOf(change);
          handler(event ? *event : StoreEvent());
        },
        [handler] { handler(StoreEvent()); });
  }

  RunHistory* history() override { return this; }

  TaskRegistrations* registrations() override { return this; }

  RequestKeys* request_keys() override { return this; }

  // One transaction: the key's row locked (or its placeholder inserted) first, then `apply`,
  // whose own transactions run inside this one (InTransaction, OnSession), then the answer.
  Result<KeyedOutcome> ApplyOnce(const KeyedRequest& request,
                                 const std::function<Result<KeptAnswer>()>& apply) override {
    STAGEHAND_CHECK(pinned_.store != this);
    constexpr std::string_view kWhat = "keeping an idempotency key";
    return InTransaction<KeyedOutcome>(kWhat, [&](Transaction& tx) -> Result<KeyedOutcome> {
      STAGEHAND_RETURN_IF_ERROR(Run(tx.session, kRemoveExpiredKeys, {}, kWhat).status());
      MyParams key;
      key.Add(request.key);
      STAGEHAND_ASSIGN_OR_RETURN(MyResult earlier, Run(tx.session, kLockKey, key, kWhat));
      if (earlier.rows() > 0) {
        if (earlier.Get(0, 0) != request.fingerprint) {
          return ConflictError(fmt::format(
              "the idempotency key {} was first sent with another request", request.key));
        }
        return KeyedOutcome{
            KeptAnswer{static_cast<int>(earlier.GetInt(0, 1)), std::string(earlier.Get(0, 2))},
            /*replayed=*/true};
      }
      MyParams placeholder;
      placeholder.Add(request.key)
          .Add(request.fingerprint)
          .Add(static_cast<std::int64_t>(request.retention.count()) * 1000);
      STAGEHAND_RETURN_IF_ERROR(Run(tx.session, kInsertKey, placeholder, kWhat).status());
      STAGEHAND_ASSIGN_OR_RETURN(KeptAnswer answer, ([&] {
                                   pinned_ = Pinned{this, &tx};
                                   const Unpin unpin;
                                   return apply();
                                 }()));
      MyParams answered;
      answered.Add(answer.status).Add(answer.body).Add(request.key);
      STAGEHAND_RETURN_IF_ERROR(Run(tx.session, kAnswerKey, answered, kWhat).status());
      return KeyedOutcome{std::move(answer), /*replayed=*/false};
    });
  }

  void SetLimits(const RunHistoryLimits& limits) override { limits_.Set(limits); }

  RunHistoryLimits limits() const override { return limits_.Get(); }

  Status RecordStarts(std::span<const RunStart> starts) override {
    STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateStarts(starts));
    if (starts.empty()) return Status::Ok();
    std::vector<store_internal::MyRunStart> rows;
    rows.reserve(starts.size());
    for (const RunStart& start : starts) {
      rows.push_back({&start.run_id, &start.task_id, &start.origin, start.started_at});
    }
    return InTransaction<bool>("recording runs' starts",
                               [&](Transaction& tx) -> Result<bool> {
                                 STAGEHAND_RETURN_IF_ERROR(RequireHistory(tx.session));
                                 STAGEHAND_RETURN_IF_ERROR(Runs(tx.session).RecordStarts(rows));
                                 return true;
                               })
        .status();
  }

  Result<std::size_t> RecordEnds(std::span<const RunEnd> ends) override {
    STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateEnds(ends));
    if (ends.empty()) return std::size_t{0};
    std::vector<store_internal::MyRunEnd> rows;
    rows.reserve(ends.size());
    for (const RunEnd& end : ends) rows.push_back({&end.run_id, &end.finish, end.ended_at});
    return InTransaction<std::size_t>("recording runs' ends",
                                      [&](Transaction& tx) -> Result<std::size_t> {
                                        STAGEHAND_RETURN_IF_ERROR(RequireHistory(tx.session));
                                        return CloseAndTrim(tx.session, rows);
                                      });
  }

  Result<RunPage> ListRuns(const std::string& task_id, int limit,
                           const std::optional<std::string>& before) override {
    STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePageSize(limit));
    return OnSession<RunPage>([&](MyConnection& session) -> Result<RunPage> {
      STAGEHAND_RETURN_IF_ERROR(RequireHistory(session));
      return Runs(session).List(task_id, limit, before);
    });
  }

  Result<TaskRun> GetRun(const std::string& run_id) override {
    return OnSession<TaskRun>([&](MyConnection& session) -> Result<TaskRun> {
      STAGEHAND_RETURN_IF_ERROR(RequireHistory(session));
      return Runs(session).Get(run_id);
    });
  }

  Result<std::size_t> MarkLost(std::span<const std::string> run_ids,
                               const std::string& error_json) override {
    if (run_ids.empty()) return std::size_t{0};
    return InTransaction<std::size_t>(
        "marking runs lost", [&](Transaction& tx) -> Result<std::size_t> {
          STAGEHAND_RETURN_IF_ERROR(RequireHistory(tx.session));
          return Runs(tx.session).MarkLost(run_ids, error_json, std::nullopt);
        });
  }

  Result<bool> TablesExist() override {
    return OnSession<bool>([&](MyConnection& session) { return HistoryPresent(session); });
  }

  Result<std::size_t> PruneExpired(std::size_t max_rows) override {
    const std::chrono::hours max_age = limits_.Get().max_age;
    return OnSession<std::size_t>([&](MyConnection& session) -> Result<std::size_t> {
      STAGEHAND_RETURN_IF_ERROR(RequireHistory(session));
      return Runs(session).Prune(max_age, max_rows);
    });
  }

  Result<std::size_t> RefreshRegistrations(std::span<const std::string> task_ids,
                                           const std::string& host) override {
    if (task_ids.empty()) return std::size_t{0};
    return InTransaction<std::size_t>(
        "refreshing task registrations", [&](Transaction& tx) -> Result<std::size_t> {
          STAGEHAND_ASSIGN_OR_RETURN(bool present,
                                     RegistrationsPresent(tx.session, /*again_if_absent=*/true));
          if (!present) return std::size_t{0};
          MyParams params;
          for (const std::string& id : task_ids) params.Add(id);
          STAGEHAND_ASSIGN_OR_RETURN(
              MyResult existing,
              Run(tx.session,
                  fmt::format("SELECT t.id FROM backstage_backend_tasks__tasks AS t WHERE {}",
                              IdsCondition(task_ids.size())),
                  params, "refreshing task registrations"));
          std::vector<std::pair<std::string, std::string>> registrations;
          for (int row = 0; row < existing.rows(); ++row) {
            registrations.emplace_back(std::string(existing.Get(row, 0)), host);
          }
          STAGEHAND_RETURN_IF_ERROR(WriteRegistrations(tx.session, registrations));
          return registrations.size();
        });
  }

  Result<std::vector<PruneCandidate>> ListPruneCandidates(WallTime cutoff) override {
    return OnSession<std::vector<PruneCandidate>>(
        [&](MyConnection& session) -> Result<std::vector<PruneCandidate>> {
          STAGEHAND_RETURN_IF_ERROR(RequireRegistrations(session));
          STAGEHAND_ASSIGN_OR_RETURN(std::vector<PruneRow> rows, PruneRows(session, std::nullopt));
          std::vector<PruneCandidate> candidates;
          for (PruneRow& row : rows) {
            if (!store_internal::IsPruneCandidate(row.task, row.last_seen_at, cutoff, row.now)) {
              continue;
            }
            candidates.push_back(PruneCandidate{std::move(row.task.id), std::move(row.host),
                                                row.last_seen_at, row.task.last_run_ended_at,
                                                row.task.next_run_start_at});
          }
          return candidates;
        });
  }

  Result<std::vector<std::string>> PruneTasks(std::span<const std::string> task_ids,
                                              WallTime cutoff, PruneScope scope) override {
    return InTransaction<std::vector<std::string>>(
        "pruning tasks", [&](Transaction& tx) -> Result<std::vector<std::string>> {
          STAGEHAND_RETURN_IF_ERROR(RequireRegistrations(tx.session));
          if (task_ids.empty()) return std::vector<std::string>();
          STAGEHAND_ASSIGN_OR_RETURN(std::vector<PruneRow> rows, PruneRows(tx.session, task_ids));
          STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryPresent(tx.session));
          std::vector<std::string> deleted;
          for (const PruneRow& row : rows) {
            if (!row.host && scope != PruneScope::kIncludeUnregistered) continue;
            if (!store_internal::IsPruneCandidate(row.task, row.last_seen_at, cutoff, row.now)) {
              continue;
            }
            const MyParams id = MyParams().Add(row.task.id);
            STAGEHAND_RETURN_IF_ERROR(Run(tx.session, kDelete, id, "pruning a task").status());
            STAGEHAND_RETURN_IF_ERROR(
                Run(tx.session, kDeleteRegistration, id, "pruning a task").status());
            if (history) STAGEHAND_RETURN_IF_ERROR(Runs(tx.session).DeleteTask(row.task.id));
            tx.Announce(StoreEvent::Kind::kDelete, row.task.id);
            deleted.push_back(row.task.id);
          }
          return deleted;
        });
  }

 private:
  Result<MyPool::Lease> Borrow() {
    Result<MyPool::Lease> session = pool_.Borrow();
    if (!session.ok()) {
      return UnavailableError(fmt::format("{}: {}", where_, session.status().message()));
    }
    return session;
  }

  // The Status of a failed statement of `what`: kUnavailable, naming the plugin and database.
  Status Failure(std::string_view what, const MyResult& result) const {
    return UnavailableError(fmt::format("{}: {} failed: {}", where_, what, result.error()));
  }

  // Runs one statement; remembers whether it failed by a deadlock (see InTransaction).
  Result<MyResult> Run(MyConnection& session, std::string_view sql, const MyParams& params,
                       std::string_view what) {
    MyResult result = session.Execute(sql, params);
    if (result.ok()) return result;
    last_error_ = result.error_code();
    lost_ = result.connection_lost();
    return Failure(what, result);
  }

  // Closes a session whose statement failed in a way that leaves it unusable or in an unknown
  // transaction state.
  void DiscardIfLost(MyPool::Lease& session) {
    if (lost_) session.Discard();
  }

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
  store_internal::MyErrorOf ErrorOf() const {
    return [this](std::string_view what, const MyResult& result) {
      last_error_ = result.error_code();
      lost_ = result.connection_lost();
      return Failure(what, result);
    };
  }

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
                            bool again_if_absent) {
    if (known == Table::kUnknown || (known == Table::kAbsent && again_if_absent)) {
      STAGEHAND_ASSIGN_OR_RETURN(MyResult found, Run(session, kTableExists, MyParams().Add(name),
                                                     "looking for stagehand's tables"));
      known = found.GetInt(0, 0) > 0 ? Table::kPresent : Table::kAbsent;
    }
    return known == Table::kPresent;
  }

  Result<bool> HistoryPresent(MyConnection& session) {
    return TablePresent(session, history_table_, "stagehand_task_runs", /*again_if_absent=*/false);
  }

  Result<bool> RegistrationsPresent(MyConnection& session, bool again_if_absent) {
    return TablePresent(session, registrations_table_, "stagehand_task_registrations",
                        again_if_absent);
  }

  // Errors: kFailedPrecondition when `present` says the table `name` is missing.
  Status RequireTable(const Result<bool>& present, std::string_view name) const {
    if (!present.ok()) return present.status();
    if (*present) return Status::Ok();
    return FailedPreconditionError(
        fmt::format("{}: the database has no {} table (it was migrated by an older stagehand); "
                    "run the migrations (stagehand db migrate)",
                    where_, name));
  }

  Status RequireHistory(MyConnection& session) {
    return RequireTable(HistoryPresent(session), "stagehand_task_runs");
  }

  Status RequireRegistrations(MyConnection& session) {
    return RequireTable(RegistrationsPresent(session, /*again_if_absent=*/true),
                        "stagehand_task_registrations");
  }

  // Records (task id, host) registrations as seen now, inside the caller's transaction.
  Status WriteRegistrations(MyConnection& session,
                            std::span<const std::pair<std::string, std::string>> registrations) {
    if (registrations.empty()) return Status::Ok();
    std::string sql =
        "INSERT INTO stagehand_task_registrations (task_id, host, last_seen_at) VALUES ";
    MyParams params;
    for (std::size_t i = 0; i < registrations.size(); ++i) {
      sql += i == 0 ? "(?, ?, UTC_TIMESTAMP(3))" : ", (?, ?, UTC_TIMESTAMP(3))";
      params.Add(registrations[i].first).Add(registrations[i].second);
    }
    sql += " ON DUPLICATE KEY UPDATE host = VALUES(host), last_seen_at = VALUES(last_seen_at)";
    return Run(session, sql, params, "recording task registrations").status();
  }

  // Records the registrations `tasks` carry, inside the caller's transaction; nothing when none
  // carries one or the table is missing.
  Status RecordRegistrations(MyConnection& session, std::span<const TaskUpsert> tasks) {
    std::vector<std::pair<std::string, std::string>> registrations;
    for (const TaskUpsert& task : tasks) {
      if (task.registered_by) registrations.emplace_back(task.id, *task.registered_by);
    }
    if (registrations.empty()) return Status::Ok();
    STAGEHAND_ASSIGN_OR_RETURN(bool present,
                               RegistrationsPresent(session, /*again_if_absent=*/false));
    if (!present) return Status::Ok();
    return WriteRegistrations(session, registrations);
  }

  // Writes what releases record of their runs (starts of runs their claims did not record, then
  // the ends), inside the caller's transaction, where the history exists.
  Status RecordReleasedRuns(MyConnection& session,
                            std::span<const store_internal::MyRunStart> starts,
                            std::span<const store_internal::MyRunEnd> ends) {
    if (starts.empty()) return Status::Ok();
    STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryPresent(session));
    if (!history) return Status::Ok();
    STAGEHAND_RETURN_IF_ERROR(Runs(session).RecordStarts(starts));
    return CloseAndTrim(session, ends).status();
  }

  // Closes the runs of `ends` and trims their tasks to the limits. Returns how many it closed.
  Result<std::size_t> CloseAndTrim(MyConnection& session,
                                   std::span<const store_internal::MyRunEnd> ends) {
    const RunHistoryLimits limits = limits_.Get();
    MyRunTable runs = Runs(session);
    STAGEHAND_ASSIGN_OR_RETURN(auto closed, runs.CloseRuns(ends, limits.max_output_bytes));
    std::vector<std::string> run_ids;
    std::vector<std::string> tasks;
    for (auto& [run_id, task_id] : closed) {
      run_ids.push_back(run_id);
      tasks.push_back(task_id);
    }
    STAGEHAND_RETURN_IF_ERROR(runs.Trim(std::move(tasks), limits.max_runs_per_task, run_ids));
    return run_ids.size();
  }

  // A task row with its registration, as the prune rule reads them, and the database's now.
  struct PruneRow {
    TaskRow task;
    std::optional<std::string> host;
    std::optional<WallTime> last_seen_at;
    WallTime now;
  };

  // Every task row with its registration, or those of `ids` (locked), ordered by id bytewise.
  Result<std::vector<PruneRow>> PruneRows(MyConnection& session,
                                          std::optional<std::span<const std::string>> ids) {
    MyParams params;
    if (ids) {
      for (const std::string& id : *ids) params.Add(id);
    }
    STAGEHAND_ASSIGN_OR_RETURN(
        MyResult result,
        Run(session,
            PruneRowsSql(ids ? IdsCondition(ids->size()) : "TRUE", ids ? Lock::kWait : Lock::kNone),
            params, "reading tasks to prune"));
    std::vector<PruneRow> rows;
    for (int i = 0; i < result.rows(); ++i) {
      PruneRow& row = rows.emplace_back();
      row.now = FromMicros(result.GetInt(i, 0));
      row.task = RowAt(result, i, 1);
      row.host = result.GetOptional(i, 1 + kRowColumnCount);
      if (!result.IsNull(i, 2 + kRowColumnCount)) {
        row.last_seen_at = FromMicros(result.GetInt(i, 2 + kRowColumnCount));
      }
    }
    std::sort(rows.begin(), rows.end(),
              [](const PruneRow& a, const PruneRow& b) { return a.task.id < b.task.id; });
    return rows;
  }

  // Whether the change log exists: known after Migrate, else looked up (once it is found).
  Result<bool> ChangeLogPresent(MyConnection& session) {
    if (change_log_ == ChangeLog::kUnknown) {
      STAGEHAND_ASSIGN_OR_RETURN(bool exists, store_internal::ChangeLogExists(session, ErrorOf()));
      change_log_ = exists ? ChangeLog::kPresent : ChangeLog::kAbsent;
    }
    return change_log_ == ChangeLog::kPresent;
  }

  // Appends the transaction's events to the change log, when it has one. Returns the first new
  // sequence number, or 0 when nothing was appended.
  Result<std::int64_t> Announce(Transaction& tx) {
    if (tx.events.empty()) return std::int64_t{0};
    STAGEHAND_ASSIGN_OR_RETURN(bool present, ChangeLogPresent(tx.session));
    if (!present) return std::int64_t{0};
    std::vector<store_internal::ChangeRecord> records;
    records.reserve(tx.events.size());
    for (const StoreEvent& event : tx.events) records.push_back(RecordOf(event));
    return store_internal::AppendChanges(tx.session, records, ErrorOf());
  }

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
                                             std::chrono::milliseconds lease, Lock lock) {
    if (claims.empty()) return std::vector<ClaimResult>();
    std::vector<std::string> ids;
    for (const ClaimRequest& claim : claims) ids.push_back(claim.id);
    return InTransaction<std::vector<
        ClaimResult>>("claiming tasks", [&](Transaction& tx) -> Result<std::vector<ClaimResult>> {
      MyConnection& session = tx.session;
      STAGEHAND_ASSIGN_OR_RETURN(ReadRows read, Read(session, ids, lock));
      std::vector<ClaimResult> results(claims.size(), ClaimResult{false, read.now, std::nullopt});
      std::vector<TaskRow> claimed;
      std::vector<store_internal::MyRunStart> starts;
      for (std::size_t i = 0; i < claims.size(); ++i) {
        const ClaimRequest& claim = claims[i];
        auto it = read.rows.find(claim.id);
        if (it == read.rows.end() ||
            !store_internal::ClaimRow(it->second, claim.ticket, claim.timeout, lease,
                                      claim.expected_version, read.now)) {
          continue;
        }
        RoundForStorage(it->second, read.now);
        results[i].claimed = true;
        results[i].expires_at = it->second.current_run_expires_at;
        if (lock == Lock::kSkipLocked) {
          tx.Announce(StoreEvent::Kind::kClaim, claim.id, claim.ticket);
        }
        if (claim.history) {
          starts.push_back({&claim.ticket, &claim.id, &*claim.history, read.now});
        }
        claimed.push_back(it->second);
      }
      STAGEHAND_RETURN_IF_ERROR(Write(session, claimed));
      if (!starts.empty()) {
        STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryPresent(session));
        if (history) STAGEHAND_RETURN_IF_ERROR(Runs(session).RecordStarts(starts));
      }
      return results;
    });
  }

  // Resets the expired runs and pauses (inside the caller's transaction). Returns the ids of the
  // reset runs.
  Result<std::vector<std::string>> SweepOn(Transaction& tx) {
    MyConnection& session = tx.session;
    // The expired rows are found by a plain read, then locked by id: a locking read of the whole
    // table would wait for, and hold up, every claim and release in flight on any row.
    STAGEHAND_ASSIGN_OR_RETURN(
        MyResult expired,
        Run(session,
            "SELECT id FROM backstage_backend_tasks__tasks WHERE current_run_expires_at < NOW(6)",
            {}, "reading expired runs"));
    if (expired.rows() == 0) return std::vector<std::string>();
    std::vector<std::string> ids;
    for (int row = 0; row < expired.rows(); ++row) ids.emplace_back(expired.Get(row, 0));
    std::sort(ids.begin(), ids.end());
    STAGEHAND_ASSIGN_OR_RETURN(ReadRows read, Read(session, ids, Lock::kWait));
    std::vector<std::string> swept;
    std::vector<std::string> lost_runs;
    std::vector<TaskRow> changed;
    for (auto& [id, row] : read.rows) {
      const std::optional<std::string> ticket = row.current_run_ticket;
      const store_internal::SweepOutcome outcome = store_internal::SweepRow(row, read.now);
      if (outcome == store_internal::SweepOutcome::kUntouched) continue;
      if (outcome == store_internal::SweepOutcome::kSwept) {
        swept.push_back(id);
        if (ticket) lost_runs.emplace_back(store_internal::RunIdOfTicket(*ticket));
      }
      tx.Announce(outcome == store_internal::SweepOutcome::kSwept ? StoreEvent::Kind::kSweep
                                                                  : StoreEvent::Kind::kRelease,
                  id);
      RoundForStorage(row, read.now);
      changed.push_back(row);
    }
    STAGEHAND_RETURN_IF_ERROR(Write(session, changed));
    if (!lost_runs.empty()) {
      STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryPresent(session));
      if (history) {
        STAGEHAND_RETURN_IF_ERROR(
            Runs(session).MarkLost(lost_runs, ErrorJson("Task timed out"), read.now));
      }
    }
    return swept;
  }

  // Reads the rows of `ids` and the database's now.
  Result<ReadRows> Read(MyConnection& session, std::span<const std::string> ids, Lock lock) {
    MyParams params;
    for (const std::string& id : ids) params.Add(id);
    const WallTime sent = clock_.Now();
    STAGEHAND_ASSIGN_OR_RETURN(
        MyResult result,
        Run(session, ReadRowsSql(IdsCondition(ids.size()), lock), params, "reading tasks"));
    db_clock_.Observe(sent, clock_.Now(), FromMicros(result.GetInt(0, 0)));
    return RowsOf(result);
  }

  // The rows of a ReadRowsSql result.
  static Result<ReadRows> RowsOf(const MyResult& result) {
    ReadRows read;
    read.now = FromMicros(result.GetInt(0, 0));
    for (int i = 0; i < result.rows(); ++i) {
      if (result.IsNull(i, 1)) continue;
      TaskRow row = RowAt(result, i, 1);
      std::string id = row.id;
      read.rows.emplace(std::move(id), std::move(row));
    }
    return read;
  }

  // The TaskRow in columns first..first+7 of row `i` of `result`.
  static TaskRow RowAt(const MyResult& result, int i, int first) {
    const auto time = [&](int column) -> std::optional<WallTime> {
      if (result.IsNull(i, first + column)) return std::nullopt;
      return WallTime(std::chrono::seconds(ParseInt(result.Get(i, first + column))));
    };
    TaskRow row;
    row.id = std::string(result.Get(i, first));
    row.settings_json = std::string(result.Get(i, first + 1));
    row.next_run_start_at = time(2);
    row.current_run_ticket = result.GetOptional(i, first + 3);
    row.current_run_started_at = time(4);
    row.current_run_expires_at = time(5);
    row.last_run_error_json = result.GetOptional(i, first + 6);
    row.last_run_ended_at = time(7);
    static_assert(kRowColumnCount == 8);
    return row;
  }

  // Writes `rows` (locked by the caller's transaction) back whole.
  Status Write(MyConnection& session, std::span<const TaskRow> rows) {
    if (rows.empty()) return Status::Ok();
    MyParams params;
    for (const TaskRow& row : rows) {
      params.Add(row.id).Add(row.settings_json);
      AddTime(params, row.next_run_start_at);
      params.Add(row.current_run_ticket);
      AddTime(params, row.current_run_started_at);
      AddTime(params, row.current_run_expires_at);
      params.Add(row.last_run_error_json);
      AddTime(params, row.last_run_ended_at);
    }
    return Run(session, WriteRowsSql(rows.size()), params, "writing tasks").status();
  }

  Result<WallTime> NowOn(MyConnection& session) {
    const WallTime sent = clock_.Now();
    STAGEHAND_ASSIGN_OR_RETURN(MyResult result, Run(session, fmt::format("SELECT {}", kNowMicros),
                                                    {}, "reading the database clock"));
    const WallTime now = FromMicros(result.GetInt(0, 0));
    db_clock_.Observe(sent, clock_.Now(), now);
    return now;
  }

  PollEntry Entry(const std::string& id, const std::map<std::string, TaskRow>& rows, WallTime now) {
    PollEntry entry;
    entry.id = id;
    auto it = rows.find(id);
    if (it == rows.end()) {
      entry.readiness = Readiness::kMissing;
      return entry;
    }
    const TaskRow& row = it->second;
    entry.next_run_start_at = row.next_run_start_at;
    entry.current_run_expires_at = row.current_run_expires_at;
    entry.running = row.current_run_ticket.has_value();
    entry.version = store_internal::RowVersion(row);
    Result<TaskSettingsV2> settings = settings_cache_.Parse(row.settings_json);
    if (!settings.ok()) {
      entry.readiness = Readiness::kInvalidSettings;
      entry.settings_error = settings.status().message();
      return entry;
    }
    entry.settings = std::move(*settings);
    const bool due = row.next_run_start_at && *row.next_run_start_at <= now;
    entry.readiness = due && !entry.running ? Readiness::kReady : Readiness::kNotReady;
    return entry;
  }

  static Status Missing(const std::string& id) {
    return NotFoundError(fmt::format("Task {} does not exist", id));
  }

  enum class ChangeLog { kUnknown, kPresent, kAbsent };

  const std::string plugin_id_;
  const store_internal::MyConnectParams params_;  // for the listeners' sessions
  const std::string where_;                       // "plugin X (MySQL database D)", for messages
  const Clock& clock_;
  DatabaseClock db_clock_;
  store_internal::SettingsCache settings_cache_;
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

thread_local unsigned MySqlTaskStore::last_error_ = 0;
thread_local bool MySqlTaskStore::lost_ = false;
thread_local MySqlTaskStore::Pinned MySqlTaskStore::pinned_;

}  // namespace

Result<std::unique_ptr<TaskStore>> OpenMySqlTaskStore(const std::string& plugin_id,
                                                      const MySqlStoreOptions& options,
                                                      const Clock& clock) {
  if (options.database.empty()) {
    return InvalidArgumentError(
        fmt::format("plugin {}: no MySQL database given for its tasks", plugin_id));
  }
  store_internal::MyConnectParams params;
  params.host = options.host;
  params.port = options.port;
  params.socket_path = options.socket_path;
  params.user = options.user;
  params.password = options.password;
  params.connect_timeout = options.connect_timeout;
  params.call_timeout = options.call_timeout;
  params.tls_required = options.tls_required;
  {
    Result<std::unique_ptr<MyConnection>> admin = MyConnection::Open(params);
    if (!admin.ok()) {
      return UnavailableError(fmt::format("plugin {}: {}", plugin_id, admin.status().message()));
    }
    STAGEHAND_ASSIGN_OR_RETURN(std::string quoted, MyConnection::QuoteIdentifier(options.database));
    MyResult created = (*admin)->Execute("CREATE DATABASE IF NOT EXISTS " + quoted);
    if (!created.ok()) {
      return UnavailableError(fmt::format("plugin {}: cannot create the MySQL database {}: {}",
                                          plugin_id, options.database, created.error()));
    }
  }
  params.database = options.database;
  return std::unique_ptr<TaskStore>(
      new MySqlTaskStore(plugin_id, options, std::move(params), clock));
}

}  // namespace stagehand
