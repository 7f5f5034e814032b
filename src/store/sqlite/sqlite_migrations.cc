#include "store/sqlite/sqlite_migrations.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "store/sqlite/sqlite_history_sql.h"
#include "store/sqlite/sqlite_sql.h"

namespace stagehand::store_internal {

namespace {

namespace sql = sqlite_sql;

Result<std::int64_t> QueryInt(SqliteDatabase& db, std::string_view statement, std::string_view what,
                              std::optional<std::string_view> param = {}) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db.Prepare(statement));
  if (param) stmt.Bind(1, *param);
  STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step(what));
  if (!row) return db.Error(StatusCode::kFailedPrecondition, fmt::format("{}: no row", what));
  return stmt.Int(0);
}

Status Run(SqliteDatabase& db, std::string_view statement, std::string_view what) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db.Prepare(statement));
  return stmt.Run(what);
}

Status EnsureKnexTables(SqliteDatabase& db) {
  STAGEHAND_ASSIGN_OR_RETURN(
      std::int64_t has_migrations,
      QueryInt(db, sql::kTableExists, "checking the knex tables", sql::kMigrationsTable));
  if (has_migrations == 0) {
    STAGEHAND_RETURN_IF_ERROR(db.Exec(sql::kCreateMigrationsTable));
  }
  STAGEHAND_ASSIGN_OR_RETURN(
      std::int64_t has_lock,
      QueryInt(db, sql::kTableExists, "checking the knex tables", sql::kLockTable));
  if (has_lock == 0) {
    STAGEHAND_RETURN_IF_ERROR(db.Exec(sql::kCreateLockTable));
  }
  STAGEHAND_ASSIGN_OR_RETURN(std::int64_t lock_rows,
                             QueryInt(db, sql::kCountLockRows, "reading the migration lock"));
  if (lock_rows == 0) return Run(db, sql::kInsertLockRow, "creating the migration lock");
  return Status::Ok();
}

Result<std::vector<std::string>> CompletedMigrations(SqliteDatabase& db) {
  STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db.Prepare(sql::kCompletedMigrations));
  std::vector<std::string> names;
  while (true) {
    STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("reading the completed migrations"));
    if (!row) return names;
    names.push_back(stmt.Text(0));
  }
}

// Returns the migrations still to apply, refusing names we do not ship and gaps before a
// completed migration (knex would refuse the first; we cannot replay the second safely).
Result<std::vector<const sql::Migration*>> PendingMigrations(
    SqliteDatabase& db, const std::vector<std::string>& completed) {
  std::vector<std::string> unknown;
  for (const std::string& name : completed) {
    const bool known = std::any_of(sql::kMigrations.begin(), sql::kMigrations.end(),
                                   [&](const sql::Migration& m) { return m.name == name; });
    if (!known) unknown.push_back(name);
  }
  if (!unknown.empty()) {
    return db.Error(
        StatusCode::kFailedPrecondition,
        fmt::format("{} lists migration(s) this version of stagehand does not know: {}; "
                    "the database was migrated by a newer Backstage or stagehand",
                    sql::kMigrationsTable, fmt::join(unknown, ", ")));
  }
  const std::set<std::string, std::less<>> done(completed.begin(), completed.end());
  std::vector<const sql::Migration*> pending;
  for (const sql::Migration& migration : sql::kMigrations) {
    if (!done.contains(migration.name)) {
      pending.push_back(&migration);
    } else if (!pending.empty()) {
      return db.Error(StatusCode::kFailedPrecondition,
                      fmt::format("{} lists migration {} but not the earlier {}",
                                  sql::kMigrationsTable, migration.name, pending.front()->name));
    }
  }
  return pending;
}

// Applies the pending migrations inside the caller's transaction, which holds the knex lock.
Status ApplyPending(SqliteDatabase& db, const Clock& clock) {
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<std::string> completed, CompletedMigrations(db));
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<const sql::Migration*> pending,
                             PendingMigrations(db, completed));
  if (pending.empty()) return Status::Ok();
  STAGEHAND_ASSIGN_OR_RETURN(std::int64_t latest_batch,
                             QueryInt(db, sql::kLatestBatch, "reading the latest batch"));
  const std::int64_t batch = latest_batch + 1;
  for (const sql::Migration* migration : pending) {
    for (std::string_view statement : migration->statements) {
      if (Status status = db.Exec(statement); !status.ok()) {
        return status.WithPrefix(fmt::format("migration {}: ", migration->name));
      }
    }
    const auto now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock.Now().time_since_epoch())
            .count();
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement record, db.Prepare(sql::kRecordMigration));
    record.Bind(1, migration->name).Bind(2, batch).Bind(3, static_cast<std::int64_t>(now_ms));
    STAGEHAND_RETURN_IF_ERROR(record.Run("recording a migration"));
  }
  return Status::Ok();
}

enum class Attempt { kDone, kLockHeld };

Result<Attempt> TryMigrate(SqliteDatabase& db, const Clock& clock) {
  SqliteTransaction transaction(db);
  STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
  STAGEHAND_RETURN_IF_ERROR(EnsureKnexTables(db));
  STAGEHAND_ASSIGN_OR_RETURN(std::int64_t locked,
                             QueryInt(db, sql::kIsLocked, "reading the migration lock"));
  if (locked != 0) return Attempt::kLockHeld;
  STAGEHAND_RETURN_IF_ERROR(Run(db, sql::kTakeLock, "taking the migration lock"));
  if (db.Changes() != 1) return Attempt::kLockHeld;
  STAGEHAND_RETURN_IF_ERROR(ApplyPending(db, clock));
  STAGEHAND_RETURN_IF_ERROR(Run(db, sql::kFreeLock, "freeing the migration lock"));
  STAGEHAND_RETURN_IF_ERROR(transaction.Commit());
  return Attempt::kDone;
}

namespace history_sql = sqlite_history_sql;

Status ApplyHistoryMigrations(SqliteDatabase& db) {
  STAGEHAND_RETURN_IF_ERROR(db.Exec(history_sql::kCreateMigrationsTable));
  std::set<std::string, std::less<>> done;
  {
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement stmt, db.Prepare(history_sql::kListMigrations));
    while (true) {
      STAGEHAND_ASSIGN_OR_RETURN(bool row, stmt.Step("reading stagehand's migrations"));
      if (!row) break;
      done.insert(stmt.Text(0));
    }
  }
  std::vector<std::string> unknown;
  for (const std::string& name : done) {
    const bool known = std::any_of(history_sql::kMigrations.begin(), history_sql::kMigrations.end(),
                                   [&](const history_sql::Migration& m) { return m.name == name; });
    if (!known) unknown.push_back(name);
  }
  if (!unknown.empty()) {
    return db.Error(StatusCode::kFailedPrecondition,
                    fmt::format("stagehand_migrations lists migration(s) this version of stagehand "
                                "does not know: {}; the database was migrated by a newer stagehand",
                                fmt::join(unknown, ", ")));
  }
  for (const history_sql::Migration& migration : history_sql::kMigrations) {
    if (done.contains(migration.name)) continue;
    for (std::string_view statement : migration.statements) {
      if (Status status = db.Exec(statement); !status.ok()) {
        return status.WithPrefix(fmt::format("migration {}: ", migration.name));
      }
    }
    STAGEHAND_ASSIGN_OR_RETURN(SqliteStatement record, db.Prepare(history_sql::kRecordMigration));
    STAGEHAND_RETURN_IF_ERROR(record.Bind(1, migration.name).Run("recording a migration"));
  }
  return Status::Ok();
}

}  // namespace

Status MigrateSqliteHistory(SqliteDatabase& db) {
  SqliteTransaction transaction(db);
  STAGEHAND_RETURN_IF_ERROR(transaction.Begin());
  STAGEHAND_RETURN_IF_ERROR(ApplyHistoryMigrations(db));
  return transaction.Commit();
}

Status MigrateSqlite(SqliteDatabase& db, const Clock& clock) {
  STAGEHAND_ASSIGN_OR_RETURN(Attempt attempt, TryMigrate(db, clock));
  if (attempt == Attempt::kLockHeld) {
    return db.Error(StatusCode::kUnavailable,
                    fmt::format("Migration table is already locked ({}.is_locked = 1); if no "
                                "migration is running, set it back to 0",
                                sql::kLockTable));
  }
  return Status::Ok();
}

}  // namespace stagehand::store_internal
