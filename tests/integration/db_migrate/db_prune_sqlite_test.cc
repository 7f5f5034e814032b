// `stagehand db prune` on SQLite files through cli::Run: which tasks it lists for --older-than,
// what --yes deletes (rows, run history, registrations) and what it keeps (tasks registered or
// refreshed lately, claimed now, ended lately; tasks no stagehand host registered unless
// --include-backstage-only), JSON, and the errors that name the flag.
//
// Time: the rows are written with times relative to SQLite's own now ("-40 days"), as the hosts
// and Backstage workers of a long-running fleet leave them, so nothing waits.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "integration/db_migrate/db_migrate_test_util.h"
#include "stagehand/cli/cli.h"

namespace stagehand::db_migrate_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSettings[] = R"({"version":2,"cadence":"PT1H","timeoutAfterDuration":"PT1M"})";

// Runs `sql` (several statements) on the SQLite file at `path`, failing the test on an error.
void Exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << (error != nullptr ? error : "") << " in: " << sql;
  sqlite3_free(error);
  sqlite3_close(db);
}

// Returns the first column of every row of `sql` on the file at `path`.
std::vector<std::string> Column(const std::string& path, const std::string& sql) {
  std::vector<std::string> values;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "cannot open " << path;
    sqlite3_close(db);
    return values;
  }
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sqlite3_errmsg(db) << " in: " << sql;
  } else {
    while (sqlite3_step(statement) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(statement, 0);
      values.emplace_back(text == nullptr ? "NULL" : reinterpret_cast<const char*>(text));
    }
  }
  sqlite3_finalize(statement);
  sqlite3_close(db);
  return values;
}

// SQLite's now moved by `modifier` ("-40 days"), in the form stagehand writes.
std::string Ago(const std::string& modifier) {
  return "strftime('%Y-%m-%d %H:%M:%f','now','" + modifier + "')";
}

class DbPruneSqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = dir_.Write("app-config.yaml",
                         "backend:\n  database:\n    client: better-sqlite3\n    connection:\n"
                         "      directory: " +
                             (dir_.path() / "data").string() +
                             "\nstagehand:\n  plugins:\n    jobs: {}\n");
    CliResult migrated = RunCli({"db", "migrate", "--config", config_});
    ASSERT_EQ(migrated.code, cli::kExitOk) << migrated.err;
    file_ = (dir_.path() / "data" / "jobs.sqlite").string();
    // gone: registered by web-1 40 days ago, ran then, with two runs in the history.
    AddTask("gone", Ago("-40 days"), Ago("-40 days"), "web-1", Ago("-40 days"));
    Exec(file_,
         "INSERT INTO stagehand_task_runs (run_id, task_id, seq, host, pid, trigger_kind, "
         "started_at, ended_at, outcome, attempt) VALUES "
         "('gone-1', 'gone', 1, 'web-1', 7, 'schedule', " +
             Ago("-41 days") + ", " + Ago("-41 days") +
             ", 'succeeded', 1), "
             "('gone-2', 'gone', 2, 'web-1', 7, 'schedule', " +
             Ago("-40 days") + ", " + Ago("-40 days") +
             ", 'failed', 1), "
             "('alive-1', 'alive', 1, 'web-2', 8, 'schedule', " +
             Ago("-40 days") + ", " + Ago("-40 days") + ", 'succeeded', 1)");
    // alive: registered 40 days ago, refreshed 10 minutes ago by a host that still runs.
    AddTask("alive", Ago("-40 days"), Ago("-40 days"), "web-2", Ago("-10 minutes"));
    // running: registered long ago, claimed now by a host whose claim has not lapsed.
    AddTask("running", Ago("-40 days"), Ago("-40 days"), "web-1", Ago("-40 days"));
    Exec(file_,
         "UPDATE backstage_backend_tasks__tasks SET current_run_ticket = 't', "
         "current_run_started_at = " +
             Ago("-40 days") + ", current_run_expires_at = " + Ago("+1 hour") +
             " WHERE id = 'running'");
    // Backstage workers' tasks, never registered by a stagehand host: one idle for 90 days, one
    // that ended an hour ago.
    AddTask("backstage-idle", Ago("-90 days"), Ago("-90 days"), "", "");
    AddTask("backstage-busy", Ago("-1 hour"), Ago("-30 minutes"), "", "");
  }

  // Adds a task row with its last end and next start, and its registration when `host` is set.
  void AddTask(const std::string& id, const std::string& ended, const std::string& next,
               const std::string& host, const std::string& seen) {
    Exec(file_,
         "INSERT INTO backstage_backend_tasks__tasks (id, settings_json, next_run_start_at, "
         "last_run_ended_at) VALUES ('" +
             id + "', '" + kSettings + "', " + next + ", " + ended + ")");
    if (!host.empty()) {
      Exec(file_,
           "INSERT INTO stagehand_task_registrations (task_id, host, last_seen_at) VALUES ('" + id +
               "', '" + host + "', " + seen + ")");
    }
  }

  std::vector<std::string> Tasks() {
    return Column(file_, "SELECT id FROM backstage_backend_tasks__tasks ORDER BY id");
  }

  TempDir dir_;
  std::string config_;
  std::string file_;
};

const std::vector<std::string> kAllTasks = {"alive", "backstage-busy", "backstage-idle", "gone",
                                            "running"};

TEST_F(DbPruneSqliteTest, ADryRunListsTheCandidatesApartAndDeletesNothing) {
  CliResult result = RunCli({"db", "prune", "--config", config_});
  ASSERT_EQ(result.code, cli::kExitOk) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_THAT(result.out, HasSubstr("Tasks no stagehand host has registered for 30d:\n"
                                    "PLUGIN  TASK  LAST REGISTERED"));
  EXPECT_THAT(result.out, HasSubstr("LAST RUN ENDED"));
  EXPECT_THAT(result.out, HasSubstr("HOST\njobs    gone  40d"));
  EXPECT_THAT(result.out, HasSubstr("web-1\n"));
  EXPECT_THAT(result.out,
              HasSubstr("Tasks no stagehand host has ever registered (Backstage workers' tasks), "
                        "unused for 30d:\n"));
  EXPECT_THAT(result.out, HasSubstr("jobs    backstage-idle  never            90d"));
  for (const char* kept : {"alive", "running", "backstage-busy"}) {
    EXPECT_THAT(result.out, Not(HasSubstr(kept))) << kept;
  }
  EXPECT_THAT(result.out,
              HasSubstr("Dry run: nothing was deleted. Run again with --yes to delete 1 task (its "
                        "row, run history and registration); add --include-backstage-only to "
                        "delete the 1 task no stagehand host has ever registered as well.\n"));
  EXPECT_EQ(Tasks(), kAllTasks);
  EXPECT_EQ(Column(file_, "SELECT count(*) FROM stagehand_task_runs"),
            std::vector<std::string>{"3"});
}

TEST_F(DbPruneSqliteTest, YesDeletesTheRowTheHistoryAndTheRegistrationOfRegisteredTasks) {
  CliResult result = RunCli({"db", "prune", "--config", config_, "--yes"});
  ASSERT_EQ(result.code, cli::kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("jobs: deleted 1 task: gone\n"));
  EXPECT_THAT(result.out, HasSubstr("Kept 1 task no stagehand host has ever registered "
                                    "(--include-backstage-only deletes it).\n"));
  EXPECT_EQ(Tasks(),
            (std::vector<std::string>{"alive", "backstage-busy", "backstage-idle", "running"}));
  EXPECT_EQ(Column(file_, "SELECT run_id FROM stagehand_task_runs ORDER BY run_id"),
            std::vector<std::string>{"alive-1"});
  EXPECT_EQ(Column(file_, "SELECT task_id FROM stagehand_task_registrations ORDER BY task_id"),
            (std::vector<std::string>{"alive", "running"}));

  CliResult again = RunCli({"db", "prune", "--config", config_, "--yes"});
  ASSERT_EQ(again.code, cli::kExitOk) << again.err;
  EXPECT_THAT(again.out, HasSubstr("jobs: deleted 0 tasks\n"));
}

TEST_F(DbPruneSqliteTest, IncludeBackstageOnlyDeletesTheTasksNoStagehandHostRegistered) {
  CliResult result =
      RunCli({"db", "prune", "--config", config_, "--yes", "--include-backstage-only"});
  ASSERT_EQ(result.code, cli::kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("jobs: deleted 2 tasks: backstage-idle, gone\n"));
  EXPECT_EQ(Tasks(), (std::vector<std::string>{"alive", "backstage-busy", "running"}));
}

TEST_F(DbPruneSqliteTest, OlderThanSetsTheWindowInTheConfigsDurationForms) {
  CliResult longer = RunCli({"db", "prune", "--config", config_, "--older-than", "P60D"});
  ASSERT_EQ(longer.code, cli::kExitOk) << longer.err;
  EXPECT_THAT(longer.out, Not(HasSubstr("gone")));
  EXPECT_THAT(longer.out, HasSubstr("backstage-idle"));

  CliResult longest = RunCli({"db", "prune", "--config", config_, "--older-than", "100 days"});
  ASSERT_EQ(longest.code, cli::kExitOk) << longest.err;
  EXPECT_EQ(longest.out, "No task has gone unregistered and unused for 100 days.\n");

  CliResult shorter = RunCli({"db", "prune", "--config", config_, "--older-than", "PT12H"});
  ASSERT_EQ(shorter.code, cli::kExitOk) << shorter.err;
  EXPECT_THAT(shorter.out, HasSubstr("gone"));
  EXPECT_THAT(shorter.out, Not(HasSubstr("alive"))) << "refreshed 10 minutes ago";
  EXPECT_THAT(shorter.out, Not(HasSubstr("backstage-busy"))) << "ended an hour ago";
}

TEST_F(DbPruneSqliteTest, BadOlderThanIsAUsageErrorNamingTheFlag) {
  CliResult plain = RunCli({"db", "prune", "--config", config_, "--older-than", "5"});
  EXPECT_EQ(plain.code, cli::kExitUsage);
  EXPECT_EQ(plain.err,
            "stagehand: invalid --older-than '5': The value cannot be a plain number; try adding a "
            "unit like 'ms' or 'seconds'\n");
  CliResult short_window = RunCli({"db", "prune", "--config", config_, "--older-than", "1h"});
  EXPECT_EQ(short_window.code, cli::kExitUsage);
  EXPECT_THAT(short_window.err,
              HasSubstr("stagehand: invalid --older-than '1h': it must be at least 2h"));
  EXPECT_EQ(Tasks(), kAllTasks);
}

TEST_F(DbPruneSqliteTest, JsonListsEveryCandidateWithWhatBecameOfIt) {
  CliResult result = RunCli({"db", "prune", "--config", config_, "--yes", "--json"});
  ASSERT_EQ(result.code, cli::kExitOk) << result.err;
  const nlohmann::json json = nlohmann::json::parse(result.out, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << result.out;
  EXPECT_EQ(json["dryRun"], false);
  EXPECT_EQ(json["olderThan"], "30d");
  ASSERT_EQ(json["plugins"].size(), 1u);
  const nlohmann::json& jobs = json["plugins"][0];
  EXPECT_EQ(jobs["plugin"], "jobs");
  EXPECT_EQ(jobs["database"], file_);
  EXPECT_TRUE(jobs["cutoff"].is_string());
  ASSERT_EQ(jobs["tasks"].size(), 2u) << result.out;
  EXPECT_EQ(jobs["tasks"][0]["task"], "backstage-idle");
  EXPECT_EQ(jobs["tasks"][0]["registered"], false);
  EXPECT_TRUE(jobs["tasks"][0]["host"].is_null());
  EXPECT_EQ(jobs["tasks"][0]["deleted"], false);
  EXPECT_EQ(jobs["tasks"][1]["task"], "gone");
  EXPECT_EQ(jobs["tasks"][1]["host"], "web-1");
  EXPECT_TRUE(jobs["tasks"][1]["lastRegisteredAt"].is_string());
  EXPECT_TRUE(jobs["tasks"][1]["lastRunEndedAt"].is_string());
  EXPECT_EQ(jobs["tasks"][1]["deleted"], true);
}

TEST_F(DbPruneSqliteTest, APluginWithoutADatabaseFileIsSkippedAndNotCreated) {
  const std::string config =
      dir_.Write("two.yaml",
                 "backend:\n  database:\n    client: better-sqlite3\n    connection:\n"
                 "      directory: " +
                     (dir_.path() / "data").string() +
                     "\nstagehand:\n  plugins:\n    jobs: {}\n    fresh: {}\n");
  CliResult result = RunCli({"db", "prune", "--config", config, "--json"});
  ASSERT_EQ(result.code, cli::kExitOk) << result.err;
  const nlohmann::json json = nlohmann::json::parse(result.out, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << result.out;
  ASSERT_EQ(json["plugins"].size(), 2u);
  EXPECT_EQ(json["plugins"][0]["plugin"], "fresh");
  EXPECT_EQ(json["plugins"][0]["skipped"], "no database file yet");
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "data" / "fresh.sqlite"));
  EXPECT_EQ(json["plugins"][1]["tasks"].size(), 2u);
}

TEST_F(DbPruneSqliteTest, ADatabaseWithoutTheRegistrationsTableFailsAskingForTheMigrations) {
  Exec(file_,
       "DROP TABLE stagehand_task_registrations; "
       "DELETE FROM stagehand_migrations WHERE name = '0002_task_registrations'");
  CliResult result = RunCli({"db", "prune", "--config", config_, "--yes"});
  EXPECT_EQ(result.code, cli::kExitFailure);
  EXPECT_THAT(result.err, HasSubstr("stagehand: jobs: prune failed: "));
  EXPECT_THAT(result.err, HasSubstr("run the migrations (stagehand db migrate)"));
  EXPECT_EQ(Tasks(), kAllTasks);
}

TEST_F(DbPruneSqliteTest, UnknownPluginIsAConfigError) {
  CliResult result = RunCli({"db", "prune", "--config", config_, "--plugin", "nope"});
  EXPECT_EQ(result.code, cli::kExitConfig);
  EXPECT_THAT(result.err, HasSubstr("--plugin nope: the config names no plugin 'nope'"));
}

TEST_F(DbPruneSqliteTest, HelpNamesTheFlagsAndTheExitCodes) {
  CliResult result = RunCli({"db", "prune", "--help"});
  ASSERT_EQ(result.code, cli::kExitOk);
  for (const char* word : {"--older-than", "--yes", "--include-backstage-only", "--json",
                           "--plugin", "Exit codes: 0 listed or deleted, 1"}) {
    EXPECT_THAT(result.out, HasSubstr(word)) << word;
  }
}

}  // namespace
}  // namespace stagehand::db_migrate_test
