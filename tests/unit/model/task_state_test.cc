#include "stagehand/model/task_state.h"

#include <gtest/gtest.h>

#include <string>

#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;

TEST(FormatRestTimeTest, ZoneTimesHaveAnOffsetAndUtcTimesAZ) {
  Result<WallTime> instant = ParseIsoInstant("2026-03-08T07:00:00.250Z");
  ASSERT_THAT(instant, IsOk());
  EXPECT_EQ(FormatRestTime(*instant, kRestUtc), "2026-03-08T07:00:00.250Z");
  const TimeZone utc = TimeZone::Utc();
  EXPECT_EQ(FormatRestTime(*instant, &utc), "2026-03-08T07:00:00.250+00:00");
  Result<TimeZone> new_york = TimeZone::Locate("America/New_York");
  ASSERT_THAT(new_york, IsOk());
  EXPECT_EQ(FormatRestTime(*instant, &*new_york), "2026-03-08T03:00:00.250-04:00");
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
