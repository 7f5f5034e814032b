#include "store/next_run.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fixtures/task_schedules.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::store_internal {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;
using Kind = NextRunPlan::Kind;

WallTime At(std::string_view iso) {
  Result<WallTime> t = ParseIsoInstant(iso);
  EXPECT_THAT(t, IsOk()) << iso;
  return t.ok() ? *t : WallTime{};
}

TaskSchedule Schedule(std::string_view cadence, std::optional<std::string> delay = std::nullopt,
                      TimeZone zone = TimeZone::Utc()) {
  return testing::ScheduleFrom(cadence, std::move(delay), "PT1M", std::move(zone));
}

NextRunPlan Plan(Kind kind, double seconds = 0, WallTime instant = WallTime{}) {
  return NextRunPlan{kind, seconds, instant};
}

TEST(PlanInsertStartTest, DurationStartsNowUnlessDelayed) {
  const WallTime now = At("2026-03-01T10:00:00.250Z");
  EXPECT_EQ(*PlanInsertStart(Schedule("PT10M"), now), Plan(Kind::kNow));
  EXPECT_EQ(*PlanInsertStart(Schedule("PT10M", "PT30S"), now), Plan(Kind::kNowPlus, 30));
  EXPECT_EQ(*PlanInsertStart(Schedule("PT10M", "PT0.3S"), now), Plan(Kind::kNowPlus, 0.3));
  EXPECT_EQ(*PlanInsertStart(Schedule("PT10M", "PT0S"), now), Plan(Kind::kNow));
  EXPECT_EQ(*PlanInsertStart(Schedule("PT10M", ""), now), Plan(Kind::kNow));
}

TEST(PlanInsertStartTest, ManualHasNoStartUnlessDelayed) {
  const WallTime now = At("2026-03-01T10:00:00Z");
  EXPECT_EQ(*PlanInsertStart(Schedule("manual"), now), Plan(Kind::kNull));
  EXPECT_EQ(*PlanInsertStart(Schedule("manual", "PT2M"), now), Plan(Kind::kNowPlus, 120));
}

TEST(PlanInsertStartTest, CronStartsAtItsFirstFireTime) {
  EXPECT_EQ(*PlanInsertStart(Schedule("0 * * * *"), At("2026-03-01T10:30:00Z")),
            Plan(Kind::kInstant, 0, At("2026-03-01T11:00:00Z")));
  // Every second: the next second, not the one already begun (Backstage's "- 1 s" would make it
  // due at once, a second time for that slot when another host already ran it).
  EXPECT_EQ(*PlanInsertStart(Schedule("* * * * * *"), At("2026-03-01T10:30:00.500Z")),
            Plan(Kind::kInstant, 0, At("2026-03-01T10:30:01Z")));
  // An initial delay wins over the cron time.
  EXPECT_EQ(*PlanInsertStart(Schedule("0 * * * *", "PT3S"), At("2026-03-01T10:30:00Z")),
            Plan(Kind::kNowPlus, 3));
}

TEST(PlanInsertStartTest, CronIsEvaluatedInTheScheduleZone) {
  Result<TimeZone> berlin = TimeZone::Locate("Europe/Berlin");
  ASSERT_THAT(berlin, IsOk());
  // 00:30Z is 01:30 in Berlin; the next local midnight is 23:00Z.
  EXPECT_EQ(
      *PlanInsertStart(Schedule("0 0 * * *", std::nullopt, *berlin), At("2026-01-01T00:30:00Z")),
      Plan(Kind::kInstant, 0, At("2026-01-01T23:00:00Z")));
}

TEST(PlanInsertStartTest, RejectsBadCadencesAndDelays) {
  const WallTime now = At("2026-03-01T10:00:00Z");
  // The empty cadence zod lets through is a cron without a program.
  Result<NextRunPlan> bad_cron = PlanInsertStart(Schedule(""), now);
  ASSERT_THAT(bad_cron, StatusIs(StatusCode::kInvalidArgument));
  Result<NextRunPlan> bad_delay = PlanInsertStart(Schedule("PT10M", "soon"), now);
  ASSERT_THAT(bad_delay, Not(IsOk()));
  EXPECT_THAT(bad_delay.status().message(), HasSubstr("soon"));
}

TEST(PlanReregisterStartTest, IgnoresTheInitialDelay) {
  const WallTime now = At("2026-03-01T10:30:00Z");
  EXPECT_EQ(*PlanReregisterStart(Schedule("PT10M", "PT1H"), now), Plan(Kind::kNowPlus, 600));
  EXPECT_EQ(*PlanReregisterStart(Schedule("PT0S"), now), Plan(Kind::kNow));
  EXPECT_EQ(*PlanReregisterStart(Schedule("manual", "PT1H"), now), Plan(Kind::kNull));
  EXPECT_EQ(*PlanReregisterStart(Schedule("*/15 * * * *", "PT2M"), now),
            Plan(Kind::kInstant, 0, At("2026-03-01T10:45:00Z")));
}

TEST(PlanReregisterStartTest, UsesCasualUnitsForDurations) {
  const WallTime now = At("2026-03-01T10:30:00Z");
  EXPECT_EQ(*PlanReregisterStart(Schedule("P1D"), now), Plan(Kind::kNowPlus, 86400));
  EXPECT_EQ(*PlanReregisterStart(Schedule("P1M"), now), Plan(Kind::kNowPlus, 2592000));
  EXPECT_EQ(*PlanReregisterStart(Schedule("PT1H30M"), now), Plan(Kind::kNowPlus, 5400));
}

TEST(PlanReleaseNextTest, CronMovesToTheNextFireTimeWithoutHeadStart) {
  EXPECT_EQ(*PlanReleaseNext(Schedule("0 * * * *"), At("2026-03-01T10:30:00Z")),
            Plan(Kind::kInstant, 0, At("2026-03-01T11:00:00Z")));
  EXPECT_EQ(*PlanReleaseNext(Schedule("* * * * * *"), At("2026-03-01T10:30:00.500Z")),
            Plan(Kind::kInstant, 0, At("2026-03-01T10:30:01Z")));
  // Strictly after: a release exactly on a fire time moves to the following one.
  EXPECT_EQ(*PlanReleaseNext(Schedule("0 * * * *"), At("2026-03-01T11:00:00Z")),
            Plan(Kind::kInstant, 0, At("2026-03-01T12:00:00Z")));
}

TEST(PlanReleaseNextTest, DurationIsAnchoredOnTheScheduledTime) {
  const WallTime now = At("2026-03-01T10:30:00Z");
  EXPECT_EQ(*PlanReleaseNext(Schedule("PT10M"), now), Plan(Kind::kScheduledPlusCadence, 600));
  EXPECT_EQ(*PlanReleaseNext(Schedule("PT0.1S"), now), Plan(Kind::kScheduledPlusCadence, 0.1));
  EXPECT_EQ(*PlanReleaseNext(Schedule("PT0S"), now), Plan(Kind::kScheduledPlusCadence, 0));
  EXPECT_EQ(*PlanReleaseNext(Schedule("manual"), now), Plan(Kind::kNull));
}

TEST(NextRunTest, UsesTheCadenceTheSettingsCarry) {
  const TaskSchedule own = Schedule("0 * * * *");
  EXPECT_EQ(*PlanReleaseNext(own, At("2026-03-01T10:30:00Z")),
            Plan(Kind::kInstant, 0, At("2026-03-01T11:00:00Z")));
  // Settings replaced by a row's (another host's): its cadence applies, parsed where it was read.
  TaskSchedule replaced = own;
  replaced.settings.cadence = testing::ParsedCadence("*/5 * * * *");
  const std::uint64_t parses = CronExpression::ParseCount();
  EXPECT_EQ(*PlanReleaseNext(replaced, At("2026-03-01T10:30:00Z")),
            Plan(Kind::kInstant, 0, At("2026-03-01T10:35:00Z")));
  EXPECT_EQ(CronExpression::ParseCount(), parses);
}

TEST(NextRunTest, ValidatesTheDurationsOfTheSettings) {
  TaskSchedule bad_timeout = Schedule("0 * * * *");
  bad_timeout.settings.timeout_after_duration = "1 minute";
  EXPECT_EQ(bad_timeout.settings.Validate(),
            InvalidArgumentError("Invalid settings: timeoutAfterDuration: Invalid duration, "
                                 "expecting ISO Period"));
  EXPECT_THAT(
      PlanUpserts(std::vector<TaskUpsert>{{"t", bad_timeout}}, At("2026-03-01T10:30:00Z")),
      StatusIs(StatusCode::kInvalidArgument, "task t: Invalid settings: timeoutAfterDuration"));
}

TEST(IsoDurationSecondsTest, ConvertsCasually) {
  EXPECT_EQ(*IsoDurationSeconds(""), 0.0);
  EXPECT_EQ(*IsoDurationSeconds("PT1M"), 60.0);
  EXPECT_EQ(*IsoDurationSeconds("PT0.5S"), 0.5);
  EXPECT_EQ(*IsoDurationSeconds("P1Y"), 31536000.0);
  EXPECT_EQ(*IsoDurationSeconds("P1M"), 2592000.0);
  EXPECT_EQ(*IsoDurationSeconds("P1W"), 604800.0);
  EXPECT_EQ(*IsoDurationSeconds("-PT5M"), -300.0);
}

TEST(IsoDurationSecondsTest, NamesTheBadText) {
  Result<double> bad = IsoDurationSeconds("5 minutes");
  ASSERT_THAT(bad, StatusIs(StatusCode::kInvalidArgument, "'5 minutes'"));
}

TEST(DatabaseClockTest, FollowsTheHostClockUntilItObservesTheDatabase) {
  testing::ManualClock clock;
  DatabaseClock db(clock);
  EXPECT_EQ(db.Now(), clock.Now());
  EXPECT_EQ(db.LocalNow(), clock.Now());
  clock.Advance(std::chrono::seconds(3));
  EXPECT_EQ(db.Now(), clock.Now());
}

TEST(DatabaseClockTest, AppliesTheObservedOffsetAtTheRoundTripMidpoint) {
  testing::ManualClock clock;
  DatabaseClock db(clock);
  const WallTime sent = clock.Now();
  const WallTime received = sent + std::chrono::milliseconds(100);
  // The database answered 10 s ahead of the host, measured at the middle of the round trip.
  db.Observe(sent, received, sent + std::chrono::milliseconds(50) + std::chrono::seconds(10));
  EXPECT_EQ(db.Now(), clock.Now() + std::chrono::seconds(10));
  clock.Advance(std::chrono::minutes(1));
  EXPECT_EQ(db.Now(), clock.Now() + std::chrono::seconds(10));

  // A later observation replaces the offset (here: the database is behind).
  db.Observe(clock.Now(), clock.Now(), clock.Now() - std::chrono::seconds(2));
  EXPECT_EQ(db.Now(), clock.Now() - std::chrono::seconds(2));
  EXPECT_EQ(db.LocalNow(), clock.Now());
}

// --- Jitter and catch-up window (ADR 0014) ---------------------------------------------------

TaskSchedule Jittered(std::string cadence, std::chrono::milliseconds offset,
                      std::optional<std::string> delay = std::nullopt) {
  TaskSchedule schedule = Schedule(std::move(cadence), std::move(delay));
  schedule.jitter_offset = offset;
  return schedule;
}

TEST(JitterPlanTest, CronTimesAreShiftedByTheOffsetWithoutSkippingASlot) {
  const auto offset = std::chrono::minutes(7);
  // 10:30 is past the 10:00 slot's jittered start (10:07): the next is 11:07.
  EXPECT_EQ(*PlanInsertStart(Jittered("0 * * * *", offset), At("2026-03-01T10:30:00Z")),
            Plan(Kind::kInstant, 0, At("2026-03-01T11:07:00Z")));
  // 11:03 is before 11:07: the 11:00 slot still starts, jittered, at 11:07.
  EXPECT_EQ(*PlanReregisterStart(Jittered("0 * * * *", offset), At("2026-03-01T11:03:00Z")),
            Plan(Kind::kInstant, 0, At("2026-03-01T11:07:00Z")));
  // Released just after its jittered start, the task waits for the next slot's, not the next
  // unjittered slot (12:00) and not 11:07 again.
  EXPECT_EQ(*PlanReleaseNext(Jittered("0 * * * *", offset), At("2026-03-01T11:07:00.500Z")),
            Plan(Kind::kInstant, 0, At("2026-03-01T12:07:00Z")));
}

TEST(JitterPlanTest, DurationStartsAreShiftedOnceAndReleasesKeepThePhase) {
  const auto offset = std::chrono::milliseconds(2500);
  const WallTime now = At("2026-03-01T10:00:00Z");
  EXPECT_EQ(*PlanInsertStart(Jittered("PT10M", offset), now), Plan(Kind::kNowPlus, 2.5));
  EXPECT_EQ(*PlanInsertStart(Jittered("PT10M", offset, "PT30S"), now), Plan(Kind::kNowPlus, 32.5));
  EXPECT_EQ(*PlanReregisterStart(Jittered("PT10M", offset), now), Plan(Kind::kNowPlus, 602.5));
  // The stored (jittered) start plus the cadence: adding the offset again would drift.
  EXPECT_EQ(*PlanReleaseNext(Jittered("PT10M", offset), now),
            Plan(Kind::kScheduledPlusCadence, 600));
}

TEST(PlanSkipNextTest, DurationSkipsToTheNextPointOfTheSlotsGrid) {
  const WallTime slot = At("2026-03-01T10:00:02.500Z");
  // 35 s late on a 10 s grid: the next point after now is slot + 40 s.
  EXPECT_EQ(*PlanSkipNext(Schedule("PT10S"), slot, slot + std::chrono::seconds(35)),
            Plan(Kind::kInstant, 0, slot + std::chrono::seconds(40)));
  // Exactly on a point of the grid: the one after it (never now, which would be due again).
  EXPECT_EQ(*PlanSkipNext(Schedule("PT10S"), slot, slot + std::chrono::seconds(30)),
            Plan(Kind::kInstant, 0, slot + std::chrono::seconds(40)));
}

TEST(PlanSkipNextTest, CronSkipsToTheNextJitteredFireAfterNow) {
  EXPECT_EQ(
      *PlanSkipNext(Schedule("0 * * * *"), At("2026-03-01T07:00:00Z"), At("2026-03-01T10:30:00Z")),
      Plan(Kind::kInstant, 0, At("2026-03-01T11:00:00Z")));
  EXPECT_EQ(*PlanSkipNext(Jittered("0 * * * *", std::chrono::minutes(7)),
                          At("2026-03-01T07:07:00Z"), At("2026-03-01T10:05:00Z")),
            Plan(Kind::kInstant, 0, At("2026-03-01T10:07:00Z")));
  EXPECT_EQ(
      *PlanSkipNext(Schedule("manual"), At("2026-03-01T07:00:00Z"), At("2026-03-01T10:05:00Z")),
      Plan(Kind::kNull));
}

TEST(PlanUpsertsTest, TasksOfEqualSettingsButOtherJitterArePlannedApart) {
  std::vector<TaskUpsert> tasks;
  tasks.push_back(TaskUpsert{"a", Jittered("PT10M", std::chrono::seconds(1))});
  tasks.push_back(TaskUpsert{"b", Jittered("PT10M", std::chrono::seconds(2))});
  Result<std::vector<PlannedUpsert>> planned = PlanUpserts(tasks, At("2026-03-01T10:00:00Z"));
  ASSERT_THAT(planned, IsOk());
  EXPECT_EQ((*planned)[0].insert, Plan(Kind::kNowPlus, 1));
  EXPECT_EQ((*planned)[1].insert, Plan(Kind::kNowPlus, 2));
  EXPECT_EQ((*planned)[0].settings_json, (*planned)[1].settings_json);
}

}  // namespace
}  // namespace stagehand::store_internal
