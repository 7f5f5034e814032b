#include "store/mysql/my_wakeups.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iterator>
#include <vector>

namespace stagehand::store_internal {

namespace {

// stagehand's own migrations on MySQL: a name and its statements (MySQL runs one per call).
struct OwnMigration {
  const char* name;
  std::vector<const char*> statements;
};

const OwnMigration kOwnMigrations[] = {
    {"0001_changes_and_waiters",
     {"CREATE TABLE stagehand_changes (seq bigint NOT NULL AUTO_INCREMENT, kind varchar(16) NOT "
      "NULL, task_id varchar(255) NULL, ticket text NULL, caller text NULL, created_at datetime "
      "NOT NULL DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (seq)) COMMENT = 'stagehand''s change log: "
      "what stagehand hosts changed, in order, for the other hosts to read (Backstage workers "
      "write none)'",
      "CREATE TABLE stagehand_waiters (host varchar(255) NOT NULL, connection_id bigint NOT NULL, "
      "seen_seq bigint NOT NULL, wait_seconds int NOT NULL, updated_at datetime NOT NULL, PRIMARY "
      "KEY (host)) COMMENT = "
      "'stagehand''s waiting hosts: the session each waits on for changes, and the last change it "
      "has seen'"}},
    // The run history (ADR 0011): times in UTC, ids compared byte for byte.
    {"0002_task_runs",
     {"CREATE TABLE stagehand_task_runs (run_id varchar(255) COLLATE utf8mb4_bin NOT NULL, "
      "task_id varchar(255) COLLATE utf8mb4_bin NOT NULL, seq bigint NOT NULL, host text NOT "
      "NULL, pid bigint NOT NULL, trigger_kind varchar(32) NOT NULL, slot_at datetime(3) NULL, "
      "started_at datetime(3) NOT NULL, ended_at datetime(3) NULL, outcome varchar(32) NOT NULL, "
      "error_json longtext NULL, exit_code int NULL, `signal` int NULL, http_status int NULL, "
      "attempt int NOT NULL, output longblob NULL, trace_id varchar(32) NULL, "
      "PRIMARY KEY (run_id), "
      "KEY stagehand_task_runs_by_task (task_id, started_at, run_id), "
      "KEY stagehand_task_runs_by_seq (task_id, seq), "
      "KEY stagehand_task_runs_by_start (started_at)) COMMENT = "
      "'stagehand''s run history: one row per run of a task by a stagehand host (Backstage "
      "workers write none); times in UTC'",
      // A task's runs recorded so far: its row, locked while a run is recorded, numbers the runs.
      "CREATE TABLE stagehand_task_run_counts (task_id varchar(255) COLLATE utf8mb4_bin NOT "
      "NULL, runs bigint NOT NULL, PRIMARY KEY (task_id)) COMMENT = 'stagehand''s count of each "
      "task''s recorded runs, which numbers them (seq)'"}},
    // Which host registered each task and when it was last seen (ADR 0012). The task id compares
    // as the tasks table's does (the database's default collation), for the join.
    {"0003_task_registrations",
     {"CREATE TABLE stagehand_task_registrations (task_id varchar(255) NOT NULL, host text NOT "
      "NULL, last_seen_at datetime(3) NOT NULL, PRIMARY KEY (task_id)) COMMENT = "
      "'stagehand''s task registrations: the host that registered or refreshed each task last; "
      "times in UTC'"}},
    // Idempotency keys (RequestKeys): the answer to each keyed request, kept until expires_at.
    {"0004_request_keys",
     {"CREATE TABLE stagehand_request_keys (request_key varchar(255) COLLATE utf8mb4_bin NOT "
      "NULL, fingerprint longtext NOT NULL, status int NOT NULL, body longtext NOT NULL, "
      "created_at datetime(3) NOT NULL, expires_at datetime(3) NOT NULL, PRIMARY KEY "
      "(request_key), KEY stagehand_request_keys_by_expiry (expires_at)) COMMENT = "
      "'stagehand''s idempotency keys: the answer to each REST request sent with an "
      "Idempotency-Key header, kept for a retention; times in UTC'"}},
};

constexpr char kCreateMigrationsTable[] =
    "CREATE TABLE IF NOT EXISTS stagehand_migrations (name varchar(255) NOT NULL, migrated_at "
    "datetime NOT NULL DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (name))";
constexpr char kListMigrations[] = "SELECT name FROM stagehand_migrations ORDER BY name";
constexpr char kRecordMigration[] = "INSERT INTO stagehand_migrations (name) VALUES (?)";

constexpr char kLatestChange[] = "SELECT coalesce(max(seq), 0) FROM stagehand_changes";
constexpr char kChangesAfter[] =
    "SELECT seq, kind, coalesce(task_id, ''), coalesce(ticket, ''), coalesce(caller, ''), "
    "(SELECT coalesce(min(seq), 0) FROM stagehand_changes) FROM stagehand_changes WHERE seq > ? "
    "ORDER BY seq LIMIT ?";
constexpr char kAppendChange[] = "(?, ?, ?, ?)";
constexpr char kPruneChanges[] =
    "DELETE FROM stagehand_changes WHERE created_at < NOW() - INTERVAL 1 MINUTE";
constexpr char kChangeLogExists[] =
    "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
    "AND TABLE_NAME = 'stagehand_changes'";
constexpr char kSessionId[] = "SELECT CONNECTION_ID()";

// A waiter's record; records untouched for ten minutes are of waiters that died.
constexpr char kRegister[] =
    "REPLACE INTO stagehand_waiters (host, connection_id, seen_seq, wait_seconds, updated_at) "
    "VALUES (?, CONNECTION_ID(), ?, ?, NOW())";
constexpr char kForgetDead[] =
    "DELETE FROM stagehand_waiters WHERE updated_at < NOW() - INTERVAL 10 MINUTE";
constexpr char kLeave[] =
    "DELETE FROM stagehand_waiters WHERE host = ? AND connection_id = CONNECTION_ID()";

// The wait looks at the log and blocks in one statement, unless a change newer than ?1 is there:
// a writer that committed before the statement started is seen by its look, and one that commits
// later finds the statement in the process list (from its start, look included) and ends it. It
// blocks on a named lock that the waiter's own holder session keeps (GET_LOCK returns 1 only when
// that session is gone), not in SLEEP: every SLEEP of the server waits under one mutex, and a KILL
// racing with another sleeper's start or end waits two seconds for it (ADR 0019). The wait names
// its waiter and what it has seen, so that a writer can tell this very statement from any other
// statement of that session, or of a session that reused its id after a restart.
#define STAGEHAND_WAIT_LOCK "CONCAT('stagehand_wait_', SHA1(CONCAT(DATABASE(), '/', ?)))"
constexpr char kHold[] = "SELECT GET_LOCK(" STAGEHAND_WAIT_LOCK ", 0)";
constexpr char kRelease[] = "DO RELEASE_LOCK(" STAGEHAND_WAIT_LOCK ")";
constexpr char kWait[] =
    "SELECT IF((SELECT coalesce(max(seq), 0) FROM stagehand_changes) > ?, 0, "
    "GET_LOCK(" STAGEHAND_WAIT_LOCK ", ?)), ?";
#undef STAGEHAND_WAIT_LOCK
// The waiters that have not seen change ?1, other than ?2, that are in their wait right now. The
// process list shows the sessions of this account only: the ones it may wake.
constexpr char kSleepingWaiters[] =
    "SELECT w.host, w.connection_id, w.seen_seq FROM stagehand_waiters AS w "
    "JOIN information_schema.PROCESSLIST AS p ON p.ID = w.connection_id "
    "WHERE w.seen_seq < ? AND w.host <> ? "
    "AND p.INFO = CONCAT('SELECT IF((SELECT coalesce(max(seq), 0) FROM stagehand_changes) > ', "
    "w.seen_seq, ', 0, GET_LOCK(CONCAT(''stagehand_wait_'', SHA1(CONCAT(DATABASE(), ''/'', ', "
    "QUOTE(w.host), '))), ', w.wait_seconds, ')), ', QUOTE(w.host))";
constexpr char kKillQuery[] = "KILL QUERY ?";

// Server errors of a wait that a writer ended: the statement was killed (1317
// ER_QUERY_INTERRUPTED).
constexpr unsigned kQueryInterrupted = 1317;
constexpr unsigned kNoSuchThread = 1094;
constexpr unsigned kNotOwner = 1095;

}  // namespace

Status MigrateMySqlStagehand(MyConnection& connection, std::string_view where,
                             const MyErrorOf& error_of) {
  const auto fail = [&](std::string_view step, const MyResult& result) {
    return error_of(fmt::format("stagehand migration ({})", step), result);
  };
  return WithMigrationLock(connection, "own", where, error_of, [&]() -> Status {
    if (MyResult r = connection.Execute(kCreateMigrationsTable); !r.ok()) {
      return fail("create migrations table", r);
    }
    MyResult listed = connection.Execute(kListMigrations);
    if (!listed.ok()) return fail("list migrations", listed);
    std::vector<std::string> applied;
    std::vector<std::string> unknown;
    for (int row = 0; row < listed.rows(); ++row) {
      std::string name(listed.Get(row, 0));
      const bool known = std::any_of(std::begin(kOwnMigrations), std::end(kOwnMigrations),
                                     [&](const OwnMigration& m) { return name == m.name; });
      (known ? applied : unknown).push_back(std::move(name));
    }
    if (!unknown.empty()) {
      return FailedPreconditionError(
          fmt::format("{}: stagehand_migrations lists migrations this version does not know: {} "
                      "(the database was migrated by a newer stagehand)",
                      where, fmt::join(unknown, ", ")));
    }
    for (const OwnMigration& migration : kOwnMigrations) {
      if (std::find(applied.begin(), applied.end(), migration.name) != applied.end()) continue;
      for (const char* statement : migration.statements) {
        if (MyResult r = connection.Execute(statement); !r.ok()) return fail(migration.name, r);
      }
      if (MyResult r = connection.Execute(kRecordMigration, MyParams().Add(migration.name));
          !r.ok()) {
        return fail(migration.name, r);
      }
    }
    return Status::Ok();
  });
}

Result<std::int64_t> AppendChanges(MyConnection& connection, std::span<const ChangeRecord> records,
                                   const MyErrorOf& error_of) {
  std::string sql = "INSERT INTO stagehand_changes (kind, task_id, ticket, caller) VALUES ";
  MyParams params;
  for (std::size_t i = 0; i < records.size(); ++i) {
    sql += i == 0 ? kAppendChange : std::string(", ") + kAppendChange;
    const ChangeRecord& record = records[i];
    params.Add(record.kind).Add(record.task_id);
    params.Add(record.ticket.empty() ? std::nullopt : std::optional(record.ticket));
    params.Add(record.caller.empty() ? std::nullopt : std::optional(record.caller));
  }
  if (records.empty()) return std::int64_t{0};
  MyResult appended = connection.Execute(sql, params);
  if (!appended.ok()) return error_of("announcing a change", appended);
  MyResult first = connection.Execute("SELECT LAST_INSERT_ID()");
  if (!first.ok()) return error_of("announcing a change", first);
  return first.GetInt(0, 0);
}

Status PruneChanges(MyConnection& connection, const MyErrorOf& error_of) {
  MyResult pruned = connection.Execute(kPruneChanges);
  return pruned.ok() ? Status::Ok() : error_of("pruning the change log", pruned);
}

Result<bool> ChangeLogExists(MyConnection& connection, const MyErrorOf& error_of) {
  MyResult exists = connection.Execute(kChangeLogExists);
  if (!exists.ok()) return error_of("looking for the change log", exists);
  return exists.GetInt(0, 0) > 0;
}

Status Interrupt(MyConnection& connection, std::int64_t session_id) {
  MyResult killed = connection.Execute(kKillQuery, MyParams().Add(session_id));
  if (killed.ok() || killed.error_code() == kNoSuchThread) return Status::Ok();
  return UnavailableError("cannot interrupt a waiter: " + killed.error());
}

Result<std::int64_t> LatestChange(MyConnection& connection) {
  MyResult latest = connection.Execute(kLatestChange);
  if (!latest.ok()) return UnavailableError("cannot read the change log: " + latest.error());
  return latest.GetInt(0, 0);
}

ChangeWaiter::ChangeWaiter(std::unique_ptr<MyConnection> session,
                           std::unique_ptr<MyConnection> holder, std::string host)
    : session_(std::move(session)), holder_(std::move(holder)), host_(std::move(host)) {}

ChangeWaiter::~ChangeWaiter() { (void)Leave(); }

bool IsWaiterName(std::string_view host) {
  return !host.empty() && host.size() <= 255 && std::all_of(host.begin(), host.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '@' || c == '-';
  });
}

Result<std::int64_t> ChangeWaiter::Wait(std::int64_t seen, std::chrono::seconds longest) {
  if (!IsWaiterName(host_)) {
    return InvalidArgumentError("invalid waiter name '" + host_ +
                                "': letters, digits and . _ : @ - only, at most 255");
  }
  // A writer's KILL QUERY may end any statement of this session: each such end is a wake, and the
  // log is read again (another writer's kill may end that read too).
  const auto latest_change = [&]() -> Result<std::int64_t> {
    MyResult latest = ExecuteThroughWakes(kLatestChange);
    if (!latest.ok()) return UnavailableError("cannot read the change log: " + latest.error());
    return latest.GetInt(0, 0);
  };
  const auto woken = [&](const MyResult& result) -> std::optional<Result<std::int64_t>> {
    if (result.ok()) return std::nullopt;
    if (result.error_code() == kQueryInterrupted) return latest_change();
    return UnavailableError("waiting for changes failed: " + result.error());
  };
  const long long seconds = std::max<long long>(longest.count(), 1);
  MyResult registered = session_->Execute(kRegister, MyParams().Add(host_).Add(seen).Add(seconds));
  if (auto end = woken(registered)) return *std::move(end);
  MyResult forgotten = session_->Execute(kForgetDead);
  if (auto end = woken(forgotten)) return *std::move(end);
  if (!holding_) {
    MyResult held = holder_->Execute(kHold, MyParams().Add(host_));
    if (!held.ok()) return UnavailableError("cannot take the waiter's lock: " + held.error());
    if (held.GetInt(0, 0) != 1) {
      return UnavailableError("the lock of waiter '" + host_ + "' is held by another session");
    }
    holding_ = true;
  }
  MyResult waited =
      session_->Execute(kWait, MyParams().Add(seen).Add(host_).Add(seconds).Add(host_));
  if (auto end = woken(waited)) return *std::move(end);
  if (waited.rows() == 1 && !waited.IsNull(0, 0) && waited.GetInt(0, 0) == 1) {
    // The lock was free: the holder's session is gone, and this one holds it now.
    (void)session_->Execute(kRelease, MyParams().Add(host_));
    return UnavailableError("the session holding the lock of waiter '" + host_ + "' is gone");
  }
  return latest_change();
}

MyResult ChangeWaiter::ExecuteThroughWakes(std::string_view sql, const MyParams& params) {
  for (int attempt = 1;; ++attempt) {
    MyResult result = session_->Execute(sql, params);
    if (result.ok() || result.error_code() != kQueryInterrupted || attempt == 3) return result;
  }
}

Result<ChangeWaiter::Changes> ChangeWaiter::ChangesAfter(std::int64_t seen, int limit) {
  MyResult read = ExecuteThroughWakes(kChangesAfter, MyParams().Add(seen).Add(limit));
  if (!read.ok()) return UnavailableError("cannot read the change log: " + read.error());
  Changes changes;
  for (int row = 0; row < read.rows(); ++row) {
    ChangeRecord& record = changes.records.emplace_back();
    record.seq = read.GetInt(row, 0);
    record.kind = std::string(read.Get(row, 1));
    record.task_id = std::string(read.Get(row, 2));
    record.ticket = std::string(read.Get(row, 3));
    record.caller = std::string(read.Get(row, 4));
    if (row == 0) changes.gap = read.GetInt(row, 5) > seen + 1;
  }
  return changes;
}

Result<std::int64_t> ChangeWaiter::SessionId() {
  if (session_id_ == 0) {
    MyResult id = ExecuteThroughWakes(kSessionId);
    if (!id.ok()) return UnavailableError("cannot read the session's id: " + id.error());
    session_id_ = id.GetInt(0, 0);
  }
  return session_id_;
}

Status ChangeWaiter::Leave() {
  MyResult left = session_->Execute(kLeave, MyParams().Add(host_));
  if (!left.ok() && left.error_code() == kQueryInterrupted) {
    left = session_->Execute(kLeave, MyParams().Add(host_));
  }
  if (!left.ok()) return UnavailableError("cannot remove the waiter's record: " + left.error());
  return Status::Ok();
}

Result<int> WaiterWaker::Wake(MyConnection& connection, std::int64_t change,
                              const std::function<void(const std::string& host)>& refused) {
  MyResult sleeping = connection.Execute(kSleepingWaiters, MyParams().Add(change).Add(self_));
  if (!sleeping.ok()) return UnavailableError("cannot read the waiters: " + sleeping.error());
  int woken = 0;
  for (int row = 0; row < sleeping.rows(); ++row) {
    const std::string host(sleeping.Get(row, 0));
    const std::int64_t seen = sleeping.GetInt(row, 2);
    auto last = woken_at_.find(host);
    if (last != woken_at_.end() && last->second == seen) continue;  // woken, not waiting again
    MyResult killed = connection.Execute(kKillQuery, MyParams().Add(sleeping.GetInt(row, 1)));
    if (killed.ok()) {
      woken_at_[host] = seen;
      ++woken;
    } else if (killed.error_code() == kNotOwner) {
      if (refused_.insert(host).second) refused(host);
    } else if (killed.error_code() != kNoSuchThread) {
      return UnavailableError("cannot wake a waiter: " + killed.error());
    }
  }
  return woken;
}

}  // namespace stagehand::store_internal
