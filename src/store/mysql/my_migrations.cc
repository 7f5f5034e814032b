#include "store/mysql/my_migrations.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>
#include <vector>

namespace stagehand::store_internal {

// The DDL knex 3's MySQL dialect sends for Backstage's migrations/scheduler/*.js: lowercase
// keywords, backticks, the primary key inside the create table, the table comment after it.
// setNullable() re-declares the column with MODIFY (two spaces and a trailing one, as knex writes
// it), which drops the column's comment.
const MyMigration kMyMigrations[3] = {
    {"20210928160613_init.js",
     "create table `backstage_backend_tasks__tasks` (`id` varchar(255) not null comment 'The "
     "unique ID of this particular task', `settings_json` text not null comment 'JSON serialized "
     "object with properties for this task', `next_run_start_at` datetime not null comment 'The "
     "next time that the task should be started', `current_run_ticket` text null comment 'A "
     "unique ticket for the current task run', `current_run_started_at` datetime null comment "
     "'The time that the current task run started', `current_run_expires_at` datetime null "
     "comment 'The time that the current task run will time out', primary key (`id`)) comment = "
     "'Tasks used for scheduling work on multiple workers'"},
    {"20240712211735_nullable_next_run.js",
     "alter table `backstage_backend_tasks__tasks` modify  `next_run_start_at` datetime null "},
    {"20250411000000_last_run.js",
     "alter table `backstage_backend_tasks__tasks` add `last_run_error_json` longtext null "
     "comment 'JSON serialized error object from the last task run, if it failed', add "
     "`last_run_ended_at` datetime null comment 'The last time that the task ended'"},
};

namespace {

constexpr char kCreateMigrationsTable[] =
    "create table if not exists `backstage_backend_tasks__knex_migrations` (`id` int unsigned "
    "not null auto_increment primary key, `name` varchar(255), `batch` int, `migration_time` "
    "timestamp)";
constexpr char kCreateLockTable[] =
    "create table if not exists `backstage_backend_tasks__knex_migrations_lock` (`index` int "
    "unsigned not null auto_increment primary key, `is_locked` int)";
constexpr char kInsertLockRowIfMissing[] =
    "insert into `backstage_backend_tasks__knex_migrations_lock` (`is_locked`) select 0 from dual "
    "where not exists (select 1 from `backstage_backend_tasks__knex_migrations_lock`)";
constexpr char kTakeLock[] =
    "update `backstage_backend_tasks__knex_migrations_lock` set `is_locked` = 1 where "
    "`is_locked` = 0";
constexpr char kFreeLock[] =
    "update `backstage_backend_tasks__knex_migrations_lock` set `is_locked` = 0";
constexpr char kListMigrations[] =
    "select `name` from `backstage_backend_tasks__knex_migrations` order by `id`";
constexpr char kLatestBatch[] =
    "select coalesce(max(`batch`), 0) from `backstage_backend_tasks__knex_migrations`";
constexpr char kRecordMigration[] =
    "insert into `backstage_backend_tasks__knex_migrations` (`batch`, `migration_time`, `name`) "
    "values (?, current_timestamp, ?)";
// Stagehand migrators of one database wait for each other on a named lock of that database (named
// by a digest: lock names are at most 64 characters, database names up to 64 too).
constexpr char kTakeNamedLock[] =
    "select get_lock(concat('stagehand.', ?, '.', sha1(database())), ?)";
constexpr char kFreeNamedLock[] =
    "select release_lock(concat('stagehand.', ?, '.', sha1(database())))";
constexpr char kPause[] = "select sleep(?)";

// How long a stagehand migrator waits for another one, and how often (and how long apart) it
// tries knex's lock row while another migrator (e.g. Backstage's) holds it.
constexpr long long kNamedLockSeconds = 60;
constexpr int kLockRowAttempts = 20;
constexpr double kLockRowPauseSeconds = 0.25;

// One attempt at the migration while holding the named lock. Sets `lock_busy` when knex's lock row
// was already taken (the caller retries).
Status MigrateOnce(MyConnection& connection, std::string_view where, const MyErrorOf& error_of,
                   bool& lock_busy) {
  const auto fail = [&](std::string_view step, const MyResult& result) {
    return error_of(fmt::format("migration ({})", step), result);
  };
  if (MyResult r = connection.Execute(kCreateMigrationsTable); !r.ok()) {
    return fail("create migrations table", r);
  }
  if (MyResult r = connection.Execute(kCreateLockTable); !r.ok()) {
    return fail("create lock table", r);
  }
  if (MyResult r = connection.Execute(kInsertLockRowIfMissing); !r.ok()) {
    return fail("lock row", r);
  }
  MyResult taken = connection.Execute(kTakeLock);
  if (!taken.ok()) return fail("take lock", taken);
  if (taken.affected() < 1) {
    lock_busy = true;
    return Status::Ok();
  }
  const auto free_lock = [&] { connection.Execute(kFreeLock); };

  MyResult listed = connection.Execute(kListMigrations);
  if (!listed.ok()) {
    free_lock();
    return fail("list migrations", listed);
  }
  std::vector<std::string> applied;
  std::vector<std::string> unknown;
  for (int row = 0; row < listed.rows(); ++row) {
    std::string name = listed.GetOptional(row, 0).value_or("");
    const bool known = std::any_of(std::begin(kMyMigrations), std::end(kMyMigrations),
                                   [&](const MyMigration& m) { return name == m.name; });
    (known ? applied : unknown).push_back(std::move(name));
  }
  if (!unknown.empty()) {
    free_lock();
    return FailedPreconditionError(fmt::format(
        "{}: backstage_backend_tasks__knex_migrations lists migrations this version does not "
        "know: {} (the database was migrated by a newer Backstage or stagehand)",
        where, fmt::join(unknown, ", ")));
  }
  MyResult latest = connection.Execute(kLatestBatch);
  if (!latest.ok()) {
    free_lock();
    return fail("latest batch", latest);
  }
  const long long batch = latest.GetInt(0, 0) + 1;
  for (const MyMigration& migration : kMyMigrations) {
    if (std::find(applied.begin(), applied.end(), migration.name) != applied.end()) continue;
    MyResult applied_now = connection.Execute(migration.ddl);
    if (applied_now.ok()) {
      applied_now = connection.Execute(kRecordMigration, MyParams().Add(batch).Add(migration.name));
    }
    if (!applied_now.ok()) {
      free_lock();
      return fail(migration.name, applied_now);
    }
  }
  if (MyResult r = connection.Execute(kFreeLock); !r.ok()) return fail("free lock", r);
  return Status::Ok();
}

}  // namespace

Status WithMigrationLock(MyConnection& connection, std::string_view name, std::string_view where,
                         const MyErrorOf& error_of, const std::function<Status()>& body) {
  MyResult named = connection.Execute(kTakeNamedLock, MyParams().Add(name).Add(kNamedLockSeconds));
  if (!named.ok()) return error_of("migration (named lock)", named);
  if (named.rows() != 1 || named.GetInt(0, 0) != 1) {
    return UnavailableError(fmt::format(
        "{}: migration failed: another stagehand host kept migrating this database for over {} s",
        where, kNamedLockSeconds));
  }
  Status status = body();
  connection.Execute(kFreeNamedLock, MyParams().Add(name));
  return status;
}

Status MigrateMySql(MyConnection& connection, std::string_view where, const MyErrorOf& error_of) {
  return WithMigrationLock(connection, "knex", where, error_of, [&]() -> Status {
    for (int attempt = 1;; ++attempt) {
      bool lock_busy = false;
      Status status = MigrateOnce(connection, where, error_of, lock_busy);
      if (!lock_busy) return status;
      if (attempt == kLockRowAttempts) {
        return UnavailableError(fmt::format(
            "{}: migration failed: backstage_backend_tasks__knex_migrations_lock stays locked by "
            "another migrator (is_locked = 1; if no migrator runs, one was interrupted: set it to "
            "0)",
            where));
      }
      if (MyResult r = connection.Execute(kPause, MyParams().Add(kLockRowPauseSeconds)); !r.ok()) {
        return error_of("migration (wait for lock)", r);
      }
    }
  });
}

}  // namespace stagehand::store_internal
