// What the MySQL task store does that the contract suite cannot see, against the test MariaDB:
// times far past 2038, whole-second rounding in the direction that keeps a run from starting
// early or being swept early, and errors that name the plugin and the database.

#include "stagehand/store/mysql_task_store.h"

#include <gmock/gmock.h>

#include <chrono>
#include <memory>
#include <string>

#include "fixtures/task_schedules.h"
#include "integration/mysql/test_server.h"

namespace stagehand {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;

class MySqlTaskStoreTest : public mysql_test::ServerTest {
 protected:
  std::unique_ptr<TaskStore> Open(const std::string& database) {
    MySqlStoreOptions options;
    options.port = params_.port;
    options.user = params_.user;
    options.password = params_.password;
    options.database = database;
    Result<std::unique_ptr<TaskStore>> store =
        OpenMySqlTaskStore("catalog", options, SystemClock::Instance());
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return nullptr;
    const Status migrated = (*store)->Migrate();
    EXPECT_TRUE(migrated.ok()) << migrated.ToString();
    return std::move(*store);
  }

  static TaskSchedule Schedule(std::string cadence, std::optional<std::string> initial_delay) {
    TaskSchedule schedule;
    schedule.settings.cadence = testing::ParsedCadence(cadence);
    schedule.settings.initial_delay_duration = std::move(initial_delay);
    schedule.settings.timeout_after_duration = "PT1M";
    return schedule;
  }
};

TEST_F(MySqlTaskStoreTest, AStartThirtyYearsAheadIsKept) {
  std::unique_ptr<TaskStore> store = Open(database_);
  ASSERT_NE(store, nullptr);
  Result<UpsertResult> upserted = store->Upsert("far", Schedule("PT1H", "P30Y"));
  ASSERT_TRUE(upserted.ok()) << upserted.status().ToString();
  ASSERT_TRUE(upserted->next_run_start_at.has_value());
  // Backstage's casual conversion: a year is 365 days.
  const WallTime expected = upserted->db_now + hours(24 * 365 * 30);
  EXPECT_GE(*upserted->next_run_start_at, expected);
  EXPECT_LE(*upserted->next_run_start_at, expected + std::chrono::seconds(1));
  Result<PollResult> polled = store->Poll(std::vector<std::string>{"far"}, false);
  ASSERT_TRUE(polled.ok()) << polled.status().ToString();
  EXPECT_EQ(polled->entries.at(0).next_run_start_at, upserted->next_run_start_at)
      << "read back as written";
  EXPECT_EQ(polled->entries.at(0).version, upserted->version);
}

TEST_F(MySqlTaskStoreTest, TimesAreWholeSecondsRoundedAwayFromAnEarlyStartOrSweep) {
  std::unique_ptr<TaskStore> store = Open(database_);
  ASSERT_NE(store, nullptr);
  Result<UpsertResult> upserted = store->Upsert("task", Schedule("PT10M", std::nullopt));
  ASSERT_TRUE(upserted.ok()) << upserted.status().ToString();
  Result<ClaimResult> claim = store->Claim("task", "t1", minutes(1), milliseconds(1500));
  ASSERT_TRUE(claim.ok()) << claim.status().ToString();
  ASSERT_TRUE(claim->claimed);
  ASSERT_TRUE(claim->expires_at.has_value());
  EXPECT_GE(*claim->expires_at, claim->db_now + milliseconds(1500)) << "never earlier";
  EXPECT_LT(*claim->expires_at, claim->db_now + milliseconds(2500));
  EXPECT_EQ(claim->expires_at->time_since_epoch() % std::chrono::seconds(1),
            WallTime::duration::zero());

  // A trigger's start is not after the database's now, so the task is due at once.
  ASSERT_TRUE(store->Release("task", "t1", Schedule("PT10M", std::nullopt), std::nullopt).ok());
  ASSERT_TRUE(store->Trigger("task").ok());
  Result<PollResult> polled = store->Poll(std::vector<std::string>{"task"}, false);
  ASSERT_TRUE(polled.ok()) << polled.status().ToString();
  EXPECT_EQ(polled->entries.at(0).readiness, Readiness::kReady);
}

TEST_F(MySqlTaskStoreTest, AFailedStatementNamesThePluginAndTheDatabase) {
  std::unique_ptr<TaskStore> store = Open(database_);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Connect()->Execute("DROP TABLE backstage_backend_tasks__tasks").ok());
  Result<std::vector<TaskRow>> states = store->States();
  ASSERT_FALSE(states.ok());
  EXPECT_EQ(states.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(states.status().message(), ::testing::HasSubstr("plugin catalog"));
  EXPECT_THAT(states.status().message(), ::testing::HasSubstr(database_));
}

TEST_F(MySqlTaskStoreTest, OpeningCreatesAMissingDatabase) {
  const std::string database = mysql_test::UniqueDatabaseName();
  std::unique_ptr<TaskStore> store = Open(database);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->Upsert("created", Schedule("manual", std::nullopt)).ok());
  ASSERT_TRUE(Connect("")->Execute("DROP DATABASE `" + database + "`").ok());
}

}  // namespace
}  // namespace stagehand
