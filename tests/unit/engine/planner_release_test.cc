// What the planner makes of the database's answers (releases, claims, renewals) and of how a run
// ended, one answer at a time: no threads, no store and no clock.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

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

TEST(PlannerReleaseTest, AClaimWithoutAnAnswerMayHaveBeenCommittedAndIsGivenBackDueAtOnce) {
  EXPECT_TRUE(Planner::ClaimMayHaveCommitted(UnavailableError("timeout")));
  EXPECT_FALSE(Planner::ClaimMayHaveCommitted(InternalError("syntax")));
  PlannedTask task;
  task.def.id = "t";
  const ReleaseRequest give_back = Planner::GiveBackOf(task, "ticket-1");
  EXPECT_EQ(give_back.id, "t");
  EXPECT_EQ(give_back.ticket, "ticket-1");
  EXPECT_EQ(give_back.next_in, std::chrono::milliseconds(0));
  ASSERT_TRUE(give_back.error_json.has_value());
  EXPECT_NE(give_back.error_json->find("answer to its claim was lost"), std::string::npos);
}

TEST(PlannerReleaseTest, ALostClaimKillsTheRunAndANoticedCancelStopsIt) {
  using Outcome = Planner::RenewalOutcome;
  using Signal = Planner::RunSignal;
  EXPECT_EQ(Planner::SignalAfterRenewal(Outcome::kLost, false), Signal::kKill);
  EXPECT_EQ(Planner::SignalAfterRenewal(Outcome::kCancelNoticed, false), Signal::kStop);
  EXPECT_EQ(Planner::SignalAfterRenewal(Outcome::kCancelNoticed, true), Signal::kKill);
  EXPECT_EQ(Planner::SignalAfterRenewal(Outcome::kRenewed, false), Signal::kNone);
  EXPECT_EQ(Planner::SignalAfterRenewal(Outcome::kRetry, true), Signal::kNone);
}

TEST(PlannerReleaseTest, ARunNotStartedSaysWhyAndAStoppedRunsErrorNamesTheStopFirst) {
  EXPECT_FALSE(Planner::NotStartedWhy(Planner::StartVerdict::kStart).has_value());
  EXPECT_NE(Planner::NotStartedWhy(Planner::StartVerdict::kShuttingDown)->find("shutting down"),
            std::string::npos);
  EXPECT_EQ(Planner::RunErrorJson(StopReason::kNone, std::chrono::seconds(2), "boom", "Error"),
            ErrorJson("boom", "Error"));
  EXPECT_EQ(Planner::RunErrorJson(StopReason::kTimeout, std::chrono::seconds(2), "boom", "Error"),
            ErrorJson(StopOutcome(StopReason::kTimeout, std::chrono::seconds(2)) + ": boom"));
}

TEST(PlannerReleaseTest, OnlyShutdownAndOperatorStopsAreNoErrorsToAlertOn) {
  EXPECT_TRUE(Planner::StoppedByOperator(StopReason::kShutdown));
  EXPECT_TRUE(Planner::StoppedByOperator(StopReason::kCancel));
  EXPECT_TRUE(Planner::StoppedByOperator(StopReason::kUnscheduled));
  EXPECT_FALSE(Planner::StoppedByOperator(StopReason::kTimeout));
  EXPECT_FALSE(Planner::StoppedByOperator(StopReason::kLeaseLost));
  EXPECT_FALSE(Planner::StoppedByOperator(StopReason::kNone));
}

}  // namespace
}  // namespace stagehand::engine_internal
