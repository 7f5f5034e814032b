// Unit tests of the reservations plugin's tasks. No backend, no threads, no waiting: the tasks are
// registered with a MockScheduler, which runs a task only when the test triggers it (inline, on
// the test's thread), and time is a ManualClock that moves only when the test advances it.

#include "reservations.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <stop_token>
#include <string>
#include <vector>

#include "stagehand/service/mock_scheduler.h"
#include "stagehand/time/manual_clock.h"

namespace reservations {
namespace {

using std::chrono::minutes;

class ReservationsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(state_.ScheduleTasks(scheduler_).ok()); }

  stagehand::testing::ManualClock clock_;
  stagehand::testing::MockScheduler scheduler_;
  Reservations state_{clock_};
};

TEST_F(ReservationsTest, SchedulesOneGlobalAndOneLocalTask) {
  std::vector<stagehand::TaskDescriptor> tasks = scheduler_.GetScheduledTasks();
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].id, "expire-reservations");
  EXPECT_EQ(tasks[0].scope, stagehand::TaskScope::kGlobal);
  EXPECT_EQ(tasks[1].id, "report-stats");
  EXPECT_EQ(tasks[1].scope, stagehand::TaskScope::kLocal);
}

TEST_F(ReservationsTest, ExpiresReservationsOnlyAfterTheirLifetime) {
  ASSERT_TRUE(state_.Reserve("A1").ok());
  clock_.Advance(minutes(10));
  ASSERT_TRUE(state_.Reserve("B2").ok());

  // 14 minutes after A1: nothing has lapsed yet.
  clock_.Advance(minutes(4));
  ASSERT_TRUE(scheduler_.TriggerTask("expire-reservations").ok());
  EXPECT_EQ(state_.Seats(), (std::vector<std::string>{"A1", "B2"}));

  // 15 minutes after A1, 5 after B2.
  clock_.Advance(minutes(1));
  ASSERT_TRUE(scheduler_.TriggerTask("expire-reservations").ok());
  EXPECT_EQ(state_.Seats(), (std::vector<std::string>{"B2"}));
}

TEST_F(ReservationsTest, ReportsTheCountOfReservedSeats) {
  ASSERT_TRUE(state_.Reserve("A1").ok());
  ASSERT_TRUE(state_.Reserve("A2").ok());

  // WaitForTask's future holds the outcome of the next completed run: the task's Status.
  std::shared_future<stagehand::Status> run = scheduler_.WaitForTask("report-stats");
  ASSERT_TRUE(scheduler_.TriggerTask("report-stats").ok());
  EXPECT_TRUE(run.get().ok());
  EXPECT_EQ(state_.last_reported_count(), 2u);
}

TEST_F(ReservationsTest, ExpiryStopsWhenItsStopTokenFires) {
  ASSERT_TRUE(state_.Reserve("A1").ok());
  clock_.Advance(minutes(20));
  std::stop_source stop;
  stop.request_stop();

  stagehand::Status status = state_.ExpireReservations(stop.get_token());
  EXPECT_EQ(status.code(), stagehand::StatusCode::kCancelled);
  EXPECT_EQ(state_.Seats(), (std::vector<std::string>{"A1"}));
}

TEST_F(ReservationsTest, RefusesASeatThatIsTaken) {
  ASSERT_TRUE(state_.Reserve("A1").ok());
  EXPECT_EQ(state_.Reserve("A1").code(), stagehand::StatusCode::kConflict);
}

}  // namespace
}  // namespace reservations
