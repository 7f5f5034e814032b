// Backstage's scheduler migrations replayed on MariaDB: the schema and knex's bookkeeping are the
// ones Backstage 0.19's own migrator (knex 3 through mysql2, run by bench/backstage-peer/peer.js)
// creates, and each side's migrator finds nothing to do on the other's database.

#include <gmock/gmock.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "integration/backstage_peer.h"
#include "integration/mysql/test_server.h"
#include "store/mysql/my_migrations.h"

namespace stagehand {
namespace {

using store_internal::MigrateMySql;
using store_internal::MyConnection;
using store_internal::MyParams;
using store_internal::MyResult;

const std::vector<std::string> kKnexMigrations = {
    "20210928160613_init.js", "20240712211735_nullable_next_run.js", "20250411000000_last_run.js"};
const std::vector<std::string> kTables = {"backstage_backend_tasks__tasks",
                                          "backstage_backend_tasks__knex_migrations",
                                          "backstage_backend_tasks__knex_migrations_lock"};

Status ErrorOf(std::string_view operation, const MyResult& result) {
  return InternalError(std::string(operation) + ": " + result.error());
}

class MySqlMigrationsTest : public mysql_test::ServerTest {
 protected:
  Status Migrate(MyConnection& db) { return MigrateMySql(db, "plugin 'p'", ErrorOf); }

  // Each of Backstage's tables as SHOW CREATE TABLE gives it, without the AUTO_INCREMENT counter.
  static std::string Schema(MyConnection& db) {
    std::string schema;
    for (const std::string& table : kTables) {
      MyResult shown = db.Execute("SHOW CREATE TABLE `" + table + "`");
      EXPECT_TRUE(shown.ok()) << table << ": " << shown.error();
      if (!shown.ok()) return "";
      schema += std::regex_replace(std::string(shown.Get(0, 1)),
                                   std::regex(" AUTO_INCREMENT=[0-9]+"), "") +
                "\n";
    }
    return schema;
  }

  // knex's bookkeeping: each migration's id, name and batch, then the lock rows.
  static std::string KnexRows(MyConnection& db) {
    std::string rows;
    MyResult listed = db.Execute(
        "SELECT id, name, batch FROM backstage_backend_tasks__knex_migrations "
        "ORDER BY id");
    EXPECT_TRUE(listed.ok()) << listed.error();
    for (int row = 0; row < listed.rows(); ++row) {
      rows += Line(listed, row, 3) + ",";
    }
    MyResult lock =
        db.Execute("SELECT `index`, is_locked FROM backstage_backend_tasks__knex_migrations_lock");
    EXPECT_TRUE(lock.ok()) << lock.error();
    rows += ";";
    for (int row = 0; row < lock.rows(); ++row) rows += Line(lock, row, 2) + ",";
    return rows;
  }

  // The first `columns` values of row `row`, joined by '|'.
  static std::string Line(const MyResult& result, int row, int columns) {
    std::string line;
    for (int column = 0; column < columns; ++column) {
      line += (column > 0 ? "|" : "") + std::string(result.Get(row, column));
    }
    return line;
  }
};

TEST_F(MySqlMigrationsTest, AFreshDatabaseGetsBackstagesTableAndBookkeepingInOneBatch) {
  std::unique_ptr<MyConnection> db = Connect();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(Migrate(*db).ok());
  EXPECT_EQ(KnexRows(*db),
            "1|20210928160613_init.js|1,2|20240712211735_nullable_next_run.js|1,"
            "3|20250411000000_last_run.js|1,;1|0,");
  MyResult columns = db->Execute(
      "SELECT column_name, column_type, is_nullable, column_comment FROM "
      "information_schema.columns WHERE table_schema = database() AND table_name = "
      "'backstage_backend_tasks__tasks' ORDER BY ordinal_position");
  ASSERT_TRUE(columns.ok()) << columns.error();
  std::vector<std::string> described;
  for (int row = 0; row < columns.rows(); ++row) described.push_back(Line(columns, row, 4));
  EXPECT_THAT(described,
              ::testing::ElementsAre(
                  "id|varchar(255)|NO|The unique ID of this particular task",
                  "settings_json|text|NO|JSON serialized object with properties for this task",
                  "next_run_start_at|datetime|YES|",
                  "current_run_ticket|text|YES|A unique ticket for the current task run",
                  "current_run_started_at|datetime|YES|The time that the current task run started",
                  "current_run_expires_at|datetime|YES|The time that the current task run will "
                  "time out",
                  "last_run_error_json|longtext|YES|JSON serialized error object from the last "
                  "task run, if it failed",
                  "last_run_ended_at|datetime|YES|The last time that the task ended"));
}

TEST_F(MySqlMigrationsTest, MigratingAgainChangesNothing) {
  std::unique_ptr<MyConnection> db = Connect();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(Migrate(*db).ok());
  const std::string schema = Schema(*db);
  const std::string rows = KnexRows(*db);
  ASSERT_TRUE(Migrate(*db).ok());
  EXPECT_EQ(Schema(*db), schema);
  EXPECT_EQ(KnexRows(*db), rows);
}

TEST_F(MySqlMigrationsTest, ConcurrentMigratorsAllSucceedAndApplyEachMigrationOnce) {
  std::vector<std::unique_ptr<MyConnection>> sessions;
  for (int i = 0; i < 4; ++i) {
    sessions.push_back(Connect());
    ASSERT_NE(sessions.back(), nullptr);
  }
  std::vector<Status> results(sessions.size());
  std::vector<std::thread> migrators;
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    migrators.emplace_back([&, i] { results[i] = Migrate(*sessions[i]); });
  }
  for (std::thread& migrator : migrators) migrator.join();
  for (const Status& result : results) EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(KnexRows(*sessions[0]),
            "1|20210928160613_init.js|1,2|20240712211735_nullable_next_run.js|1,"
            "3|20250411000000_last_run.js|1,;1|0,");
}

TEST_F(MySqlMigrationsTest, AMigrationThisVersionDoesNotKnowIsNamedAndNothingIsApplied) {
  std::unique_ptr<MyConnection> db = Connect();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(Migrate(*db).ok());
  ASSERT_TRUE(db->Execute("INSERT INTO backstage_backend_tasks__knex_migrations (name, batch, "
                          "migration_time) VALUES (?, 2, now())",
                          MyParams().Add("20990101000000_future.js"))
                  .ok());
  const Status refused = Migrate(*db);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("plugin 'p'"));
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("20990101000000_future.js"));
  EXPECT_THAT(KnexRows(*db), ::testing::EndsWith(";1|0,")) << "the lock row was left taken";
}

class BackstageMySqlMigratorTest : public MySqlMigrationsTest {
 protected:
  void SetUp() override {
    MySqlMigrationsTest::SetUp();
    if (IsSkipped() || HasFailure()) return;
    if (std::optional<std::string> tool = peer_test::MissingTool()) {
      if (std::getenv("CI") != nullptr) GTEST_FAIL() << *tool << " is not installed";
      GTEST_SKIP() << *tool << " is not installed (scripts/bootstrap)";
    }
    ASSERT_TRUE(peer_test::Modules().has_value()) << "bench/backstage-peer/install.sh failed";
  }

  // Runs Backstage's migrator on the test's database; checks it ran cleanly and returns what
  // knex saw before and after.
  nlohmann::json RunBackstage() {
    const peer_test::Command report = peer_test::RunBackstageMigrator(Url(database_), database_);
    EXPECT_EQ(report.exit_code, 0) << report.out;
    nlohmann::json json = nlohmann::json::parse(report.out, nullptr, false);
    EXPECT_FALSE(json.is_discarded()) << report.out;
    if (json.is_discarded()) return {};
    EXPECT_TRUE(json["error"].is_null()) << report.out;
    EXPECT_EQ(json["after"]["completed"].get<std::vector<std::string>>(), kKnexMigrations);
    EXPECT_TRUE(json["after"]["pending"].empty()) << report.out;
    return json;
  }
};

TEST_F(BackstageMySqlMigratorTest, BothMigratorsCreateTheSameSchemaAndBookkeeping) {
  std::unique_ptr<MyConnection> db = Connect();
  ASSERT_NE(db, nullptr);
  RunBackstage();
  const std::string backstage_schema = Schema(*db);
  const std::string backstage_rows = KnexRows(*db);

  const std::string ours = mysql_test::UniqueDatabaseName();
  ASSERT_TRUE(db->Execute("CREATE DATABASE `" + ours + "`").ok());
  std::unique_ptr<MyConnection> our_db = Connect(ours);
  ASSERT_NE(our_db, nullptr);
  const Status migrated = Migrate(*our_db);
  const std::string our_schema = Schema(*our_db);
  const std::string our_rows = KnexRows(*our_db);
  db->Execute("DROP DATABASE `" + ours + "`");
  ASSERT_TRUE(migrated.ok()) << migrated.ToString();
  EXPECT_EQ(our_schema, backstage_schema);
  EXPECT_EQ(our_rows, backstage_rows);
}

TEST_F(BackstageMySqlMigratorTest, EachSideFindsNothingToDoOnTheOthersDatabase) {
  std::unique_ptr<MyConnection> db = Connect();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(Migrate(*db).ok());
  const std::string schema = Schema(*db);
  const std::string rows = KnexRows(*db);
  const nlohmann::json report = RunBackstage();
  EXPECT_TRUE(report["before"]["pending"].empty()) << report.dump();
  EXPECT_EQ(Schema(*db), schema);
  EXPECT_EQ(KnexRows(*db), rows);

  // And on a database Backstage migrated first, stagehand applies nothing.
  const std::string ours = database_;
  database_ = mysql_test::UniqueDatabaseName();  // dropped by TearDown
  ASSERT_TRUE(db->Execute("CREATE DATABASE `" + database_ + "`").ok());
  db->Execute("DROP DATABASE `" + ours + "`");
  RunBackstage();
  std::unique_ptr<MyConnection> their_db = Connect();
  ASSERT_NE(their_db, nullptr);
  const std::string their_rows = KnexRows(*their_db);
  ASSERT_TRUE(Migrate(*their_db).ok());
  EXPECT_EQ(KnexRows(*their_db), their_rows);
}

}  // namespace
}  // namespace stagehand
