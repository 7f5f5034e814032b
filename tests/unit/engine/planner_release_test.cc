// What the planner makes of the database's answers to releases, one answer at a time: no threads,
// no store and no clock.
#include <gtest/gtest.h>

#include "engine/planner.h"

namespace stagehand::engine_internal {
namespace {

using ReleaseVerdict = Planner::ReleaseVerdict;
using FailedWrite = Planner::FailedWrite;

ReleaseResult Answer(bool released, bool recorded) {
  ReleaseResult result;
  result.released = released;
  result.recorded = recorded;
  return result;
}

TEST(PlannerReleaseTest, AFirstReleaseOfAHeldClaimGuardsOnTheTicketOnly) {
  EXPECT_FALSE(Planner::ReleaseGuardsOnVersion(/*attempts=*/1, /*held=*/true));
}

TEST(PlannerReleaseTest, ARetriedReleaseAlsoGuardsOnTheClaimedVersion) {
  EXPECT_TRUE(Planner::ReleaseGuardsOnVersion(/*attempts=*/2, /*held=*/true));
}

TEST(PlannerReleaseTest, AReleaseOfAClaimNoLongerHeldAlsoGuardsOnTheClaimedVersion) {
  EXPECT_TRUE(Planner::ReleaseGuardsOnVersion(/*attempts=*/1, /*held=*/false));
}

TEST(PlannerReleaseTest, AnAnswerThatReleasedIsAReleaseWhateverItRecorded) {
  EXPECT_EQ(Planner::JudgeRelease(Answer(true, false)), ReleaseVerdict::kReleased);
  EXPECT_EQ(Planner::JudgeRelease(Answer(true, true)), ReleaseVerdict::kReleased);
}

TEST(PlannerReleaseTest, AnAnswerThatNeitherReleasedNorRecordedMeansAnEarlierReleaseGotThrough) {
  EXPECT_EQ(Planner::JudgeRelease(Answer(false, false)), ReleaseVerdict::kAlreadyReleased);
}

TEST(PlannerReleaseTest, AnAnswerThatRecordedTheRunButCouldNotReleaseItPutsTheRunAtRisk) {
  EXPECT_EQ(Planner::JudgeRelease(Answer(false, true)), ReleaseVerdict::kAtRisk);
}

TEST(PlannerReleaseTest, WritesTheDatabaseDidNotAnswerAreSentAgain) {
  EXPECT_EQ(Planner::OnFailedWrite(UnavailableError("connection lost")), FailedWrite::kSendAgain);
}

TEST(PlannerReleaseTest, WritesTheDatabaseRefusedAreDropped) {
  EXPECT_EQ(Planner::OnFailedWrite(InternalError("constraint violated")), FailedWrite::kDrop);
  EXPECT_EQ(Planner::OnFailedWrite(ConflictError("version changed")), FailedWrite::kDrop);
}

}  // namespace
}  // namespace stagehand::engine_internal
