// Compatibility of the PostgreSQL store with Backstage's database: the schema a stagehand
// migration leaves equals the checked-in dump of knex's, knex's bookkeeping and lock protocol are
// reproduced, databases prepared by Backstage are used as they are, Backstage's own statements and
// ours interoperate on one table, and concurrent migrators never fail.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fixtures/task_schedules.h"
#include "integration/postgres/test_server.h"
#include "integration/trace_id_migration.h"
#include "stagehand/model/task_state.h"
#include "stagehand/service/task_row_state.h"
#include "stagehand/store/postgres_task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

constexpr char kPluginId[] = "schema";

// The DDL knex generates for Backstage's three scheduler migrations and for its bookkeeping
// tables, copied from the spec (§3.3) independently of the store's own text.
constexpr char kKnexBookkeepingDdl[] = R"sql(
create table "backstage_backend_tasks__knex_migrations" ("id" serial primary key, "name" varchar(255), "batch" integer, "migration_time" timestamptz);
create table "backstage_backend_tasks__knex_migrations_lock" ("index" serial primary key, "is_locked" integer);
insert into "backstage_backend_tasks__knex_migrations_lock" ("is_locked") values (0);
)sql";

constexpr char kKnexInitDdl[] = R"sql(
create table "backstage_backend_tasks__tasks" ("id" varchar(255) not null, "settings_json" text not null, "next_run_start_at" timestamptz not null, "current_run_ticket" text null, "current_run_started_at" timestamptz null, "current_run_expires_at" timestamptz null, constraint "backstage_backend_tasks__tasks_pkey" primary key ("id"));
comment on table "backstage_backend_tasks__tasks" is 'Tasks used for scheduling work on multiple workers';
comment on column "backstage_backend_tasks__tasks"."id" is 'The unique ID of this particular task';
comment on column "backstage_backend_tasks__tasks"."settings_json" is 'JSON serialized object with properties for this task';
comment on column "backstage_backend_tasks__tasks"."next_run_start_at" is 'The next time that the task should be started';
comment on column "backstage_backend_tasks__tasks"."current_run_ticket" is 'A unique ticket for the current task run';
comment on column "backstage_backend_tasks__tasks"."current_run_started_at" is 'The time that the current task run started';
comment on column "backstage_backend_tasks__tasks"."current_run_expires_at" is 'The time that the current task run will time out';
)sql";

constexpr char kKnexNullableDdl[] = R"sql(
alter table "backstage_backend_tasks__tasks" alter column "next_run_start_at" drop not null;
)sql";

constexpr char kKnexLastRunDdl[] = R"sql(
alter table "backstage_backend_tasks__tasks" add column "last_run_error_json" text null, add column "last_run_ended_at" timestamptz null;
comment on column "backstage_backend_tasks__tasks"."last_run_error_json" is 'JSON serialized error object from the last task run, if it failed';
comment on column "backstage_backend_tasks__tasks"."last_run_ended_at" is 'The last time that the task ended';
)sql";

constexpr char kSettingsPT10M[] =
    R"({"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT1M"})";

// Which tables DumpSchema shows: Backstage's (every table but stagehand's own) or stagehand's
// own (stagehand_*).
enum class Part { kBackstage, kStagehand };

// Returns a readable dump of every table of `part`, with its columns (type, nullability, default,
// comment), constraints, indexes and sequences, in the session's current schema.
std::string DumpSchema(pg_test::RawConnection& db, Part part = Part::kBackstage) {
  std::ostringstream out;
  const auto text = [](PGresult* r, int row, int column) -> std::string {
    return PQgetisnull(r, row, column) ? "-" : PQgetvalue(r, row, column);
  };
  const std::string ours = part == Part::kStagehand ? "LIKE" : "NOT LIKE";
  pg_test::RawResult tables = db.Exec(
      "SELECT c.relname, obj_description(c.oid, 'pg_class') FROM pg_class c "
      "JOIN pg_namespace n ON n.oid = c.relnamespace "
      "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname " +
      ours + " 'stagehand\\_%' ORDER BY c.relname");
  for (int t = 0; t < PQntuples(tables.get()); ++t) {
    const std::string table = text(tables.get(), t, 0);
    out << "table " << table << "\n  comment: " << text(tables.get(), t, 1) << "\n";
    pg_test::RawResult columns = db.Exec(
        "SELECT c.column_name, c.data_type, c.character_maximum_length, c.is_nullable, "
        "c.column_default, col_description(to_regclass(quote_ident(c.table_name)), "
        "c.ordinal_position::int) "
        "FROM information_schema.columns c "
        "WHERE c.table_schema = current_schema() AND c.table_name = $1 "
        "ORDER BY c.ordinal_position",
        {table});
    for (int c = 0; c < PQntuples(columns.get()); ++c) {
      out << "  column " << text(columns.get(), c, 0) << ": " << text(columns.get(), c, 1);
      if (!PQgetisnull(columns.get(), c, 2)) out << "(" << text(columns.get(), c, 2) << ")";
      out << (text(columns.get(), c, 3) == "YES" ? " null" : " not null") << ", default "
          << text(columns.get(), c, 4) << ", comment " << text(columns.get(), c, 5) << "\n";
    }
    pg_test::RawResult constraints = db.Exec(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = to_regclass(quote_ident($1)) ORDER BY conname",
        {table});
    for (int c = 0; c < PQntuples(constraints.get()); ++c) {
      out << "  constraint " << text(constraints.get(), c, 0) << ": "
          << text(constraints.get(), c, 1) << "\n";
    }
    pg_test::RawResult indexes = db.Exec(
        "SELECT i.relname, x.indisunique, x.indisprimary, "
        "array_to_string(ARRAY(SELECT pg_get_indexdef(x.indexrelid, k, true) "
        "FROM generate_series(1, x.indnkeyatts) AS k ORDER BY k), ', ') "
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "WHERE x.indrelid = to_regclass(quote_ident($1)) ORDER BY i.relname",
        {table});
    for (int i = 0; i < PQntuples(indexes.get()); ++i) {
      out << "  index " << text(indexes.get(), i, 0) << ":"
          << (text(indexes.get(), i, 1) == "t" ? " unique" : "")
          << (text(indexes.get(), i, 2) == "t" ? " primary" : "") << " ("
          << text(indexes.get(), i, 3) << ")\n";
    }
  }
  pg_test::RawResult sequences = db.Exec(
      "SELECT sequence_name, data_type FROM information_schema.sequences "
      "WHERE sequence_schema = current_schema() AND sequence_name " +
      ours + " 'stagehand\\_%' ORDER BY sequence_name");
  for (int s = 0; s < PQntuples(sequences.get()); ++s) {
    out << "sequence " << text(sequences.get(), s, 0) << ": " << text(sequences.get(), s, 1)
        << "\n";
  }
  return out.str();
}

std::string ReadFixture(const std::string& name) {
  std::ifstream file(STAGEHAND_SOURCE_DIR "/tests/integration/postgres/fixtures/" + name);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

// Backstage's tables as knex creates them.
std::string ExpectedSchema() { return ReadFixture("schema.txt"); }

// stagehand's own tables.
std::string ExpectedStagehandSchema() { return ReadFixture("stagehand_schema.txt"); }

// Every row of knex's two bookkeeping tables, as text (migration times included).
std::string KnexRows(pg_test::RawConnection& db) {
  return db.Scalar(
             "SELECT string_agg(id || '|' || coalesce(name, '-') || '|' || coalesce(batch::text, "
             "'-') || '|' || coalesce(migration_time::text, '-'), ',' ORDER BY id) "
             "FROM backstage_backend_tasks__knex_migrations") +
         ";" +
         db.Scalar(
             "SELECT string_agg(\"index\" || '|' || coalesce(is_locked::text, '-'), ',' "
             "ORDER BY \"index\") FROM backstage_backend_tasks__knex_migrations_lock");
}

// stagehand's own migrations, as StagehandMigrations lists them.
constexpr char kStagehandMigrationNames[] =
    "0001_task_runs,0002_task_registrations,0003_task_runs_two_indexes,0004_task_run_rings,"
    "0005_run_trace_id,0006_request_keys";

std::string StagehandMigrations(pg_test::RawConnection& db) {
  return db.Scalar("SELECT string_agg(name, ',' ORDER BY name) FROM stagehand_migrations");
}

bool HasRunsTable(pg_test::RawConnection& db) {
  return db.Scalar("SELECT to_regclass('stagehand_task_runs') IS NOT NULL") == "t";
}

struct Bookkeeping {
  std::vector<std::string> names;
  std::vector<int> batches;
  std::string lock_rows;  // "index:is_locked" per row
};

Bookkeeping ReadBookkeeping(pg_test::RawConnection& db) {
  Bookkeeping result;
  pg_test::RawResult rows =
      db.Exec("SELECT name, batch FROM backstage_backend_tasks__knex_migrations ORDER BY id");
  for (int r = 0; r < PQntuples(rows.get()); ++r) {
    result.names.emplace_back(PQgetvalue(rows.get(), r, 0));
    result.batches.push_back(std::stoi(PQgetvalue(rows.get(), r, 1)));
  }
  pg_test::RawResult lock = db.Exec(
      "SELECT \"index\", is_locked FROM backstage_backend_tasks__knex_migrations_lock "
      "ORDER BY \"index\"");
  for (int r = 0; r < PQntuples(lock.get()); ++r) {
    if (r > 0) result.lock_rows += ",";
    result.lock_rows +=
        std::string(PQgetvalue(lock.get(), r, 0)) + ":" + PQgetvalue(lock.get(), r, 1);
  }
  return result;
}

const std::vector<std::string> kAllMigrations = {
    "20210928160613_init.js", "20240712211735_nullable_next_run.js", "20250411000000_last_run.js"};

class PostgresSchemaTest : public pg_test::ServerTest {
 protected:
  void SetUp() override {
    pg_test::ServerTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    database_ = pg_test::UniqueDatabaseName("stagehand_schema");
  }

  void TearDown() override {
    if (!database_.empty()) pg_test::DropDatabase(url(), database_);
  }

  PostgresStoreOptions Options(const std::string& schema = "") const {
    PostgresStoreOptions options;
    options.connection = url();
    options.database = database_;
    options.schema = schema;
    options.pool_size = 2;
    return options;
  }

  std::unique_ptr<TaskStore> Open(const std::string& schema = "") {
    Result<std::unique_ptr<TaskStore>> store =
        OpenPostgresTaskStore(kPluginId, Options(schema), SystemClock::Instance());
    EXPECT_THAT(store, IsOk());
    return store.ok() ? std::move(*store) : nullptr;
  }

  // Caches the store's plans while `table` is small (twelve rounds of triggering, claiming and
  // releasing two manual tasks, their runs recorded when `history`), grows it with `grow` (SQL
  // that adds rows; autovacuum is off for the table, so nothing replans meanwhile), runs three
  // more rounds and checks that each statement naming `table` read less than a quarter of its
  // pages a call. At least `at_least` such statements must have run.
  void ExpectStatementsKeepToTheKeyAfterGrowing(const std::string& table, const std::string& grow,
                                                bool history, int at_least) {
    std::unique_ptr<TaskStore> store = OpenMigrated();
    ASSERT_NE(store, nullptr);
    pg_test::RawConnection db(url(), database_);
    db.Exec(fmt::format("ALTER TABLE {} SET (autovacuum_enabled = false)", table));
    TaskSchedule schedule;
    schedule.settings.cadence = testing::ParsedCadence("manual");
    schedule.settings.timeout_after_duration = "PT1M";
    ASSERT_THAT(store->Upsert("a", schedule), IsOk());
    ASSERT_THAT(store->Upsert("b", schedule), IsOk());
    int ticket = 0;
    const auto run_both = [&] {
      std::vector<ClaimRequest> claims;
      std::vector<ReleaseRequest> releases;
      for (const char* id : {"a", "b"}) {
        ASSERT_THAT(store->Trigger(id), IsOk());
        const std::string run = fmt::format("{}-{}", id, ++ticket);
        claims.push_back({id, run, minutes(1), std::nullopt});
        releases.push_back({id, run, schedule, std::nullopt});
        if (history) {
          claims.back().history = RunOrigin{"host", 1};
          releases.back().history = ReleasedRun{{}, RunOrigin{"host", 1}};
        }
      }
      Result<std::vector<ClaimResult>> claimed = store->ClaimMany(claims, minutes(1));
      ASSERT_THAT(claimed, IsOk());
      for (const ClaimResult& claim : *claimed) ASSERT_TRUE(claim.claimed);
      Result<std::vector<ReleaseResult>> released = store->ReleaseMany(releases);
      ASSERT_THAT(released, IsOk());
      for (const ReleaseResult& release : *released) ASSERT_TRUE(release.released);
    };
    for (int i = 0; i < 12; ++i) ASSERT_NO_FATAL_FAILURE(run_both());

    db.Exec(grow);
    const int pages = std::stoi(db.Scalar(
        fmt::format("SELECT pg_relation_size('{}') / current_setting('block_size')::int", table)));
    ASSERT_GT(pages, 300);
    db.Exec("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    db.Exec(
        "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = "
        "current_database()), 0)");
    for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(run_both());

    pg_test::RawResult statements = db.Exec(
        fmt::format("SELECT left(query, 80), shared_blks_hit + shared_blks_read, calls FROM "
                    "pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = "
                    "current_database()) AND query LIKE '%{}%' AND query NOT LIKE '%pg_stat%'",
                    table));
    ASSERT_GE(PQntuples(statements.get()), at_least);
    for (int row = 0; row < PQntuples(statements.get()); ++row) {
      const long long blocks = std::stoll(PQgetvalue(statements.get(), row, 1));
      const long long calls = std::stoll(PQgetvalue(statements.get(), row, 2));
      EXPECT_LT(blocks / calls, pages / 4)
          << "a statement read about the whole table " << table << ": "
          << PQgetvalue(statements.get(), row, 0) << " (" << blocks / calls << " blocks a call)";
    }
  }

  std::unique_ptr<TaskStore> OpenMigrated(const std::string& schema = "") {
    std::unique_ptr<TaskStore> store = Open(schema);
    if (store == nullptr) return nullptr;
    const Status migrated = store->Migrate();
    EXPECT_THAT(migrated, IsOk());
    return migrated.ok() ? std::move(store) : nullptr;
  }

  // A database prepared by hand the way Backstage's knex leaves it after `migrations`.
  void PrepareLikeKnex(const std::vector<const char*>& ddl, int applied) {
    pg_test::CreateDatabase(url(), database_);
    pg_test::RawConnection db(url(), database_);
    db.Exec(kKnexBookkeepingDdl);
    for (const char* statement : ddl) db.Exec(statement);
    for (int i = 0; i < applied; ++i) {
      db.Exec(
          "insert into \"backstage_backend_tasks__knex_migrations\" (\"name\", \"batch\", "
          "\"migration_time\") values ($1, 1, '2025-05-01T10:00:00.000Z')",
          {kAllMigrations[static_cast<size_t>(i)]});
    }
  }

  std::string database_;
};

TEST_F(PostgresSchemaTest, SchemaOfAMigratedDatabaseMatchesTheFixture) {
  ASSERT_NE(OpenMigrated(), nullptr);
  pg_test::RawConnection db(url(), database_);
  const std::string expected = ExpectedSchema();
  ASSERT_FALSE(expected.empty()) << "fixtures/schema.txt is missing";
  EXPECT_EQ(DumpSchema(db), expected);
  const std::string stagehand = ExpectedStagehandSchema();
  ASSERT_FALSE(stagehand.empty()) << "fixtures/stagehand_schema.txt is missing";
  EXPECT_EQ(DumpSchema(db, Part::kStagehand), stagehand);
  EXPECT_EQ(StagehandMigrations(db), kStagehandMigrationNames);
}

TEST_F(PostgresSchemaTest, MigrationWritesKnexBookkeepingAndIsIdempotent) {
  std::unique_ptr<TaskStore> store = OpenMigrated();
  ASSERT_NE(store, nullptr);
  pg_test::RawConnection db(url(), database_);
  Bookkeeping first = ReadBookkeeping(db);
  EXPECT_EQ(first.names, kAllMigrations);
  EXPECT_EQ(first.batches, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(first.lock_rows, "1:0");
  EXPECT_EQ(db.Scalar("SELECT count(*) FROM backstage_backend_tasks__knex_migrations "
                      "WHERE migration_time IS NULL"),
            "0");

  const std::string knex_rows = KnexRows(db);
  ASSERT_THAT(store->Migrate(), IsOk());
  ASSERT_NE(OpenMigrated(), nullptr);
  Bookkeeping again = ReadBookkeeping(db);
  EXPECT_EQ(again.names, first.names);
  EXPECT_EQ(again.batches, first.batches);
  EXPECT_EQ(again.lock_rows, "1:0");
  EXPECT_EQ(KnexRows(db), knex_rows);
  EXPECT_EQ(DumpSchema(db), ExpectedSchema());
  EXPECT_EQ(DumpSchema(db, Part::kStagehand), ExpectedStagehandSchema());
  EXPECT_EQ(StagehandMigrations(db), kStagehandMigrationNames);
}

TEST_F(PostgresSchemaTest, DatabasePreparedByKnexIsUsedAsIs) {
  PrepareLikeKnex({kKnexInitDdl, kKnexNullableDdl, kKnexLastRunDdl}, 3);
  pg_test::RawConnection db(url(), database_);
  const std::string knex_schema = DumpSchema(db);
  EXPECT_EQ(knex_schema, ExpectedSchema());
  const std::string knex_rows = KnexRows(db);
  const std::string knex_times = db.Scalar(
      "SELECT string_agg(id || '@' || migration_time::text, ',' ORDER BY id) "
      "FROM backstage_backend_tasks__knex_migrations");
  EXPECT_FALSE(HasRunsTable(db));

  // Backstage's tables and knex's bookkeeping stay byte for byte as knex left them (so its
  // migrator finds nothing to do and no name it does not know); stagehand's own tables are added
  // beside them.
  std::unique_ptr<TaskStore> store = OpenMigrated();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(DumpSchema(db), knex_schema);
  EXPECT_EQ(KnexRows(db), knex_rows);
  EXPECT_EQ(DumpSchema(db, Part::kStagehand), ExpectedStagehandSchema());
  EXPECT_EQ(StagehandMigrations(db), kStagehandMigrationNames);
  const Bookkeeping after = ReadBookkeeping(db);
  EXPECT_EQ(after.names, kAllMigrations);
  EXPECT_EQ(after.batches, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(after.lock_rows, "1:0");
  EXPECT_EQ(db.Scalar("SELECT string_agg(id || '@' || migration_time::text, ',' ORDER BY id) "
                      "FROM backstage_backend_tasks__knex_migrations"),
            knex_times);

  TaskSchedule schedule;
  schedule.settings.cadence = testing::ParsedCadence("PT10M");
  schedule.settings.timeout_after_duration = "PT1M";
  ASSERT_THAT(store->Upsert("on-knex", schedule), IsOk());
  Result<ClaimResult> claim = store->Claim("on-knex", "t", minutes(1), minutes(1));
  ASSERT_THAT(claim, IsOk());
  EXPECT_TRUE(claim->claimed);
}

TEST_F(PostgresSchemaTest, OlderBackstageDatabaseGetsTheMissingMigrationInTheNextBatch) {
  PrepareLikeKnex({kKnexInitDdl, kKnexNullableDdl}, 2);
  ASSERT_NE(OpenMigrated(), nullptr);
  pg_test::RawConnection db(url(), database_);
  const Bookkeeping after = ReadBookkeeping(db);
  EXPECT_EQ(after.names, kAllMigrations);
  EXPECT_EQ(after.batches, (std::vector<int>{1, 1, 2}));
  EXPECT_EQ(after.lock_rows, "1:0");
  EXPECT_EQ(DumpSchema(db), ExpectedSchema());
}

TEST_F(PostgresSchemaTest, UnknownMigrationIsAFailedPreconditionNamingIt) {
  std::unique_ptr<TaskStore> store = OpenMigrated();
  ASSERT_NE(store, nullptr);
  pg_test::RawConnection db(url(), database_);
  db.Exec(
      "INSERT INTO backstage_backend_tasks__knex_migrations (name, batch, migration_time) "
      "VALUES ('20990101000000_future.js', 2, now())");

  const Status status = store->Migrate();
  EXPECT_THAT(status, StatusIs(StatusCode::kFailedPrecondition, "20990101000000_future.js"));
  EXPECT_NE(status.message().find(kPluginId), std::string::npos);
  EXPECT_NE(status.message().find(database_), std::string::npos);
  // Nothing was recorded and knex's lock is free again.
  EXPECT_EQ(db.Scalar("SELECT count(*) FROM backstage_backend_tasks__knex_migrations"), "4");
  EXPECT_EQ(ReadBookkeeping(db).lock_rows, "1:0");
}

TEST_F(PostgresSchemaTest, MigrationLockHeldByAnotherMigratorIsUnavailable) {
  std::unique_ptr<TaskStore> store = OpenMigrated();
  ASSERT_NE(store, nullptr);
  pg_test::RawConnection db(url(), database_);
  db.Exec("UPDATE backstage_backend_tasks__knex_migrations_lock SET is_locked = 1");

  const Status status = store->Migrate();
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable, "locked"));

  db.Exec("UPDATE backstage_backend_tasks__knex_migrations_lock SET is_locked = 0");
  EXPECT_THAT(store->Migrate(), IsOk());
}

TEST_F(PostgresSchemaTest, ThreeMigratorsOnAFreshDatabaseAllSucceed) {
  constexpr int kMigrators = 3;
  std::barrier start(kMigrators);
  std::vector<Status> outcomes(kMigrators);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kMigrators; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        Result<std::unique_ptr<TaskStore>> store =
            OpenPostgresTaskStore(kPluginId, Options(), SystemClock::Instance());
        outcomes[static_cast<size_t>(i)] = store.ok() ? (*store)->Migrate() : store.status();
      });
    }
  }
  for (const Status& outcome : outcomes) EXPECT_THAT(outcome, IsOk());
  pg_test::RawConnection db(url(), database_);
  const Bookkeeping after = ReadBookkeeping(db);
  EXPECT_EQ(after.names, kAllMigrations);
  EXPECT_EQ(after.batches, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(after.lock_rows, "1:0");
  EXPECT_EQ(StagehandMigrations(db), kStagehandMigrationNames);
  EXPECT_EQ(DumpSchema(db, Part::kStagehand), ExpectedStagehandSchema());
}

// pluginDivisionMode schema: several hosts migrate the schemas of two plugins of one database at
// once; each schema gets its own history tables, migrated once, and none lands in public.
TEST_F(PostgresSchemaTest, MigratorsOfTwoSchemasAtOnceEachMigrateTheirHistoryOnce) {
  constexpr int kMigrators = 4;
  const std::string schemas[] = {"plugin_x", "plugin_y"};
  std::barrier start(kMigrators);
  std::vector<Status> outcomes(kMigrators);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kMigrators; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        Result<std::unique_ptr<TaskStore>> store =
            OpenPostgresTaskStore(kPluginId, Options(schemas[i % 2]), SystemClock::Instance());
        outcomes[static_cast<size_t>(i)] = store.ok() ? (*store)->Migrate() : store.status();
      });
    }
  }
  for (const Status& outcome : outcomes) EXPECT_THAT(outcome, IsOk());
  pg_test::RawConnection db(url(), database_);
  for (const std::string& schema : schemas) {
    db.Exec("SET search_path = " + schema);
    EXPECT_EQ(StagehandMigrations(db), kStagehandMigrationNames) << schema;
    EXPECT_EQ(DumpSchema(db), ExpectedSchema()) << schema;
    EXPECT_EQ(DumpSchema(db, Part::kStagehand), ExpectedStagehandSchema()) << schema;
    EXPECT_EQ(ReadBookkeeping(db).names, kAllMigrations) << schema;
  }
  EXPECT_EQ(db.Scalar("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'stagehand\\_%' "
                      "AND schemaname = 'public'"),
            "0");
}

TEST_F(PostgresSchemaTest, UnknownStagehandMigrationIsAFailedPreconditionAndKnexIsLeftAlone) {
  std::unique_ptr<TaskStore> store = OpenMigrated();
  ASSERT_NE(store, nullptr);
  pg_test::RawConnection db(url(), database_);
  db.Exec("INSERT INTO stagehand_migrations (name) VALUES ('9999_from_the_future')");
  const std::string knex_rows = KnexRows(db);

  const Status status = store->Migrate();
  EXPECT_THAT(status, StatusIs(StatusCode::kFailedPrecondition, "9999_from_the_future"));
  EXPECT_NE(status.message().find("stagehand_migrations"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(database_), std::string::npos) << status.message();
  EXPECT_EQ(KnexRows(db), knex_rows);
}

// Issue 19: a database an older stagehand migrated (its run table without trace_id) gets the
// column from the next migration; the runs already recorded have no trace id.
TEST_F(PostgresSchemaTest, ADatabaseMigratedBeforeTheTraceIdGetsTheColumn) {
  const std::vector<RunStart> old = {RunStart{"old", "task", RunOrigin{"host", 1}}};
  {
    std::unique_ptr<TaskStore> store = OpenMigrated();
    ASSERT_NE(store, nullptr);
    ASSERT_THAT(store->history()->RecordStarts(old), IsOk());
  }
  pg_test::RawConnection db(url(), database_);
  db.Exec(
      "ALTER TABLE stagehand_task_runs DROP COLUMN trace_id; "
      "DELETE FROM stagehand_migrations WHERE name = '0005_run_trace_id'");
  const std::string kColumn =
      "SELECT coalesce(string_agg(data_type || ' ' || is_nullable, ','), '-') FROM "
      "information_schema.columns WHERE table_name = 'stagehand_task_runs' AND column_name = "
      "'trace_id' AND table_schema = current_schema()";
  ASSERT_EQ(db.Scalar(kColumn), "-");

  std::unique_ptr<TaskStore> store = OpenMigrated();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(StagehandMigrations(db), kStagehandMigrationNames);
  EXPECT_EQ(db.Scalar(kColumn), "text YES");
  schema_test::ExpectOldRunsWithoutTraceIdsAndNewRunsWithThem(*store);
}

// A host that does not migrate (backend.database.skipMigrations) on a database whose history
// tables nobody created: claims, releases and sweeps carry on without history.
TEST_F(PostgresSchemaTest, StoreOnADatabaseWithoutTheHistoryTablesWorksWithoutHistory) {
  PrepareLikeKnex({kKnexInitDdl, kKnexNullableDdl, kKnexLastRunDdl}, 3);
  std::unique_ptr<TaskStore> store = Open();
  ASSERT_NE(store, nullptr);
  TaskSchedule schedule;
  schedule.settings.cadence = testing::ParsedCadence("PT10M");
  schedule.settings.timeout_after_duration = "PT1M";
  ASSERT_THAT(store->Upsert("task", schedule), IsOk());
  const std::vector<ClaimRequest> claims = {
      {"task", "ticket", minutes(1), std::nullopt, RunOrigin{"host", 1}}};
  Result<std::vector<ClaimResult>> claimed = store->ClaimMany(claims, minutes(1));
  ASSERT_THAT(claimed, IsOk());
  EXPECT_TRUE((*claimed)[0].claimed);
  ASSERT_THAT(store->SweepExpired(), IsOk());
  Result<PollResult> polled = store->Poll(std::vector<std::string>{"task"}, true);
  ASSERT_THAT(polled, IsOk());
  const std::vector<ReleaseRequest> releases = {
      {"task", "ticket", schedule, std::nullopt, ReleasedRun{{}, RunOrigin{"host", 1}}}};
  Result<std::vector<ReleaseResult>> released = store->ReleaseMany(releases);
  ASSERT_THAT(released, IsOk());
  EXPECT_TRUE((*released)[0].released);
  ASSERT_NE(store->history(), nullptr);
  EXPECT_THAT(store->history()->ListRuns("task", 10, std::nullopt),
              StatusIs(StatusCode::kFailedPrecondition));
  pg_test::RawConnection db(url(), database_);
  EXPECT_FALSE(HasRunsTable(db));
}

TEST_F(PostgresSchemaTest, SchemaDivisionKeepsPluginsApartAndNotifiesPerSchema) {
  const std::string long_schema(60, 's');  // "stagehand_tasks_" + 60 bytes exceeds 63: hashed
  std::unique_ptr<TaskStore> a = OpenMigrated("plugin_a");
  std::unique_ptr<TaskStore> b = OpenMigrated(long_schema);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);

  std::mutex mu;
  std::condition_variable changed;
  std::vector<std::string> seen;
  auto listener = [&](const std::string& name) {
    return [&, name](const StoreEvent& event) {
      std::lock_guard lock(mu);
      seen.push_back(name + ":" + event.task_id);
      changed.notify_all();
    };
  };
  std::unique_ptr<Notifications> on_a = a->Listen(listener("a"));
  std::unique_ptr<Notifications> on_b = b->Listen(listener("b"));

  TaskSchedule schedule;
  schedule.settings.cadence = testing::ParsedCadence("PT10M");
  schedule.settings.timeout_after_duration = "PT1M";
  ASSERT_THAT(a->Upsert("only-in-a", schedule), IsOk());
  ASSERT_THAT(b->Upsert("only-in-b", schedule), IsOk());
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(changed.wait_for(lock, seconds(10), [&] { return seen.size() >= 2; }));
  }
  on_a.reset();
  on_b.reset();
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::string>{"a:only-in-a", "b:only-in-b"}));

  Result<std::vector<TaskRow>> rows_a = a->States();
  Result<std::vector<TaskRow>> rows_b = b->States();
  ASSERT_TRUE(rows_a.ok() && rows_b.ok());
  ASSERT_EQ(rows_a->size(), 1u);
  EXPECT_EQ(rows_a->front().id, "only-in-a");
  ASSERT_EQ(rows_b->size(), 1u);
  EXPECT_EQ(rows_b->front().id, "only-in-b");

  // Each plugin's runs live in its own schema's history.
  ASSERT_NE(a->history(), nullptr);
  ASSERT_NE(b->history(), nullptr);
  const std::vector<RunStart> starts = {RunStart{"run-a", "only-in-a", RunOrigin{"host", 1}}};
  ASSERT_THAT(a->history()->RecordStarts(starts), IsOk());
  EXPECT_THAT(a->history()->GetRun("run-a"), IsOk());
  EXPECT_THAT(b->history()->GetRun("run-a"), StatusIs(StatusCode::kNotFound));

  pg_test::RawConnection db(url(), database_);
  db.Exec("SET search_path = plugin_a");
  EXPECT_EQ(DumpSchema(db), ExpectedSchema());
  EXPECT_EQ(DumpSchema(db, Part::kStagehand), ExpectedStagehandSchema());
  EXPECT_EQ(db.Scalar("SELECT count(*) FROM pg_tables WHERE tablename = "
                      "'backstage_backend_tasks__tasks' AND schemaname = 'public'"),
            "0");
  EXPECT_EQ(db.Scalar("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'stagehand\\_%' "
                      "AND schemaname = 'public'"),
            "0");
}

TEST_F(PostgresSchemaTest, IdentifiersAndIdsNeedNoCareFromCallers) {
  database_ = pg_test::UniqueDatabaseName("stagehand \"odd\" name;");
  std::unique_ptr<TaskStore> store = OpenMigrated("odd \"schema\"");
  ASSERT_NE(store, nullptr);
  TaskSchedule schedule;
  schedule.settings.cadence = testing::ParsedCadence("PT10M");
  schedule.settings.timeout_after_duration = "PT1M";
  const std::vector<std::string> ids = {"a\"b", "c\\d", "e,f", "{g}", "h'); DROP TABLE x; --",
                                        "NULL", ""};
  for (const std::string& id : ids) ASSERT_THAT(store->Upsert(id, schedule), IsOk()) << id;
  Result<PollResult> poll = store->Poll(ids, true);
  ASSERT_THAT(poll, IsOk());
  ASSERT_EQ(poll->entries.size(), ids.size());
  for (const PollEntry& entry : poll->entries) {
    EXPECT_EQ(entry.readiness, Readiness::kReady) << entry.id;
  }
  Result<PollResult> missing = store->Poll(std::vector<std::string>{"a", "a\"b"}, false);
  ASSERT_THAT(missing, IsOk());
  EXPECT_EQ(missing->entries[0].readiness, Readiness::kMissing);
  EXPECT_EQ(missing->entries[1].readiness, Readiness::kReady);
}

// Backstage's own statements (spec §4.3–4.6, §5, §7, with knex's PostgreSQL bindings) run against
// a stagehand-migrated table, interleaved with the store's operations: each side reads what the
// other wrote.
TEST_F(PostgresSchemaTest, BackstageStatementsAndOursInteroperate) {
  std::unique_ptr<TaskStore> store = OpenMigrated();
  ASSERT_NE(store, nullptr);
  pg_test::RawConnection backstage(url(), database_);

  // persistTask of a cron task from a Backstage host (nextStartAt bound as an ISO string).
  const char* const cron_settings =
      R"({"version":2,"cadence":"0 0 * * *","timeoutAfterDuration":"PT30M"})";
  backstage.Exec(
      "insert into \"backstage_backend_tasks__tasks\" (\"id\", \"next_run_start_at\", "
      "\"settings_json\") values ($1, $2, $3) on conflict (\"id\") do update set "
      "\"settings_json\" = \"excluded\".\"settings_json\",\"next_run_start_at\" = CASE WHEN "
      "\"backstage_backend_tasks__tasks\".\"next_run_start_at\" IS NULL OR $4 < "
      "\"backstage_backend_tasks__tasks\".\"next_run_start_at\" THEN $5 ELSE "
      "\"backstage_backend_tasks__tasks\".\"next_run_start_at\" END",
      {"bs-cron", "2099-11-30T23:59:59.000+00:00", cron_settings, "2099-11-30T23:59:59.000+00:00",
       "2099-11-30T23:59:59.000+00:00"});
  // persistTask of a duration task (startAt CURRENT_TIMESTAMP).
  backstage.Exec(
      "insert into \"backstage_backend_tasks__tasks\" (\"id\", \"next_run_start_at\", "
      "\"settings_json\") values ($1, CURRENT_TIMESTAMP, $2) on conflict (\"id\") do update set "
      "\"settings_json\" = \"excluded\".\"settings_json\",\"next_run_start_at\" = CASE WHEN "
      "\"backstage_backend_tasks__tasks\".\"next_run_start_at\" IS NULL OR now() + interval "
      "'600 seconds' < \"backstage_backend_tasks__tasks\".\"next_run_start_at\" THEN now() + "
      "interval '600 seconds' ELSE \"backstage_backend_tasks__tasks\".\"next_run_start_at\" END",
      {"bs-duration", kSettingsPT10M});

  Result<std::vector<TaskRow>> rows = store->States();
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].id, "bs-cron");
  EXPECT_EQ((*rows)[0].settings_json, cron_settings);
  Result<WallTime> expected_cron = ParseIsoInstant("2099-11-30T23:59:59Z");
  ASSERT_THAT(expected_cron, IsOk());
  EXPECT_EQ((*rows)[0].next_run_start_at, *expected_cron);
  EXPECT_EQ(ToTaskState((*rows)[0], TimeZone::Utc()).starts_at, "2099-11-30T23:59:59.000+00:00");

  // We see Backstage's duration row as due, claim it, and release it with an error.
  Result<PollResult> poll = store->Poll(std::vector<std::string>{"bs-cron", "bs-duration"}, false);
  ASSERT_THAT(poll, IsOk());
  EXPECT_EQ(poll->entries[0].readiness, Readiness::kNotReady);
  EXPECT_EQ(poll->entries[1].readiness, Readiness::kReady);
  Result<ClaimResult> claim = store->Claim("bs-duration", "ours", minutes(1), minutes(1));
  ASSERT_TRUE(claim.ok() && claim->claimed);

  // Backstage's poller query sees our claim; its claim fails on our ticket.
  const std::string poller_query =
      "SELECT id AS id, settings_json AS \"settingsJson\", CASE WHEN next_run_start_at <= "
      "CURRENT_TIMESTAMP AND current_run_ticket IS NULL THEN TRUE ELSE FALSE END AS ready FROM "
      "backstage_backend_tasks__tasks WHERE id IN ($1)";
  EXPECT_EQ(
      backstage.Scalar("SELECT ready::text FROM (" + poller_query + ") AS p", {"bs-duration"}),
      "false");
  pg_test::RawResult stolen = backstage.Exec(
      "update \"backstage_backend_tasks__tasks\" set \"current_run_ticket\" = $1, "
      "\"current_run_started_at\" = CURRENT_TIMESTAMP, \"current_run_expires_at\" = now() + "
      "interval '60 seconds' where \"id\" = $2 and \"current_run_ticket\" is null",
      {"theirs", "bs-duration"});
  EXPECT_STREQ(PQcmdTuples(stolen.get()), "0");

  TaskSchedule schedule;
  schedule.settings.cadence = testing::ParsedCadence("PT10M");
  schedule.settings.timeout_after_duration = "PT1M";
  const std::string error = R"({"name":"TypeError","message":"bad type"})";
  Result<bool> released = store->Release("bs-duration", "ours", schedule, error);
  ASSERT_TRUE(released.ok() && *released);
  EXPECT_EQ(backstage.Scalar("SELECT last_run_error_json FROM backstage_backend_tasks__tasks "
                             "WHERE id = 'bs-duration'"),
            error);
  EXPECT_EQ(
      backstage.Scalar("SELECT ready::text FROM (" + poller_query + ") AS p", {"bs-duration"}),
      "false");

  // Backstage triggers it, claims it and releases it; we read its run and its error.
  backstage.Exec(
      "update \"backstage_backend_tasks__tasks\" set \"next_run_start_at\" = CURRENT_TIMESTAMP "
      "where \"id\" = $1 and \"current_run_ticket\" is null",
      {"bs-duration"});
  pg_test::RawResult claimed = backstage.Exec(
      "update \"backstage_backend_tasks__tasks\" set \"current_run_ticket\" = $1, "
      "\"current_run_started_at\" = CURRENT_TIMESTAMP, \"current_run_expires_at\" = now() + "
      "interval '60 seconds' where \"id\" = $2 and \"current_run_ticket\" is null",
      {"theirs", "bs-duration"});
  ASSERT_STREQ(PQcmdTuples(claimed.get()), "1");
  rows = store->States();
  ASSERT_THAT(rows, IsOk());
  const TaskState running = ToTaskState((*rows)[1], TimeZone::Utc());
  EXPECT_EQ(running.status, TaskState::Status::kRunning);
  EXPECT_EQ(running.last_run_error, error);
  ASSERT_TRUE((*rows)[1].current_run_started_at && (*rows)[1].current_run_expires_at);
  EXPECT_EQ(*(*rows)[1].current_run_expires_at - *(*rows)[1].current_run_started_at, seconds(60));

  // Our cancel of a Backstage worker's run marks its ticket (the worker's liveness check then
  // fails and its release matches nothing) and shortens the expiry to the hold, after which
  // Backstage's own janitor frees the row.
  ASSERT_THAT(store->Cancel("bs-duration", milliseconds(1)), IsOk());
  pg_test::RawResult their_release = backstage.Exec(
      "update \"backstage_backend_tasks__tasks\" set \"next_run_start_at\" = "
      "greatest(next_run_start_at + interval '600 seconds', now()), \"current_run_ticket\" = "
      "null, \"current_run_started_at\" = null, \"current_run_expires_at\" = null, "
      "\"last_run_ended_at\" = CURRENT_TIMESTAMP, \"last_run_error_json\" = $1 where \"id\" = $2 "
      "and \"current_run_ticket\" = $3",
      {std::nullopt, "bs-duration", "theirs"});
  EXPECT_STREQ(PQcmdTuples(their_release.get()), "0");  // our cancel took its ticket
  EXPECT_EQ(backstage.Scalar("SELECT current_run_ticket FROM backstage_backend_tasks__tasks "
                             "WHERE id = 'bs-duration'"),
            "cancel:theirs");
  EXPECT_THAT(store->Trigger("bs-duration"), StatusIs(StatusCode::kConflict));
  backstage.Exec("SELECT pg_sleep(0.01)");
  pg_test::RawResult their_janitor = backstage.Exec(
      "update \"backstage_backend_tasks__tasks\" set \"current_run_ticket\" = null, "
      "\"current_run_started_at\" = null, \"current_run_expires_at\" = null, "
      "\"last_run_ended_at\" = CURRENT_TIMESTAMP, \"last_run_error_json\" = $1 where "
      "\"current_run_expires_at\" < CURRENT_TIMESTAMP returning \"id\"",
      {R"({"name":"Error","message":"Task timed out"})"});
  ASSERT_EQ(PQntuples(their_janitor.get()), 1);

  // Backstage's janitor resets a run of ours whose expiry passed.
  ASSERT_THAT(store->Trigger("bs-duration"), IsOk());
  claim = store->Claim("bs-duration", "short", milliseconds(1), milliseconds(1));
  ASSERT_TRUE(claim.ok() && claim->claimed);
  backstage.Exec("SELECT pg_sleep(0.01)");
  pg_test::RawResult janitor = backstage.Exec(
      "update \"backstage_backend_tasks__tasks\" set \"current_run_ticket\" = null, "
      "\"current_run_started_at\" = null, \"current_run_expires_at\" = null, "
      "\"last_run_ended_at\" = CURRENT_TIMESTAMP, \"last_run_error_json\" = $1 where "
      "\"current_run_expires_at\" < CURRENT_TIMESTAMP returning \"id\"",
      {R"({"name":"Error","message":"Task timed out"})"});
  ASSERT_EQ(PQntuples(janitor.get()), 1);
  Result<bool> late = store->Release("bs-duration", "short", schedule, std::nullopt);
  ASSERT_THAT(late, IsOk());
  EXPECT_FALSE(*late);
}

// Under load: what only a busy real server shows.

TEST_F(PostgresSchemaTest, RegistrationsAndReleasesOfTheSameRowsAtOnceNeverDeadlock) {
  // A host registering its tasks while another host releases the same tasks: both lock the rows,
  // and two lock orders would deadlock. The rows are written in descending id order, so a table
  // scan meets them the other way round from a release, which locks in id order.
  std::unique_ptr<TaskStore> registering = OpenMigrated();
  std::unique_ptr<TaskStore> releasing = Open();
  ASSERT_NE(registering, nullptr);
  ASSERT_NE(releasing, nullptr);
  TaskSchedule schedule;
  schedule.settings.cadence = testing::ParsedCadence("PT10M");
  schedule.settings.timeout_after_duration = "PT1M";
  std::vector<TaskUpsert> upserts;
  std::vector<ReleaseRequest> releases;
  for (int i = 299; i >= 0; --i) {
    const std::string id = fmt::format("task-{:03}", i);
    upserts.push_back({id, schedule});
    releases.push_back({id, "not-held", schedule, std::nullopt});
  }
  ASSERT_THAT(registering->UpsertMany(upserts), IsOk());
  std::vector<Status> failures;
  std::mutex failures_mu;
  std::barrier start(2);
  const auto repeat = [&](const std::function<Status()>& call) {
    start.arrive_and_wait();
    for (int round = 0; round < 40; ++round) {
      if (Status status = call(); !status.ok()) {
        std::lock_guard lock(failures_mu);
        failures.push_back(status);
      }
    }
  };
  std::thread registrations(
      [&] { repeat([&] { return registering->UpsertMany(upserts).status(); }); });
  std::thread releases_thread(
      [&] { repeat([&] { return releasing->ReleaseMany(releases).status(); }); });
  registrations.join();
  releases_thread.join();
  for (const Status& failure : failures) ADD_FAILURE() << failure.ToString();
}

// SQL that fills the run history with `rows` ended runs `bulk-<n>` of 300 other tasks.
std::string InsertEndedRuns(int rows) {
  return fmt::format(
      "INSERT INTO stagehand_task_runs (run_id, task_id, slot, seq, host, pid, trigger_kind, "
      "started_at, ended_at, outcome, attempt) "
      "SELECT 'bulk-' || n, 'other-' || (n % 300), n / 300, n / 300 + 1, 'host', 1, 'schedule', "
      "now(), now(), 'succeeded', 1 FROM generate_series(1, {}) AS n",
      rows);
}

TEST_F(PostgresSchemaTest, HistoryStatementsKeepToTheirIndexesAfterTheTableHasGrown) {
  // A run history starts empty and grows by orders of magnitude. A plan made while it was small
  // (a prepared statement's cached generic plan) scans it whole; every statement that ends runs
  // must find them by index however small the table was when the store first used it.
  ExpectStatementsKeepToTheKeyAfterGrowing("stagehand_task_runs", InsertEndedRuns(60000),
                                           /*history=*/true,
                                           /*at_least=*/2);  // the claims and the releases
}

TEST_F(PostgresSchemaTest, TaskStatementsKeepToTheKeyAfterTheTableHasGrown) {
  // A plugin's task table is small when a host first claims from it, and grows (more tasks, or
  // dead row versions until autovacuum comes). A prepared statement's generic plan made while it
  // was small read it whole and kept doing so as it grew; the hot statements must reach their
  // rows through the primary key whatever the table's size when they were planned.
  ExpectStatementsKeepToTheKeyAfterGrowing(
      "backstage_backend_tasks__tasks",
      "INSERT INTO backstage_backend_tasks__tasks (id, settings_json, next_run_start_at) "
      "SELECT 'other-' || n, '{\"version\":2,\"cadence\":\"manual\",'"
      " || '\"timeoutAfterDuration\":\"PT1M\"}', NULL FROM generate_series(1, 60000) AS n",
      /*history=*/false, /*at_least=*/3);  // the triggers, the claims and the releases
}

TEST_F(PostgresSchemaTest, NoStatementIsCompiledByTheJit) {
  // With sequential scans priced out (ADR 0016), a statement that must still read a table whole
  // (a run looked up by id, the knex lock's bookkeeping) is estimated above jit_above_cost, and
  // PostgreSQL would compile it to machine code on every call: tens of milliseconds for a
  // statement that takes a few.
  std::unique_ptr<TaskStore> store = OpenMigrated();
  ASSERT_NE(store, nullptr);
  pg_test::RawConnection db(url(), database_);
  db.Exec(InsertEndedRuns(20000));
  db.Exec("ANALYZE stagehand_task_runs");
  db.Exec("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
  db.Exec(
      "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = "
      "current_database()), 0)");

  ASSERT_THAT(store->Migrate(), IsOk());
  Result<TaskRun> run = store->history()->GetRun("bulk-77");
  ASSERT_THAT(run, IsOk());
  EXPECT_EQ(run->task_id, "other-77");

  pg_test::RawResult compiled = db.Exec(
      "SELECT count(*), coalesce(sum(jit_functions), 0), "
      "coalesce(string_agg(left(query, 60), ' | ') FILTER (WHERE jit_functions > 0), '') "
      "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = "
      "current_database()) AND query NOT LIKE '%pg_stat%'");
  EXPECT_GE(std::stoi(PQgetvalue(compiled.get(), 0, 0)), 2);
  EXPECT_EQ(std::string(PQgetvalue(compiled.get(), 0, 1)), "0")
      << "compiled: " << PQgetvalue(compiled.get(), 0, 2);
}

TEST_F(PostgresSchemaTest, EachTaskKeepsARingOfRowsAndARunTakesTheRowOfTheOldest) {
  // Retention deletes nothing: a run takes the row of the run recorded max_runs_per_task runs
  // before it, whether its start was recorded by the claim or the run written whole at its end.
  std::unique_ptr<TaskStore> store = OpenMigrated();
  ASSERT_NE(store, nullptr);
  RunHistoryLimits limits;
  limits.max_runs_per_task = 4;
  store->history()->SetLimits(limits);
  TaskSchedule schedule;
  schedule.settings.cadence = testing::ParsedCadence("manual");
  schedule.settings.timeout_after_duration = "PT1M";
  ASSERT_THAT(store->Upsert("a", schedule), IsOk());
  int ticket = 0;
  const auto run_once = [&](bool record_start) {
    ASSERT_THAT(store->Trigger("a"), IsOk());
    const std::string run = fmt::format("a-{}", ++ticket);
    std::vector<ClaimRequest> claims = {{"a", run, minutes(1), std::nullopt}};
    if (record_start) claims[0].history = RunOrigin{"host", 1};
    Result<std::vector<ClaimResult>> claimed = store->ClaimMany(claims, minutes(1));
    ASSERT_TRUE(claimed.ok() && (*claimed)[0].claimed) << claimed.status().ToString();
    RunFinish finish;
    finish.exit_code = ticket;
    const std::vector<ReleaseRequest> releases = {
        {"a", run, schedule, std::nullopt,
         ReleasedRun{finish, RunOrigin{"host", 1}, (*claimed)[0].db_now}}};
    Result<std::vector<ReleaseResult>> released = store->ReleaseMany(releases);
    ASSERT_TRUE(released.ok() && (*released)[0].released) << released.status().ToString();
  };
  for (int i = 0; i < 10; ++i) ASSERT_NO_FATAL_FAILURE(run_once(/*record_start=*/i % 3 == 0));

  pg_test::RawConnection db(url(), database_);
  EXPECT_EQ(db.Scalar("SELECT string_agg(format('%s:%s:%s:%s', slot, seq, run_id, exit_code), ' ' "
                      "ORDER BY slot) FROM stagehand_task_runs WHERE task_id = 'a'"),
            "0:9:a-9:9 1:10:a-10:10 2:7:a-7:7 3:8:a-8:8");
  EXPECT_EQ(db.Scalar("SELECT runs FROM stagehand_task_run_counts WHERE task_id = 'a'"), "10");
  Result<RunPage> page = store->history()->ListRuns("a", 100, std::nullopt);
  ASSERT_THAT(page, IsOk());
  std::vector<std::string> ids;
  for (const TaskRun& run : page->runs) ids.push_back(run.run_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a-10", "a-9", "a-8", "a-7"}));

  // Fewer runs kept: the next runs take the lower rows, and the prune removes the rows beyond.
  limits.max_runs_per_task = 2;
  store->history()->SetLimits(limits);
  ASSERT_NO_FATAL_FAILURE(run_once(/*record_start=*/true));
  EXPECT_EQ(db.Scalar("SELECT string_agg(run_id, ' ' ORDER BY slot) FROM stagehand_task_runs "
                      "WHERE task_id = 'a'"),
            "a-11 a-10 a-7 a-8");
  Result<std::size_t> pruned = store->history()->PruneExpired(100);
  ASSERT_THAT(pruned, IsOk());
  EXPECT_EQ(*pruned, 2u);
  EXPECT_EQ(db.Scalar("SELECT string_agg(run_id, ' ' ORDER BY slot) FROM stagehand_task_runs "
                      "WHERE task_id = 'a'"),
            "a-11 a-10");
}

}  // namespace
}  // namespace stagehand
