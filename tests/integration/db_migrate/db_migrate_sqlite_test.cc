// `stagehand db migrate` on SQLite files, plus the failures that need no database server.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <string>
#include <vector>

#include "integration/db_migrate/db_migrate_test_util.h"
#include "stagehand/cli/cli.h"

namespace stagehand::db_migrate_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Runs `sql` on the SQLite file at `path` and returns every row's columns joined by '|'.
std::vector<std::string> Query(const std::string& path, const std::string& sql) {
  std::vector<std::string> rows;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "cannot open " << path;
    sqlite3_close(db);
    return rows;
  }
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sqlite3_errmsg(db) << " in: " << sql;
  } else {
    while (sqlite3_step(statement) == SQLITE_ROW) {
      std::string row;
      for (int i = 0; i < sqlite3_column_count(statement); ++i) {
        const unsigned char* text = sqlite3_column_text(statement, i);
        row += (i == 0 ? "" : "|") +
               std::string(text == nullptr ? "NULL" : reinterpret_cast<const char*>(text));
      }
      rows.push_back(row);
    }
  }
  sqlite3_finalize(statement);
  sqlite3_close(db);
  return rows;
}

std::vector<std::string> Migrations(const std::string& path) {
  return Query(path,
               "SELECT name, batch FROM backstage_backend_tasks__knex_migrations ORDER BY id");
}

const std::vector<std::string> kAllMigrations = {"20210928160613_init.js|1",
                                                 "20240712211735_nullable_next_run.js|1",
                                                 "20250411000000_last_run.js|1"};

class DbMigrateSqliteTest : public ::testing::Test {
 protected:
  std::string Config(const std::string& database_extra = "",
                     const std::string& rest =
                         "stagehand:\n  plugins:\n    catalog: {}\n"
                         "    search: {}\n") {
    return dir_.Write("app-config.yaml",
                      "backend:\n  database:\n    client: better-sqlite3\n    connection:\n"
                      "      directory: " +
                          data().string() + "\n" + database_extra + rest);
  }
  std::filesystem::path data() const { return dir_.path() / "data"; }
  std::string File(const std::string& plugin) const {
    return (data() / (plugin + ".sqlite")).string();
  }

  TempDir dir_;
};

TEST_F(DbMigrateSqliteTest, CreatesOneMigratedFilePerPlugin) {
  const std::string config =
      Config("    plugin:\n      scaffolder:\n        skipMigrations: false\n");
  CliResult result = RunCli({"db", "migrate", "--config", config});
  ASSERT_EQ(result.code, cli::kExitOk) << result.err;
  EXPECT_EQ(result.out, "catalog: migrated (" + File("catalog") + ")\nscaffolder: migrated (" +
                            File("scaffolder") + ")\nsearch: migrated (" + File("search") + ")\n");
  for (const std::string plugin : {"catalog", "scaffolder", "search"}) {
    ASSERT_TRUE(std::filesystem::exists(File(plugin))) << plugin;
    EXPECT_EQ(Migrations(File(plugin)), kAllMigrations);
    EXPECT_EQ(
        Query(File(plugin), "SELECT is_locked FROM backstage_backend_tasks__knex_migrations_lock"),
        std::vector<std::string>{"0"});
    // The run history's tables, recorded in stagehand's own bookkeeping, never in knex's.
    EXPECT_EQ(Query(File(plugin), "SELECT name FROM stagehand_migrations ORDER BY name"),
              (std::vector<std::string>{"0001_task_runs", "0002_task_registrations",
                                        "0003_run_trace_id", "0004_request_keys"}));
    EXPECT_EQ(Query(File(plugin),
                    "SELECT count(*) FROM sqlite_master WHERE name = 'stagehand_task_runs'"),
              std::vector<std::string>{"1"});
    EXPECT_EQ(
        Query(File(plugin),
              "SELECT name FROM pragma_table_info('backstage_backend_tasks__tasks')"
              " ORDER BY cid"),
        (std::vector<std::string>{"id", "settings_json", "next_run_start_at", "current_run_ticket",
                                  "current_run_started_at", "current_run_expires_at",
                                  "last_run_error_json", "last_run_ended_at"}));
  }
}

TEST_F(DbMigrateSqliteTest, SecondRunIsIdempotent) {
  const std::string config = Config();
  ASSERT_EQ(RunCli({"db", "migrate", "--config", config}).code, cli::kExitOk);
  CliResult again = RunCli({"db", "migrate", "--config", config});
  ASSERT_EQ(again.code, cli::kExitOk) << again.err;
  EXPECT_THAT(again.out, HasSubstr("catalog: migrated"));
  EXPECT_EQ(Migrations(File("catalog")), kAllMigrations);
  EXPECT_EQ(Migrations(File("search")), kAllMigrations);
}

TEST_F(DbMigrateSqliteTest, PluginFlagMigratesOnlyThatPlugin) {
  CliResult result = RunCli({"db", "migrate", "--config", Config(), "--plugin", "search"});
  ASSERT_EQ(result.code, cli::kExitOk) << result.err;
  EXPECT_EQ(result.out, "search: migrated (" + File("search") + ")\n");
  EXPECT_FALSE(std::filesystem::exists(File("catalog")));
}

TEST_F(DbMigrateSqliteTest, SkipMigrationsPerPluginAndGlobal) {
  CliResult result = RunCli(
      {"db", "migrate", "--config",
       Config("    skipMigrations: true\n    plugin:\n      catalog:\n        skipMigrations: "
              "false\n")});
  ASSERT_EQ(result.code, cli::kExitOk) << result.err;
  EXPECT_EQ(result.out,
            "catalog: migrated (" + File("catalog") + ")\nsearch: skipped (skipMigrations)\n");
  EXPECT_FALSE(std::filesystem::exists(File("search")));
  EXPECT_EQ(Migrations(File("catalog")), kAllMigrations);
}

TEST_F(DbMigrateSqliteTest, LaterConfigFilesOverrideEarlierOnes) {
  const std::string base = Config();
  const std::string local = dir_.Write(
      "app-config.local.yaml",
      "backend:\n  database:\n    plugin:\n      search:\n        skipMigrations: true\n");
  CliResult result = RunCli({"db", "migrate", "--config", base, "--config", local});
  ASSERT_EQ(result.code, cli::kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("search: skipped (skipMigrations)"));
  EXPECT_THAT(result.out, HasSubstr("catalog: migrated"));
}

TEST_F(DbMigrateSqliteTest, UnwritableDirectoryFailsNamingPluginAndDatabase) {
  const std::string blocker = dir_.Write("blocker", "not a directory");
  const std::string config = dir_.Write(
      "bad.yaml",
      "backend:\n  database:\n    client: better-sqlite3\n    connection:\n      directory: " +
          blocker + "/sub\nstagehand:\n  plugins:\n    catalog: {}\n");
  CliResult result = RunCli({"db", "migrate", "--config", config});
  EXPECT_EQ(result.code, cli::kExitFailure);
  EXPECT_THAT(result.out, HasSubstr("catalog: failed: "));
  EXPECT_THAT(result.out, HasSubstr("'catalog'"));
  EXPECT_THAT(result.out, HasSubstr(blocker + "/sub/catalog.sqlite"));
}

TEST_F(DbMigrateSqliteTest, UnreachablePostgresFailsNamingPluginAndDatabaseButNotPassword) {
  const std::string config =
      dir_.Write("pg.yaml",
                 "backend:\n  database:\n    client: pg\n    connection:\n      host: 127.0.0.1\n"
                 "      port: 1\n      user: u\n      password: hunter2\n"
                 "stagehand:\n  plugins:\n    catalog: {}\n");
  CliResult result = RunCli({"db", "migrate", "--config", config});
  EXPECT_EQ(result.code, cli::kExitFailure);
  EXPECT_THAT(result.out, HasSubstr("catalog: failed: "));
  EXPECT_THAT(result.out, HasSubstr("backstage_plugin_catalog"));
  EXPECT_THAT(result.out + result.err, Not(HasSubstr("hunter2")));
}

TEST_F(DbMigrateSqliteTest, ConfigErrorsExit78ListingEveryProblem) {
  const std::string config =
      dir_.Write("bad.yaml",
                 "backend:\n  database:\n    client: oracledb\n    connection: ':memory:'\n"
                 "    pluginDivisionMode: tables\nstagehand:\n  plugins:\n    catalog: {}\n");
  CliResult result = RunCli({"db", "migrate", "--config", config});
  EXPECT_EQ(result.code, cli::kExitConfig);
  EXPECT_THAT(result.err, HasSubstr("'backend.database.client' in '" + config + "'"));
  EXPECT_THAT(result.err, HasSubstr("'backend.database.pluginDivisionMode' in '" + config + "'"));
  EXPECT_EQ(result.out, "");
}

TEST_F(DbMigrateSqliteTest, MissingVariableIsAConfigError) {
  const std::string config =
      dir_.Write("env.yaml",
                 "backend:\n  database:\n    client: better-sqlite3\n    connection:\n"
                 "      directory: ${STAGEHAND_TEST_SURELY_UNSET_VARIABLE}\n"
                 "stagehand:\n  plugins:\n    catalog: {}\n");
  CliResult result = RunCli({"db", "migrate", "--config", config});
  EXPECT_EQ(result.code, cli::kExitConfig);
  EXPECT_THAT(result.err, HasSubstr("STAGEHAND_TEST_SURELY_UNSET_VARIABLE"));
  EXPECT_THAT(result.err, HasSubstr("backend.database.connection.directory"));
}

TEST_F(DbMigrateSqliteTest, UnreadableFileIsAConfigError) {
  CliResult result = RunCli({"db", "migrate", "--config", (dir_.path() / "missing.yaml").string()});
  EXPECT_EQ(result.code, cli::kExitConfig);
  EXPECT_THAT(result.err, HasSubstr("missing.yaml"));
}

TEST_F(DbMigrateSqliteTest, NoPluginsIsAConfigError) {
  CliResult result = RunCli({"db", "migrate", "--config", Config("", "")});
  EXPECT_EQ(result.code, cli::kExitConfig);
  EXPECT_THAT(result.err, HasSubstr("no plugins to migrate"));
}

// Issue 13: `db migrate --plugin nope` created nope.sqlite and exited 0.
TEST_F(DbMigrateSqliteTest, RefusesAPluginTheConfigDoesNotName) {
  CliResult result = RunCli({"db", "migrate", "--config", Config(), "--plugin", "nope"});
  EXPECT_EQ(result.code, cli::kExitConfig);
  EXPECT_EQ(result.err,
            "stagehand: --plugin nope: the config names no plugin 'nope' under 'stagehand.plugins' "
            "or 'backend.database.plugin'; it names catalog, search\n");
  EXPECT_EQ(result.out, "");
  EXPECT_FALSE(std::filesystem::exists(data()));
}

TEST_F(DbMigrateSqliteTest, PluginFlagAcceptsAPluginNamedOnlyUnderTheDatabase) {
  CliResult result = RunCli({"db", "migrate", "--config",
                             Config("    plugin:\n      scaffolder: {skipMigrations: false}\n"),
                             "--plugin", "scaffolder"});
  ASSERT_EQ(result.code, cli::kExitOk) << result.err;
  EXPECT_EQ(result.out, "scaffolder: migrated (" + File("scaffolder") + ")\n");
}

// Issue 13: `db migrate` accepted a config that `config check` rejects.
TEST_F(DbMigrateSqliteTest, RejectsWhatConfigCheckRejectsWithTheSameLines) {
  const std::string config =
      Config("",
             "stagehand:\n  schedular: {lease: 5s}\n  plugins:\n    catalog:\n      tasks:\n"
             "        hot:\n          schedule: {frequency: 0s, timeout: 1m, intialDelay: 1s}\n"
             "          command: ['true']\n        loop:\n"
             "          schedule: {frequency: {minutes: -1}, timeout: 1m}\n"
             "          command: ['true']\n");
  CliResult check = RunCli({"config", "check", "--config", config});
  ASSERT_EQ(check.code, cli::kExitConfig);
  CliResult migrate = RunCli({"db", "migrate", "--config", config});
  EXPECT_EQ(migrate.code, cli::kExitConfig);
  EXPECT_EQ(migrate.out, "");
  EXPECT_EQ(migrate.err + "stagehand: config check failed: 3 problems\n", check.err);
  EXPECT_THAT(migrate.err,
              HasSubstr("stagehand: Invalid config value for key 'stagehand.schedular' in '" +
                        config + "': unknown key 'schedular'; did you mean 'scheduler'?\n"));
  EXPECT_THAT(migrate.err,
              HasSubstr("'stagehand.plugins.catalog.tasks.hot.schedule.intialDelay' in '" + config +
                        "': unknown key 'intialDelay'; did you mean "
                        "'initialDelay'?\n"));
  EXPECT_THAT(migrate.err,
              HasSubstr("'stagehand.plugins.catalog.tasks.loop.schedule.frequency' in '" + config +
                        "': must be longer than zero, got PT-1M\n"));
  EXPECT_FALSE(std::filesystem::exists(data()));
}

TEST_F(DbMigrateSqliteTest, IgnoredBackendKeysAreWarnings) {
  const std::string config = Config("    ensureExists: true\n");
  CliResult result = RunCli({"db", "migrate", "--config", config});
  ASSERT_EQ(result.code, cli::kExitOk) << result.err;
  EXPECT_EQ(result.err,
            "stagehand: warning: Ignoring config key 'backend.database.ensureExists' in '" +
                config + "': a Backstage setting that stagehand does not use\n");
  EXPECT_THAT(result.out, HasSubstr("catalog: migrated"));
}

TEST_F(DbMigrateSqliteTest, MissingConfigFlagIsAUsageError) {
  CliResult result = RunCli({"db", "migrate"});
  EXPECT_EQ(result.code, cli::kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--config"));
}

TEST_F(DbMigrateSqliteTest, HelpShowsAnExample) {
  CliResult result = RunCli({"db", "migrate", "--help"});
  EXPECT_EQ(result.code, cli::kExitOk);
  EXPECT_THAT(result.out, HasSubstr("stagehand db migrate --config app-config.yaml"));
}

}  // namespace
}  // namespace stagehand::db_migrate_test
