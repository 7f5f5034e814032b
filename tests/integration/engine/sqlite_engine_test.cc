// The scheduling engine on real SQLite files in real time: two schedulers, each with its own
// connection to the same file. SQLite cannot notify, so other schedulers learn of changes through
// the safety-net poll (200 ms here) and the lease renewal (every lease/3).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "engine_integration.h"
#include "stagehand/store/sqlite_task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/clock.h"

namespace stagehand::engine_integration {
namespace {

using ::stagehand::testing::IsOk;

class SqliteEngineTest : public EngineIntegrationTest {
 protected:
  void SetUp() override {
    const std::string name = std::string("stagehand-engine-it-") +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
                             NewUuidV4();
    dir_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::shared_ptr<TaskStore> OpenStore() override {
    SqliteStoreOptions options;
    options.path = SqlitePluginDatabasePath(dir_.string(), kPluginId);
    Result<std::unique_ptr<TaskStore>> store =
        OpenSqliteTaskStore(kPluginId, options, SystemClock::Instance());
    EXPECT_THAT(store, IsOk());
    if (!store.ok()) return nullptr;
    Status migrated = (*store)->Migrate();
    EXPECT_THAT(migrated, IsOk());
    return std::shared_ptr<TaskStore>(std::move(*store));
  }

 private:
  std::filesystem::path dir_;
};

TEST_F(SqliteEngineTest, TwoSchedulersNeverOverlapAGlobalTask) { RunNoOverlap(); }

TEST_F(SqliteEngineTest, TriggerOnOneSchedulerStartsTheTaskOnTheOtherWithinThePoll) {
  std::optional<Steady::duration> latency = TriggerAcross(ShortOptions());
  ASSERT_TRUE(latency.has_value()) << "the task never started on B";
  EXPECT_LT(*latency, milliseconds(200) + milliseconds(300)) << Millis(*latency) << " ms";
}

TEST_F(SqliteEngineTest, CancelOnOneSchedulerStopsTheRunOnTheOtherWithinALease) {
  std::optional<Steady::duration> latency = CancelAcross(ShortOptions());
  ASSERT_TRUE(latency.has_value()) << "B's stop token never fired";
  EXPECT_LT(*latency, seconds(1)) << Millis(*latency) << " ms";
}

TEST_F(SqliteEngineTest, DeadOwnerIsTakenOverWithinLeasePlusJanitorPeriod) {
  std::optional<Steady::duration> after_claim = TakeOverFromDeadOwner(ShortOptions());
  ASSERT_TRUE(after_claim.has_value()) << "B never took the task over";
  // The claim lapses after the lease (1 s); the janitor runs every lease period.
  EXPECT_GE(*after_claim, milliseconds(900)) << "taken over before the claim lapsed";
  EXPECT_LT(*after_claim, seconds(2) + milliseconds(500)) << Millis(*after_claim) << " ms";
}

TEST_F(SqliteEngineTest, GracefulShutdownHandsTheTaskOverAtOnce) {
  std::optional<Steady::duration> latency = HandOverAtShutdown(ShortOptions());
  ASSERT_TRUE(latency.has_value()) << "B never started the task";
  EXPECT_LT(*latency, milliseconds(200) + milliseconds(500)) << Millis(*latency) << " ms";
}

}  // namespace
}  // namespace stagehand::engine_integration
