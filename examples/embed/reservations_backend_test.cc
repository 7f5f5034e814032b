// Tests of the reservations plugin as a whole, the way Backstage plugin authors use
// startTestBackend: the plugin starts in a real backend (its routes served over HTTP on
// 127.0.0.1, its database in memory) with a MockScheduler in place of the scheduler. Tasks that
// are neither manual nor initially delayed run once at startup; after that a task runs only when
// the test triggers it through the mock.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "reservations.h"
#include "stagehand/testing/test_backend.h"
#include "stagehand/time/manual_clock.h"

namespace reservations {
namespace {

using stagehand::testing::StartTestBackend;
using stagehand::testing::TestBackend;
using stagehand::testing::TestBackendOptions;
using stagehand::testing::TestResponse;
using std::chrono::minutes;

class ReservationsBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestBackendOptions options;
    options.plugins.push_back(MakeReservationsPlugin(state_));
    options.clock = &clock_;
    auto backend = StartTestBackend(std::move(options));
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = std::move(*backend);
  }

  stagehand::testing::ManualClock clock_;
  Reservations state_{clock_};
  std::unique_ptr<TestBackend> backend_;
};

TEST_F(ReservationsBackendTest, AnExpiredReservationIsGoneFromTheRouteAfterTheTaskRuns) {
  ASSERT_EQ(backend_->Post("/api/reservations/seats/A1")->status, 201);
  EXPECT_EQ(backend_->Get("/api/reservations/seats")->body, "A1\n");

  clock_.Advance(minutes(16));
  ASSERT_TRUE(backend_->scheduler("reservations")->TriggerTask("expire-reservations").ok());

  stagehand::Result<TestResponse> seats = backend_->Get("/api/reservations/seats");
  ASSERT_TRUE(seats.ok()) << seats.status().ToString();
  EXPECT_EQ(seats->status, 200);
  EXPECT_EQ(seats->body, "");
}

TEST_F(ReservationsBackendTest, OnlyTheTaskWithoutAnInitialDelayRanAtStartup) {
  stagehand::testing::MockScheduler* scheduler = backend_->scheduler("reservations");
  EXPECT_EQ(scheduler->GetTaskRuns("expire-reservations", 10, {})->runs.size(), 1u);
  EXPECT_EQ(scheduler->GetTaskRuns("report-stats", 10, {})->runs.size(), 0u);
}

}  // namespace
}  // namespace reservations
