// Every SQL text the PostgreSQL task store sends (its task table's, its run history's and its task
// registrations'), in one place. Statements that take input bind it
// as parameters; the only identifiers spliced into text (database, schema, LISTEN channel) are
// quoted with PQescapeIdentifier by the caller.
#pragma once

#include <string>
#include <string_view>

#include "store/postgres/pg_connection.h"

namespace stagehand::store_internal::pg_sql {

// A NextRunPlan is bound as three parameters: its kind ('null', 'now', 'now_plus', 'instant',
// 'scheduled_plus'), its seconds (float8) and its instant (timestamptz or NULL).
inline constexpr std::string_view kPlanNull = "null";
inline constexpr std::string_view kPlanNow = "now";
inline constexpr std::string_view kPlanNowPlus = "now_plus";
inline constexpr std::string_view kPlanInstant = "instant";
inline constexpr std::string_view kPlanScheduledPlus = "scheduled_plus";

// The prepared statements of the task table. Each comment lists the parameters and the columns.
struct Statements {
  // $1 id, $2 settings_json, $3..$5 insert plan, $6..$8 re-register plan, $9 channel
  // → next_run_start_at, now(), (notify), version
  PgStatement upsert;
  // $1 ids, $2 settings_json, $3..$5 insert plans, $6..$8 re-register plans (arrays, one element
  // per task), $9 channel → id, next_run_start_at, now(), (notify), version (one row per task, any
  // order)
  PgStatement upsert_many;
  // $1 ids (text[]) → kind ('task' | 'clock'), id, settings_json, next_run_start_at, running,
  //   current_run_expires_at, ready, now(), version
  PgStatement poll;
  // $1 ids (text[]), $2 known versions (int8[], NULL: unknown) → kind ('task' | 'missing' |
  //   'clock'), id, settings_json, next_run_start_at, running, current_run_expires_at, ready,
  //   now(), version; only rows missing, running, due or whose version differs
  PgStatement poll_changed;
  // $1, $2 as poll_changed, $3 timeout error JSON, $4 channel → as poll_changed, plus 'swept'
  PgStatement poll_changed_and_sweep;
  // $1 ids (text[]), $2 timeout error JSON, $3 channel → as `poll`, plus kind 'swept' rows (id)
  PgStatement poll_and_sweep;
  // $1 id, $2 ticket, $3 timeout ms, $4 lease ms → now(), current_run_expires_at (NULL: not
  // claimed)
  PgStatement claim;
  // $1 ids (text[]), $2 tickets (text[]), $3 timeouts ms (float8[]), $4 lease ms, $5 expected
  //   versions (int8[], NULL: none) → id (NULL on the one row carrying only the clock),
  //   current_run_expires_at, now(); one row per claimed task
  PgStatement claim_many;
  // $1 id, $2 ticket, $3 timeout ms, $4 lease ms, $5 the ticket marked by a cancel → now(),
  // whether the marked ticket holds the row (no row: neither form holds it)
  PgStatement renew_lease;
  // $1 id, $2 ticket, $3..$5 next plan, $6 error JSON, $7 channel, $8 event kind, $9 the ticket
  // marked by a cancel, $10 the error JSON recorded when the marked ticket holds the row → now()
  PgStatement release;
  // $1 ids, $2 tickets, $3..$5 next plans, $6 error JSONs, $7 the tickets marked by a cancel
  // (arrays, one element per run), $8 the error JSON recorded where a marked ticket holds the row,
  // $9 channel → id (NULL on the one row carrying only the clock), now(), (notify),
  // next_run_start_at, version; one row per released task
  PgStatement release_many;
  // $1 id, $2 expected version, $3 the next start (timestamptz), $4 channel →
  // next_run_start_at, version, now(), (notify); no row when the task is missing, held or of
  // another version
  PgStatement skip_slot;
  // $1 id, $2 channel → exists, triggered, now(), paused
  PgStatement trigger;
  // $1 id, $2 the pause's ticket, $3 until (NULL: none), $4 channel → exists, paused, now(),
  // until not in the future (ADR 0013)
  PgStatement pause;
  // $1 id, $2 channel → exists, resumed, now()
  PgStatement resume;
  // $1 id, $2 the stored ticket, $3 the ticket replacing it, $4 channel, $5 hold ms (NULL: the
  // expiry is kept, else it comes forward to at most now + hold) → now() (no row: the stored
  // ticket no longer holds the row). A pause of a running task and its resume (ADR 0013).
  PgStatement rewrite_ticket;
  // $1 id, $2 the stored ticket (carrying a pending pause), $3..$5 next plan, $6 error JSON,
  // $7 channel, $8 event kind, $9 the paused ticket (NULL: the pause has ended), $10 its until
  // → now(), (notify), next_run_start_at, version (no row: the ticket no longer holds the row)
  PgStatement release_into_pause;
  // $1 id → settings_json, current_run_ticket, now(), last_run_error_json
  PgStatement read_for_cancel;
  // $1 id, $2 ticket, $3 the marked ticket, $4 hold ms, $5 channel → now() (no row: the ticket
  // no longer holds the row)
  PgStatement mark_cancelled;
  // $1 timeout error JSON, $2 channel → id, now(), NULL (expired pauses are cleared, not listed)
  PgStatement sweep;
  // → id, settings_json, next_run_start_at, current_run_ticket, current_run_started_at,
  //   current_run_expires_at, last_run_error_json, last_run_ended_at, now()
  PgStatement states;
  // $1 id, $2 channel → now() (no row: nothing deleted)
  PgStatement remove;
  // → now()
  PgStatement now;
};

// Returns the statements (built once; thread-safe).
const Statements& TaskStatements();

// The statements that read or write stagehand_task_runs, used only where that table exists. Those
// on the hot path (claim_many, release_many, record_starts) write through the primary key's
// ON CONFLICT alone, with no plan to choose, and stay prepared; the others join or filter the
// table and are planned at every execution, as the table grows from empty (a cached generic plan
// made while it was small would keep scanning it whole). The first five are the task statements of
// the same names, also writing the history; with their extra parameters NULL they write none.
struct HistoryStatements {
  // As claim_many, plus $7 hosts (text[], NULL: no history for that claim), $8 pids (int8[]),
  // $9 triggers (text[]), $10 slots (timestamptz[]), $11 attempts (int4[]), $12 trace ids
  // (text[]), $13 runs kept per task; each claimed row also returns the ring slot its run was
  // recorded in (column 4)
  PgStatement claim_many;
  // As release_many, plus $10 outcomes (text[], NULL: no history for that run), $11 run error
  // JSONs, $12 exit codes, $13 signals, $14 HTTP statuses (int4[]), $15 outputs (hex text[]),
  // $16 hosts, $17 pids (int8[]), $18 triggers, $19 slots, $20 starts (timestamptz[]),
  // $21 attempts (int4[]), $22 trace ids (text[]), $23 runs kept per task: the runs written whole
  PgStatement release_many;
  // As sweep, the swept runs closed as lost
  PgStatement sweep;
  // As poll_and_sweep, the swept runs closed as lost
  PgStatement poll_and_sweep;
  // As poll_changed_and_sweep, the swept runs closed as lost
  PgStatement poll_changed_and_sweep;
  // $1 run ids, $2 task ids, $3 hosts, $4 pids, $5 triggers, $6 slots, $7 starts (NULL: now()),
  // $8 attempts, $9 trace ids (arrays, one element per run), $10 runs kept per task → task_id,
  // slot, run_id of each run recorded
  PgStatement record_starts;
  // $1 task ids, $2 ring slots, $3 run ids, $4 ends (NULL: now()), $5 outcomes, $6 error JSONs,
  // $7 exit codes, $8 signals, $9 HTTP statuses, $10 outputs (hex) → count of runs closed
  PgStatement record_ends;
  // As record_ends without $1 and $2, each run found by its id: a scan of the table
  PgStatement record_ends_by_id;
  // $1 task ids, $2 run ids (one element per run) → run_id of each of those runs the table holds
  PgStatement recorded_runs;
  // $1 task id, $2 limit → the run columns (run_id, task_id, host, pid, trigger_kind, slot_at,
  // started_at, ended_at, outcome, error_json, exit_code, signal, http_status, attempt,
  // trace_id), newest first
  PgStatement list_runs;
  // As list_runs, after $3 start and $4 run id
  PgStatement list_runs_before;
  // $1 run id → the run columns, then the output (hex): a scan of the table
  PgStatement get_run;
  // $1 run id, $2 its task id → started_at
  PgStatement run_start;
  // $1 run ids (text[]), $2 error JSON → (rows changed: runs closed): a scan of the table
  PgStatement mark_lost;
  // $1 max age (seconds), $2 most rows, $3 runs kept per task → (rows changed: runs removed, by
  // age or beyond the ring)
  PgStatement prune_expired;
};

// Returns the history statements (built once; thread-safe).
const HistoryStatements& RunStatements();

// The prepared statements that read or write stagehand_task_registrations, used only where that
// table exists.
struct RegistryStatements {
  // As the task statement upsert_many, plus $10 hosts (text[], NULL: no registration for that task)
  PgStatement upsert_many;
  // $1 task ids (text[]), $2 host → (rows changed: registrations recorded)
  PgStatement refresh;
  // $1 cutoff → id, host, last_seen_at, last_run_ended_at, next_run_start_at of every candidate,
  // by id
  PgStatement prune_candidates;
  // $1 task ids (text[]), $2 cutoff, $3 whether unregistered tasks may go, $4 channel → the
  // deleted ids, by id
  PgStatement prune_tasks;
};

// Returns the registration statements (built once; thread-safe).
const RegistryStatements& RegistrationStatements();

// Session settings applied on connect: $1 statement_timeout (ms, text), $2 search_path ('' keeps
// the default), sequential scans and the JIT off (ADR 0016) → now() in column 4.
extern const char* const kSessionSetup;
// kSessionSetup behind a pooler in transaction mode: TimeZone and DateStyle only → now() in
// column 4.
extern const char* const kPooledSessionSetup;

// $1 database name → one row if the database exists.
// Sets the session's search_path to $1 (a quoted schema), or back to the server's default when
// $1 is empty.
extern const char* const kSetSearchPath;
// The server a session reached: its system identifier (shared by a primary and its streaming
// standbys), whether it is in recovery (a standby), and on a primary the name of its current WAL
// file, whose first eight hex digits are its timeline (a promoted standby starts a new one).
extern const char* const kServerIdentity;
extern const char* const kDatabaseExists;
// Returns the statement creating database `quoted_name`.
std::string CreateDatabase(std::string_view quoted_name);
// Returns the statement creating schema `quoted_name` when missing.
std::string CreateSchema(std::string_view quoted_name);
// Returns the statement subscribing to `quoted_channel`.
std::string Listen(std::string_view quoted_channel);
// Returns the statement unsubscribing from `quoted_channel`.
std::string Unlisten(std::string_view quoted_channel);

// Migration, knex-compatible (see pg_migrations.h for the protocol).
extern const char* const kBegin;
extern const char* const kCommit;
extern const char* const kRollback;
// Serializes stagehand migrators of this schema for the rest of the transaction.
extern const char* const kMigrationAdvisoryLock;
extern const char* const kCreateMigrationsTable;
extern const char* const kCreateMigrationsLockTable;
extern const char* const kInsertLockRowIfMissing;
// → is_locked of the lock row, row-locked for the transaction
extern const char* const kReadMigrationLock;
// → rows changed (1 when the lock was taken)
extern const char* const kTakeMigrationLock;
extern const char* const kFreeMigrationLock;
// → name, in the order applied
extern const char* const kListMigrations;
// → max(batch) or 0
extern const char* const kLatestBatch;
// $1 name, $2 batch
extern const char* const kRecordMigration;
// $1 seconds: waits on the server
extern const char* const kPause;

// One Backstage migration: its knex name (with ".js") and its DDL.
struct Migration {
  const char* name;
  const char* ddl;
};
// Backstage's scheduler migrations, in the order knex applies them.
extern const Migration kMigrations[3];

// stagehand's own migrations (see pg_migrations.h), with bookkeeping knex never reads.
// Serializes stagehand's own migrators of this schema for the rest of the transaction.
extern const char* const kHistoryAdvisoryLock;
extern const char* const kCreateHistoryMigrationsTable;
// → name
extern const char* const kListHistoryMigrations;
// $1 name
extern const char* const kRecordHistoryMigration;
// → whether stagehand_task_runs exists in the search path
extern const char* const kHistoryTableExists;
// → whether stagehand_task_registrations exists in the search path
extern const char* const kRegistrationsTableExists;
// $1 key, $2 fingerprint, $3 retention (ms): records the key as being applied, unless it is kept
// and not expired (→ one row when recorded); removes a few expired keys on the way
extern const char* const kKeepRequestKey;
// $1 key → fingerprint, status, body
extern const char* const kReadRequestKey;
// $1 key, $2 status, $3 body
extern const char* const kAnswerRequestKey;
// In the order they apply.
extern const Migration kHistoryMigrations[6];

}  // namespace stagehand::store_internal::pg_sql
