// The planner's verdicts on what the database answered and how a run ended (planner.h).
#include "engine/planner.h"

namespace stagehand::engine_internal {

bool Planner::ReleaseGuardsOnVersion(int attempts, bool held) { return attempts > 1 || !held; }

Planner::ReleaseVerdict Planner::JudgeRelease(const ReleaseResult& result) {
  if (result.released) return ReleaseVerdict::kReleased;
  return result.recorded ? ReleaseVerdict::kAtRisk : ReleaseVerdict::kAlreadyReleased;
}

Planner::FailedWrite Planner::OnFailedWrite(const Status& status) {
  return status.code() == StatusCode::kUnavailable ? FailedWrite::kSendAgain : FailedWrite::kDrop;
}

bool Planner::ClaimMayHaveCommitted(const Status& status) {
  return status.code() == StatusCode::kUnavailable;
}

ReleaseRequest Planner::GiveBackOf(const PlannedTask& task, const std::string& ticket) {
  ReleaseRequest give_back{task.def.id, ticket, task.def.schedule,
                           ErrorJson("not started: the database's answer to its claim was lost")};
  give_back.next_in = std::chrono::milliseconds(0);
  return give_back;
}

Planner::RunSignal Planner::SignalAfterRenewal(RenewalOutcome outcome, bool stop_requested) {
  switch (outcome) {
    case RenewalOutcome::kLost:
      return RunSignal::kKill;
    case RenewalOutcome::kCancelNoticed:
      return stop_requested ? RunSignal::kKill : RunSignal::kStop;
    default:
      return RunSignal::kNone;
  }
}

std::optional<std::string> Planner::NotStartedWhy(StartVerdict verdict) {
  switch (verdict) {
    case StartVerdict::kClaimAtRisk:
      return "not started: its claim was about to lapse before the run could start";
    case StartVerdict::kShuttingDown:
      return "not started: its host was shutting down";
    case StartVerdict::kStart:
      break;
  }
  return std::nullopt;
}

std::string Planner::RunErrorJson(StopReason reason, std::chrono::milliseconds timeout,
                                  const std::string& message, const std::string& name) {
  const std::string why = StopOutcome(reason, timeout);
  return ErrorJson(why.empty() ? message : why + ": " + message, name);
}

bool Planner::StoppedByOperator(StopReason reason) {
  return reason == StopReason::kShutdown || reason == StopReason::kCancel ||
         reason == StopReason::kUnscheduled;
}

}  // namespace stagehand::engine_internal
