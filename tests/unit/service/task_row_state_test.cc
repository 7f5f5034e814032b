#include "stagehand/service/task_row_state.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "stagehand/model/task_state.h"
#include "stagehand/store/task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;

WallTime At(std::string_view iso) {
  Result<WallTime> t = ParseIsoInstant(iso);
  EXPECT_THAT(t, IsOk()) << iso;
  return t.ok() ? *t : WallTime{};
}

TaskRow IdleRow() {
  TaskRow row;
  row.id = "idle";
  row.settings_json = R"({"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT1M"})";
  row.next_run_start_at = At("2026-11-30T04:42:26Z");
  return row;
}

TEST(ToTaskStateTest, IdleRowShowsItsNextStart) {
  TaskState expected;
  expected.status = TaskState::Status::kIdle;
  expected.starts_at = "2026-11-30T04:42:26.000+00:00";
  EXPECT_EQ(ToTaskState(IdleRow(), TimeZone::Utc()), expected);
}

TEST(ToTaskStateTest, IdleRowWithLastRun) {
  TaskRow row = IdleRow();
  row.last_run_ended_at = At("2026-11-30T04:32:26.123Z");
  row.last_run_error_json = R"({"name":"Error","message":"failed"})";
  const TaskState state = ToTaskState(row, TimeZone::Utc());
  EXPECT_EQ(state.status, TaskState::Status::kIdle);
  EXPECT_EQ(state.starts_at, "2026-11-30T04:42:26.000+00:00");
  EXPECT_EQ(state.last_run_ended_at, "2026-11-30T04:32:26.123+00:00");
  EXPECT_EQ(state.last_run_error, R"({"name":"Error","message":"failed"})");
  EXPECT_FALSE(state.started_at.has_value());
  EXPECT_FALSE(state.times_out_at.has_value());
}

TEST(ToTaskStateTest, ManualRowHasNoStart) {
  TaskRow row = IdleRow();
  row.next_run_start_at.reset();
  TaskState expected;
  EXPECT_EQ(ToTaskState(row, TimeZone::Utc()), expected);
}

TEST(ToTaskStateTest, RunningIffStartedIsSet) {
  TaskRow row = IdleRow();
  row.current_run_ticket = "t";
  row.current_run_started_at = At("2026-11-30T04:42:27.5Z");
  row.current_run_expires_at = At("2026-11-30T04:43:27.5Z");
  row.last_run_ended_at = At("2026-11-30T04:32:26Z");
  TaskState expected;
  expected.status = TaskState::Status::kRunning;
  expected.started_at = "2026-11-30T04:42:27.500+00:00";
  expected.times_out_at = "2026-11-30T04:43:27.500+00:00";
  expected.last_run_ended_at = "2026-11-30T04:32:26.000+00:00";
  EXPECT_EQ(ToTaskState(row, TimeZone::Utc()), expected);

  // A ticket without a start time is not "running" in Backstage's listing.
  row.current_run_started_at.reset();
  EXPECT_EQ(ToTaskState(row, TimeZone::Utc()).status, TaskState::Status::kIdle);
}

TEST(ToTaskStateTest, RunningWithoutExpiryOmitsTimesOutAt) {
  TaskRow row = IdleRow();
  row.current_run_ticket = "t";
  row.current_run_started_at = At("2026-11-30T04:42:27Z");
  const TaskState state = ToTaskState(row, TimeZone::Utc());
  EXPECT_EQ(state.status, TaskState::Status::kRunning);
  EXPECT_FALSE(state.times_out_at.has_value());
  EXPECT_FALSE(state.starts_at.has_value());
}

TEST(ToTaskStateTest, EmptyErrorCountsAsAbsent) {
  TaskRow row = IdleRow();
  row.last_run_error_json = "";
  EXPECT_FALSE(ToTaskState(row, TimeZone::Utc()).last_run_error.has_value());
}

TEST(ToTaskStateTest, FormatsInTheGivenZone) {
  Result<TimeZone> new_york = TimeZone::Locate("America/New_York");
  ASSERT_THAT(new_york, IsOk());
  EXPECT_EQ(ToTaskState(IdleRow(), *new_york).starts_at, "2026-11-29T23:42:26.000-05:00");
}

}  // namespace
}  // namespace stagehand
