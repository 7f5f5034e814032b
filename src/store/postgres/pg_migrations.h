// Backstage's knex migrations for the scheduler tables, replayed on PostgreSQL with knex's
// bookkeeping and lock protocol, so that Backstage and stagehand each see the other's work as done;
// and stagehand's own migrations (the run history), with bookkeeping of their own.
// The SQL texts live in statements.h; this file holds the protocol. PostgresTaskStore::Migrate
// calls it on the thread that opens the store, with a session borrowed from the store's pool.
#pragma once

#include <functional>
#include <string_view>

#include "stagehand/base/status.h"
#include "store/postgres/pg_connection.h"

namespace stagehand::store_internal {

// Returns the Status for a failed statement of step `operation` (the store's error mapping, which
// names the plugin and the database).
using PgErrorOf = std::function<Status(std::string_view operation, const PgResult& result)>;

// Brings the schema of `connection`'s search_path to the latest version, as knex's
// migrate.latest() does, in one transaction: creates the knex bookkeeping tables if missing,
// takes knex's lock row (0 -> 1), applies the missing migrations as one new batch (max + 1) and
// frees the lock. A transaction-scoped advisory lock makes concurrent stagehand migrators wait for
// each other; a lock row held by another migrator (e.g. Backstage) is retried a few times, with a
// pause on the server between attempts. `where` names the plugin and the database in messages.
// Errors: kFailedPrecondition when the bookkeeping lists migrations this version does not know;
// kUnavailable when the lock row stays taken; otherwise what `error_of` maps the failed statement
// to.
Status MigratePostgres(PgConnection& connection, std::string_view where, const PgErrorOf& error_of);

// Brings stagehand's own tables in the schema of `connection`'s search_path (the run history) to
// the latest version in one transaction: a transaction-scoped advisory lock of their own makes
// concurrent migrators wait for each other (and a crashed one leaves no lock behind), then
// stagehand_migrations is created if missing and the migrations it does not list are applied and
// recorded. Never reads or writes knex's tables. Errors: kFailedPrecondition when
// stagehand_migrations lists migrations this version does not know; otherwise what `error_of`
// maps the failed statement to.
Status MigratePostgresHistory(PgConnection& connection, std::string_view where,
                              const PgErrorOf& error_of);

}  // namespace stagehand::store_internal
