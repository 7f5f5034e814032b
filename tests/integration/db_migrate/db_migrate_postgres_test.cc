// `stagehand db migrate` against the test PostgreSQL server (STAGEHAND_TEST_POSTGRES_URL): plugin
// databases named <prefix><pluginId>, with a prefix unique to the test so that runs never clash;
// every database created is dropped at the end.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "integration/db_migrate/db_migrate_test_util.h"
#include "integration/postgres/test_server.h"
#include "stagehand/cli/cli.h"

namespace stagehand::db_migrate_test {
namespace {

using ::testing::HasSubstr;

class DbMigratePostgresTest : public pg_test::ServerTest {
 protected:
  void SetUp() override {
    pg_test::ServerTest::SetUp();
    if (IsSkipped() || HasFailure()) return;
    prefix_ = pg_test::UniqueDatabaseName("stagehand_dbm") + "_";
  }

  void TearDown() override {
    if (prefix_.empty()) return;
    for (const std::string plugin : {"catalog", "search"}) {
      pg_test::DropDatabase(url(), prefix_ + plugin);
    }
  }

  std::string Config(const std::string& database_extra = "") {
    return dir_.Write("app-config.yaml",
                      "backend:\n  database:\n    client: pg\n    connection: ${TEST_PG_URL}\n"
                      "    prefix: " +
                          prefix_ + "\n" + database_extra +
                          "stagehand:\n  plugins:\n    catalog: {}\n    search: {}\n");
  }

  std::vector<std::string> Migrations(const std::string& database) {
    pg_test::RawConnection connection(url(), database);
    std::vector<std::string> names;
    if (!connection.ok()) return names;
    pg_test::RawResult result = connection.Exec(
        "SELECT name || '|' || batch FROM backstage_backend_tasks__knex_migrations ORDER BY id");
    for (int i = 0; i < PQntuples(result.get()); ++i)
      names.push_back(PQgetvalue(result.get(), i, 0));
    return names;
  }

  // Returns the names stagehand_migrations lists, in order.
  std::vector<std::string> StagehandMigrations(const std::string& database) {
    pg_test::RawConnection connection(url(), database);
    std::vector<std::string> names;
    if (!connection.ok()) return names;
    pg_test::RawResult result =
        connection.Exec("SELECT name FROM stagehand_migrations ORDER BY name");
    for (int i = 0; i < PQntuples(result.get()); ++i)
      names.push_back(PQgetvalue(result.get(), i, 0));
    return names;
  }

  bool DatabaseExists(const std::string& database) {
    pg_test::RawConnection connection(url());
    return connection.Scalar("SELECT count(*) FROM pg_database WHERE datname = $1", {database}) ==
           "1";
  }

  std::string prefix_;
  TempDir dir_;
};

const std::vector<std::string> kAllMigrations = {"20210928160613_init.js|1",
                                                 "20240712211735_nullable_next_run.js|1",
                                                 "20250411000000_last_run.js|1"};
const std::vector<std::string> kStagehandMigrations = {
    "0001_task_runs",      "0002_task_registrations", "0003_task_runs_two_indexes",
    "0004_task_run_rings", "0005_run_trace_id",       "0006_request_keys"};

TEST_F(DbMigratePostgresTest, CreatesAndMigratesOneDatabasePerPlugin) {
  ::setenv("TEST_PG_URL", url().c_str(), 1);
  const std::string config = Config();
  CliResult result = RunCli({"db", "migrate", "--config", config});
  ASSERT_EQ(result.code, cli::kExitOk) << result.out << result.err;
  EXPECT_EQ(result.out, "catalog: migrated (" + prefix_ + "catalog)\nsearch: migrated (" + prefix_ +
                            "search)\n");
  EXPECT_EQ(Migrations(prefix_ + "catalog"), kAllMigrations);
  EXPECT_EQ(Migrations(prefix_ + "search"), kAllMigrations);
  // The run history's tables, recorded in stagehand's own bookkeeping, never in knex's.
  EXPECT_EQ(StagehandMigrations(prefix_ + "catalog"), kStagehandMigrations);
  EXPECT_EQ(StagehandMigrations(prefix_ + "search"), kStagehandMigrations);

  CliResult again = RunCli({"db", "migrate", "--config", config});
  ASSERT_EQ(again.code, cli::kExitOk) << again.out << again.err;
  EXPECT_EQ(Migrations(prefix_ + "catalog"), kAllMigrations);
  EXPECT_EQ(StagehandMigrations(prefix_ + "catalog"), kStagehandMigrations);
}

TEST_F(DbMigratePostgresTest, SkipMigrationsLeavesThePluginDatabaseAlone) {
  ::setenv("TEST_PG_URL", url().c_str(), 1);
  CliResult result = RunCli({"db", "migrate", "--config",
                             Config("    plugin:\n      search:\n        skipMigrations: true\n")});
  ASSERT_EQ(result.code, cli::kExitOk) << result.out << result.err;
  EXPECT_THAT(result.out, HasSubstr("search: skipped (skipMigrations)"));
  EXPECT_FALSE(DatabaseExists(prefix_ + "search"));
  EXPECT_EQ(Migrations(prefix_ + "catalog"), kAllMigrations);
}

}  // namespace
}  // namespace stagehand::db_migrate_test
