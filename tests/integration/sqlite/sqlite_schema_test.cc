// Schema and migration compatibility with Backstage's knex migrations on SQLite (spec §3.2, §3.3).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "fixtures/task_schedules.h"
#include "integration/trace_id_migration.h"
#include "sqlite_test_util.h"
#include "stagehand/store/sqlite_task_store.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using sqlite_test::RawDb;
using sqlite_test::SchemaDump;
using sqlite_test::StagehandSchemaDump;
using sqlite_test::TempDir;
using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using Rows = std::vector<std::vector<std::string>>;

constexpr char kInit[] = "20210928160613_init.js";
constexpr char kNullableNextRun[] = "20240712211735_nullable_next_run.js";
constexpr char kLastRun[] = "20250411000000_last_run.js";

// The statements knex runs on SQLite, written out here independently of the store.
constexpr char kKnexMigrationsTable[] =
    "create table `backstage_backend_tasks__knex_migrations` (`id` integer not null primary key "
    "autoincrement, `name` varchar(255), `batch` integer, `migration_time` datetime);"
    "create table `backstage_backend_tasks__knex_migrations_lock` (`index` integer not null "
    "primary key autoincrement, `is_locked` integer);"
    "insert into `backstage_backend_tasks__knex_migrations_lock` (`is_locked`) values (0);";
constexpr char kKnexInitTable[] =
    "create table `backstage_backend_tasks__tasks` (`id` varchar(255) not null, `settings_json` "
    "text not null, `next_run_start_at` datetime not null, `current_run_ticket` text null, "
    "`current_run_started_at` datetime null, `current_run_expires_at` datetime null, "
    "primary key (`id`))";
// Spec §3.3, "SQLite final".
constexpr char kFinalTasksTable[] =
    "CREATE TABLE \"backstage_backend_tasks__tasks\" (`id` varchar(255) NOT NULL, `settings_json` "
    "text NOT NULL, `next_run_start_at` datetime, `current_run_ticket` text NULL, "
    "`current_run_started_at` datetime NULL, `current_run_expires_at` datetime NULL, "
    "`last_run_error_json` text null, `last_run_ended_at` datetime null, PRIMARY KEY (`id`))";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::unique_ptr<TaskStore> Open(const std::string& path, const std::string& plugin = "sched") {
  Result<std::unique_ptr<TaskStore>> store =
      OpenSqliteTaskStore(plugin, SqliteStoreOptions{path}, SystemClock::Instance());
  EXPECT_THAT(store, IsOk());
  return store.ok() ? std::move(*store) : nullptr;
}

Rows MigrationRows(RawDb& db) {
  return db.Query(
      "SELECT id, name, batch FROM backstage_backend_tasks__knex_migrations ORDER BY id");
}

// Every row of knex's two bookkeeping tables, as text.
Rows KnexBookkeeping(RawDb& db) {
  Rows rows = db.Query(
      "SELECT id, name, batch, migration_time, typeof(migration_time) "
      "FROM backstage_backend_tasks__knex_migrations ORDER BY id");
  for (std::vector<std::string>& lock :
       db.Query("SELECT `index`, is_locked FROM backstage_backend_tasks__knex_migrations_lock "
                "ORDER BY `index`")) {
    rows.push_back(std::move(lock));
  }
  return rows;
}

// Returns whether stagehand's history table exists.
bool HasRunsTable(RawDb& db) {
  return db.Query("SELECT count(*) FROM sqlite_master WHERE name = 'stagehand_task_runs'") ==
         Rows{{"1"}};
}

Rows StagehandMigrationNames(RawDb& db) {
  return db.Query("SELECT name FROM stagehand_migrations ORDER BY name");
}

// stagehand's own migrations, as stagehand_migrations lists them.
const Rows kStagehandMigrations = {
    {"0001_task_runs"}, {"0002_task_registrations"}, {"0003_run_trace_id"}, {"0004_request_keys"}};

TaskSchedule TenMinutes() {
  TaskSchedule schedule;
  schedule.settings.cadence = testing::ParsedCadence("PT10M");
  schedule.settings.timeout_after_duration = "PT1M";
  return schedule;
}

TEST(SqliteSchemaTest, MigratedDatabaseMatchesTheCheckedInDump) {
  TempDir dir;
  const std::string path = dir.File("sched.sqlite");
  std::unique_ptr<TaskStore> store = Open(path);
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Migrate(), IsOk());
  RawDb db(path);
  EXPECT_EQ(SchemaDump(db),
            ReadFile(STAGEHAND_SOURCE_DIR "/tests/integration/sqlite/fixtures/schema.txt"));
  EXPECT_EQ(db.Query("SELECT sql FROM sqlite_master WHERE name = 'backstage_backend_tasks__tasks'"),
            (Rows{{kFinalTasksTable}}));
  EXPECT_EQ(
      StagehandSchemaDump(db),
      ReadFile(STAGEHAND_SOURCE_DIR "/tests/integration/sqlite/fixtures/stagehand_schema.txt"));
}

TEST(SqliteSchemaTest, FreshDatabaseRecordsAllMigrationsAsBatchOneLikeKnex) {
  TempDir dir;
  const std::string path = dir.File("sched.sqlite");
  const auto before = std::chrono::system_clock::now();
  ASSERT_THAT(Open(path)->Migrate(), IsOk());
  const auto after = std::chrono::system_clock::now();
  RawDb db(path);
  EXPECT_EQ(MigrationRows(db),
            (Rows{{"1", kInit, "1"}, {"2", kNullableNextRun, "1"}, {"3", kLastRun, "1"}}));
  EXPECT_EQ(
      db.Query("SELECT `index`, is_locked FROM backstage_backend_tasks__knex_migrations_lock"),
      (Rows{{"1", "0"}}));
  // migration_time is integer epoch milliseconds, as the JavaScript driver stores a Date.
  const Rows times = db.Query(
      "SELECT typeof(migration_time), migration_time FROM "
      "backstage_backend_tasks__knex_migrations");
  ASSERT_EQ(times.size(), 3u);
  const auto ms = [](auto t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  };
  for (const std::vector<std::string>& row : times) {
    EXPECT_EQ(row[0], "integer");
    EXPECT_GE(std::stoll(row[1]), ms(before));
    EXPECT_LE(std::stoll(row[1]), ms(after));
  }
  // stagehand's own migrations are recorded in stagehand's own table only.
  EXPECT_EQ(StagehandMigrationNames(db), kStagehandMigrations);
}

TEST(SqliteSchemaTest, MigrateIsIdempotentAcrossStoresAndKeepsRows) {
  TempDir dir;
  const std::string path = dir.File("sched.sqlite");
  std::unique_ptr<TaskStore> store = Open(path);
  ASSERT_THAT(store->Migrate(), IsOk());
  TaskSchedule schedule;
  schedule.settings.cadence = testing::ParsedCadence("PT10M");
  schedule.settings.timeout_after_duration = "PT1M";
  ASSERT_THAT(store->Upsert("kept", schedule), IsOk());
  RawDb db(path);
  const std::string dump = SchemaDump(db);
  const std::string stagehand_dump = StagehandSchemaDump(db);
  const Rows knex = KnexBookkeeping(db);
  ASSERT_THAT(store->Migrate(), IsOk());
  ASSERT_THAT(Open(path)->Migrate(), IsOk());
  EXPECT_EQ(SchemaDump(db), dump);
  EXPECT_EQ(StagehandSchemaDump(db), stagehand_dump);
  EXPECT_EQ(KnexBookkeeping(db), knex);
  EXPECT_EQ(MigrationRows(db).size(), 3u);
  EXPECT_EQ(StagehandMigrationNames(db), kStagehandMigrations);
  EXPECT_EQ(db.Query("SELECT count(*) FROM backstage_backend_tasks__tasks"), (Rows{{"1"}}));
}

TEST(SqliteSchemaTest, DatabaseCreatedByBackstageIsUsedAsIs) {
  TempDir dir;
  const std::string path = dir.File("sched.sqlite");
  {
    RawDb db(path);
    db.Exec(kKnexMigrationsTable);
    db.Exec(std::string(kFinalTasksTable) + ";");
    // Backstage applied the migrations over three upgrades.
    db.Exec(
        "insert into `backstage_backend_tasks__knex_migrations` (`name`, `batch`, "
        "`migration_time`) values ('20210928160613_init.js', 1, 1633000000000), "
        "('20240712211735_nullable_next_run.js', 2, 1721000000000), "
        "('20250411000000_last_run.js', 3, 1744500000000)");
    db.Exec(
        "insert into backstage_backend_tasks__tasks (id, settings_json, next_run_start_at) "
        "values ('bs', '{\"version\":2,\"cadence\":\"PT10M\",\"timeoutAfterDuration\":"
        "\"PT1M\"}', '2026-11-30 04:18:13')");
  }
  RawDb db(path);
  const std::string dump = SchemaDump(db);
  const Rows bookkeeping = KnexBookkeeping(db);
  EXPECT_EQ(dump, ReadFile(STAGEHAND_SOURCE_DIR "/tests/integration/sqlite/fixtures/schema.txt"));
  EXPECT_FALSE(HasRunsTable(db));

  // Backstage's tables, their rows and knex's bookkeeping stay byte for byte as Backstage left
  // them (so its migrator finds nothing to do and no name it does not know); stagehand's own
  // tables are added beside them.
  std::unique_ptr<TaskStore> store = Open(path);
  ASSERT_THAT(store->Migrate(), IsOk());
  EXPECT_EQ(SchemaDump(db), dump);
  EXPECT_EQ(KnexBookkeeping(db), bookkeeping);
  EXPECT_EQ(
      StagehandSchemaDump(db),
      ReadFile(STAGEHAND_SOURCE_DIR "/tests/integration/sqlite/fixtures/stagehand_schema.txt"));
  EXPECT_EQ(StagehandMigrationNames(db), kStagehandMigrations);
  ASSERT_NE(store->history(), nullptr);
  EXPECT_THAT(store->history()->ListRuns("bs", 10, std::nullopt), IsOk());
  Result<std::vector<TaskRow>> rows = store->States();
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].id, "bs");
}

TEST(SqliteSchemaTest, DatabaseFromAnOlderBackstageGetsTheMissingMigrationsAsTheNextBatch) {
  TempDir dir;
  const std::string path = dir.File("sched.sqlite");
  {
    RawDb db(path);
    db.Exec(kKnexMigrationsTable);
    db.Exec(std::string(kKnexInitTable) + ";");
    db.Exec(
        "insert into `backstage_backend_tasks__knex_migrations` (`name`, `batch`, "
        "`migration_time`) values ('20210928160613_init.js', 1, 1633000000000)");
    db.Exec(
        "insert into backstage_backend_tasks__tasks (id, settings_json, next_run_start_at, "
        "current_run_ticket, current_run_started_at, current_run_expires_at) values ('old', "
        "'{\"version\":2,\"cadence\":\"PT10M\",\"timeoutAfterDuration\":\"PT1M\"}', "
        "'2026-11-30 04:18:13', 'tick', '2026-11-30 04:18:14', '2026-11-30 04:19:14')");
  }
  ASSERT_THAT(Open(path)->Migrate(), IsOk());
  RawDb db(path);
  EXPECT_EQ(SchemaDump(db),
            ReadFile(STAGEHAND_SOURCE_DIR "/tests/integration/sqlite/fixtures/schema.txt"));
  EXPECT_EQ(MigrationRows(db),
            (Rows{{"1", kInit, "1"}, {"2", kNullableNextRun, "2"}, {"3", kLastRun, "2"}}));
  EXPECT_EQ(db.Query("SELECT * FROM backstage_backend_tasks__tasks"),
            (Rows{{"old", R"({"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT1M"})",
                   "2026-11-30 04:18:13", "tick", "2026-11-30 04:18:14", "2026-11-30 04:19:14",
                   "NULL", "NULL"}}));
  // next_run_start_at is nullable now.
  db.Exec("UPDATE backstage_backend_tasks__tasks SET next_run_start_at = NULL");
}

TEST(SqliteSchemaTest, UnknownMigrationIsAFailedPreconditionNamingPluginFileAndMigration) {
  TempDir dir;
  const std::string path = dir.File("catalog.sqlite");
  ASSERT_THAT(Open(path, "catalog")->Migrate(), IsOk());
  RawDb db(path);
  db.Exec(
      "insert into backstage_backend_tasks__knex_migrations (name, batch, migration_time) "
      "values ('20990101000000_future.js', 2, 4070908800000)");
  const std::string dump = SchemaDump(db);

  const Status status = Open(path, "catalog")->Migrate();
  EXPECT_THAT(status, StatusIs(StatusCode::kFailedPrecondition, "plugin 'catalog'"));
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("20990101000000_future.js"));
  EXPECT_EQ(SchemaDump(db), dump);
  EXPECT_EQ(db.Query("SELECT is_locked FROM backstage_backend_tasks__knex_migrations_lock"),
            (Rows{{"0"}}));
}

TEST(SqliteSchemaTest, MigrationRecordedOutOfOrderIsRefused) {
  TempDir dir;
  const std::string path = dir.File("sched.sqlite");
  {
    RawDb db(path);
    db.Exec(kKnexMigrationsTable);
    db.Exec(std::string(kKnexInitTable) + ";");
    db.Exec(
        "insert into `backstage_backend_tasks__knex_migrations` (`name`, `batch`, "
        "`migration_time`) values ('20210928160613_init.js', 1, 1), "
        "('20250411000000_last_run.js', 1, 1)");
  }
  const Status status = Open(path)->Migrate();
  EXPECT_THAT(status, StatusIs(StatusCode::kFailedPrecondition, kNullableNextRun));
}

TEST(SqliteSchemaTest, UnknownStagehandMigrationIsAFailedPreconditionAndKnexIsLeftAlone) {
  TempDir dir;
  const std::string path = dir.File("catalog.sqlite");
  ASSERT_THAT(Open(path, "catalog")->Migrate(), IsOk());
  RawDb db(path);
  db.Exec(
      "INSERT INTO stagehand_migrations (name, migrated_at) "
      "VALUES ('9999_from_the_future', '2099-01-01 00:00:00.000')");
  const Rows knex = KnexBookkeeping(db);

  const Status status = Open(path, "catalog")->Migrate();
  EXPECT_THAT(status, StatusIs(StatusCode::kFailedPrecondition, "plugin 'catalog'"));
  EXPECT_THAT(status.message(), HasSubstr("9999_from_the_future"));
  EXPECT_THAT(status.message(), HasSubstr("stagehand_migrations"));
  EXPECT_EQ(KnexBookkeeping(db), knex);
}

// A host that does not migrate (backend.database.skipMigrations) on a database whose history
// tables nobody created: claims, releases and sweeps carry on without history.
TEST(SqliteSchemaTest, StoreOnADatabaseWithoutTheHistoryTablesWorksWithoutHistory) {
  TempDir dir;
  const std::string path = dir.File("sched.sqlite");
  {
    RawDb db(path);
    db.Exec(kKnexMigrationsTable);
    db.Exec(std::string(kFinalTasksTable) + ";");
  }
  std::unique_ptr<TaskStore> store = Open(path);
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Upsert("task", TenMinutes()), IsOk());
  const std::vector<ClaimRequest> claims = {
      {"task", "ticket", std::chrono::minutes(1), std::nullopt, RunOrigin{"host", 1}}};
  Result<std::vector<ClaimResult>> claimed = store->ClaimMany(claims, std::chrono::minutes(1));
  ASSERT_THAT(claimed, IsOk());
  EXPECT_TRUE((*claimed)[0].claimed);
  ASSERT_THAT(store->SweepExpired(), IsOk());
  const std::vector<ReleaseRequest> releases = {
      {"task", "ticket", TenMinutes(), std::nullopt, ReleasedRun{{}, RunOrigin{"host", 1}}}};
  Result<std::vector<ReleaseResult>> released = store->ReleaseMany(releases);
  ASSERT_THAT(released, IsOk());
  EXPECT_TRUE((*released)[0].released);
  ASSERT_NE(store->history(), nullptr);
  EXPECT_THAT(store->history()->ListRuns("task", 10, std::nullopt),
              StatusIs(StatusCode::kFailedPrecondition));
  RawDb db(path);
  EXPECT_FALSE(HasRunsTable(db));
}

// A database an older stagehand migrated (the run history, no registrations table): tasks are
// registered and refreshed without recording registrations, and a prune asks for the migrations,
// until they have run.
TEST(SqliteSchemaTest, StoreOnADatabaseWithoutTheRegistrationsTableRegistersWithoutThem) {
  TempDir dir;
  const std::string path = dir.File("sched.sqlite");
  ASSERT_THAT(Open(path)->Migrate(), IsOk());
  {
    RawDb db(path);
    db.Exec(
        "DROP TABLE stagehand_task_registrations; "
        "DELETE FROM stagehand_migrations WHERE name = '0002_task_registrations'");
  }
  std::unique_ptr<TaskStore> store = Open(path);
  ASSERT_NE(store, nullptr);
  const std::vector<TaskUpsert> upserts = {{"task", TenMinutes(), "host-a"}};
  ASSERT_THAT(store->UpsertMany(upserts), IsOk());
  ASSERT_NE(store->registrations(), nullptr);
  const std::vector<std::string> ids = {"task"};
  Result<std::size_t> refreshed = store->registrations()->RefreshRegistrations(ids, "host-a");
  ASSERT_THAT(refreshed, IsOk());
  EXPECT_EQ(*refreshed, 0u);
  const Result<std::vector<PruneCandidate>> listed =
      store->registrations()->ListPruneCandidates(std::chrono::system_clock::now());
  EXPECT_THAT(listed, StatusIs(StatusCode::kFailedPrecondition, "stagehand db migrate"));
  EXPECT_EQ(store->registrations()
                ->PruneTasks(ids, std::chrono::system_clock::now(), PruneScope::kRegistered)
                .status()
                .code(),
            StatusCode::kFailedPrecondition);

  // Another host migrates; this one's next refresh finds the table.
  ASSERT_THAT(Open(path)->Migrate(), IsOk());
  RawDb db(path);
  EXPECT_EQ(StagehandMigrationNames(db), kStagehandMigrations);
  refreshed = store->registrations()->RefreshRegistrations(ids, "host-a");
  ASSERT_THAT(refreshed, IsOk());
  EXPECT_EQ(*refreshed, 1u);
  EXPECT_EQ(db.Query("SELECT task_id, host FROM stagehand_task_registrations"),
            (Rows{{"task", "host-a"}}));
}

// Issue 19: a database an older stagehand migrated (its run table without trace_id) gets the
// column from the next migration; the runs already recorded have no trace id.
TEST(SqliteSchemaTest, ADatabaseMigratedBeforeTheTraceIdGetsTheColumn) {
  TempDir dir;
  const std::string path = dir.File("sched.sqlite");
  {
    std::unique_ptr<TaskStore> store = Open(path);
    ASSERT_THAT(store->Migrate(), IsOk());
  }
  {
    RawDb db(path);
    db.Exec(
        "ALTER TABLE stagehand_task_runs DROP COLUMN trace_id; "
        "DELETE FROM stagehand_migrations WHERE name = '0003_run_trace_id'; "
        "INSERT INTO stagehand_task_runs (run_id, task_id, seq, host, pid, trigger_kind, "
        "started_at, outcome, attempt) VALUES ('old', 'task', 1, 'host', 1, 'manual', "
        "'2026-12-01 10:00:00.000', 'running', 1)");
    ASSERT_EQ(db.Query("SELECT count(*) FROM pragma_table_info('stagehand_task_runs') "
                       "WHERE name = 'trace_id'"),
              (Rows{{"0"}}));
  }
  std::unique_ptr<TaskStore> store = Open(path);
  ASSERT_THAT(store->Migrate(), IsOk());
  RawDb db(path);
  EXPECT_EQ(StagehandMigrationNames(db), kStagehandMigrations);
  EXPECT_EQ(db.Query("SELECT type, \"notnull\" FROM pragma_table_info('stagehand_task_runs') "
                     "WHERE name = 'trace_id'"),
            (Rows{{"TEXT", "0"}}));
  schema_test::ExpectOldRunsWithoutTraceIdsAndNewRunsWithThem(*store);
}

TEST(SqliteSchemaTest, HeldKnexLockIsUnavailable) {
  TempDir dir;
  const std::string path = dir.File("sched.sqlite");
  ASSERT_THAT(Open(path)->Migrate(), IsOk());
  RawDb db(path);
  db.Exec("UPDATE backstage_backend_tasks__knex_migrations_lock SET is_locked = 1");
  const Status status = Open(path)->Migrate();
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable, "already locked"));
  EXPECT_THAT(status.message(), HasSubstr(path));
  db.Exec("UPDATE backstage_backend_tasks__knex_migrations_lock SET is_locked = 0");
  EXPECT_THAT(Open(path)->Migrate(), IsOk());
}

TEST(SqliteSchemaTest, InMemoryDatabaseMigratesAndWorks) {
  std::unique_ptr<TaskStore> store = Open(":memory:");
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Migrate(), IsOk());
  ASSERT_THAT(store->Migrate(), IsOk());
  TaskSchedule schedule;
  schedule.settings.cadence = testing::ParsedCadence("PT10M");
  schedule.settings.timeout_after_duration = "PT1M";
  ASSERT_THAT(store->Upsert("mem", schedule), IsOk());
  const std::vector<std::string> ids = {"mem"};
  Result<PollResult> poll = store->Poll(ids, true);
  ASSERT_THAT(poll, IsOk());
  ASSERT_EQ(poll->entries.size(), 1u);
  EXPECT_EQ(poll->entries[0].readiness, Readiness::kReady);
}

// Issue 14: data/ was created 0755 and the database files 0644, as the umask decided.
TEST(SqliteFilePermissionsTest, NewDirectoriesAre0700AndDatabaseFiles0600WhateverTheUmask) {
  TempDir dir;
  const std::filesystem::path data = dir.path() / "data";
  const std::string path = (data / "sub" / "backstage_plugin_sched.sqlite").string();
  const mode_t old_umask = ::umask(0);
  std::unique_ptr<TaskStore> store = Open(path);
  const Status migrated = store ? store->Migrate() : InternalError("not opened");
  ::umask(old_umask);
  ASSERT_THAT(migrated, IsOk());
  const auto mode = [](const std::filesystem::path& p) {
    struct stat info {};
    EXPECT_EQ(::stat(p.c_str(), &info), 0) << p;
    return info.st_mode & 0777;
  };
  EXPECT_EQ(mode(data), 0700u);
  EXPECT_EQ(mode(data / "sub"), 0700u);
  EXPECT_EQ(mode(path), 0600u);
  EXPECT_EQ(mode(path + "-wal"), 0600u);
  EXPECT_EQ(mode(path + "-shm"), 0600u);
}

TEST(SqliteSchemaTest, PluginDatabasePathIsNamedAsBackstageNamesIt) {
  EXPECT_EQ(SqlitePluginDatabasePath("/var/lib/backstage", "catalog"),
            "/var/lib/backstage/catalog.sqlite");
  EXPECT_EQ(SqlitePluginDatabasePath("/var/lib/backstage/", "catalog"),
            "/var/lib/backstage/catalog.sqlite");
}

}  // namespace
}  // namespace stagehand
