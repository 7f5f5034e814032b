// Backstage 0.19's own migrator (DefaultSchedulerService, driven by bench/backstage-peer/peer.js
// --migrate-check) on plugin databases where stagehand created its run history and its task
// registrations (stagehand's migrations 0001 and 0002): it runs cleanly,
// finds no migration to apply and none it does not know, and leaves knex's bookkeeping and
// stagehand's tables as they were. The peer's npm packages come from
// bench/backstage-peer/install.sh (the cache bench/side_by_side.sh fills). Needs the test
// PostgreSQL, node and npm: without them the tests skip, and fail under CI.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fixtures/task_schedules.h"
#include "integration/backstage_peer.h"
#include "integration/postgres/test_server.h"
#include "stagehand/store/postgres_task_store.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;

using std::chrono::minutes;

constexpr char kPluginId[] = "history";
const std::vector<std::string> kKnexMigrations = {
    "20210928160613_init.js", "20240712211735_nullable_next_run.js", "20250411000000_last_run.js"};

using peer_test::Command;
using peer_test::Modules;

class BackstageMigratorTest : public pg_test::ServerTest {
 protected:
  void SetUp() override {
    pg_test::ServerTest::SetUp();
    if (IsSkipped() || HasFailure()) return;
    if (std::optional<std::string> tool = peer_test::MissingTool()) {
      if (std::getenv("CI") != nullptr) GTEST_FAIL() << *tool << " is not installed";
      GTEST_SKIP() << *tool << " is not installed (scripts/bootstrap)";
    }
    ASSERT_TRUE(Modules().has_value()) << "bench/backstage-peer/install.sh failed";
    database_ = pg_test::UniqueDatabaseName("stagehand_backstage_migrator");
  }

  void TearDown() override {
    if (!database_.empty()) pg_test::DropDatabase(url(), database_);
  }

  // Opens the plugin's store (in `schema`, for pluginDivisionMode schema), migrated, with a task
  // that a host registered and runs in its history: one ended, one running.
  std::unique_ptr<TaskStore> OpenWithHistory(const std::string& schema = "") {
    PostgresStoreOptions options;
    options.connection = url();
    options.database = database_;
    options.schema = schema;
    options.pool_size = 2;
    Result<std::unique_ptr<TaskStore>> store =
        OpenPostgresTaskStore(kPluginId, options, SystemClock::Instance());
    EXPECT_THAT(store, IsOk());
    if (!store.ok()) return nullptr;
    const Status migrated = (*store)->Migrate();
    EXPECT_THAT(migrated, IsOk());
    RunHistory* history = (*store)->history();
    EXPECT_NE(history, nullptr);
    if (!migrated.ok() || history == nullptr) return nullptr;
    TaskSchedule schedule;
    schedule.settings.cadence = testing::ParsedCadence("manual");
    schedule.settings.timeout_after_duration = "PT1M";
    const std::vector<TaskUpsert> upserts = {{"task", schedule, "host"}};
    EXPECT_THAT((*store)->UpsertMany(upserts), IsOk());
    const std::vector<RunStart> starts = {RunStart{"ended", "task", RunOrigin{"host", 1}},
                                          RunStart{"running", "task", RunOrigin{"host", 1}}};
    EXPECT_THAT(history->RecordStarts(starts), IsOk());
    const std::vector<RunEnd> ends = {RunEnd{"ended", RunFinish{RunOutcome::kFailed}}};
    EXPECT_THAT(history->RecordEnds(ends), IsOk());
    return std::move(*store);
  }

  // Runs Backstage's migrator on the database (in `schema`) and returns its report.
  Command RunBackstageMigrator(const std::string& schema = "") {
    return peer_test::RunBackstageMigrator(url(), database_, schema);
  }

  // Returns knex's bookkeeping rows, migration times included, as text.
  std::string KnexRows(const std::string& schema = "") {
    pg_test::RawConnection db(url(), database_);
    if (!schema.empty()) db.Exec("SET search_path = " + pg_test::QuoteIdentifier(db, schema));
    return db.Scalar(
               "SELECT string_agg(id || '|' || name || '|' || batch || '|' || migration_time, ',' "
               "ORDER BY id) FROM backstage_backend_tasks__knex_migrations") +
           ";" +
           db.Scalar(
               "SELECT string_agg(\"index\" || '|' || is_locked, ',' ORDER BY \"index\") "
               "FROM backstage_backend_tasks__knex_migrations_lock");
  }

  // Checks a report of a clean run: no error, nothing pending, the bookkeeping unchanged.
  void ExpectCleanRun(const Command& report) {
    ASSERT_EQ(report.exit_code, 0) << report.out;
    const nlohmann::json json = nlohmann::json::parse(report.out, nullptr, false);
    ASSERT_FALSE(json.is_discarded()) << report.out;
    EXPECT_TRUE(json["error"].is_null()) << report.out;
    for (const char* side : {"before", "after"}) {
      EXPECT_FALSE(json[side].contains("error")) << side << ": " << report.out;
      EXPECT_EQ(json[side]["completed"].get<std::vector<std::string>>(), kKnexMigrations) << side;
      EXPECT_TRUE(json[side]["pending"].empty()) << side << ": " << report.out;
    }
    EXPECT_EQ(json["before"]["rows"], json["after"]["rows"]);
    EXPECT_EQ(json["before"]["lock"], json["after"]["lock"]);
  }

  // Checks that the runs and the registration OpenWithHistory recorded are still there.
  static void ExpectHistoryIntact(TaskStore& store) {
    ASSERT_NE(store.registrations(), nullptr);
    Result<std::vector<PruneCandidate>> registered =
        store.registrations()->ListPruneCandidates(std::chrono::system_clock::now() + minutes(1));
    ASSERT_THAT(registered, IsOk());
    ASSERT_EQ(registered->size(), 1u);
    EXPECT_EQ((*registered)[0].host, "host");
    Result<RunPage> page = store.history()->ListRuns("task", 10, std::nullopt);
    ASSERT_THAT(page, IsOk());
    EXPECT_EQ(page->runs.size(), 2u);
    Result<TaskRun> ended = store.history()->GetRun("ended");
    ASSERT_THAT(ended, IsOk());
    EXPECT_EQ(ended->finish.outcome, RunOutcome::kFailed);
  }

  std::string database_;
};

TEST_F(BackstageMigratorTest, RunsCleanlyOnADatabaseWhereStagehandCreatedItsHistory) {
  std::unique_ptr<TaskStore> store = OpenWithHistory();
  ASSERT_NE(store, nullptr);
  const std::string knex = KnexRows();
  ExpectCleanRun(RunBackstageMigrator());
  EXPECT_EQ(KnexRows(), knex);
  ExpectHistoryIntact(*store);
  // And stagehand migrates again after Backstage, finding nothing to do either.
  ASSERT_THAT(store->Migrate(), IsOk());
  EXPECT_EQ(KnexRows(), knex);
  ExpectHistoryIntact(*store);
}

TEST_F(BackstageMigratorTest, RunsCleanlyInPluginDivisionModeSchema) {
  std::unique_ptr<TaskStore> store = OpenWithHistory("plugin_history");
  ASSERT_NE(store, nullptr);
  const std::string knex = KnexRows("plugin_history");
  ExpectCleanRun(RunBackstageMigrator("plugin_history"));
  EXPECT_EQ(KnexRows("plugin_history"), knex);
  ExpectHistoryIntact(*store);
}

// The check can fail: had stagehand recorded its history migration in knex's table, Backstage's
// migrator would refuse the database.
TEST_F(BackstageMigratorTest, FailsWhenKnexsTableListsAMigrationBackstageDoesNotShip) {
  std::unique_ptr<TaskStore> store = OpenWithHistory();
  ASSERT_NE(store, nullptr);
  pg_test::RawConnection db(url(), database_);
  db.Exec(
      "INSERT INTO backstage_backend_tasks__knex_migrations (name, batch, migration_time) "
      "VALUES ('0001_task_runs', 2, now())");
  const Command report = RunBackstageMigrator();
  EXPECT_NE(report.exit_code, 0) << report.out;
  EXPECT_NE(report.out.find("the following files are missing: 0001_task_runs"), std::string::npos)
      << report.out;
}

}  // namespace
}  // namespace stagehand
