// TaskEngine's dispatcher lane: releases first, then renewals, polls and claims (task_engine.h).
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

// ---------------------------------------------------------------------------------------------
// Dispatcher: database work for global tasks.

MonoTime TaskEngine::DispatcherStep() {
  if (!warmed_up_) {
    // First uses are slow (connections, prepared statements, the ticket generator): pay for them
    // now rather than on the first trigger.
    warmed_up_ = true;
    (void)NewUuidV4();
    if (context_.store != nullptr) {
      if (Status warmed = context_.store->WarmUp(); !warmed.ok() && debug_logs_) {
        logger_->Debug("Store warm-up failed (statements prepare on first use), " +
                       warmed.message());
      }
    }
  }
  bool replay = false;
  bool backing_off = false;
  std::vector<TaskPtr> reregister;
  {
    MutexLock lock(mu_);
    if (threads_stopping_) return kMonoInfinity;
    const MonoTime now = clock_.MonoNow();
    backing_off = planner_->BackingOff(now);
    if (!backing_off) {
      replay = std::exchange(replay_due_, false);
      reregister = planner_->TakeReregistration();
    }
  }
  bool releases_left = false;
  if (!backing_off) {
    // The releases of the replay window go out again before anything else: the new server may
    // lack them.
    if (replay) releases_.ReplayDelivered();
    if (!reregister.empty()) Reregister(reregister);
    ReplayReleases();
    GiveBackDoubtfulClaims();
    releases_left = !ReleasePending();
    releases_left = releases_left || releases_.HasWork(/*pending=*/false);
  } else {
    // Waiting for the backoff: the runs queued meanwhile have ended all the same.
    std::vector<PendingRelease> waiting = releases_.TakePending();
    releases_left = !waiting.empty() || releases_.HasWork(/*pending=*/false);
    ReportGlobalRunEnds(waiting);
    releases_.ReturnPending(std::move(waiting));
  }
  Planner::DispatchPlan plan;
  bool prune = false;
  std::vector<std::string> refresh;
  {
    MutexLock lock(mu_);
    if (threads_stopping_) return kMonoInfinity;
    dispatcher_parked_ = false;
    kicked_dispatcher_ = false;
    const MonoTime now = clock_.MonoNow();
    plan = planner_->PlanDispatch(now);
    for (const auto& [task, run] : plan.start_records) {
      if (std::optional<RunStart> start = UnrecordedStart(*task, *run)) {
        run->start_recorded = true;
        (void)history_queue_->Queue(*std::move(start), std::nullopt);
      }
    }
    prune = history_ != nullptr && planner_->PruneDue(now);
    if (registrations_ != nullptr) refresh = planner_->RegistrationRefreshDue(now);
  }
  bool history_left = false;
  if (history_ != nullptr) {
    if (backing_off) {
      history_left = history_queue_->HasQueued();
    } else {
      history_left = !FlushHistory(prune);
    }
  }
  if (!refresh.empty()) RefreshRegistrations(refresh);
  if (!plan.renewals.empty()) RenewLeases(plan.renewals);
  if (!plan.poll || Poll(plan)) {
    if (!plan.candidates.empty()) SkipMissedSlots(plan);
    if (!plan.candidates.empty()) ClaimAndStart(std::move(plan.candidates));
  }
  MutexLock lock(mu_);
  dispatcher_deadline_ = planner_->NextDispatcherWake();
  if (releases_left || history_left) {
    // Writes the database did not take are sent again once the backoff allows.
    dispatcher_deadline_ =
        std::min(dispatcher_deadline_, planner_->DatabaseRetryAt(clock_.MonoNow()));
  }
  dispatcher_parked_ = true;
  cv_.notify_all();
  return kicked_dispatcher_ ? clock_.MonoNow() : dispatcher_deadline_;
}

void TaskEngine::RenewLeases(const std::vector<std::pair<TaskPtr, RunPtr>>& due) {
  for (const auto& [task, run] : due) {
    const std::string& id = task->def.id;
    const MonoTime sent = clock_.MonoNow();
    milliseconds hold{0};
    bool after_server_change = false;
    {
      MutexLock lock(mu_);
      hold = planner_->RenewalHold(*task, *run, sent);
      after_server_change = run->server_changed;
    }
    Result<LeaseStatus> renewed =
        context_.store->RenewLease(id, run->ticket, hold, context_.options.lease);
    Planner::RenewalOutcome outcome{};
    {
      MutexLock lock(mu_);
      outcome = planner_->ApplyRenewal(*run, renewed, sent, clock_.MonoNow());
      if (outcome == Planner::RenewalOutcome::kStale) continue;
      KickLocked(/*timer=*/true, /*dispatcher=*/false);
    }
    bool reclaimed = false;
    if (outcome == Planner::RenewalOutcome::kReclaim) {
      // The new server lacks this run's claim: held again with the same ticket if nobody has
      // claimed or changed the row since.
      const MonoTime again = clock_.MonoNow();
      Result<bool> held = context_.store->Reclaim(id, run->ticket, run->claimed_version, hold,
                                                  context_.options.lease);
      MutexLock lock(mu_);
      outcome = planner_->ApplyReclaim(*run, held, again, clock_.MonoNow());
      reclaimed = outcome == Planner::RenewalOutcome::kRenewed;
      KickLocked(/*timer=*/true, /*dispatcher=*/false);
    }
    cv_.notify_all();
    const RunInfo info = InfoOf(*task, *run);
    switch (outcome) {
      case Planner::RenewalOutcome::kRetry:
        if (after_server_change) {
          logger_->Warn("Task \"" + id + "\" could not confirm its claim on the new database " +
                            "server, " + renewed.status().message() + "; stopping the run",
                        RunFields(id, run->trace));
          ReportAtRisk(id, run->run_id, run->slot,
                       "its claim could not be confirmed on the new database server");
        } else {
          logger_->Warn(
              "Failed to renew the lease of task \"" + id + "\", " + renewed.status().message(),
              RunFields(id, run->trace));
        }
        observer_->OnLeaseRenewalFailed(info);
        break;
      case Planner::RenewalOutcome::kLost:
        if (after_server_change) {
          logger_->Warn("Task \"" + id + "\": its claim is missing on the new database server " +
                            "and the task's row has changed since; killing the run",
                        RunFields(id, run->trace));
          ReportAtRisk(id, run->run_id, run->slot,
                       "its claim was missing on the new database server, where another host "
                       "has claimed or changed the task since");
        } else {
          logger_->Warn("Task ticket for \"" + id + "\" is no longer valid; killing the run",
                        RunFields(id, run->trace));
        }
        // Another host may run the task now: this run ends at once, without grace.
        SignalStop(*run, /*kill=*/true);
        observer_->OnLeaseLost(info);
        break;
      case Planner::RenewalOutcome::kCancelNoticed:
        logger_->Info("Task \"" + id + "\" was cancelled; stopping the run",
                      RunFields(id, run->trace));
        SignalStop(*run, /*kill=*/run->stop.stop_requested());
        observer_->OnLeaseRenewed(info);
        break;
      case Planner::RenewalOutcome::kRenewed:
        if (reclaimed) {
          logger_->Info("Task \"" + id + "\": its claim was missing on the new database " +
                            "server; claimed again there with the same ticket, the run goes on",
                        RunFields(id, run->trace));
          observer_->OnWriteReplayed(context_.plugin_id, id);
        }
        observer_->OnLeaseRenewed(info);
        break;
      case Planner::RenewalOutcome::kReclaim:
      case Planner::RenewalOutcome::kStale:
        break;
    }
  }
}

void TaskEngine::ReportAtRisk(const std::string& task_id, const std::string& run_id,
                              std::optional<WallTime> slot, const std::string& why) {
  if (!releases_.FirstReportAtRisk(run_id)) return;
  logger_->Warn("Run " + run_id + " of task \"" + task_id + "\"" +
                    (slot ? " (slot " + FormatRestTime(*slot, kRestUtc) + ")" : "") +
                    " may be done twice or go unrecorded: " + why +
                    " (a failover to a standby that lacked the last writes)",
                {{"task", task_id}, {"run", run_id}});
  observer_->OnRunAtRisk(context_.plugin_id, task_id, run_id, slot, why);
}

bool TaskEngine::Poll(Planner::DispatchPlan& plan) {
  if (debug_logs_) {
    logger_->Debug("Polling " + std::to_string(plan.poll_ids.size()) + " task(s)" +
                   (plan.sweep ? " with sweep" : ""));
  }
  // Read before the statement: a wake-up computed from it can only be early, never late.
  const MonoTime mono_ref = clock_.MonoNow();
  Result<PollResult> polled =
      context_.store->PollChanged(plan.poll_ids, plan.known_versions, plan.sweep);
  if (!polled.ok()) {
    logger_->Warn("Task state poll failed, " + polled.status().message());
    MutexLock lock(mu_);
    planner_->PollFailed(plan, mono_ref);
    return false;
  }
  const std::size_t known_candidates = plan.candidates.size();
  Planner::PollOutcome outcome;
  {
    MutexLock lock(mu_);
    outcome = planner_->ApplyPoll(plan, *polled, mono_ref);
  }
  for (const std::string& id : outcome.finished_missing) {
    logger_->Info("No longer able to find task \"" + id +
                      "\"; aborting and assuming that it has been unregistered or expired",
                  {{"task", id}});
  }
  for (const auto& [id, why] : outcome.finished_invalid) {
    logger_->Info("Task \"" + id +
                      "\" is no longer able to parse task settings; aborting and assuming that a "
                      "newer version of the task has been issued and is being handled by other "
                      "workers, " +
                      why,
                  {{"task", id}});
  }
  for (const std::string& id : polled->swept_ids) {
    logger_->Warn("Task timed out and was lost: " + id, {{"task", id}});
    observer_->OnReclaimed(context_.plugin_id, id);
  }
  if (debug_logs_) {
    logger_->Debug("Poll found " + std::to_string(plan.candidates.size() - known_candidates) +
                   " ready task(s)");
  }
  return true;
}

void TaskEngine::SkipMissedSlots(Planner::DispatchPlan& plan) {
  std::vector<Planner::Skip> skips;
  {
    MutexLock lock(mu_);
    skips = planner_->TakeMissedSlots(plan);
    std::vector<TaskPtr> tasks;
    for (const Planner::Skip& skip : skips) tasks.push_back(skip.task);
    planner_->ReleasesSent(tasks);  // a skip is announced as a release
  }
  for (const Planner::Skip& skip : skips) {
    const std::string& id = skip.task->def.id;
    const MonoTime mono_ref = clock_.MonoNow();
    Result<SkipResult> skipped =
        context_.store->SkipSlot(id, skip.version, skip.slot, skip.schedule);
    {
      MutexLock lock(mu_);
      if (!skipped.ok() || !skipped->skipped) planner_->ReleaseEchoCleared(*skip.task);
      if (std::optional<Planner::Candidate> run = planner_->ApplySkip(skip, skipped, mono_ref)) {
        plan.candidates.push_back(*std::move(run));
      }
    }
    if (!skipped.ok()) {
      if (skipped.status().code() != StatusCode::kUnimplemented) {
        logger_->Warn(
            "Failed to skip a missed slot of task \"" + id + "\", " + skipped.status().message(),
            {{"task", id}});
      }
    } else if (skipped->skipped) {
      LogSkippedSlot(*skip.task, skip.slot, skip.late, skipped->next_run_start_at);
    }
  }
}

void TaskEngine::LogSkippedSlot(const PlannedTask& task, WallTime slot, nanoseconds late,
                                const std::optional<WallTime>& next) const {
  const std::string& id = task.def.id;
  logger_->Info("Skipped the slot of task \"" + id + "\" due at " + FormatRestTime(slot, kRestUtc) +
                    ": it was " +
                    FormatShortDuration(std::chrono::duration_cast<milliseconds>(late)) +
                    " late, beyond its catch-up window of " +
                    FormatShortDuration(task.def.catchup_window.value_or(milliseconds(0))) +
                    "; next run at " + (next ? FormatRestTime(*next, kRestUtc) : "none"),
                {{"task", id}});
  observer_->OnSlotSkipped(context_.plugin_id, id, slot, late);
}

void TaskEngine::ClaimAndStart(std::vector<Planner::Candidate> candidates) {
  std::vector<std::string> tickets;
  std::vector<Planner::Candidate> reserved;
  {
    MutexLock lock(mu_);
    reserved = planner_->ReserveClaims(std::move(candidates), NewUuidV4, &tickets);
    if (reserved.empty()) return;
    // Chosen before the claim, which records the run's start with its trace id.
    const MonoTime now = clock_.MonoNow();
    for (Planner::Candidate& candidate : reserved) {
      candidate.trace = TraceOf(candidate.trigger == RunTrigger::kManual
                                    ? Planner::TriggerCaller(*candidate.task, now)
                                    : TraceContext{});
    }
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
  std::vector<ClaimRequest> claims;
  claims.reserve(reserved.size());
  for (std::size_t i = 0; i < reserved.size(); ++i) {
    ClaimRequest& claim = claims.emplace_back(ClaimRequest{
        reserved[i].task->def.id, tickets[i], reserved[i].task->def.timeout, reserved[i].version});
    if (reserved[i].record_start) {
      const bool slotted = reserved[i].trigger == RunTrigger::kSchedule;
      claim.history = RunOrigin{host_,
                                pid_,
                                reserved[i].trigger,
                                slotted ? reserved[i].due : std::nullopt,
                                reserved[i].attempt,
                                HistoryTraceId(reserved[i].trace)};
    }
  }
  const MonoTime sent = clock_.MonoNow();
  Result<std::vector<ClaimResult>> claimed =
      context_.store->ClaimMany(claims, context_.options.lease);
  if (debug_logs_) {
    std::size_t won = 0;
    if (claimed.ok()) {
      for (const ClaimResult& result : *claimed) won += result.claimed ? 1 : 0;
    }
    logger_->Debug("Claim of " + std::to_string(claims.size()) + " task(s): " +
                   (claimed.ok() ? std::to_string(won) + " claimed" : claimed.status().message()));
  }
  if (!claimed.ok()) {
    for (const ClaimRequest& claim : claims) {
      logger_->Warn("Failed to claim task \"" + claim.id + "\", " + claimed.status().message(),
                    {{"task", claim.id}});
    }
    if (claimed.status().code() == StatusCode::kUnavailable) {
      // The statement may have been committed with its answer lost: its rows are given back.
      for (std::size_t i = 0; i < reserved.size(); ++i) {
        // Due again at once: the slot, trigger or retry it was claimed for is not lost.
        ReleaseRequest give_back{
            reserved[i].task->def.id, tickets[i], reserved[i].task->def.schedule,
            ErrorJson("not started: the database's answer to its claim was lost")};
        give_back.next_in = std::chrono::milliseconds(0);
        releases_.AddDoubtfulClaim(std::move(give_back));
      }
    }
    MutexLock lock(mu_);
    planner_->ClaimFailed(reserved, clock_.MonoNow());
    return;
  }
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
  for (const TaskPtr& task : lost) observer_->OnClaimLost(context_.plugin_id, task->def.id);
  for (Planner::Started& run : started) {
    SubmitRun([this, task = std::move(run.task), run = std::move(run.run)] {
      ExecuteGlobalRun(task, run);
    });
  }
}

void TaskEngine::SubmitRun(std::function<void()> body) {
  {
    MutexLock lock(jobs_->mu);
    ++jobs_->active;
  }
  runtime_->SubmitRun([jobs = jobs_, body = std::move(body)] {
    body();
    MutexLock lock(jobs->mu);
    --jobs->active;
    jobs->cv.notify_all();
  });
}

}  // namespace stagehand::engine_internal
