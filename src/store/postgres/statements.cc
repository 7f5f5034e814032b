#include "store/postgres/statements.h"

#include <fmt/format.h>

#include <initializer_list>
#include <optional>
#include <string_view>

#include "stagehand/store/task_store.h"
#include "store/postgres/statement_parts.h"
#include "store/ticket_sql.h"

namespace stagehand::store_internal::pg_sql {

// The pause statements recognise a pause's ticket with this literal.
static_assert(ticket_sql::kPaused == "paused:");

namespace {

struct Texts {
  std::string upsert =
      fmt::format(R"sql(
INSERT INTO backstage_backend_tasks__tasks AS t (id, next_run_start_at, settings_json)
VALUES ($1::text, {start}, $2::text)
ON CONFLICT (id) DO UPDATE SET
  settings_json = excluded.settings_json,
  next_run_start_at = CASE
    WHEN t.next_run_start_at IS NULL OR {next} < t.next_run_start_at THEN {next}
    ELSE t.next_run_start_at
  END
RETURNING t.next_run_start_at, now(), pg_notify($9::text, 'upsert:' || t.id), {version}
)sql",
                  fmt::arg("start", Plan(3, false)), fmt::arg("next", Plan(6, false)),
                  fmt::arg("version", VersionOf("t")));

  std::string upsert_many = UpsertMany(false);

  std::string poll = fmt::format(R"sql(
SELECT 'task', id, settings_json, next_run_start_at,
       current_run_ticket IS NOT NULL,
       current_run_expires_at,
       coalesce(next_run_start_at <= now() AND current_run_ticket IS NULL, false),
       now(), {version}
FROM backstage_backend_tasks__tasks AS t
WHERE id = ANY ($1::text[])
UNION ALL
SELECT 'clock', NULL, NULL, NULL, NULL, NULL, NULL, now(), NULL
)sql",
                                 fmt::arg("version", VersionOf("t")));

  std::string poll_changed = PollChanged(false, false);
  std::string poll_changed_and_sweep = PollChanged(true, false);

  std::string poll_and_sweep = PollAndSweep(false);

  std::string claim = R"sql(
WITH claimed AS (
  UPDATE backstage_backend_tasks__tasks
  SET current_run_ticket = $2::text,
      current_run_started_at = now(),
      current_run_expires_at = now() + least($3::float8, $4::float8) * interval '1 millisecond'
  WHERE id = $1::text AND current_run_ticket IS NULL AND next_run_start_at <= now()
  RETURNING current_run_expires_at
)
SELECT now(), (SELECT current_run_expires_at FROM claimed)
)sql";

  std::string claim_many = ClaimMany(false);

  std::string renew_lease = R"sql(
UPDATE backstage_backend_tasks__tasks
SET current_run_expires_at = least(current_run_started_at + $3::float8 * interval '1 millisecond',
                                   now() + $4::float8 * interval '1 millisecond')
WHERE id = $1::text AND current_run_ticket IN ($2::text, $5::text)
RETURNING now(), current_run_ticket = $5::text
)sql";

  std::string release = fmt::format(R"sql(
UPDATE backstage_backend_tasks__tasks
SET next_run_start_at = {next},
    current_run_ticket = NULL,
    current_run_started_at = NULL,
    current_run_expires_at = NULL,
    last_run_ended_at = now(),
    last_run_error_json = CASE WHEN current_run_ticket = $9::text THEN $10::text ELSE $6::text END
WHERE id = $1::text AND current_run_ticket IN ($2::text, $9::text)
RETURNING now(), pg_notify($7::text, $8::text || ':' || id)
)sql",
                                    fmt::arg("next", Plan(3, true)));

  std::string release_many = ReleaseMany(false);

  std::string skip_slot = fmt::format(R"sql(
UPDATE backstage_backend_tasks__tasks AS t
SET next_run_start_at = $3::timestamptz
WHERE t.id = $1::text AND t.current_run_ticket IS NULL AND {version} = $2::int8
RETURNING t.next_run_start_at, {version}, now(), pg_notify($4::text, 'release:' || t.id)
)sql",
                                      fmt::arg("version", VersionOf("t")));

  std::string trigger = R"sql(
WITH target AS (
  SELECT id, current_run_ticket FROM backstage_backend_tasks__tasks WHERE id = $1::text
), triggered AS (
  UPDATE backstage_backend_tasks__tasks
  SET next_run_start_at = now()
  WHERE id = $1::text AND current_run_ticket IS NULL
  RETURNING pg_notify($2::text, CASE WHEN $3::text = '' THEN 'trigger:' || id
    ELSE 'traced-trigger:' || octet_length(id) || ':' || id || octet_length($3::text) || ':' ||
         $3::text || octet_length($4::text) || ':' || $4::text END)
)
SELECT (SELECT count(*) FROM target) > 0, (SELECT count(*) FROM triggered) > 0, now(),
       coalesce((SELECT starts_with(current_run_ticket, 'paused:') FROM target), false)
)sql";

  std::string pause = R"sql(
WITH target AS (
  SELECT id FROM backstage_backend_tasks__tasks WHERE id = $1::text
), paused AS (
  UPDATE backstage_backend_tasks__tasks
  SET current_run_ticket = $2::text,
      current_run_started_at = now(),
      current_run_expires_at = $3::timestamptz
  WHERE id = $1::text
    AND (current_run_ticket IS NULL OR starts_with(current_run_ticket, 'paused:'))
    AND ($3::timestamptz IS NULL OR $3::timestamptz > now())
  RETURNING pg_notify($4::text, 'upsert:' || id)
)
SELECT (SELECT count(*) FROM target) > 0, (SELECT count(*) FROM paused) > 0, now(),
       coalesce($3::timestamptz <= now(), false)
)sql";

  std::string resume = R"sql(
WITH target AS (
  SELECT id FROM backstage_backend_tasks__tasks WHERE id = $1::text
), resumed AS (
  UPDATE backstage_backend_tasks__tasks
  SET current_run_ticket = NULL, current_run_started_at = NULL, current_run_expires_at = NULL
  WHERE id = $1::text AND starts_with(current_run_ticket, 'paused:')
  RETURNING pg_notify($2::text, 'release:' || id)
)
SELECT (SELECT count(*) FROM target) > 0, (SELECT count(*) FROM resumed) > 0, now()
)sql";

  std::string rewrite_ticket = R"sql(
UPDATE backstage_backend_tasks__tasks
SET current_run_ticket = $3::text,
    current_run_expires_at = CASE WHEN $5::float8 IS NULL THEN current_run_expires_at
      ELSE least(current_run_expires_at, now() + $5::float8 * interval '1 millisecond') END
WHERE id = $1::text AND current_run_ticket = $2::text
RETURNING now(), pg_notify($4::text, 'upsert:' || id)
)sql";

  std::string release_into_pause =
      fmt::format(R"sql(
UPDATE backstage_backend_tasks__tasks
SET next_run_start_at = {next},
    current_run_ticket = $9::text,
    current_run_started_at = CASE WHEN $9::text IS NULL THEN NULL ELSE now() END,
    current_run_expires_at = $10::timestamptz,
    last_run_ended_at = now(),
    last_run_error_json = $6::text
WHERE id = $1::text AND current_run_ticket = $2::text
RETURNING now(), pg_notify($7::text, $8::text || ':' || id), next_run_start_at, {version}
)sql",
                  fmt::arg("next", Plan(3, true)),
                  fmt::arg("version", VersionOf("backstage_backend_tasks__tasks")));

  std::string read_for_cancel = R"sql(
SELECT settings_json, current_run_ticket, now(), last_run_error_json
FROM backstage_backend_tasks__tasks
WHERE id = $1::text
)sql";

  std::string mark_cancelled = R"sql(
UPDATE backstage_backend_tasks__tasks
SET current_run_ticket = $3::text,
    current_run_expires_at = least(current_run_expires_at,
                                   now() + $4::float8 * interval '1 millisecond')
WHERE id = $1::text AND current_run_ticket = $2::text
RETURNING now(), pg_notify($5::text, 'cancel:' || id)
)sql";

  std::string sweep = Sweep(false);

  std::string states = R"sql(
SELECT id, settings_json, next_run_start_at, current_run_ticket, current_run_started_at,
       current_run_expires_at, last_run_error_json, last_run_ended_at, now()
FROM backstage_backend_tasks__tasks
ORDER BY id COLLATE "C"
)sql";

  std::string remove = R"sql(
DELETE FROM backstage_backend_tasks__tasks
WHERE id = $1::text
RETURNING now(), pg_notify($2::text, 'delete:' || id)
)sql";

  std::string now = "SELECT now()";
};

}  // namespace

const Statements& TaskStatements() {
  static const Texts* const texts = new Texts();
  static const Statements statements{
      .upsert = {0, "stagehand_upsert", texts->upsert.c_str()},
      .upsert_many = {12, "stagehand_upsert_many", texts->upsert_many.c_str()},
      .poll = {1, "stagehand_poll", texts->poll.c_str()},
      .poll_changed = {13, "stagehand_poll_changed", texts->poll_changed.c_str()},
      .poll_changed_and_sweep = {14, "stagehand_poll_changed_and_sweep",
                                 texts->poll_changed_and_sweep.c_str()},
      .poll_and_sweep = {2, "stagehand_poll_and_sweep", texts->poll_and_sweep.c_str()},
      .claim = {3, "stagehand_claim", texts->claim.c_str()},
      .claim_many = {16, "stagehand_claim_many", texts->claim_many.c_str()},
      .renew_lease = {4, "stagehand_renew_lease", texts->renew_lease.c_str()},
      .release = {5, "stagehand_release", texts->release.c_str()},
      .release_many = {17, "stagehand_release_many", texts->release_many.c_str()},
      .skip_slot = {39, "stagehand_skip_slot", texts->skip_slot.c_str()},
      .trigger = {6, "stagehand_trigger", texts->trigger.c_str()},
      .pause = {35, "stagehand_pause", texts->pause.c_str()},
      .resume = {36, "stagehand_resume", texts->resume.c_str()},
      .rewrite_ticket = {37, "stagehand_rewrite_ticket", texts->rewrite_ticket.c_str()},
      .release_into_pause = {38, "stagehand_release_into_pause", texts->release_into_pause.c_str()},
      .read_for_cancel = {7, "stagehand_read_for_cancel", texts->read_for_cancel.c_str()},
      .mark_cancelled = {15, "stagehand_mark_cancelled", texts->mark_cancelled.c_str()},
      .sweep = {8, "stagehand_sweep", texts->sweep.c_str()},
      .states = {9, "stagehand_states", texts->states.c_str()},
      .remove = {10, "stagehand_delete", texts->remove.c_str()},
      .now = {11, "stagehand_now", texts->now.c_str()},
  };
  return statements;
}

const char* const kSessionSetup = R"sql(
SELECT set_config('statement_timeout', $1::text, false),
       set_config('TimeZone', 'UTC', false),
       set_config('DateStyle', 'ISO, YMD', false),
       CASE WHEN $2::text <> '' THEN set_config('search_path', $2::text, false) END,
       now(),
       set_config('enable_seqscan', 'off', false),
       set_config('jit', 'off', false)
)sql";

// kSessionSetup's columns behind a transaction pooler: only what the pooler carries from session
// to session (it tracks TimeZone and DateStyle per client); the parameters are not used.
const char* const kPooledSessionSetup = R"sql(
SELECT $1::text, set_config('TimeZone', 'UTC', false), set_config('DateStyle', 'ISO, YMD', false),
       $2::text, now()
)sql";

const char* const kServerIdentity = R"sql(
SELECT (SELECT system_identifier::text FROM pg_control_system()), pg_is_in_recovery(),
       CASE WHEN NOT pg_is_in_recovery() THEN pg_walfile_name(pg_current_wal_lsn()) END
)sql";

const char* const kSetSearchPath =
    "SELECT CASE WHEN $1::text <> '' THEN set_config('search_path', $1::text, false) "
    "ELSE set_config('search_path', reset_val, false) END FROM pg_settings "
    "WHERE name = 'search_path'";

const char* const kDatabaseExists = "SELECT 1 FROM pg_database WHERE datname = $1::text";

std::string CreateDatabase(std::string_view quoted_name) {
  return fmt::format("CREATE DATABASE {}", quoted_name);
}

std::string CreateSchema(std::string_view quoted_name) {
  return fmt::format("CREATE SCHEMA IF NOT EXISTS {}", quoted_name);
}

std::string Listen(std::string_view quoted_channel) {
  return fmt::format("LISTEN {}", quoted_channel);
}

std::string Unlisten(std::string_view quoted_channel) {
  return fmt::format("UNLISTEN {}", quoted_channel);
}

const char* const kBegin = "BEGIN";
const char* const kCommit = "COMMIT";
const char* const kRollback = "ROLLBACK";

const char* const kMigrationAdvisoryLock = R"sql(
SELECT pg_advisory_xact_lock(
  hashtextextended('stagehand:backstage_backend_tasks__knex_migrations:' || current_schema(), 0))
)sql";

// Knex's own DDL for its bookkeeping tables.
const char* const kCreateMigrationsTable =
    R"sql(create table if not exists "backstage_backend_tasks__knex_migrations" ("id" serial primary key, "name" varchar(255), "batch" integer, "migration_time" timestamptz))sql";

const char* const kCreateMigrationsLockTable =
    R"sql(create table if not exists "backstage_backend_tasks__knex_migrations_lock" ("index" serial primary key, "is_locked" integer))sql";

const char* const kInsertLockRowIfMissing = R"sql(
INSERT INTO backstage_backend_tasks__knex_migrations_lock (is_locked)
SELECT 0 WHERE NOT EXISTS (SELECT FROM backstage_backend_tasks__knex_migrations_lock)
)sql";

const char* const kReadMigrationLock = R"sql(
SELECT is_locked FROM backstage_backend_tasks__knex_migrations_lock ORDER BY "index" FOR UPDATE
)sql";

const char* const kTakeMigrationLock = R"sql(
UPDATE backstage_backend_tasks__knex_migrations_lock SET is_locked = 1 WHERE is_locked = 0
)sql";

const char* const kFreeMigrationLock =
    "UPDATE backstage_backend_tasks__knex_migrations_lock SET is_locked = 0";

const char* const kListMigrations =
    "SELECT name FROM backstage_backend_tasks__knex_migrations ORDER BY id";

const char* const kLatestBatch =
    "SELECT coalesce(max(batch), 0) FROM backstage_backend_tasks__knex_migrations";

const char* const kRecordMigration = R"sql(
INSERT INTO backstage_backend_tasks__knex_migrations (name, batch, migration_time)
VALUES ($1::text, $2::int4, now())
)sql";

const char* const kPause = "SELECT pg_sleep($1::float8)";

// The DDL knex generates for Backstage's migrations/scheduler/*.js on PostgreSQL.
const Migration kMigrations[3] = {
    {"20210928160613_init.js",
     R"sql(create table "backstage_backend_tasks__tasks" ("id" varchar(255) not null, "settings_json" text not null, "next_run_start_at" timestamptz not null, "current_run_ticket" text null, "current_run_started_at" timestamptz null, "current_run_expires_at" timestamptz null, constraint "backstage_backend_tasks__tasks_pkey" primary key ("id"));
comment on table "backstage_backend_tasks__tasks" is 'Tasks used for scheduling work on multiple workers';
comment on column "backstage_backend_tasks__tasks"."id" is 'The unique ID of this particular task';
comment on column "backstage_backend_tasks__tasks"."settings_json" is 'JSON serialized object with properties for this task';
comment on column "backstage_backend_tasks__tasks"."next_run_start_at" is 'The next time that the task should be started';
comment on column "backstage_backend_tasks__tasks"."current_run_ticket" is 'A unique ticket for the current task run';
comment on column "backstage_backend_tasks__tasks"."current_run_started_at" is 'The time that the current task run started';
comment on column "backstage_backend_tasks__tasks"."current_run_expires_at" is 'The time that the current task run will time out')sql"},
    {"20240712211735_nullable_next_run.js",
     R"sql(alter table "backstage_backend_tasks__tasks" alter column "next_run_start_at" drop not null)sql"},
    {"20250411000000_last_run.js",
     R"sql(alter table "backstage_backend_tasks__tasks" add column "last_run_error_json" text null, add column "last_run_ended_at" timestamptz null;
comment on column "backstage_backend_tasks__tasks"."last_run_error_json" is 'JSON serialized error object from the last task run, if it failed';
comment on column "backstage_backend_tasks__tasks"."last_run_ended_at" is 'The last time that the task ended')sql"},
};

const char* const kHistoryAdvisoryLock = R"sql(
SELECT pg_advisory_xact_lock(hashtextextended('stagehand:stagehand_migrations:' || current_schema(), 0))
)sql";

const char* const kCreateHistoryMigrationsTable = R"sql(
CREATE TABLE IF NOT EXISTS stagehand_migrations (
  name varchar(255) NOT NULL,
  migrated_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT stagehand_migrations_pkey PRIMARY KEY (name)
)
)sql";

const char* const kListHistoryMigrations = "SELECT name FROM stagehand_migrations ORDER BY name";

const char* const kRecordHistoryMigration =
    "INSERT INTO stagehand_migrations (name) VALUES ($1::text)";

const char* const kHistoryTableExists = "SELECT to_regclass('stagehand_task_runs') IS NOT NULL";

const char* const kKeepRequestKey = R"sql(
WITH expired AS (
  SELECT request_key FROM stagehand_request_keys
  WHERE expires_at < now()
  ORDER BY expires_at
  LIMIT 16
  FOR UPDATE SKIP LOCKED
), removed AS (
  DELETE FROM stagehand_request_keys AS k USING expired AS e
  WHERE k.request_key = e.request_key AND k.request_key <> $1::text
)
INSERT INTO stagehand_request_keys AS k
  (request_key, fingerprint, status, body, created_at, expires_at)
VALUES ($1::text, $2::text, 0, '', now(), now() + $3::float8 * interval '1 millisecond')
ON CONFLICT (request_key) DO UPDATE
SET fingerprint = excluded.fingerprint, status = 0, body = '', created_at = excluded.created_at,
    expires_at = excluded.expires_at
WHERE k.expires_at <= now()
RETURNING 1
)sql";

const char* const kReadRequestKey = R"sql(
SELECT fingerprint, status, body FROM stagehand_request_keys WHERE request_key = $1::text
)sql";

const char* const kAnswerRequestKey = R"sql(
UPDATE stagehand_request_keys SET status = $2::int4, body = $3::text WHERE request_key = $1::text
)sql";

const char* const kRegistrationsTableExists =
    "SELECT to_regclass('stagehand_task_registrations') IS NOT NULL";

// run_id is compared in the "C" collation, so pages are ordered by its bytes on every server. Since
// 0004 the table holds a ring of rows per task (ADR 0011): its only index is the primary key
// (task_id, slot), so that no write of a run changes an indexed column once its task's ring is
// full, and pages keep free space, so that every write of a run is a heap-only update.
const Migration kHistoryMigrations[6] = {
    {"0001_task_runs",
     R"sql(CREATE TABLE stagehand_task_runs (
  run_id text COLLATE "C" NOT NULL,
  task_id varchar(255) NOT NULL,
  seq int8 NOT NULL,
  host text NOT NULL,
  pid int8 NOT NULL,
  trigger_kind text NOT NULL,
  slot_at timestamptz NULL,
  started_at timestamptz NOT NULL,
  ended_at timestamptz NULL,
  outcome text NOT NULL,
  error_json text NULL,
  exit_code int4 NULL,
  signal int4 NULL,
  http_status int4 NULL,
  attempt int4 NOT NULL,
  output bytea NULL,
  CONSTRAINT stagehand_task_runs_pkey PRIMARY KEY (run_id)
) WITH (fillfactor = 80);
CREATE INDEX stagehand_task_runs_by_task ON stagehand_task_runs (task_id, started_at, run_id);
CREATE INDEX stagehand_task_runs_by_seq ON stagehand_task_runs (task_id, seq);
CREATE INDEX stagehand_task_runs_by_start ON stagehand_task_runs (started_at);
COMMENT ON TABLE stagehand_task_runs IS 'stagehand''s run history: one row per run of a task by a stagehand host (Backstage workers write none)')sql"},
    // One row per task, no foreign key to Backstage's table (whose rows Backstage's own tools may
    // delete); only the primary key: a refresh finds its rows by it, and a prune reads them all.
    {"0002_task_registrations",
     R"sql(CREATE TABLE stagehand_task_registrations (
  task_id varchar(255) NOT NULL,
  host text NOT NULL,
  last_seen_at timestamptz NOT NULL,
  CONSTRAINT stagehand_task_registrations_pkey PRIMARY KEY (task_id)
);
COMMENT ON TABLE stagehand_task_registrations IS 'stagehand''s task registrations: the stagehand host that registered each task last, and when a host last refreshed it (Backstage workers write none)')sql"},
    // A run's writes touch two indexes instead of four: the trim counts runs by their start through
    // by_task, and the age prune finds old runs through a BRIN index (next to nothing to keep up as
    // rows are appended). seq is no longer read (SeqOf).
    {"0003_task_runs_two_indexes",
     R"sql(DROP INDEX stagehand_task_runs_by_seq;
DROP INDEX stagehand_task_runs_by_start;
CREATE INDEX stagehand_task_runs_by_start ON stagehand_task_runs USING brin (started_at))sql"},
    // Each task's runs become a ring of rows, numbered by a count per task: a run takes the row of
    // the run recorded max_runs_per_task runs before it, so retention deletes nothing and no write
    // touches an index. The runs already recorded keep their order (slot 0 the oldest); the rows
    // beyond a host's max_runs_per_task go with the age prune (PruneExpired).
    {"0004_task_run_rings",
     R"sql(ALTER TABLE stagehand_task_runs DROP CONSTRAINT stagehand_task_runs_pkey;
DROP INDEX stagehand_task_runs_by_task;
DROP INDEX stagehand_task_runs_by_start;
ALTER TABLE stagehand_task_runs ADD COLUMN slot int4;
UPDATE stagehand_task_runs AS r SET slot = n.slot, seq = n.slot + 1
FROM (SELECT run_id,
             (row_number() OVER (PARTITION BY task_id ORDER BY started_at, run_id) - 1)::int4 AS slot
      FROM stagehand_task_runs) AS n
WHERE r.run_id = n.run_id;
ALTER TABLE stagehand_task_runs ALTER COLUMN slot SET NOT NULL, SET (fillfactor = 70);
ALTER TABLE stagehand_task_runs ADD CONSTRAINT stagehand_task_runs_pkey PRIMARY KEY (task_id, slot);
CREATE TABLE stagehand_task_run_counts (
  task_id varchar(255) NOT NULL,
  runs int8 NOT NULL,
  CONSTRAINT stagehand_task_run_counts_pkey PRIMARY KEY (task_id)
) WITH (fillfactor = 50);
INSERT INTO stagehand_task_run_counts (task_id, runs)
SELECT task_id, count(*) FROM stagehand_task_runs GROUP BY task_id;
COMMENT ON TABLE stagehand_task_runs IS 'stagehand''s run history: a ring of rows per task holding the newest runs that stagehand hosts recorded (Backstage workers write none)';
COMMENT ON TABLE stagehand_task_run_counts IS 'stagehand''s run history: how many runs of each task stagehand hosts have recorded (the ring slot of the next is that count modulo the runs kept)')sql"},
    // A run's trace id (32 lowercase hex digits), NULL when its trace was not sampled. A nullable
    // column without a default: the table is not rewritten.
    {"0005_run_trace_id", "ALTER TABLE stagehand_task_runs ADD COLUMN trace_id text NULL"},
    // Idempotency keys (RequestKeys): the answer to each keyed request, kept until expires_at;
    // status 0 while the request is being applied, in the transaction that applies it.
    {"0006_request_keys",
     R"sql(CREATE TABLE stagehand_request_keys (
  request_key text COLLATE "C" NOT NULL,
  fingerprint text NOT NULL,
  status int4 NOT NULL,
  body text NOT NULL,
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  CONSTRAINT stagehand_request_keys_pkey PRIMARY KEY (request_key)
);
CREATE INDEX stagehand_request_keys_by_expiry ON stagehand_request_keys (expires_at);
COMMENT ON TABLE stagehand_request_keys IS 'stagehand''s idempotency keys: the answer to each REST request sent with an Idempotency-Key header, kept for a retention (Backstage workers write none)')sql"},
};

}  // namespace stagehand::store_internal::pg_sql
