#include "engine/dispatch_rounds.h"

#include <utility>

#include "stagehand/base/uuid.h"

namespace stagehand::engine_internal {

using std::chrono::milliseconds;
using Wake = PlannerAccess::Wake;

DispatchRounds::DispatchRounds(PlannerAccess& engine, DispatchRoundsContext context)
    : engine_(engine),
      context_(std::move(context)),
      clock_(*context_.clock),
      reporter_(*context_.reporter) {}

void DispatchRounds::SignalStop(PlannedRun& run, bool kill) {
  run.stop.request_stop();
  if (kill) run.kill.request_stop();
}

void DispatchRounds::WarmUp() {
  (void)NewUuidV4();
  if (context_.store == nullptr) return;
  if (Status warmed = store().WarmUp(); !warmed.ok() && reporter_.debug()) {
    reporter_.log().Debug("Store warm-up failed (statements prepare on first use), " +
                          warmed.message());
  }
}

void DispatchRounds::RenewLeases(const std::vector<std::pair<TaskPtr, RunPtr>>& due) {
  for (const auto& due_run : due) {
    // Named, not bound: lambdas capture them (clang before 16 cannot capture bindings).
    const TaskPtr& task = due_run.first;
    const RunPtr& run = due_run.second;
    const std::string& id = task->def.id;
    const MonoTime sent = clock_.MonoNow();
    milliseconds hold{0};
    bool after_server_change = false;
    engine_.WithPlanner(
        [&](Planner& planner) {
          hold = planner.RenewalHold(*task, *run, sent);
          after_server_change = run->server_changed;
        },
        Wake::kNone);
    Result<LeaseStatus> renewed = store().RenewLease(id, run->ticket, hold, context_.lease);
    Planner::RenewalOutcome outcome{};
    engine_.WithPlanner(
        [&](Planner& planner) {
          outcome = planner.ApplyRenewal(*run, renewed, sent, clock_.MonoNow());
        },
        Wake::kTimer);
    if (outcome == Planner::RenewalOutcome::kStale) continue;
    bool reclaimed = false;
    if (outcome == Planner::RenewalOutcome::kReclaim) {
      // The new server lacks this run's claim: held again with the same ticket if nobody has
      // claimed or changed the row since.
      const MonoTime again = clock_.MonoNow();
      Result<bool> held =
          store().Reclaim(id, run->ticket, run->claimed_version, hold, context_.lease);
      engine_.WithPlanner(
          [&](Planner& planner) {
            outcome = planner.ApplyReclaim(*run, held, again, clock_.MonoNow());
          },
          Wake::kTimer);
      reclaimed = outcome == Planner::RenewalOutcome::kRenewed;
    }
    if (std::optional<std::string> why = reporter_.LogRenewal(
            *task, *run, outcome, after_server_change, reclaimed, renewed.status())) {
      context_.releaser->ReportAtRisk(id, run->run_id, run->slot, *why);
    }
    switch (Planner::SignalAfterRenewal(outcome, run->stop.stop_requested())) {
      case Planner::RunSignal::kKill:
        SignalStop(*run, /*kill=*/true);
        break;
      case Planner::RunSignal::kStop:
        SignalStop(*run, /*kill=*/false);
        break;
      case Planner::RunSignal::kNone:
        break;
    }
    reporter_.ObserveRenewal(*task, *run, outcome, reclaimed);
  }
}

bool DispatchRounds::Poll(Planner::DispatchPlan& plan) {
  if (reporter_.debug()) {
    reporter_.log().Debug("Polling " + std::to_string(plan.poll_ids.size()) + " task(s)" +
                          (plan.sweep ? " with sweep" : ""));
  }
  // Read before the statement: a wake-up computed from it can only be early, never late.
  const MonoTime mono_ref = clock_.MonoNow();
  Result<PollResult> polled = store().PollChanged(plan.poll_ids, plan.known_versions, plan.sweep);
  if (!polled.ok()) {
    reporter_.log().Warn("Task state poll failed, " + polled.status().message());
    engine_.WithPlanner([&](Planner& planner) { planner.PollFailed(plan, mono_ref); }, Wake::kNone);
    return false;
  }
  const std::size_t known_candidates = plan.candidates.size();
  Planner::PollOutcome outcome;
  engine_.WithPlanner(
      [&](Planner& planner) { outcome = planner.ApplyPoll(plan, *polled, mono_ref); }, Wake::kNone);
  reporter_.PollAnswered(outcome, *polled, plan.candidates.size() - known_candidates);
  return true;
}

void DispatchRounds::SkipMissedSlots(Planner::DispatchPlan& plan) {
  std::vector<Planner::Skip> skips;
  engine_.WithPlanner(
      [&](Planner& planner) {
        skips = planner.TakeMissedSlots(plan);
        std::vector<TaskPtr> tasks;
        for (const Planner::Skip& skip : skips) tasks.push_back(skip.task);
        planner.ReleasesSent(tasks);  // a skip is announced as a release
      },
      Wake::kNone);
  for (const Planner::Skip& skip : skips) {
    const std::string& id = skip.task->def.id;
    const MonoTime mono_ref = clock_.MonoNow();
    Result<SkipResult> skipped = store().SkipSlot(id, skip.version, skip.slot, skip.schedule);
    engine_.WithPlanner(
        [&](Planner& planner) {
          if (!skipped.ok() || !skipped->skipped) planner.ReleaseEchoCleared(*skip.task);
          if (std::optional<Planner::Candidate> run = planner.ApplySkip(skip, skipped, mono_ref)) {
            plan.candidates.push_back(*std::move(run));
          }
        },
        Wake::kNone);
    if (!skipped.ok()) {
      reporter_.SkipFailed(id, skipped.status());
    } else if (skipped->skipped) {
      reporter_.SlotSkipped(*skip.task, skip.slot, skip.late, skipped->next_run_start_at);
    }
  }
}

std::optional<std::vector<ClaimResult>> DispatchRounds::Claim(
    const std::vector<Planner::Candidate>& reserved, const std::vector<std::string>& tickets) {
  std::vector<ClaimRequest> claims;
  claims.reserve(reserved.size());
  for (std::size_t i = 0; i < reserved.size(); ++i) {
    const Planner::Candidate& candidate = reserved[i];
    ClaimRequest& claim = claims.emplace_back(ClaimRequest{
        candidate.task->def.id, tickets[i], candidate.task->def.timeout, candidate.version});
    if (candidate.record_start) {
      const bool slotted = candidate.trigger == RunTrigger::kSchedule;
      claim.history = RunOrigin{context_.host,     context_.pid,
                                candidate.trigger, slotted ? candidate.due : std::nullopt,
                                candidate.attempt, HistoryTraceId(candidate.trace)};
    }
  }
  Result<std::vector<ClaimResult>> claimed = store().ClaimMany(claims, context_.lease);
  reporter_.ClaimAnswered(claims, claimed);
  if (claimed.ok()) return *std::move(claimed);
  if (Planner::ClaimMayHaveCommitted(claimed.status())) {
    // The statement may have been committed with its answer lost: its rows are given back.
    for (std::size_t i = 0; i < reserved.size(); ++i) {
      context_.releaser->GiveBackLater(Planner::GiveBackOf(*reserved[i].task, tickets[i]));
    }
  }
  engine_.WithPlanner([&](Planner& planner) { planner.ClaimFailed(reserved, clock_.MonoNow()); },
                      Wake::kNone);
  return std::nullopt;
}

}  // namespace stagehand::engine_internal
