// Every SQL statement of the SQLite task store, in one place. Statements are fixed text with bound
// parameters; the only composed statements (Upsert, Release) splice in fixed fragments chosen by
// the kind of next-run plan. Timestamps are UTC text, compared as strings as Backstage does; our
// writes carry milliseconds: strftime('%Y-%m-%d %H:%M:%f', ...).
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>

#include "stagehand/store/task_store.h"
#include "store/next_run.h"
#include "store/ticket_sql.h"

namespace stagehand::store_internal::sqlite_sql {

// The pause statements and sweeps recognise a pause's ticket (ADR 0013) with these literals (and
// their lengths).
static_assert(ticket_sql::kPaused == "paused:");
static_assert(ticket_sql::kPausePending == "pausing:");
static_assert(ticket_sql::kCancelRequested == "cancel:");

// ---- connection ----

// WAL lets readers run beside the one writer; NORMAL sync is safe (consistent) in WAL mode.
inline constexpr std::string_view kConnectionSetup =
    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL";
// IMMEDIATE takes the write lock up front, waiting for it under the busy timeout, so a
// transaction never fails half-way on a lock upgrade.
inline constexpr std::string_view kBegin = "BEGIN IMMEDIATE";
inline constexpr std::string_view kCommit = "COMMIT";
inline constexpr std::string_view kRollback = "ROLLBACK";
// A transaction inside another one (SqliteTransaction).
inline constexpr std::string_view kSavepoint = "SAVEPOINT stagehand_nested";
inline constexpr std::string_view kReleaseSavepoint = "RELEASE stagehand_nested";
inline constexpr std::string_view kRollbackSavepoint =
    "ROLLBACK TO stagehand_nested; RELEASE stagehand_nested";

// ---- knex bookkeeping (Backstage §3.2), byte-for-byte what knex creates on SQLite ----

inline constexpr std::string_view kTableExists =
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1";

inline constexpr std::string_view kMigrationsTable = "backstage_backend_tasks__knex_migrations";
inline constexpr std::string_view kLockTable = "backstage_backend_tasks__knex_migrations_lock";

inline constexpr std::string_view kCreateMigrationsTable =
    "create table `backstage_backend_tasks__knex_migrations` (`id` integer not null primary key "
    "autoincrement, `name` varchar(255), `batch` integer, `migration_time` datetime)";
inline constexpr std::string_view kCreateLockTable =
    "create table `backstage_backend_tasks__knex_migrations_lock` (`index` integer not null "
    "primary key autoincrement, `is_locked` integer)";
inline constexpr std::string_view kCountLockRows =
    "SELECT count(*) FROM backstage_backend_tasks__knex_migrations_lock";
inline constexpr std::string_view kInsertLockRow =
    "insert into `backstage_backend_tasks__knex_migrations_lock` (`is_locked`) values (0)";
inline constexpr std::string_view kIsLocked =
    "SELECT is_locked FROM backstage_backend_tasks__knex_migrations_lock ORDER BY `index` LIMIT 1";
inline constexpr std::string_view kTakeLock =
    "UPDATE backstage_backend_tasks__knex_migrations_lock SET is_locked = 1 WHERE is_locked = 0";
inline constexpr std::string_view kFreeLock =
    "UPDATE backstage_backend_tasks__knex_migrations_lock SET is_locked = 0";
inline constexpr std::string_view kCompletedMigrations =
    "SELECT name FROM backstage_backend_tasks__knex_migrations ORDER BY id";
inline constexpr std::string_view kLatestBatch =
    "SELECT coalesce(max(batch), 0) FROM backstage_backend_tasks__knex_migrations";
// migration_time is bound as integer epoch milliseconds, as the JavaScript driver stores a Date.
inline constexpr std::string_view kRecordMigration =
    "insert into `backstage_backend_tasks__knex_migrations` (`name`, `batch`, `migration_time`) "
    "values (?1, ?2, ?3)";

// One of Backstage's scheduler migrations: its file name and the statements knex runs for it.
struct Migration {
  std::string_view name;
  std::span<const std::string_view> statements;
};

inline constexpr std::array<std::string_view, 1> kInitStatements = {
    "create table `backstage_backend_tasks__tasks` (`id` varchar(255) not null, `settings_json` "
    "text not null, `next_run_start_at` datetime not null, `current_run_ticket` text null, "
    "`current_run_started_at` datetime null, `current_run_expires_at` datetime null, primary key "
    "(`id`))",
};

// knex alters a SQLite column by rebuilding the table; the rename leaves the table name
// double-quoted in sqlite_master, as in a Backstage-migrated database.
inline constexpr std::array<std::string_view, 4> kNullableNextRunStatements = {
    "CREATE TABLE `_knex_temp_alter111` (`id` varchar(255) NOT NULL, `settings_json` text NOT "
    "NULL, `next_run_start_at` datetime, `current_run_ticket` text NULL, `current_run_started_at` "
    "datetime NULL, `current_run_expires_at` datetime NULL, PRIMARY KEY (`id`))",
    "INSERT INTO `_knex_temp_alter111` (`id`, `settings_json`, `next_run_start_at`, "
    "`current_run_ticket`, `current_run_started_at`, `current_run_expires_at`) SELECT `id`, "
    "`settings_json`, `next_run_start_at`, `current_run_ticket`, `current_run_started_at`, "
    "`current_run_expires_at` FROM `backstage_backend_tasks__tasks`",
    "DROP TABLE \"backstage_backend_tasks__tasks\"",
    "ALTER TABLE \"_knex_temp_alter111\" RENAME TO \"backstage_backend_tasks__tasks\"",
};

inline constexpr std::array<std::string_view, 2> kLastRunStatements = {
    "alter table `backstage_backend_tasks__tasks` add column `last_run_error_json` text null",
    "alter table `backstage_backend_tasks__tasks` add column `last_run_ended_at` datetime null",
};

// In the order knex applies them (lexical file order).
inline constexpr std::array<Migration, 3> kMigrations = {{
    {"20210928160613_init.js", kInitStatements},
    {"20240712211735_nullable_next_run.js", kNullableNextRunStatements},
    {"20250411000000_last_run.js", kLastRunStatements},
}};

// ---- task operations ----

inline constexpr std::string_view kDatabaseNow = "SELECT strftime('%Y-%m-%d %H:%M:%f','now')";

// ?1 JSON array of ids. One row per requested id, in request order; a missing row has NULLs.
// Columns: requested id, row exists, settings_json, next_run_start_at, current_run_ticket,
// current_run_expires_at, ready, now, version.
inline constexpr std::string_view kPoll =
    "WITH clock(now) AS MATERIALIZED (SELECT strftime('%Y-%m-%d %H:%M:%f','now')) "
    "SELECT ids.value, t.id IS NOT NULL, t.settings_json, t.next_run_start_at, "
    "t.current_run_ticket, t.current_run_expires_at, "
    "coalesce(t.next_run_start_at <= clock.now AND t.current_run_ticket IS NULL, 0), clock.now, "
    "stagehand_version(t.next_run_start_at, t.settings_json) "
    "FROM json_each(?1) AS ids CROSS JOIN clock "
    "LEFT JOIN backstage_backend_tasks__tasks AS t ON t.id = ids.value "
    "ORDER BY ids.key";

// ?1 JSON array of [id, known version or null] pairs. As kPoll, but only the rows that are
// missing, hold a ticket, are due, or whose version differs from the known one.
inline constexpr std::string_view kPollChanged =
    "WITH clock(now) AS MATERIALIZED (SELECT strftime('%Y-%m-%d %H:%M:%f','now')), "
    "known(key, id, version) AS (SELECT key, json_extract(value, '$[0]'), "
    "json_extract(value, '$[1]') FROM json_each(?1)) "
    "SELECT k.id, t.id IS NOT NULL, t.settings_json, t.next_run_start_at, "
    "t.current_run_ticket, t.current_run_expires_at, "
    "coalesce(t.next_run_start_at <= clock.now AND t.current_run_ticket IS NULL, 0), clock.now, "
    "stagehand_version(t.next_run_start_at, t.settings_json) "
    "FROM known AS k CROSS JOIN clock "
    "LEFT JOIN backstage_backend_tasks__tasks AS t ON t.id = k.id "
    "WHERE t.id IS NULL OR t.current_run_ticket IS NOT NULL OR t.next_run_start_at <= clock.now "
    "OR stagehand_version(t.next_run_start_at, t.settings_json) IS NOT k.version "
    "ORDER BY k.key";

// ?1 error JSON. Returns the reset ids.
inline constexpr std::string_view kSweepExpired =
    "UPDATE backstage_backend_tasks__tasks SET current_run_ticket = NULL, "
    "current_run_started_at = NULL, current_run_expires_at = NULL, "
    "last_run_ended_at = strftime('%Y-%m-%d %H:%M:%f','now'), last_run_error_json = ?1 "
    "WHERE current_run_expires_at < strftime('%Y-%m-%d %H:%M:%f','now') "
    "AND substr(current_run_ticket, 1, 7) IS NOT 'paused:' RETURNING id";

// ?1 id, ?2 ticket, ?3 modifier for the expiry (now + min(timeout, lease)).
inline constexpr std::string_view kClaim =
    "UPDATE backstage_backend_tasks__tasks SET current_run_ticket = ?2, "
    "current_run_started_at = strftime('%Y-%m-%d %H:%M:%f','now'), "
    "current_run_expires_at = strftime('%Y-%m-%d %H:%M:%f','now',?3) "
    "WHERE id = ?1 AND current_run_ticket IS NULL "
    "AND next_run_start_at <= strftime('%Y-%m-%d %H:%M:%f','now') "
    "RETURNING current_run_started_at, current_run_expires_at";

// As kClaim, and ?4 the version (stagehand_version) the row must have.
inline constexpr std::string_view kClaimVersion =
    "UPDATE backstage_backend_tasks__tasks SET current_run_ticket = ?2, "
    "current_run_started_at = strftime('%Y-%m-%d %H:%M:%f','now'), "
    "current_run_expires_at = strftime('%Y-%m-%d %H:%M:%f','now',?3) "
    "WHERE id = ?1 AND current_run_ticket IS NULL "
    "AND next_run_start_at <= strftime('%Y-%m-%d %H:%M:%f','now') "
    "AND stagehand_version(next_run_start_at, settings_json) = ?4 "
    "RETURNING current_run_started_at, current_run_expires_at";

// ?1 id, ?2 ticket, ?3 modifier for the timeout, ?4 modifier for the lease, ?5 the ticket marked
// by a cancel. Returns whether the marked ticket held the row (no row: neither form held it).
inline constexpr std::string_view kRenewLease =
    "UPDATE backstage_backend_tasks__tasks SET current_run_expires_at = min("
    "coalesce(strftime('%Y-%m-%d %H:%M:%f',current_run_started_at,?3), "
    "strftime('%Y-%m-%d %H:%M:%f','now',?4)), strftime('%Y-%m-%d %H:%M:%f','now',?4)) "
    "WHERE id = ?1 AND current_run_ticket IN (?2, ?5) RETURNING current_run_ticket = ?5";

// ?1 id, ?2 ticket, ?3 the marked ticket, ?4 modifier for the hold: marks the run as cancelled and
// brings its expiry forward to at most now + hold.
inline constexpr std::string_view kMarkCancelled =
    "UPDATE backstage_backend_tasks__tasks SET current_run_ticket = ?3, "
    "current_run_expires_at = min(coalesce(strftime('%Y-%m-%d %H:%M:%f',current_run_expires_at), "
    "strftime('%Y-%m-%d %H:%M:%f','now',?4)), strftime('%Y-%m-%d %H:%M:%f','now',?4)) "
    "WHERE id = ?1 AND current_run_ticket = ?2";

// ?1 id.
inline constexpr std::string_view kTrigger =
    "UPDATE backstage_backend_tasks__tasks "
    "SET next_run_start_at = strftime('%Y-%m-%d %H:%M:%f','now') "
    "WHERE id = ?1 AND current_run_ticket IS NULL";
// ?1 id, ?2 expected version, ?3 the next start (an instant) → the next start and version after
// the skip, and now; no row when the task is missing, held or of another version (SkipSlot).
inline constexpr std::string_view kSkipSlot =
    "UPDATE backstage_backend_tasks__tasks SET next_run_start_at = ?3 "
    "WHERE id = ?1 AND current_run_ticket IS NULL "
    "AND stagehand_version(next_run_start_at, settings_json) = ?2 "
    "RETURNING next_run_start_at, stagehand_version(next_run_start_at, settings_json), "
    "strftime('%Y-%m-%d %H:%M:%f','now')";
// ?1 id → the row's ticket (a row that exists).
inline constexpr std::string_view kReadTicket =
    "SELECT current_run_ticket FROM backstage_backend_tasks__tasks WHERE id = ?1";

// ?1 id, ?2 the pause's ticket (PausedTicket), ?3 until (NULL: none). Pauses a row with no ticket,
// or changes a paused row's pause (ADR 0013).
inline constexpr std::string_view kPause =
    "UPDATE backstage_backend_tasks__tasks SET current_run_ticket = ?2, "
    "current_run_started_at = strftime('%Y-%m-%d %H:%M:%f','now'), current_run_expires_at = ?3 "
    "WHERE id = ?1 AND (current_run_ticket IS NULL OR substr(current_run_ticket, 1, 7) = "
    "'paused:')";
// ?1 id. Resumes a paused row.
inline constexpr std::string_view kResume =
    "UPDATE backstage_backend_tasks__tasks SET current_run_ticket = NULL, "
    "current_run_started_at = NULL, current_run_expires_at = NULL "
    "WHERE id = ?1 AND substr(current_run_ticket, 1, 7) = 'paused:'";
// Clears the pauses whose until has passed, recording nothing (before the janitor's sweep, which
// would record a timed-out run).
inline constexpr std::string_view kResumeExpiredPauses =
    "UPDATE backstage_backend_tasks__tasks SET current_run_ticket = NULL, "
    "current_run_started_at = NULL, current_run_expires_at = NULL "
    "WHERE substr(current_run_ticket, 1, 7) = 'paused:' "
    "AND current_run_expires_at < strftime('%Y-%m-%d %H:%M:%f','now')";
// ?1 id, ?2 the stored ticket, ?3 the ticket that replaces it (a pause asked of a running row, or
// the resume of that pause), ?4 a modifier bringing the expiry forward to at most now + hold
// (NULL: the expiry is kept).
inline constexpr std::string_view kRewriteTicket =
    "UPDATE backstage_backend_tasks__tasks SET current_run_ticket = ?3, "
    "current_run_expires_at = CASE WHEN ?4 IS NULL THEN current_run_expires_at ELSE "
    "min(coalesce(strftime('%Y-%m-%d %H:%M:%f',current_run_expires_at), "
    "strftime('%Y-%m-%d %H:%M:%f','now',?4)), strftime('%Y-%m-%d %H:%M:%f','now',?4)) END "
    "WHERE id = ?1 AND current_run_ticket = ?2";
// The expired runs whose tickets carry a pending pause: id, ticket, now.
inline constexpr std::string_view kExpiredPendingPauses =
    "SELECT id, current_run_ticket, strftime('%Y-%m-%d %H:%M:%f','now') "
    "FROM backstage_backend_tasks__tasks "
    "WHERE current_run_expires_at < strftime('%Y-%m-%d %H:%M:%f','now') "
    "AND (substr(current_run_ticket, 1, 8) = 'pausing:' "
    "OR substr(current_run_ticket, 1, 15) = 'cancel:pausing:')";
// ?1 id, ?2 the stored ticket, ?3 error JSON, ?4 the paused ticket (NULL: the pause has ended),
// ?5 its until (NULL: none), ?6 the sweep's now. The sweep of an expired run with a pending pause.
inline constexpr std::string_view kSweepIntoPause =
    "UPDATE backstage_backend_tasks__tasks SET current_run_ticket = ?4, "
    "current_run_started_at = CASE WHEN ?4 IS NULL THEN NULL ELSE ?6 END, "
    "current_run_expires_at = ?5, last_run_ended_at = ?6, last_run_error_json = ?3 "
    "WHERE id = ?1 AND current_run_ticket = ?2";
inline constexpr std::string_view kReadForCancel =
    "SELECT settings_json, current_run_ticket FROM backstage_backend_tasks__tasks WHERE id = ?1";

inline constexpr std::string_view kStates =
    "SELECT id, settings_json, next_run_start_at, current_run_ticket, current_run_started_at, "
    "current_run_expires_at, last_run_error_json, last_run_ended_at "
    "FROM backstage_backend_tasks__tasks ORDER BY id";

inline constexpr std::string_view kDelete =
    "DELETE FROM backstage_backend_tasks__tasks WHERE id = ?1";

// Registration (Backstage §4.3): ?1 id, ?2 settings JSON, ?3 the insert start's parameter, ?4 the
// re-registration start's parameter. Returns next_run_start_at, now and the version.
std::string Upsert(NextRunPlan::Kind start, NextRunPlan::Kind reregister);

// End of a run (§4.6): ?1 id, ?2 ticket, ?3 error JSON or NULL, ?4 the plan's parameter, ?5 the
// ticket marked by a cancel, ?6 the error JSON recorded when the marked ticket holds the row.
// Returns (one row if released) next_run_start_at, the version and now.
std::string Release(NextRunPlan::Kind next);

// End of a run whose ticket carries a pending pause (ADR 0013), leaving the row paused: ?1 id,
// ?2 the stored ticket, ?3 error JSON or NULL, ?4 the plan's parameter, ?5 the paused ticket
// (NULL: the pause has ended, the row is left free), ?6 its until (NULL: none). Returns what
// Release returns.
std::string ReleaseIntoPause(NextRunPlan::Kind next);

}  // namespace stagehand::store_internal::sqlite_sql
