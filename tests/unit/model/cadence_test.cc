#include "stagehand/model/cadence.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::IsOkAndHolds;
using ::stagehand::testing::StatusIs;
using std::chrono::milliseconds;
using Kind = Cadence::Kind;

WallTime At(const char* iso) {
  Result<WallTime> at = ParseIsoInstant(iso);
  EXPECT_THAT(at, IsOk()) << iso;
  return at.ok() ? *at : WallTime{};
}

TEST(CadenceTest, ClassifiesByBackstagesRule) {
  EXPECT_EQ(Cadence::Classify("manual"), Kind::kManual);
  EXPECT_EQ(Cadence::Classify("PT1M"), Kind::kDuration);
  EXPECT_EQ(Cadence::Classify("P"), Kind::kDuration);
  EXPECT_EQ(Cadence::Classify("Pnot-a-duration"), Kind::kDuration);
  EXPECT_EQ(Cadence::Classify("pt1m"), Kind::kCron);
  EXPECT_EQ(Cadence::Classify("*/5 * * * *"), Kind::kCron);
  EXPECT_EQ(Cadence::Classify("Manual"), Kind::kCron);
  EXPECT_EQ(Cadence::Classify(""), Kind::kCron);
}

TEST(CadenceTest, ParsesEachKindOnce) {
  const std::uint64_t parses = CronExpression::ParseCount();
  const Result<Cadence> cron = Cadence::Parse("*/15 * * * *");
  ASSERT_THAT(cron, IsOk());
  EXPECT_EQ(CronExpression::ParseCount(), parses + 1);
  EXPECT_TRUE(cron->is_cron());
  EXPECT_EQ(cron->text(), "*/15 * * * *");
  ASSERT_NE(cron->cron(), nullptr);
  EXPECT_EQ(cron->period(), milliseconds(0));

  const Result<Cadence> duration = Cadence::Parse("PT1M30S");
  ASSERT_THAT(duration, IsOk());
  EXPECT_TRUE(duration->is_duration());
  EXPECT_EQ(duration->period(), milliseconds(90'000));
  EXPECT_EQ(duration->period_ms(), 90'000.0);
  EXPECT_EQ(duration->cron(), nullptr);

  const Result<Cadence> month = Cadence::Parse("P1M");
  ASSERT_THAT(month, IsOk());
  EXPECT_EQ(month->period(), milliseconds(30LL * 24 * 3600 * 1000));  // a month is 30 days

  const Result<Cadence> manual = Cadence::Parse("manual");
  ASSERT_THAT(manual, IsOk());
  EXPECT_TRUE(manual->is_manual());
  EXPECT_EQ(*manual, Cadence());
  EXPECT_EQ(CronExpression::ParseCount(), parses + 1);
}

TEST(CadenceTest, CopiesShareTheParsedProgram) {
  const Result<Cadence> cron = Cadence::Parse("0 * * * *");
  ASSERT_THAT(cron, IsOk());
  const std::uint64_t parses = CronExpression::ParseCount();
  const Cadence copy = *cron;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(copy.cron(), cron->cron());
  EXPECT_EQ(copy, *cron);
  EXPECT_EQ(CronExpression::ParseCount(), parses);
}

TEST(CadenceTest, RefusesWhatItCannotRead) {
  EXPECT_THAT(Cadence::Parse("0 * * *"),
              StatusIs(StatusCode::kInvalidArgument, "Invalid cron expression '0 * * *'"));
  EXPECT_THAT(Cadence::Parse("0 0 30 2 *"),
              StatusIs(StatusCode::kInvalidArgument, "No execution date was found"));
  EXPECT_THAT(Cadence::Parse("P1X"),
              StatusIs(StatusCode::kInvalidArgument, "Invalid duration 'P1X'"));
}

TEST(CadenceTest, EmptyTextIsACronThatNeverComputesAStart) {
  // zod's schema lets an empty cadence through; Backstage's worker reads it as cron and fails.
  const Result<Cadence> empty = Cadence::Parse("");
  ASSERT_THAT(empty, IsOk());
  EXPECT_TRUE(empty->is_cron());
  EXPECT_EQ(empty->cron(), nullptr);
  EXPECT_THAT(empty->NextAfter(At("2026-03-01T10:00:00Z"), TimeZone::Utc()),
              StatusIs(StatusCode::kInvalidArgument, "Invalid cron expression ''"));
}

TEST(CadenceTest, NextAfterIsTheNextStartOfEachKind) {
  const WallTime now = At("2026-03-01T10:07:30Z");
  EXPECT_THAT(Cadence::Parse("*/15 * * * *")->NextAfter(now, TimeZone::Utc()),
              IsOkAndHolds(std::optional(At("2026-03-01T10:15:00Z"))));
  Result<TimeZone> berlin = TimeZone::Locate("Europe/Berlin");
  ASSERT_THAT(berlin, IsOk());
  EXPECT_THAT(Cadence::Parse("0 12 * * *")->NextAfter(now, *berlin),
              IsOkAndHolds(std::optional(At("2026-03-01T11:00:00Z"))));
  EXPECT_THAT(Cadence::Every(milliseconds(1500)).NextAfter(now, TimeZone::Utc()),
              IsOkAndHolds(std::optional(now + milliseconds(1500))));
  EXPECT_THAT(Cadence::Manual().NextAfter(now, TimeZone::Utc()),
              IsOkAndHolds(std::optional<WallTime>()));
}

TEST(CadenceTest, BuiltCadencesStoreBackstagesText) {
  HumanDuration ninety;
  ninety.minutes = 90;
  EXPECT_EQ(Cadence::Every(ninety).text(), "PT90M");
  EXPECT_EQ(Cadence::Every(ninety).period(), milliseconds(5'400'000));
  EXPECT_EQ(Cadence::Every(milliseconds(5500)).text(), "PT5.5S");
  Result<CronExpression> program = CronExpression::Parse("@daily");
  ASSERT_THAT(program, IsOk());
  EXPECT_EQ(Cadence::Cron(*program).text(), "@daily");
}

}  // namespace
}  // namespace stagehand
