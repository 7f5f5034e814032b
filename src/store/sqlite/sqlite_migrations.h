// Backstage's knex migrations for the scheduler tables, replayed on SQLite with knex's bookkeeping
// and lock protocol, so that Backstage and stagehand each see the other's work as done; and
// stagehand's own migrations (the run history), with bookkeeping of their own that knex never
// reads.
#pragma once

#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"
#include "store/sqlite/sqlite_database.h"

namespace stagehand::store_internal {

// Brings `db` to the latest schema in one write transaction (BEGIN IMMEDIATE, so concurrent
// migrators queue on SQLite's write lock): creates the knex tables if missing, takes knex's lock,
// applies the missing migrations in order as one new batch stamped with `clock`'s wall time, and
// frees the lock. Like knex, fails at once if another migrator left the lock taken (knex on
// SQLite holds it only inside its own transaction, so a committed lock means a crashed
// non-transactional run). Errors: kFailedPrecondition naming unknown or out-of-order migrations;
// kUnavailable if the database fails or the lock is held.
Status MigrateSqlite(SqliteDatabase& db, const Clock& clock);

// Brings stagehand's own tables to the latest version in one write transaction (BEGIN IMMEDIATE:
// concurrent migrators queue on SQLite's write lock, and a crashed one leaves no lock behind):
// creates stagehand_migrations if missing, applies the migrations it does not list, in order, and
// records each. Touches no knex table. Errors: kFailedPrecondition naming migrations this version
// does not know; kUnavailable if the database fails or stays locked past the busy timeout.
Status MigrateSqliteHistory(SqliteDatabase& db);

}  // namespace stagehand::store_internal
