// The scheduling engine on the test PostgreSQL in real time: two schedulers, each with its own
// pool on a fresh database. Other schedulers learn of triggers, cancels and releases through
// NOTIFY, so the safety-net poll is set far beyond the latencies asserted where that matters.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine_integration.h"
#include "integration/postgres/test_server.h"
#include "stagehand/store/postgres_task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/clock.h"

namespace stagehand::engine_integration {
namespace {

using ::stagehand::testing::IsOk;

class PostgresEngineTest : public EngineIntegrationTest {
 protected:
  void SetUp() override {
    std::optional<std::string> url = pg_test::ServerUrl();
    if (!url) {
      if (std::getenv("CI") != nullptr) {
        GTEST_FAIL() << pg_test::kNoServerMessage << " (CI is set, so this is a failure)";
      }
      GTEST_SKIP() << pg_test::kNoServerMessage;
    }
    url_ = *url;
    database_ = pg_test::UniqueDatabaseName("stagehand_engine_it");
    pg_test::CreateDatabase(url_, database_);
  }
  void TearDown() override {
    if (!database_.empty()) pg_test::DropDatabase(url_, database_);
  }

  std::shared_ptr<TaskStore> OpenStore() override {
    PostgresStoreOptions options;
    options.connection = url_;
    options.database = database_;
    options.pool_size = 2;
    Result<std::unique_ptr<TaskStore>> store =
        OpenPostgresTaskStore(kPluginId, options, SystemClock::Instance());
    EXPECT_THAT(store, IsOk());
    if (!store.ok()) return nullptr;
    Status migrated = (*store)->Migrate();
    EXPECT_THAT(migrated, IsOk());
    return std::shared_ptr<TaskStore>(std::move(*store));
  }

  // Options under which only a notification can explain a start or stop within a second.
  static EngineOptions NotifyOnlyOptions() {
    EngineOptions options = ShortOptions();
    options.poll_interval = seconds(30);
    options.lease = seconds(30);
    return options;
  }

 private:
  std::string url_;
  std::string database_;
};

TEST_F(PostgresEngineTest, TwoSchedulersNeverOverlapAGlobalTask) { RunNoOverlap(); }

TEST_F(PostgresEngineTest, TriggerOnOneSchedulerStartsTheTaskOnTheOtherThroughNotify) {
  std::optional<Steady::duration> latency = TriggerAcross(NotifyOnlyOptions());
  ASSERT_TRUE(latency.has_value()) << "the task never started on B";
  EXPECT_LT(*latency, milliseconds(500)) << Millis(*latency) << " ms (safety-net poll: 30 s)";
}

TEST_F(PostgresEngineTest, CancelOnOneSchedulerStopsTheRunOnTheOtherThroughNotify) {
  std::optional<Steady::duration> latency = CancelAcross(NotifyOnlyOptions());
  ASSERT_TRUE(latency.has_value()) << "B's stop token never fired";
  EXPECT_LT(*latency, milliseconds(500)) << Millis(*latency) << " ms (lease renewal: 10 s)";
}

TEST_F(PostgresEngineTest, DeadOwnerIsTakenOverWithinLeasePlusJanitorPeriod) {
  std::optional<Steady::duration> after_claim = TakeOverFromDeadOwner(ShortOptions());
  ASSERT_TRUE(after_claim.has_value()) << "B never took the task over";
  EXPECT_GE(*after_claim, milliseconds(900)) << "taken over before the claim lapsed";
  EXPECT_LT(*after_claim, seconds(2) + milliseconds(500)) << Millis(*after_claim) << " ms";
}

TEST_F(PostgresEngineTest, GracefulShutdownHandsTheTaskOverAtOnce) {
  EngineOptions options = ShortOptions();
  options.poll_interval = seconds(30);
  std::optional<Steady::duration> latency = HandOverAtShutdown(options);
  ASSERT_TRUE(latency.has_value()) << "B never started the task";
  EXPECT_LT(*latency, milliseconds(500)) << Millis(*latency) << " ms";
}

}  // namespace
}  // namespace stagehand::engine_integration
