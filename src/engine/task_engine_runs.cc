// TaskEngine's runs: their releases and ends, and the timer lane (task_engine.h).
#include <exception>
#include <utility>

#include "engine/task_engine.h"

namespace stagehand::engine_internal {

void TaskEngine::WithPlanner(const std::function<void(Planner&)>& step, Wake wake) {
  {
    MutexLock lock(mu_);
    step(*planner_);
    if (wake != Wake::kNone) {
      KickLocked(wake == Wake::kTimer || wake == Wake::kBoth,
                 wake == Wake::kDispatcher || wake == Wake::kBoth);
    }
  }
  if (wake != Wake::kNone) cv_.notify_all();
}

void TaskEngine::RunsReleased(std::span<PendingRelease> ended) {
  std::vector<bool> finished(ended.size());
  {
    MutexLock lock(mu_);
    for (std::size_t i = 0; i < ended.size(); ++i) {
      const PendingRelease& run = ended[i];
      finished[i] = planner_->FinishGlobalRun(*run.task, run.run, run.row_version, run.row_next,
                                              run.row_wake_at);
    }
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  RunsEnded(ended);
  for (std::size_t i = 0; i < ended.size(); ++i) {
    if (finished[i]) reporter_.TaskFinished(ended[i].task->def.id);
  }
}

void TaskEngine::RunsEnded(std::span<PendingRelease> ended) {
  int newly = 0;
  for (const PendingRelease& run : ended) newly += run.reported ? 0 : 1;
  if (newly == 0) return;
  {
    MutexLock lock(mu_);
    runs_in_flight_ -= newly;
    runs_outside_fn_ -= newly;
    KickLocked(/*timer=*/true, /*dispatcher=*/true);
  }
  cv_.notify_all();
  for (PendingRelease& run : ended) {
    if (std::exchange(run.reported, true)) continue;
    reporter_.RunEnded(run.info, run.duration, run.finish);
  }
}

// ---------------------------------------------------------------------------------------------
// Timer: local runs, timeouts and fences. No I/O.

MonoTime TaskEngine::TimerStep() {
  Planner::TimerActions actions;
  std::vector<RunStart> local_starts;
  MonoTime next = kMonoInfinity;
  {
    MutexLock lock(mu_);
    if (threads_stopping_) return kMonoInfinity;
    timer_.Unpark();
    bool kick_dispatcher = false;
    const WallTime wall_now = clock_.Now();
    next = planner_->TimerStep(clock_.MonoNow(), wall_now, &actions, &kick_dispatcher);
    if (history_ != nullptr) {
      for (const Planner::Started& start : actions.to_start) {
        local_starts.push_back(RunStart{start.run->run_id, start.task->def.id,
                                        OriginOf(*start.run, host_, pid_), wall_now});
      }
    }
    if (kick_dispatcher) KickLocked(/*timer=*/false, /*dispatcher=*/true);
    runs_in_flight_ += static_cast<int>(actions.to_start.size());
    runs_outside_fn_ += static_cast<int>(actions.to_start.size());
  }
  cv_.notify_all();
  for (RunStart& start : local_starts) QueueHistory(std::move(start), std::nullopt);
  for (const Planner::TimerActions::Skipped& skipped : actions.skipped) {
    reporter_.SlotSkipped(*skipped.task, skipped.slot, skipped.late, skipped.next);
  }
  for (const RunPtr& run : actions.to_stop) DispatchRounds::SignalStop(*run, /*kill=*/false);
  for (const RunPtr& run : actions.to_kill) DispatchRounds::SignalStop(*run, /*kill=*/true);
  for (const auto& [task, run] : actions.fenced) reporter_.LeaseFenced(*task, *run);
  for (const auto& [task, run] : actions.overdue) {
    reporter_.RunOverdue(*task, *run, context_.options.lease);
  }
  for (Planner::Started& start : actions.to_start) {
    SubmitRun([this, task = std::move(start.task), run = std::move(start.run)] {
      run_jobs_->RunLocal(task, run);
    });
  }
  MutexLock lock(mu_);
  cv_.notify_all();
  return timer_.Park(next, clock_.MonoNow());
}

}  // namespace stagehand::engine_internal
