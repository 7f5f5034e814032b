#include "store/postgres/pg_migrations.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>
#include <vector>

#include "store/postgres/statements.h"

namespace stagehand::store_internal {

namespace {

namespace sql = pg_sql;

// Migration lock attempts while another migrator holds knex's lock row, and the pause between them.
constexpr int kMigrationLockAttempts = 20;
constexpr std::chrono::milliseconds kMigrationLockPause{250};

// One attempt at the whole migration in one transaction. Reproduces knex's migrate.latest():
// bookkeeping tables, lock row 0 -> 1, the missing migrations recorded with batch = max + 1, lock
// row back to 0. The advisory lock makes concurrent stagehand migrators wait for each other
// instead of failing. Sets `lock_busy` when knex's lock row was already taken (the caller
// retries).
Status MigrateOnce(PgConnection& connection, std::string_view where, const PgErrorOf& error_of,
                   bool& lock_busy) {
  const auto fail = [&](std::string_view step, const PgResult& result) {
    if (!result.connection_lost()) connection.ExecuteScript(sql::kRollback);
    return error_of(fmt::format("migration ({})", step), result);
  };
  const auto script = [&](const char* text) { return connection.ExecuteScript(text); };

  if (PgResult r = script(sql::kBegin); !r.ok()) return fail("begin", r);
  if (PgResult r = script(sql::kMigrationAdvisoryLock); !r.ok()) return fail("advisory lock", r);
  if (PgResult r = script(sql::kCreateMigrationsTable); !r.ok()) {
    return fail("create migrations table", r);
  }
  if (PgResult r = script(sql::kCreateMigrationsLockTable); !r.ok()) {
    return fail("create lock table", r);
  }
  if (PgResult r = script(sql::kInsertLockRowIfMissing); !r.ok()) return fail("lock row", r);

  PgResult locked = script(sql::kReadMigrationLock);
  if (!locked.ok()) return fail("read lock", locked);
  if (locked.rows() > 0 && locked.GetInt(0, 0) != 0) {
    connection.ExecuteScript(sql::kRollback);
    lock_busy = true;
    return Status::Ok();
  }
  PgResult taken = script(sql::kTakeMigrationLock);
  if (!taken.ok()) return fail("take lock", taken);
  if (taken.affected() < 1) {
    connection.ExecuteScript(sql::kRollback);
    lock_busy = true;
    return Status::Ok();
  }

  PgResult listed = script(sql::kListMigrations);
  if (!listed.ok()) return fail("list migrations", listed);
  std::vector<std::string> applied;
  std::vector<std::string> unknown;
  for (int row = 0; row < listed.rows(); ++row) {
    std::string name = listed.GetOptional(row, 0).value_or("");
    const bool known = std::any_of(std::begin(sql::kMigrations), std::end(sql::kMigrations),
                                   [&](const sql::Migration& m) { return name == m.name; });
    (known ? applied : unknown).push_back(std::move(name));
  }
  if (!unknown.empty()) {
    connection.ExecuteScript(sql::kRollback);
    return FailedPreconditionError(fmt::format(
        "{}: backstage_backend_tasks__knex_migrations lists migrations this version does not "
        "know: {} (the database was migrated by a newer Backstage or stagehand)",
        where, fmt::join(unknown, ", ")));
  }

  PgResult latest = script(sql::kLatestBatch);
  if (!latest.ok()) return fail("latest batch", latest);
  const long long batch = latest.GetInt(0, 0) + 1;
  for (const sql::Migration& migration : sql::kMigrations) {
    if (std::find(applied.begin(), applied.end(), migration.name) != applied.end()) continue;
    if (PgResult r = script(migration.ddl); !r.ok()) return fail(migration.name, r);
    PgParams record;
    record.Add(migration.name).Add(batch);
    if (PgResult r = connection.ExecuteText(sql::kRecordMigration, record); !r.ok()) {
      return fail(migration.name, r);
    }
  }

  if (PgResult r = script(sql::kFreeMigrationLock); !r.ok()) return fail("free lock", r);
  if (PgResult r = script(sql::kCommit); !r.ok()) return fail("commit", r);
  return Status::Ok();
}

}  // namespace

Status MigratePostgresHistory(PgConnection& connection, std::string_view where,
                              const PgErrorOf& error_of) {
  const auto fail = [&](std::string_view step, const PgResult& result) {
    if (!result.connection_lost()) connection.ExecuteScript(sql::kRollback);
    return error_of(fmt::format("stagehand migration ({})", step), result);
  };
  const auto script = [&](const char* text) { return connection.ExecuteScript(text); };

  if (PgResult r = script(sql::kBegin); !r.ok()) return fail("begin", r);
  if (PgResult r = script(sql::kHistoryAdvisoryLock); !r.ok()) return fail("advisory lock", r);
  if (PgResult r = script(sql::kCreateHistoryMigrationsTable); !r.ok()) {
    return fail("create migrations table", r);
  }
  PgResult listed = script(sql::kListHistoryMigrations);
  if (!listed.ok()) return fail("list migrations", listed);
  std::vector<std::string> applied;
  std::vector<std::string> unknown;
  for (int row = 0; row < listed.rows(); ++row) {
    std::string name(listed.Get(row, 0));
    const bool known =
        std::any_of(std::begin(sql::kHistoryMigrations), std::end(sql::kHistoryMigrations),
                    [&](const sql::Migration& m) { return name == m.name; });
    (known ? applied : unknown).push_back(std::move(name));
  }
  if (!unknown.empty()) {
    connection.ExecuteScript(sql::kRollback);
    return FailedPreconditionError(
        fmt::format("{}: stagehand_migrations lists migrations this version does not know: {} "
                    "(the database was migrated by a newer stagehand)",
                    where, fmt::join(unknown, ", ")));
  }
  for (const sql::Migration& migration : sql::kHistoryMigrations) {
    if (std::find(applied.begin(), applied.end(), migration.name) != applied.end()) continue;
    if (PgResult r = script(migration.ddl); !r.ok()) return fail(migration.name, r);
    PgParams record;
    record.Add(migration.name);
    if (PgResult r = connection.ExecuteText(sql::kRecordHistoryMigration, record); !r.ok()) {
      return fail(migration.name, r);
    }
  }
  if (PgResult r = script(sql::kCommit); !r.ok()) return fail("commit", r);
  return Status::Ok();
}

Status MigratePostgres(PgConnection& connection, std::string_view where,
                       const PgErrorOf& error_of) {
  for (int attempt = 1;; ++attempt) {
    bool lock_busy = false;
    Status status = MigrateOnce(connection, where, error_of, lock_busy);
    if (!lock_busy) return status;
    if (attempt == kMigrationLockAttempts) {
      return UnavailableError(fmt::format(
          "{}: migration failed: backstage_backend_tasks__knex_migrations_lock stays locked by "
          "another migrator (is_locked = 1)",
          where));
    }
    // The store holds only a const Clock, so the pause happens on the server.
    PgParams pause;
    pause.Add(std::chrono::duration<double>(kMigrationLockPause).count());
    if (PgResult r = connection.ExecuteText(sql::kPause, pause); !r.ok()) {
      return error_of("migration (wait for lock)", r);
    }
  }
}

}  // namespace stagehand::store_internal
