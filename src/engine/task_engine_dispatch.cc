// TaskEngine's dispatcher lane: releases first, then renewals, polls and claims (task_engine.h).
#include <algorithm>
#include <utility>

#include "engine/task_engine.h"
#include "stagehand/base/uuid.h"

namespace stagehand::engine_internal {

MonoTime TaskEngine::DispatcherStep() {
  if (!std::exchange(warmed_up_, true)) rounds_->WarmUp();
  bool replay = false;
  bool backing_off = false;
  std::vector<TaskPtr> reregister;
  {
    MutexLock lock(mu_);
    if (threads_stopping_) return kMonoInfinity;
    backing_off = planner_->BackingOff(clock_.MonoNow());
    if (!backing_off) {
      replay = std::exchange(replay_due_, false);
      reregister = planner_->TakeReregistration();
    }
  }
  bool releases_left = false;
  if (!backing_off) {
    if (!reregister.empty()) registrar_->Reregister(reregister);
    releases_left = !releaser_->Release(replay);
  } else {
    // Waiting for the backoff: the runs queued meanwhile have ended all the same.
    releases_left = !releaser_->ReportWhileBackingOff();
  }
  Planner::DispatchPlan plan;
  bool prune = false;
  std::vector<std::string> refresh;
  {
    MutexLock lock(mu_);
    if (threads_stopping_) return kMonoInfinity;
    dispatcher_.Unpark();
    const MonoTime now = clock_.MonoNow();
    plan = planner_->PlanDispatch(now);
    for (const auto& [task, run] : plan.start_records) {
      (void)history_queue_->Queue(
          RunStart{run->run_id, task->def.id, OriginOf(*run, host_, pid_), run->claimed_at},
          std::nullopt);
    }
    prune = history_ != nullptr && planner_->PruneDue(now);
    if (registrar_->keeps_registrations()) refresh = planner_->RegistrationRefreshDue(now);
  }
  bool history_left = false;
  if (history_ != nullptr)
    history_left = backing_off ? history_queue_->HasQueued() : !FlushHistory(prune);
  if (!refresh.empty()) registrar_->RefreshRegistrations(refresh);
  if (!plan.renewals.empty()) rounds_->RenewLeases(plan.renewals);
  if (!plan.poll || rounds_->Poll(plan)) {
    if (!plan.candidates.empty()) rounds_->SkipMissedSlots(plan);
    if (!plan.candidates.empty()) ClaimAndStart(std::move(plan.candidates));
  }
  MutexLock lock(mu_);
  const MonoTime now = clock_.MonoNow();
  MonoTime next = planner_->NextDispatcherWake();
  // Writes the database did not take are sent again once the backoff allows.
  if (releases_left || history_left) next = std::min(next, planner_->DatabaseRetryAt(now));
  cv_.notify_all();
  return dispatcher_.Park(next, now);
}

void TaskEngine::ClaimAndStart(std::vector<Planner::Candidate> candidates) {
  std::vector<std::string> tickets;
  std::vector<Planner::Candidate> reserved;
  {
    MutexLock lock(mu_);
    reserved =
        planner_->ReserveClaims(std::move(candidates), NewUuidV4, clock_.MonoNow(), &tickets);
    if (reserved.empty()) return;
    claiming_ = true;  // Shutdown waits for this claim, so it signals the runs it starts
  }
  struct ClaimDone {
    TaskEngine* engine;
    ~ClaimDone() {
      {
        MutexLock lock(engine->mu_);
        engine->claiming_ = false;
      }
      engine->cv_.notify_all();
    }
  } claim_done{this};
  const MonoTime sent = clock_.MonoNow();
  std::optional<std::vector<ClaimResult>> claimed = rounds_->Claim(reserved, tickets);
  if (!claimed) return;
  std::vector<Planner::Started> started;
  std::vector<TaskPtr> lost;
  {
    MutexLock lock(mu_);
    started = planner_->ApplyClaims(reserved, tickets, *claimed, sent, &lost);
    runs_in_flight_ += static_cast<int>(started.size());
    runs_outside_fn_ += static_cast<int>(started.size());
    if (!started.empty()) KickLocked(/*timer=*/true, /*dispatcher=*/false);
  }
  cv_.notify_all();
  for (const TaskPtr& task : lost)
    reporter_.observer().OnClaimLost(context_.plugin_id, task->def.id);
  for (Planner::Started& run : started) {
    SubmitRun([this, task = std::move(run.task), run = std::move(run.run)] {
      run_jobs_->RunGlobal(task, run);
    });
  }
}

void TaskEngine::SubmitRun(std::function<void()> body) {
  {
    MutexLock lock(mu_);
    ++jobs_active_;
  }
  runtime_->SubmitRun([this, body = std::move(body)] {
    body();
    MutexLock lock(mu_);
    --jobs_active_;
    cv_.notify_all();
  });
}

}  // namespace stagehand::engine_internal
