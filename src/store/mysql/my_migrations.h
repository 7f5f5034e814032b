// Backstage's knex migrations for the scheduler table, replayed on MySQL and MariaDB with knex's
// bookkeeping and lock protocol and the exact DDL that knex 3's MySQL dialect sends for them, so
// that Backstage and stagehand each see the other's work as done. The MySQL task store calls it
// on the thread that opens the store.
#pragma once

#include <functional>
#include <string_view>

#include "stagehand/base/status.h"
#include "store/mysql/my_connection.h"

namespace stagehand::store_internal {

// One of Backstage's migrations: its file name (as knex records it) and the statements knex sends.
struct MyMigration {
  const char* name;
  const char* ddl;
};

// Backstage's scheduler migrations, in the order knex applies them.
extern const MyMigration kMyMigrations[3];

// Returns the Status for a failed statement of step `operation` (the store's error mapping, which
// names the plugin and the database).
using MyErrorOf = std::function<Status(std::string_view operation, const MyResult& result)>;

// Brings the scheduler table of `connection`'s database to the latest version, as knex's
// migrate.latest() does: creates the knex bookkeeping tables if missing, takes knex's lock row
// (0 -> 1), applies the missing migrations as one new batch (max + 1) and frees the lock. MySQL
// commits each DDL statement at once, so the steps are not one transaction; a named lock
// (GET_LOCK) makes concurrent stagehand migrators wait for each other, and a lock row held by
// another migrator (e.g. Backstage) is retried a few times with a pause on the server between
// attempts. `where` names the plugin and the database in messages. Errors: kFailedPrecondition
// when the bookkeeping lists migrations this version does not know; kUnavailable when the lock
// stays taken; otherwise what `error_of` maps the failed statement to.
Status MigrateMySql(MyConnection& connection, std::string_view where, const MyErrorOf& error_of);

// Runs `body` while holding the named lock `name` of `connection`'s database, for which stagehand
// migrators of that database wait for each other (a minute at most). Errors: kUnavailable when
// the lock stays taken; what `error_of` maps a failed lock statement to; else `body`'s.
Status WithMigrationLock(MyConnection& connection, std::string_view name, std::string_view where,
                         const MyErrorOf& error_of, const std::function<Status()>& body);

}  // namespace stagehand::store_internal
