// Every SQL statement of stagehand's own SQLite tables, in one place: stagehand's own migration
// bookkeeping (stagehand_migrations), the run history (stagehand_task_runs), the task
// registrations (stagehand_task_registrations), and the statements the task store runs on them.
// Fixed text with bound parameters. Times are UTC text "YYYY-MM-DD HH:MM:SS.SSS", compared as
// strings like the task table's.
#pragma once

#include <array>
#include <span>
#include <string_view>

#include "stagehand/store/task_store.h"
#include "store/ticket_sql.h"

namespace stagehand::store_internal::sqlite_history_sql {

// The statements below strip a cancel's mark from a ticket, and recognise a pause's ticket, with
// these literals (and their lengths).
static_assert(ticket_sql::kCancelRequested == "cancel:");
static_assert(ticket_sql::kPaused == "paused:");

// ---- stagehand's own bookkeeping (never knex's tables) ----

inline constexpr std::string_view kCreateMigrationsTable =
    "CREATE TABLE IF NOT EXISTS stagehand_migrations (name varchar(255) NOT NULL PRIMARY KEY, "
    "migrated_at datetime NOT NULL)";
inline constexpr std::string_view kListMigrations =
    "SELECT name FROM stagehand_migrations ORDER BY name";
inline constexpr std::string_view kRecordMigration =
    "INSERT INTO stagehand_migrations (name, migrated_at) "
    "VALUES (?1, strftime('%Y-%m-%d %H:%M:%f','now'))";

// One of stagehand's own migrations: its name and its statements.
struct Migration {
  std::string_view name;
  std::span<const std::string_view> statements;
};

inline constexpr std::array<std::string_view, 4> kTaskRunsStatements = {
    "CREATE TABLE stagehand_task_runs (run_id varchar(255) NOT NULL PRIMARY KEY, "
    "task_id varchar(255) NOT NULL, seq integer NOT NULL, host text NOT NULL, "
    "pid integer NOT NULL, "
    "trigger_kind text NOT NULL, slot_at datetime NULL, started_at datetime NOT NULL, "
    "ended_at datetime NULL, outcome text NOT NULL, error_json text NULL, exit_code integer NULL, "
    "signal integer NULL, http_status integer NULL, attempt integer NOT NULL, output blob NULL)",
    // A task's page, newest first.
    "CREATE INDEX stagehand_task_runs_by_task ON stagehand_task_runs (task_id, started_at, run_id)",
    // A task's count-based trim.
    "CREATE INDEX stagehand_task_runs_by_seq ON stagehand_task_runs (task_id, seq)",
    // Age-based pruning, oldest first.
    "CREATE INDEX stagehand_task_runs_by_start ON stagehand_task_runs (started_at)",
};

// One row per task: the host that registered or refreshed it last. No foreign key to Backstage's
// table, whose rows Backstage's own tools may delete.
inline constexpr std::array<std::string_view, 1> kTaskRegistrationsStatements = {
    "CREATE TABLE stagehand_task_registrations (task_id varchar(255) NOT NULL PRIMARY KEY, "
    "host text NOT NULL, last_seen_at datetime NOT NULL)",
};

// A run's trace id (32 lowercase hex digits), NULL when its trace was not sampled.
inline constexpr std::array<std::string_view, 1> kRunTraceIdStatements = {
    "ALTER TABLE stagehand_task_runs ADD COLUMN trace_id text NULL",
};

// Idempotency keys (RequestKeys): the answer to each keyed request, kept until expires_at.
inline constexpr std::array<std::string_view, 2> kRequestKeysStatements = {
    "CREATE TABLE stagehand_request_keys (request_key text NOT NULL PRIMARY KEY, "
    "fingerprint text NOT NULL, status integer NOT NULL, body text NOT NULL, "
    "created_at datetime NOT NULL, expires_at datetime NOT NULL)",
    "CREATE INDEX stagehand_request_keys_by_expiry ON stagehand_request_keys (expires_at)",
};

// In the order they apply.
inline constexpr std::array<Migration, 4> kMigrations = {{
    {"0001_task_runs", kTaskRunsStatements},
    {"0002_task_registrations", kTaskRegistrationsStatements},
    {"0003_run_trace_id", kRunTraceIdStatements},
    {"0004_request_keys", kRequestKeysStatements},
}};

// ---- idempotency keys ----

// Removes a few expired keys.
inline constexpr std::string_view kRemoveExpiredRequestKeys =
    "DELETE FROM stagehand_request_keys WHERE request_key IN (SELECT request_key FROM "
    "stagehand_request_keys WHERE expires_at < strftime('%Y-%m-%d %H:%M:%f','now') "
    "ORDER BY expires_at LIMIT 16)";

// ?1 key → fingerprint, status, body of the key while it is kept.
inline constexpr std::string_view kReadRequestKey =
    "SELECT fingerprint, status, body FROM stagehand_request_keys WHERE request_key = ?1 "
    "AND expires_at >= strftime('%Y-%m-%d %H:%M:%f','now')";

// ?1 key, ?2 fingerprint, ?3 retention (ms), ?4 status, ?5 body: keeps the answer.
inline constexpr std::string_view kKeepRequestKey =
    "INSERT OR REPLACE INTO stagehand_request_keys "
    "(request_key, fingerprint, status, body, created_at, expires_at) "
    "VALUES (?1, ?2, ?4, ?5, strftime('%Y-%m-%d %H:%M:%f','now'), "
    "strftime('%Y-%m-%d %H:%M:%f','now', (?3 / 1000.0) || ' seconds'))";

inline constexpr std::string_view kTableExists =
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'stagehand_task_runs'";

inline constexpr std::string_view kRegistrationsTableExists =
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
    "name = 'stagehand_task_registrations'";

// ---- registrations ----

// ?1 JSON array of [task id, host] pairs: records each as registered by its host now.
inline constexpr std::string_view kRecordRegistrations =
    "INSERT INTO stagehand_task_registrations (task_id, host, last_seen_at) "
    "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
    "strftime('%Y-%m-%d %H:%M:%f','now') FROM json_each(?1) WHERE true "
    "ON CONFLICT (task_id) DO UPDATE SET host = excluded.host, last_seen_at = "
    "excluded.last_seen_at";

// ?1 JSON array of task ids, ?2 host: records the ids that have a row in the tasks table as
// registered by the host now.
inline constexpr std::string_view kRefreshRegistrations =
    "INSERT INTO stagehand_task_registrations (task_id, host, last_seen_at) "
    "SELECT t.id, ?2, strftime('%Y-%m-%d %H:%M:%f','now') FROM backstage_backend_tasks__tasks AS t "
    "WHERE t.id IN (SELECT value FROM json_each(?1)) "
    "ON CONFLICT (task_id) DO UPDATE SET host = excluded.host, last_seen_at = "
    "excluded.last_seen_at";

// Every task with what the prune rule reads: id, next_run_start_at, current_run_ticket,
// current_run_started_at, current_run_expires_at, last_run_ended_at, the registration's host and
// last_seen_at (NULL without one). The rule is applied once the times are read (prune_rule.h):
// a row Backstage wrote may hold integer epoch milliseconds, which do not compare with text.
inline constexpr std::string_view kPruneRows =
    "SELECT t.id, t.next_run_start_at, t.current_run_ticket, t.current_run_started_at, "
    "t.current_run_expires_at, t.last_run_ended_at, r.host, r.last_seen_at "
    "FROM backstage_backend_tasks__tasks AS t "
    "LEFT JOIN stagehand_task_registrations AS r ON r.task_id = t.id ORDER BY t.id";

// ?1 JSON array of task ids: as kPruneRows, for those ids only.
inline constexpr std::string_view kPruneRowsOf =
    "SELECT t.id, t.next_run_start_at, t.current_run_ticket, t.current_run_started_at, "
    "t.current_run_expires_at, t.last_run_ended_at, r.host, r.last_seen_at "
    "FROM backstage_backend_tasks__tasks AS t "
    "LEFT JOIN stagehand_task_registrations AS r ON r.task_id = t.id "
    "WHERE t.id IN (SELECT value FROM json_each(?1)) ORDER BY t.id";

// ?1 task id: the task's runs (through stagehand_task_runs_by_task), and its registration.
inline constexpr std::string_view kDeleteTaskRuns =
    "DELETE FROM stagehand_task_runs WHERE task_id = ?1";
inline constexpr std::string_view kDeleteRegistration =
    "DELETE FROM stagehand_task_registrations WHERE task_id = ?1";

// ---- runs ----

// ?1 run id, ?2 task id, ?3 host, ?4 pid, ?5 trigger, ?6 slot or NULL, ?7 start or NULL (now),
// ?8 attempt, ?9 trace id or NULL. A recorded run id is left as it is. The run's seq is one more
// than its task's latest (through stagehand_task_runs_by_seq).
inline constexpr std::string_view kRecordStart =
    "INSERT OR IGNORE INTO stagehand_task_runs (run_id, task_id, seq, host, pid, trigger_kind, "
    "slot_at, started_at, outcome, attempt, trace_id) VALUES (?1, ?2, "
    "coalesce((SELECT max(seq) FROM stagehand_task_runs WHERE task_id = ?2), 0) + 1, ?3, ?4, ?5, "
    "?6, coalesce(?7, strftime('%Y-%m-%d %H:%M:%f','now')), 'running', ?8, ?9)";

// ?1 run id, ?2 end or NULL (now), ?3 outcome, ?4 error JSON, ?5 exit code, ?6 signal, ?7 HTTP
// status, ?8 output. Closes a running or lost run; returns its task id.
inline constexpr std::string_view kCloseRun =
    "UPDATE stagehand_task_runs SET ended_at = coalesce(?2, strftime('%Y-%m-%d %H:%M:%f','now')), "
    "outcome = ?3, error_json = ?4, exit_code = ?5, signal = ?6, http_status = ?7, output = ?8 "
    "WHERE run_id = ?1 AND (ended_at IS NULL OR outcome = 'lost') RETURNING task_id";

// ?1 task id, ?2 runs kept, ?3 JSON array of the run ids just closed (kept until a later end, as
// on PostgreSQL), ?4 the trim window (kRunTrimWindow): removes the task's other ended runs beyond
// its newest kept ones by seq, within the window below that bound, through
// stagehand_task_runs_by_seq.
inline constexpr std::string_view kTrimTask =
    "WITH bound(seq) AS (SELECT max(seq) - ?2 FROM stagehand_task_runs WHERE task_id = ?1) "
    "DELETE FROM stagehand_task_runs WHERE task_id = ?1 AND ended_at IS NOT NULL "
    "AND seq <= (SELECT seq FROM bound) AND seq > (SELECT seq FROM bound) - ?4 "
    "AND run_id NOT IN (SELECT value FROM json_each(?3))";

// ?1 run id, ?2 error JSON: closes a running run as lost.
inline constexpr std::string_view kMarkLost =
    "UPDATE stagehand_task_runs SET ended_at = strftime('%Y-%m-%d %H:%M:%f','now'), "
    "outcome = 'lost', error_json = ?2 WHERE run_id = ?1 AND ended_at IS NULL";

// ?1 now, ?2 error JSON: closes as lost the running runs of the claims the sweep at ?1 resets
// (kSweepExpiredAt, in the same transaction).
inline constexpr std::string_view kMarkSweptRunsLost =
    "UPDATE stagehand_task_runs SET ended_at = ?1, outcome = 'lost', error_json = ?2 "
    "WHERE ended_at IS NULL AND run_id IN (SELECT CASE WHEN substr(current_run_ticket, 1, 7) = "
    "'cancel:' THEN substr(current_run_ticket, 8) ELSE current_run_ticket END "
    "FROM backstage_backend_tasks__tasks WHERE current_run_expires_at < ?1)";

// ?1 error JSON, ?2 now: the task store's kSweepExpired at a given now. Returns the reset ids.
inline constexpr std::string_view kSweepExpiredAt =
    "UPDATE backstage_backend_tasks__tasks SET current_run_ticket = NULL, "
    "current_run_started_at = NULL, current_run_expires_at = NULL, "
    "last_run_ended_at = ?2, last_run_error_json = ?1 "
    "WHERE current_run_expires_at < ?2 AND substr(current_run_ticket, 1, 7) IS NOT 'paused:' "
    "RETURNING id";

// ?1 task id, ?2 limit. Every run select reads these columns, in this order.
inline constexpr std::string_view kListRuns =
    "SELECT run_id, task_id, host, pid, trigger_kind, slot_at, started_at, ended_at, outcome, "
    "error_json, exit_code, signal, http_status, attempt, trace_id FROM stagehand_task_runs WHERE "
    "task_id = ?1 "
    "ORDER BY started_at DESC, run_id DESC LIMIT ?2";

// ?1 task id, ?2 limit, ?3 and ?4 the start and run id the page comes after.
inline constexpr std::string_view kListRunsBefore =
    "SELECT run_id, task_id, host, pid, trigger_kind, slot_at, started_at, ended_at, outcome, "
    "error_json, exit_code, signal, http_status, attempt, trace_id FROM stagehand_task_runs WHERE "
    "task_id = ?1 "
    "AND (started_at, run_id) < (?3, ?4) "
    "ORDER BY started_at DESC, run_id DESC LIMIT ?2";

// ?1 run id → the run's columns and its output.
inline constexpr std::string_view kGetRun =
    "SELECT run_id, task_id, host, pid, trigger_kind, slot_at, started_at, ended_at, outcome, "
    "error_json, exit_code, signal, http_status, attempt, trace_id, output "
    "FROM stagehand_task_runs WHERE run_id = ?1";

// ?1 run id → its start (the position of a page that comes after it).
inline constexpr std::string_view kRunStart =
    "SELECT started_at FROM stagehand_task_runs WHERE run_id = ?1";

// ?1 modifier for -max_age, ?2 most rows: removes the runs that started before now - max_age,
// oldest first, through stagehand_task_runs_by_start.
inline constexpr std::string_view kPruneExpired =
    "DELETE FROM stagehand_task_runs WHERE run_id IN (SELECT run_id FROM stagehand_task_runs "
    "WHERE started_at < strftime('%Y-%m-%d %H:%M:%f','now',?1) ORDER BY started_at LIMIT ?2)";

}  // namespace stagehand::store_internal::sqlite_history_sql
