// TaskEngine's runs: calling the task function, a run's end and its release, the writes replayed
// after a server change, and the timer lane (task_engine.h).
#include <algorithm>
#include <exception>
#include <utility>

#include "engine/task_engine.h"
#include "stagehand/base/uuid.h"
#include "stagehand/time/duration.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::engine_internal {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

TaskEngine::Outcome TaskEngine::Invoke(const PlannedTask& task, PlannedRun& run,
                                       const RunInfo& info) {
  Planner::StartVerdict verdict;
  {
    MutexLock lock(mu_);
    verdict = planner_->StartRun(task, run, clock_.MonoNow());
  }
  const bool claim_at_risk = verdict == Planner::StartVerdict::kClaimAtRisk;
  const bool shutting_down = verdict == Planner::StartVerdict::kShuttingDown;
  // Only a run whose function is called is reported as started, and before it is inside it.
  if (!claim_at_risk && !shutting_down) observer_->OnRunStarted(info, run.lag);
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
  std::optional<std::string> message;
  std::string name = "Error";
  Outcome outcome;
  if (claim_at_risk) {
    message = "not started: its claim was about to lapse before the run could start";
    outcome.started = false;
  } else if (shutting_down) {
    message = "not started: its host was shutting down";
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
  if (!message) return outcome;
  // A stopped run's failure is named by why it was stopped, then by what the function said.
  const std::string why = StopOutcome(outcome.reason, task.def.timeout);
  outcome.error = ErrorJson(why.empty() ? *message : why + ": " + *message, name);
  return outcome;
}

void TaskEngine::LogFailure(const PlannedTask& task, const PlannedRun& run,
                            const Outcome& outcome) const {
  if (!outcome.error) return;
  const std::string line = "Task " + task.def.id + " failed, " + *outcome.error;
  LogFields fields = RunFields(task.def.id, run.trace);
  // Operators alert on errors: a run that shutdown or an operator stopped is not one.
  if (outcome.reason == StopReason::kShutdown || outcome.reason == StopReason::kCancel ||
      outcome.reason == StopReason::kUnscheduled) {
    logger_->Warn(line, fields);
  } else {
    logger_->Error(line, fields);
  }
}

void TaskEngine::ExecuteGlobalRun(TaskPtr task, RunPtr run) {
  const RunInfo info = InfoOf(*task, *run);
  const MonoTime began = clock_.MonoNow();
  Outcome outcome = Invoke(*task, *run, info);
  const nanoseconds duration = clock_.MonoNow() - began;
  LogFailure(*task, *run, outcome);
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
  PlanGlobalRunEnd(ended, outcome.started);
  EnqueueRelease(std::move(ended));
}

bool TaskEngine::PlanGlobalRunEnd(PendingRelease& ended, bool started) {
  PlannedTask& task = *ended.task;
  bool needs_attempt = false;
  {
    MutexLock lock(mu_);
    needs_attempt = planner_->RetryNeedsRecordedAttempt(task, *ended.run, ended.error.has_value());
  }
  int recorded_attempt = 0;
  if (needs_attempt) {
    Result<std::optional<RunError>> previous = context_.store->LastRunError(task.def.id);
    if (!previous.ok()) {
      // Decided again before the release is sent, once the database answers.
      if (debug_logs_) {
        logger_->Debug("Task " + task.def.id + ": cannot read its last attempt yet, " +
                           previous.status().message(),
                       {{"task", task.def.id}});
      }
      ended.end_undecided = true;
      ended.started = started;
      return false;
    }
    if (*previous) recorded_attempt = (*previous)->retried_attempt();
  }
  ended.end_undecided = false;
  Planner::GlobalRunEnd end;
  {
    MutexLock lock(mu_);
    end = planner_->PlanGlobalRunEnd(task, *ended.run, started, std::move(ended.error),
                                     recorded_attempt, clock_.Now());
  }
  ended.next_in = end.next_in;
  ended.error = std::move(end.error);
  ended.finish.error_json = ended.error;
  if (end.retried_attempt > 0) ReportRetry(task, ended.info, end.retried_attempt, *end.next_in);
  if (end.skipped) LogSkippedSlot(task, end.skipped->slot, end.skipped->late, end.skipped->next);
  return true;
}

void TaskEngine::ReportRetry(const PlannedTask& task, const RunInfo& run, int attempt,
                             milliseconds delay) {
  observer_->OnRetryScheduled(run, attempt, delay);
  logger_->Info("Task " + task.def.id + " failed on attempt " + std::to_string(attempt) + " of " +
                    std::to_string(task.def.retry->attempts + 1) + "; retrying in " +
                    FormatShortDuration(delay),
                RunFields(task.def.id, run.trace != nullptr ? *run.trace : TraceContext{}));
}

void TaskEngine::EnqueueRelease(PendingRelease release) {
  releases_.Push(std::move(release));
  {
    MutexLock lock(mu_);
    KickLocked(/*timer=*/false, /*dispatcher=*/true);
  }
  cv_.notify_all();
}

bool TaskEngine::ReleasePending() {
  std::vector<PendingRelease> batch = releases_.TakePending();
  if (batch.empty()) return true;
  std::vector<PendingRelease> ready;
  std::vector<PendingRelease> unsent;
  for (PendingRelease& ended : batch) {
    if (ended.end_undecided && !PlanGlobalRunEnd(ended, ended.started)) {
      unsent.push_back(std::move(ended));
      continue;
    }
    ready.push_back(std::move(ended));
  }
  if (!unsent.empty()) {
    {
      MutexLock lock(mu_);
      planner_->DatabaseFailed(clock_.MonoNow());
    }
    ReportGlobalRunEnds(unsent);
  }
  if (!ready.empty()) {
    std::vector<PendingRelease> unanswered = ReleaseBatch(std::move(ready));
    unsent.insert(unsent.end(), std::make_move_iterator(unanswered.begin()),
                  std::make_move_iterator(unanswered.end()));
  }
  if (unsent.empty()) return true;
  releases_.ReturnPending(std::move(unsent));
  return false;
}

ReleaseRequest TaskEngine::RequestOf(const PendingRelease& ended) const {
  ReleaseRequest release{ended.task->def.id, ended.run->ticket, ended.run->schedule, ended.error};
  release.next_in = ended.next_in;
  if (history_ != nullptr) {
    release.history = ReleasedRun{ended.finish, OriginOf(*ended.run), ended.run->claimed_at};
  }
  release.retried = ended.attempts > 1;
  // A run whose claim may no longer hold the row (it lapsed, or a new server lacks it) is still
  // released when nobody has claimed or changed the row since.
  if (release.retried || !ended.held) release.claimed_version = ended.run->claimed_version;
  return release;
}

std::vector<PendingRelease> TaskEngine::ReleaseBatch(std::vector<PendingRelease> batch) {
  std::vector<ReleaseRequest> releases;
  std::vector<TaskPtr> tasks;
  releases.reserve(batch.size());
  tasks.reserve(batch.size());
  for (PendingRelease& ended : batch) {
    ++ended.attempts;
    releases.push_back(RequestOf(ended));
    tasks.push_back(ended.task);
  }
  {
    MutexLock lock(mu_);
    planner_->ReleasesSent(tasks);
  }
  // Read before the statement: a wake-up computed from it can only be early, never late.
  const MonoTime mono_ref = clock_.MonoNow();
  Result<std::vector<ReleaseResult>> released = context_.store->ReleaseMany(releases);
  if (!released.ok()) {
    {
      MutexLock lock(mu_);
      planner_->DatabaseFailed(clock_.MonoNow());
      for (const PendingRelease& ended : batch) planner_->ReleaseEchoCleared(*ended.task);
    }
    for (const PendingRelease& ended : batch) {
      const std::string& id = ended.task->def.id;
      if (ended.attempts == 1) {
        logger_->Warn("Failed to release task \"" + id + "\", " + released.status().message() +
                          "; the release is sent again when the database answers",
                      {{"task", id}});
      } else if (debug_logs_) {
        logger_->Debug("Release of task " + id + " failed again (attempt " +
                           std::to_string(ended.attempts) + "), " + released.status().message(),
                       {{"task", id}});
      }
    }
    // The runs have ended, whenever their releases get through.
    ReportGlobalRunEnds(batch);
    return batch;
  }
  std::vector<ReleaseRequest> delivered;
  {
    MutexLock lock(mu_);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      PendingRelease& ended = batch[i];
      const ReleaseResult& result = (*released)[i];
      ended.row_wake_at =
          planner_->ApplyRelease(*ended.task, *ended.run, ended.duration, result, mono_ref);
      if (!result.released) continue;
      delivered.push_back(releases[i]);
      if (!result.version) continue;
      ended.row_version = result.version;
      ended.row_next = result.next_run_start_at;
    }
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const std::string& id = batch[i].task->def.id;
    const ReleaseResult& result = (*released)[i];
    if (!result.released && result.recorded) {
      // Neither the run's release nor its record had been written (or they went with a failover),
      // and the row has changed.
      ReportAtRisk(id, batch[i].run->run_id, batch[i].run->slot,
                   "its release could not be written before another host claimed or changed the "
                   "task");
    } else if (batch[i].attempts > 1) {
      logger_->Info("Released task \"" + id + "\" after " + std::to_string(batch[i].attempts) +
                        " attempts" + (result.released ? "" : " (it had been released already)"),
                    {{"task", id}});
    }
    if (debug_logs_) {
      logger_->Debug(
          "Release of task " + id + ": " + (result.released ? "released" : "ticket no longer held"),
          {{"task", id}});
    }
  }
  releases_.RememberDelivered(std::move(delivered), clock_.MonoNow());
  FinishGlobalRuns(batch);
  return {};
}

void TaskEngine::ReplayReleases() {
  std::vector<std::vector<ReleaseRequest>> batches =
      ReleaseQueue::BatchesNamingEachTaskOnce(releases_.TakeReplays());
  for (std::size_t next = 0; next < batches.size(); ++next) {
    // A task released twice in the replay window has its releases written in the order they
    // were first made.
    const std::vector<ReleaseRequest>& batch = batches[next];
    Result<std::vector<ReleaseResult>> replayed = context_.store->ReleaseMany(batch);
    if (!replayed.ok() && replayed.status().code() == StatusCode::kUnavailable) {
      {
        MutexLock lock(mu_);
        planner_->DatabaseFailed(clock_.MonoNow());
      }
      releases_.ReturnReplays(ReleaseQueue::Unsent(std::move(batches), next));
      return;
    }
    if (!replayed.ok()) {
      // The new server refuses these writes for good: sending them again would only stop the
      // dispatcher. Their runs are reported at risk, since nobody can tell what the server holds.
      logger_->Warn("Writing the last releases again on the new database server failed, " +
                    replayed.status().ToString());
      for (const ReleaseRequest& request : batch) {
        ReportAtRisk(request.id, request.ticket,
                     request.history ? request.history->origin.slot : std::nullopt,
                     "its release could not be written again on the new database server");
      }
      continue;
    }
    ApplyReplayedReleases(batch, *replayed);
  }
}

void TaskEngine::GiveBackDoubtfulClaims() {
  std::vector<std::vector<ReleaseRequest>> batches =
      ReleaseQueue::BatchesNamingEachTaskOnce(releases_.TakeDoubtfulClaims());
  for (std::size_t next = 0; next < batches.size(); ++next) {
    Result<std::vector<ReleaseResult>> given = context_.store->ReleaseMany(batches[next]);
    if (!given.ok()) {
      if (given.status().code() != StatusCode::kUnavailable) {
        logger_->Warn("Giving back the claims whose answer was lost failed, " +
                      given.status().ToString());
        continue;
      }
      {
        MutexLock lock(mu_);
        planner_->DatabaseFailed(clock_.MonoNow());
      }
      releases_.ReturnDoubtfulClaims(ReleaseQueue::Unsent(std::move(batches), next));
      return;
    }
    for (std::size_t i = 0; i < batches[next].size(); ++i) {
      if (!(*given)[i].released) continue;
      const ReleaseRequest& request = batches[next][i];
      logger_->Info("Task \"" + request.id + "\" was claimed by a statement whose answer was " +
                        "lost: the claim is given back, so the task is free again",
                    {{"task", request.id}});
    }
  }
}

void TaskEngine::ApplyReplayedReleases(const std::vector<ReleaseRequest>& batch,
                                       const std::vector<ReleaseResult>& replayed) {
  std::vector<std::string> polled;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const ReleaseRequest& request = batch[i];
    const ReleaseResult& result = replayed[i];
    const std::optional<WallTime> slot =
        request.history ? request.history->origin.slot : std::nullopt;
    if (result.released) {
      logger_->Info("The release of run " + request.ticket + " of task \"" + request.id +
                        "\" was missing on the new database server: written again there",
                    {{"task", request.id}});
      observer_->OnWriteReplayed(context_.plugin_id, request.id);
      polled.push_back(request.id);
    } else if (result.recorded) {
      ReportAtRisk(request.id, request.ticket, slot,
                   "its claim and release were missing on the new database server, where another "
                   "host has claimed or changed the task since");
    }
  }
  MutexLock lock(mu_);
  for (const std::string& id : polled) {
    planner_->OnStoreEvent(StoreEvent{StoreEvent::Kind::kUpsert, id}, clock_.MonoNow(),
                           std::nullopt);
  }
}

void TaskEngine::Reregister(const std::vector<TaskPtr>& tasks) {
  std::vector<TaskUpsert> upserts;
  {
    MutexLock lock(mu_);
    upserts.reserve(tasks.size());
    for (const TaskPtr& task : tasks) {
      upserts.push_back(TaskUpsert{task->def.id, task->def.schedule, host_});
    }
  }
  Result<std::vector<UpsertResult>> upserted = context_.store->UpsertMany(upserts);
  if (!upserted.ok()) {
    MutexLock lock(mu_);
    planner_->ReregistrationFailed();
    planner_->DatabaseFailed(clock_.MonoNow());
    return;
  }
  logger_->Info("Registered " + std::to_string(upserts.size()) +
                " task(s) again on the new database server");
}

void TaskEngine::FinishGlobalRuns(std::span<PendingRelease> ended) {
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
  ReportGlobalRunEnds(ended);
  for (std::size_t i = 0; i < ended.size(); ++i) {
    const std::string& id = ended[i].task->def.id;
    if (finished[i]) logger_->Info("Task worker finished: " + id, {{"task", id}});
  }
}

void TaskEngine::ReportGlobalRunEnds(std::span<PendingRelease> ended) {
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
    ReportRunEnd(run.info, run.duration, run.finish);
  }
}

void TaskEngine::ReportRunEnd(const RunInfo& info, std::chrono::nanoseconds duration,
                              const RunFinish& finish) {
  if (finish.error_json) {
    observer_->OnRunFailed(info, duration, *finish.error_json);
  } else {
    observer_->OnRunCompleted(info, duration);
  }
  observer_->OnRunFinished(info, finish, duration);
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
        local_starts.push_back(
            RunStart{start.run->run_id, start.task->def.id, OriginOf(*start.run), wall_now});
      }
    }
    if (kick_dispatcher) KickLocked(/*timer=*/false, /*dispatcher=*/true);
    runs_in_flight_ += static_cast<int>(actions.to_start.size());
    runs_outside_fn_ += static_cast<int>(actions.to_start.size());
  }
  cv_.notify_all();
  for (RunStart& start : local_starts) QueueHistory(std::move(start), std::nullopt);
  for (const Planner::TimerActions::Skipped& skipped : actions.skipped) {
    LogSkippedSlot(*skipped.task, skipped.slot, skipped.late, skipped.next);
  }
  for (const RunPtr& run : actions.to_stop) SignalStop(*run, /*kill=*/false);
  for (const RunPtr& run : actions.to_kill) SignalStop(*run, /*kill=*/true);
  for (const auto& [task, run] : actions.fenced) {
    logger_->Warn("Task \"" + task->def.id +
                      "\" could not renew its lease in time; stopping the run (it is killed "
                      "before the lease lapses if still running)",
                  RunFields(task->def.id, run->trace));
    observer_->OnLeaseLost(InfoOf(*task, *run));
  }
  for (const auto& [task, run] : actions.overdue) {
    logger_->Warn("Task \"" + task->def.id + "\" is overdue: its function has not returned " +
                      FormatShortDuration(context_.options.lease) + " after its timeout of " +
                      FormatShortDuration(task->def.timeout) + "; its claim is held until it does",
                  RunFields(task->def.id, run->trace));
    observer_->OnRunOverdue(InfoOf(*task, *run));
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
  const RunInfo info = InfoOf(*task, *run);
  const MonoTime began = clock_.MonoNow();
  const Outcome outcome = Invoke(*task, *run, info);
  const nanoseconds duration = clock_.MonoNow() - began;
  LogFailure(*task, *run, outcome);
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
  ReportRunEnd(info, duration, finish);
  if (end.retry_in) ReportRetry(*task, info, run->attempt, *end.retry_in);
  const bool finished = end.finished;
  if (finished) logger_->Info("Task worker finished: " + task->def.id, {{"task", task->def.id}});
}

}  // namespace stagehand::engine_internal
