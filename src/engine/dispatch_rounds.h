// The dispatcher's round trips to the store for global tasks (TaskEngine): lease renewals, the
// poll of the rows that may have changed, the skips of missed slots and the claims. Each sends a
// statement the planner asked for and hands the answer back to the planner; what an answer means
// is the planner's (ApplyRenewal, ApplyPoll, ApplySkip, ApplyClaims).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_reporter.h"
#include "engine/planner.h"
#include "engine/planner_access.h"
#include "engine/releaser.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand::engine_internal {

struct DispatchRoundsContext {
  TaskStore* store = nullptr;  // not null when a round is sent
  Clock* clock = nullptr;
  const EngineReporter* reporter = nullptr;
  Releaser* releaser = nullptr;  // for runs at risk and claims to give back
  std::chrono::milliseconds lease{0};
  std::string host;  // this host as the run history names it
  std::int64_t pid = 0;
};

// Thread-compatible: only the dispatcher lane calls it. It takes the planner through
// PlannerAccess, never across a store call.
class DispatchRounds {
 public:
  DispatchRounds(PlannerAccess& engine, DispatchRoundsContext context);

  // Pays for the slow first uses (connections, prepared statements, the ticket generator) before
  // the first trigger does. Once, on the dispatcher's first step.
  void WarmUp();
  // Renews the lease of each run in `due`, one statement each, and signals the runs the answers
  // say to stop or kill (Planner::SignalAfterRenewal).
  void RenewLeases(const std::vector<std::pair<TaskPtr, RunPtr>>& due);
  // Polls the plan's rows, in one statement; the planner adds the due ones to plan.candidates.
  // Returns false when the poll failed.
  bool Poll(Planner::DispatchPlan& plan);
  // Skips the slots of plan.candidates missed beyond their catch-up window (ADR 0014): one
  // SkipSlot each, logged and counted; a candidate whose store cannot skip stays to be claimed.
  void SkipMissedSlots(Planner::DispatchPlan& plan);
  // Claims `reserved` (with `tickets`, in order) in one ClaimMany, the runs' starts recorded with
  // the claims when the planner says so. Returns the answers; on failure, the planner is told
  // (ClaimFailed), the claims the database may have committed are queued to be given back, and
  // nullopt is returned.
  std::optional<std::vector<ClaimResult>> Claim(const std::vector<Planner::Candidate>& reserved,
                                                const std::vector<std::string>& tickets);

  // Requests the run's stop token and, with `kill`, its kill token too. Not under the engine's
  // lock (the tokens' callbacks are the task function's).
  static void SignalStop(PlannedRun& run, bool kill);

 private:
  TaskStore& store() const { return *context_.store; }

  PlannerAccess& engine_;
  DispatchRoundsContext context_;
  Clock& clock_;
  const EngineReporter& reporter_;
};

}  // namespace stagehand::engine_internal
