// TaskEngine's runs: calling the task function, a run's end, and the timer lane (task_engine.h).
#include <exception>
#include <utility>

#include "engine/task_engine.h"
#include "stagehand/base/uuid.h"

namespace stagehand::engine_internal {

using std::chrono::nanoseconds;

TaskEngine::Outcome TaskEngine::Invoke(const PlannedTask& task, PlannedRun& run,
                                       const RunInfo& info) {
  Planner::StartVerdict verdict;
  {
    MutexLock lock(mu_);
    verdict = planner_->StartRun(task, run, clock_.MonoNow());
  }
  std::optional<std::string> message = Planner::NotStartedWhy(verdict);
  // Only a run whose function is called is reported as started, and before it is inside it.
  if (!message) reporter_.observer().OnRunStarted(info, run.lag);
  {
    MutexLock lock(mu_);
    --runs_outside_fn_;
  }
  cv_.notify_all();  // WaitIdleForTesting may be waiting for this run to be inside its function
  struct BackOutside {
    TaskEngine* engine;
    ~BackOutside() {
      MutexLock lock(engine->mu_);
      ++engine->runs_outside_fn_;
    }
  } back_outside{this};
  std::string name = "Error";
  Outcome outcome;
  if (message) {
    outcome.started = false;
  } else {
    try {
      SpanSink* spans = run.trace.sampled() ? context_.options.span_sink.get() : nullptr;
      Status status = task.def.fn(RunControl{run.stop.get_token(), run.kill.get_token(), run.report,
                                             run.trace, spans, run.run_id});
      if (!status.ok()) message = status.message();
    } catch (const std::exception& error) {
      message = error.what();
    } catch (...) {
      message = "<no reason given>";
      name = "Unknown";
    }
  }
  {
    MutexLock lock(mu_);
    outcome.reason = run.reason;
  }
  if (message)
    outcome.error = Planner::RunErrorJson(outcome.reason, task.def.timeout, *message, name);
  return outcome;
}

void TaskEngine::ExecuteGlobalRun(TaskPtr task, RunPtr run) {
  const RunInfo info = reporter_.InfoOf(*task, *run);
  const MonoTime began = clock_.MonoNow();
  Outcome outcome = Invoke(*task, *run, info);
  const nanoseconds duration = clock_.MonoNow() - began;
  reporter_.RunFailed(*task, *run, outcome.error, outcome.reason);
  bool held = false;
  {
    MutexLock lock(mu_);
    held = planner_->GlobalRunReturned(*run);
  }
  // Every run is released, whether or not this host still knew its claim to hold: the release is
  // guarded by the ticket (and by the claim's version, for a row whose claim lapsed or went
  // missing and that nobody took since), and it carries the run's history.
  PendingRelease ended;
  ended.finish = FinishOf(*run, outcome);
  ended.task = std::move(task);
  ended.run = std::move(run);
  ended.info = info;
  ended.duration = duration;
  ended.error = std::move(outcome.error);
  ended.held = held;
  releaser_->PlanGlobalRunEnd(ended, outcome.started);
  releaser_->Push(std::move(ended));
  {
    MutexLock lock(mu_);
    KickLocked(/*timer=*/false, /*dispatcher=*/true);
  }
  cv_.notify_all();
}

void TaskEngine::WithPlanner(const std::function<void(Planner&)>& step, Wake wake) {
  {
    MutexLock lock(mu_);
    step(*planner_);
    if (wake != Wake::kNone) KickLocked(wake == Wake::kTimer, wake == Wake::kDispatcher);
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
    timer_parked_ = false;
    kicked_timer_ = false;
    bool kick_dispatcher = false;
    const WallTime wall_now = clock_.Now();
    next = planner_->TimerStep(clock_.MonoNow(), wall_now, &actions, &kick_dispatcher);
    for (Planner::Started& start : actions.to_start) {
      start.run->trace = TraceOf(start.run->caller);
      start.run->run_id = NewUuidV4();
      if (history_ != nullptr) {
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
      ExecuteLocalRun(task, run);
    });
  }
  MutexLock lock(mu_);
  timer_deadline_ = next;
  timer_parked_ = true;
  cv_.notify_all();
  return kicked_timer_ ? clock_.MonoNow() : next;
}

void TaskEngine::ExecuteLocalRun(TaskPtr task, RunPtr run) {
  const RunInfo info = reporter_.InfoOf(*task, *run);
  const MonoTime began = clock_.MonoNow();
  const Outcome outcome = Invoke(*task, *run, info);
  const nanoseconds duration = clock_.MonoNow() - began;
  reporter_.RunFailed(*task, *run, outcome.error, outcome.reason);
  const RunFinish finish = FinishOf(*run, outcome);
  QueueHistory(std::nullopt, RunEnd{run->run_id, finish, clock_.Now()});
  Planner::LocalRunEnd end;
  {
    MutexLock lock(mu_);
    end = planner_->FinishLocalRun(*task, run, outcome.error, clock_.MonoNow(), clock_.Now());
    --runs_in_flight_;
    --runs_outside_fn_;
    KickLocked(/*timer=*/true, /*dispatcher=*/false);
  }
  cv_.notify_all();
  reporter_.RunEnded(info, duration, finish);
  if (end.retry_in) reporter_.RetryScheduled(*task, info, run->attempt, *end.retry_in);
  if (end.finished) reporter_.TaskFinished(task->def.id);
}

}  // namespace stagehand::engine_internal
