#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "stagehand/model/task_state.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {
namespace {

WallTime At(std::string_view iso) {
  Result<WallTime> t = ParseIsoInstant(iso);
  EXPECT_TRUE(t.ok()) << iso;
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
  ASSERT_TRUE(new_york.ok());
  EXPECT_EQ(ToTaskState(IdleRow(), *new_york).starts_at, "2026-11-29T23:42:26.000-05:00");
}

TEST(TaskStateToJsonTest, IdleWithEveryField) {
  TaskState state;
  state.starts_at = "2026-11-30T04:42:26.000+00:00";
  state.last_run_ended_at = "2026-11-30T04:32:26.000+00:00";
  state.last_run_error = R"({"name":"Error","message":"failed"})";
  EXPECT_EQ(state.ToJson(), R"({"status":"idle","startsAt":"2026-11-30T04:42:26.000+00:00",)"
                            R"("lastRunEndedAt":"2026-11-30T04:32:26.000+00:00",)"
                            R"("lastRunError":"{\"name\":\"Error\",\"message\":\"failed\"}"})");
}

TEST(TaskStateToJsonTest, RunningWithEveryField) {
  TaskState state;
  state.status = TaskState::Status::kRunning;
  state.started_at = "2026-11-30T04:42:27.000+00:00";
  state.times_out_at = "2026-11-30T04:43:27.000+00:00";
  state.last_run_ended_at = "2026-11-30T04:32:26.000+00:00";
  state.last_run_error = R"({"name":"Error","message":"Task timed out"})";
  EXPECT_EQ(state.ToJson(),
            R"({"status":"running","startedAt":"2026-11-30T04:42:27.000+00:00",)"
            R"("timesOutAt":"2026-11-30T04:43:27.000+00:00",)"
            R"("lastRunEndedAt":"2026-11-30T04:32:26.000+00:00",)"
            R"("lastRunError":"{\"name\":\"Error\",\"message\":\"Task timed out\"}"})");
}

TEST(TaskStateToJsonTest, OmitsAbsentFields) {
  EXPECT_EQ(TaskState{}.ToJson(), R"({"status":"idle"})");
  TaskState running;
  running.status = TaskState::Status::kRunning;
  running.started_at = "2026-11-30T04:42:27.000+00:00";
  EXPECT_EQ(running.ToJson(),
            R"({"status":"running","startedAt":"2026-11-30T04:42:27.000+00:00"})");
}

TEST(TaskStateToJsonTest, EscapesLikeJsonStringify) {
  TaskState state;
  state.last_run_error = "a\"b\\c\nd\te\x01 caf\xc3\xa9";
  EXPECT_EQ(state.ToJson(),
            "{\"status\":\"idle\",\"lastRunError\":\"a\\\"b\\\\c\\nd\\te\\u0001 caf\xc3\xa9\"}");
}

TEST(ErrorJsonTest, MatchesSerializeError) {
  EXPECT_EQ(ErrorJson("Task was cancelled"), R"({"name":"Error","message":"Task was cancelled"})");
  EXPECT_EQ(ErrorJson("Task timed out"), R"({"name":"Error","message":"Task timed out"})");
  EXPECT_EQ(ErrorJson("bad type", "TypeError"), R"({"name":"TypeError","message":"bad type"})");
  EXPECT_EQ(ErrorJson("say \"hi\"\n"), R"({"name":"Error","message":"say \"hi\"\n"})");
}

TEST(WorkerStatusNameTest, UsesBackstageNames) {
  EXPECT_EQ(WorkerStatusName(WorkerStatus::kInitialWait), "initial-wait");
  EXPECT_EQ(WorkerStatusName(WorkerStatus::kIdle), "idle");
  EXPECT_EQ(WorkerStatusName(WorkerStatus::kRunning), "running");
}

}  // namespace
}  // namespace stagehand
