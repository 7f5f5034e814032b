// `stagehand db prune` against the test PostgreSQL server (STAGEHAND_TEST_POSTGRES_URL): a plugin
// database with a prefix unique to the test, migrated by `stagehand db migrate`, with rows written
// as a long-running fleet leaves them (times relative to the server's now()); dropped at the end.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "integration/db_migrate/db_migrate_test_util.h"
#include "integration/postgres/test_server.h"
#include "stagehand/cli/cli.h"

namespace stagehand::db_migrate_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class DbPrunePostgresTest : public pg_test::ServerTest {
 protected:
  void SetUp() override {
    pg_test::ServerTest::SetUp();
    if (IsSkipped() || HasFailure()) return;
    prefix_ = pg_test::UniqueDatabaseName("stagehand_dbp") + "_";
    ::setenv("TEST_PG_URL", url().c_str(), 1);
    config_ = dir_.Write("app-config.yaml",
                         "backend:\n  database:\n    client: pg\n    connection: ${TEST_PG_URL}\n"
                         "    prefix: " +
                             prefix_ + "\nstagehand:\n  plugins:\n    jobs: {}\n");
    CliResult migrated = RunCli({"db", "migrate", "--config", config_});
    ASSERT_EQ(migrated.code, cli::kExitOk) << migrated.out << migrated.err;
  }

  void TearDown() override {
    if (!prefix_.empty()) pg_test::DropDatabase(url(), prefix_ + "jobs");
  }

  // Returns one value per row of `sql`, the columns joined by '|'.
  std::vector<std::string> Rows(const std::string& sql) {
    pg_test::RawConnection db(url(), prefix_ + "jobs");
    pg_test::RawResult result = db.Exec(sql);
    std::vector<std::string> rows;
    for (int i = 0; i < PQntuples(result.get()); ++i) {
      std::string row;
      for (int j = 0; j < PQnfields(result.get()); ++j) {
        row += (j == 0 ? "" : "|") + std::string(PQgetvalue(result.get(), i, j));
      }
      rows.push_back(row);
    }
    return rows;
  }

  std::string prefix_;
  std::string config_;
  TempDir dir_;
};

TEST_F(DbPrunePostgresTest, ListsThenDeletesTheTasksNoHostRunsAnyMore) {
  {
    pg_test::RawConnection db(url(), prefix_ + "jobs");
    db.Exec(R"sql(
INSERT INTO backstage_backend_tasks__tasks (id, settings_json, next_run_start_at, last_run_ended_at,
                                            current_run_ticket, current_run_started_at,
                                            current_run_expires_at)
VALUES ('gone', '{}', now() - interval '40 days', now() - interval '40 days', NULL, NULL, NULL),
       ('alive', '{}', now() - interval '40 days', now() - interval '40 days', NULL, NULL, NULL),
       ('running', '{}', now() - interval '40 days', NULL, 't', now() - interval '40 days',
        now() + interval '1 hour'),
       ('backstage-idle', '{}', now() - interval '90 days', now() - interval '90 days', NULL,
        NULL, NULL);
INSERT INTO stagehand_task_registrations (task_id, host, last_seen_at)
VALUES ('gone', 'web-1', now() - interval '40 days'),
       ('alive', 'web-2', now() - interval '10 minutes'),
       ('running', 'web-1', now() - interval '40 days');
INSERT INTO stagehand_task_runs (run_id, task_id, slot, seq, host, pid, trigger_kind,
                                 started_at, ended_at, outcome, attempt)
VALUES ('gone-1', 'gone', 0, 1, 'web-1', 7, 'schedule', now() - interval '40 days',
        now() - interval '40 days', 'succeeded', 1),
       ('alive-1', 'alive', 0, 1, 'web-2', 8, 'schedule', now() - interval '40 days',
        now() - interval '40 days', 'succeeded', 1);
INSERT INTO stagehand_task_run_counts (task_id, runs) VALUES ('gone', 1), ('alive', 1);
)sql");
  }
  CliResult dry = RunCli({"db", "prune", "--config", config_, "--older-than", "7d"});
  ASSERT_EQ(dry.code, cli::kExitOk) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("jobs    gone  40d"));
  EXPECT_THAT(dry.out, HasSubstr("web-1\n"));
  EXPECT_THAT(dry.out, HasSubstr("backstage-idle  never"));
  EXPECT_THAT(dry.out, Not(HasSubstr("alive")));
  EXPECT_THAT(dry.out, Not(HasSubstr("running")));
  EXPECT_THAT(dry.out, HasSubstr("Dry run: nothing was deleted."));
  EXPECT_EQ(Rows("SELECT count(*) FROM backstage_backend_tasks__tasks"),
            std::vector<std::string>{"4"});

  CliResult deleted = RunCli({"db", "prune", "--config", config_, "--older-than", "7d", "--yes",
                              "--include-backstage-only"});
  ASSERT_EQ(deleted.code, cli::kExitOk) << deleted.err;
  EXPECT_THAT(deleted.out, HasSubstr("jobs: deleted 2 tasks: backstage-idle, gone\n"));
  EXPECT_EQ(Rows("SELECT id FROM backstage_backend_tasks__tasks ORDER BY id"),
            (std::vector<std::string>{"alive", "running"}));
  EXPECT_EQ(Rows("SELECT run_id FROM stagehand_task_runs ORDER BY run_id"),
            std::vector<std::string>{"alive-1"});
  EXPECT_EQ(Rows("SELECT task_id FROM stagehand_task_run_counts ORDER BY task_id"),
            std::vector<std::string>{"alive"});
  EXPECT_EQ(Rows("SELECT task_id || '|' || host FROM stagehand_task_registrations ORDER BY 1"),
            (std::vector<std::string>{"alive|web-2", "running|web-1"}));
}

}  // namespace
}  // namespace stagehand::db_migrate_test
