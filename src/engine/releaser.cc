#include "engine/releaser.h"

#include <iterator>
#include <utility>

#include "stagehand/time/time_zone.h"

namespace stagehand::engine_internal {

using Wake = PlannerAccess::Wake;

std::optional<std::string> HistoryTraceId(const TraceContext& trace) {
  if (!trace.valid() || !trace.sampled()) return std::nullopt;
  return HexOf(trace.trace_id);
}

RunOrigin OriginOf(const PlannedRun& run, const std::string& host, std::int64_t pid) {
  return RunOrigin{host, pid, run.trigger, run.slot, run.attempt, HistoryTraceId(run.trace)};
}

Releaser::Releaser(ReleaseEngine& engine, ReleaserContext context)
    : engine_(engine),
      context_(std::move(context)),
      clock_(*context_.clock),
      reporter_(*context_.reporter),
      logger_(reporter_.log()),
      queue_(context_.replay_window) {}

void Releaser::DatabaseFailed() {
  engine_.WithPlanner([&](Planner& planner) { planner.DatabaseFailed(clock_.MonoNow()); },
                      Wake::kNone);
}

bool Releaser::PlanGlobalRunEnd(PendingRelease& ended, bool started) {
  PlannedTask& task = *ended.task;
  bool needs_attempt = false;
  engine_.WithPlanner(
      [&](Planner& planner) {
        needs_attempt =
            planner.RetryNeedsRecordedAttempt(task, *ended.run, ended.error.has_value());
      },
      Wake::kNone);
  int recorded_attempt = 0;
  if (needs_attempt) {
    Result<std::optional<RunError>> previous = context_.store->LastRunError(task.def.id);
    if (!previous.ok()) {
      // Decided again before the release is sent, once the database answers.
      if (reporter_.debug()) {
        logger_.Debug("Task " + task.def.id + ": cannot read its last attempt yet, " +
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
  engine_.WithPlanner(
      [&](Planner& planner) {
        end = planner.PlanGlobalRunEnd(task, *ended.run, started, std::move(ended.error),
                                       recorded_attempt, clock_.Now());
      },
      Wake::kNone);
  ended.next_in = end.next_in;
  ended.error = std::move(end.error);
  ended.finish.error_json = ended.error;
  if (end.retried_attempt > 0) {
    reporter_.RetryScheduled(task, ended.info, end.retried_attempt, *end.next_in);
  }
  if (end.skipped) {
    reporter_.SlotSkipped(task, end.skipped->slot, end.skipped->late, end.skipped->next);
  }
  return true;
}

bool Releaser::Release(bool replay) {
  // The releases of the replay window go out again before anything else: the new server may lack
  // them.
  if (replay) queue_.ReplayDelivered();
  ReplayReleases();
  GiveBackDoubtfulClaims();
  const bool sent = ReleasePending();
  return sent && !queue_.HasWork(/*pending=*/false);
}

bool Releaser::ReportWhileBackingOff() {
  std::vector<PendingRelease> waiting = queue_.TakePending();
  const bool left = !waiting.empty() || queue_.HasWork(/*pending=*/false);
  engine_.RunsEnded(waiting);
  queue_.ReturnPending(std::move(waiting));
  return !left;
}

bool Releaser::ReleasePending() {
  std::vector<PendingRelease> batch = queue_.TakePending();
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
    DatabaseFailed();
    engine_.RunsEnded(unsent);
  }
  if (!ready.empty()) {
    std::vector<PendingRelease> unanswered = ReleaseBatch(std::move(ready));
    unsent.insert(unsent.end(), std::make_move_iterator(unanswered.begin()),
                  std::make_move_iterator(unanswered.end()));
  }
  if (unsent.empty()) return true;
  queue_.ReturnPending(std::move(unsent));
  return false;
}

ReleaseRequest Releaser::RequestOf(const PendingRelease& ended) const {
  ReleaseRequest release{ended.task->def.id, ended.run->ticket, ended.run->schedule, ended.error};
  release.next_in = ended.next_in;
  if (context_.record_history) {
    release.history = ReleasedRun{ended.finish, OriginOf(*ended.run, context_.host, context_.pid),
                                  ended.run->claimed_at};
  }
  release.retried = ended.attempts > 1;
  if (Planner::ReleaseGuardsOnVersion(ended.attempts, ended.held)) {
    release.claimed_version = ended.run->claimed_version;
  }
  return release;
}

std::vector<PendingRelease> Releaser::ReleaseBatch(std::vector<PendingRelease> batch) {
  std::vector<ReleaseRequest> releases;
  std::vector<TaskPtr> tasks;
  releases.reserve(batch.size());
  tasks.reserve(batch.size());
  for (PendingRelease& ended : batch) {
    ++ended.attempts;
    releases.push_back(RequestOf(ended));
    tasks.push_back(ended.task);
  }
  engine_.WithPlanner([&](Planner& planner) { planner.ReleasesSent(tasks); }, Wake::kNone);
  // Read before the statement: a wake-up computed from it can only be early, never late.
  const MonoTime mono_ref = clock_.MonoNow();
  Result<std::vector<ReleaseResult>> released = context_.store->ReleaseMany(releases);
  if (!released.ok()) {
    engine_.WithPlanner(
        [&](Planner& planner) {
          planner.DatabaseFailed(clock_.MonoNow());
          for (const PendingRelease& ended : batch) planner.ReleaseEchoCleared(*ended.task);
        },
        Wake::kNone);
    for (const PendingRelease& ended : batch) {
      const std::string& id = ended.task->def.id;
      if (ended.attempts == 1) {
        logger_.Warn("Failed to release task \"" + id + "\", " + released.status().message() +
                         "; the release is sent again when the database answers",
                     {{"task", id}});
      } else if (reporter_.debug()) {
        logger_.Debug("Release of task " + id + " failed again (attempt " +
                          std::to_string(ended.attempts) + "), " + released.status().message(),
                      {{"task", id}});
      }
    }
    engine_.RunsEnded(batch);
    return batch;
  }
  std::vector<ReleaseRequest> delivered;
  engine_.WithPlanner(
      [&](Planner& planner) {
        for (std::size_t i = 0; i < batch.size(); ++i) {
          PendingRelease& ended = batch[i];
          const ReleaseResult& result = (*released)[i];
          ended.row_wake_at =
              planner.ApplyRelease(*ended.task, *ended.run, ended.duration, result, mono_ref);
          if (!result.released) continue;
          delivered.push_back(releases[i]);
          if (!result.version) continue;
          ended.row_version = result.version;
          ended.row_next = result.next_run_start_at;
        }
      },
      Wake::kNone);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const std::string& id = batch[i].task->def.id;
    const Planner::ReleaseVerdict verdict = Planner::JudgeRelease((*released)[i]);
    if (verdict == Planner::ReleaseVerdict::kAtRisk) {
      // Neither the run's release nor its record had been written (or they went with a failover),
      // and the row has changed.
      ReportAtRisk(id, batch[i].run->run_id, batch[i].run->slot,
                   "its release could not be written before another host claimed or changed the "
                   "task");
    } else if (batch[i].attempts > 1) {
      logger_.Info(
          "Released task \"" + id + "\" after " + std::to_string(batch[i].attempts) + " attempts" +
              (verdict == Planner::ReleaseVerdict::kReleased ? ""
                                                             : " (it had been released already)"),
          {{"task", id}});
    }
    if (reporter_.debug()) {
      logger_.Debug("Release of task " + id + ": " +
                        ((*released)[i].released ? "released" : "ticket no longer held"),
                    {{"task", id}});
    }
  }
  queue_.RememberDelivered(std::move(delivered), clock_.MonoNow());
  engine_.RunsReleased(batch);
  return {};
}

void Releaser::ReplayReleases() {
  std::vector<std::vector<ReleaseRequest>> batches =
      ReleaseQueue::BatchesNamingEachTaskOnce(queue_.TakeReplays());
  for (std::size_t next = 0; next < batches.size(); ++next) {
    // A task released twice in the replay window has its releases written in the order they
    // were first made.
    const std::vector<ReleaseRequest>& batch = batches[next];
    Result<std::vector<ReleaseResult>> replayed = context_.store->ReleaseMany(batch);
    if (replayed.ok()) {
      ApplyReplayedReleases(batch, *replayed);
      continue;
    }
    if (Planner::OnFailedWrite(replayed.status()) == Planner::FailedWrite::kSendAgain) {
      DatabaseFailed();
      queue_.ReturnReplays(ReleaseQueue::Unsent(std::move(batches), next));
      return;
    }
    // The new server refuses these writes for good: sending them again would only stop the
    // dispatcher. Their runs are reported at risk, since nobody can tell what the server holds.
    logger_.Warn("Writing the last releases again on the new database server failed, " +
                 replayed.status().ToString());
    for (const ReleaseRequest& request : batch) {
      ReportAtRisk(request.id, request.ticket,
                   request.history ? request.history->origin.slot : std::nullopt,
                   "its release could not be written again on the new database server");
    }
  }
}

void Releaser::GiveBackDoubtfulClaims() {
  std::vector<std::vector<ReleaseRequest>> batches =
      ReleaseQueue::BatchesNamingEachTaskOnce(queue_.TakeDoubtfulClaims());
  for (std::size_t next = 0; next < batches.size(); ++next) {
    Result<std::vector<ReleaseResult>> given = context_.store->ReleaseMany(batches[next]);
    if (!given.ok()) {
      if (Planner::OnFailedWrite(given.status()) == Planner::FailedWrite::kDrop) {
        logger_.Warn("Giving back the claims whose answer was lost failed, " +
                     given.status().ToString());
        continue;
      }
      DatabaseFailed();
      queue_.ReturnDoubtfulClaims(ReleaseQueue::Unsent(std::move(batches), next));
      return;
    }
    for (std::size_t i = 0; i < batches[next].size(); ++i) {
      if (Planner::JudgeRelease((*given)[i]) != Planner::ReleaseVerdict::kReleased) continue;
      const ReleaseRequest& request = batches[next][i];
      logger_.Info("Task \"" + request.id +
                       "\" was claimed by a statement whose answer was lost: the claim "
                       "is given back, so the task is free again",
                   {{"task", request.id}});
    }
  }
}

void Releaser::ApplyReplayedReleases(const std::vector<ReleaseRequest>& batch,
                                     const std::vector<ReleaseResult>& replayed) {
  std::vector<std::string> polled;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const ReleaseRequest& request = batch[i];
    const std::optional<WallTime> slot =
        request.history ? request.history->origin.slot : std::nullopt;
    switch (Planner::JudgeRelease(replayed[i])) {
      case Planner::ReleaseVerdict::kReleased:
        logger_.Info("The release of run " + request.ticket + " of task \"" + request.id +
                         "\" was missing on the new database server: written again there",
                     {{"task", request.id}});
        reporter_.observer().OnWriteReplayed(reporter_.plugin_id(), request.id);
        polled.push_back(request.id);
        break;
      case Planner::ReleaseVerdict::kAtRisk:
        ReportAtRisk(request.id, request.ticket, slot,
                     "its claim and release were missing on the new database server, where "
                     "another host has claimed or changed the task since");
        break;
      case Planner::ReleaseVerdict::kAlreadyReleased:
        break;
    }
  }
  engine_.WithPlanner(
      [&](Planner& planner) {
        for (const std::string& id : polled) {
          planner.OnStoreEvent(StoreEvent{StoreEvent::Kind::kUpsert, id}, clock_.MonoNow(),
                               std::nullopt);
        }
      },
      Wake::kNone);
}

void Releaser::ReportAtRisk(const std::string& task_id, const std::string& run_id,
                            std::optional<WallTime> slot, const std::string& why) {
  if (!queue_.FirstReportAtRisk(run_id)) return;
  logger_.Warn("Run " + run_id + " of task \"" + task_id + "\"" +
                   (slot ? " (slot " + FormatRestTime(*slot, kRestUtc) + ")" : "") +
                   " may be done twice or go unrecorded: " + why +
                   " (a failover to a standby that lacked the last writes)",
               {{"task", task_id}, {"run", run_id}});
  reporter_.observer().OnRunAtRisk(reporter_.plugin_id(), task_id, run_id, slot, why);
}

int Releaser::DeliverBeforeExit(const std::function<bool()>& flush_history,
                                std::chrono::milliseconds patience) {
  const MonoTime give_up = clock_.MonoNow() + patience;
  while (true) {
    bool done = ReleasePending();
    done = flush_history() && done;
    if (done) return 0;
    MonoTime retry_at{};
    engine_.WithPlanner(
        [&](Planner& planner) { retry_at = planner.DatabaseRetryAt(clock_.MonoNow()); },
        PlannerAccess::Wake::kNone);
    if (retry_at >= give_up) return DropPending();
    clock_.SleepUntil(retry_at, {});
  }
}

int Releaser::DropPending() {
  const std::vector<PendingRelease> pending = queue_.TakePending();
  for (const PendingRelease& ended : pending) {
    logger_.Error("The end of run " + ended.run->run_id + " of task \"" + ended.task->def.id +
                      "\" (" + std::string(RunOutcomeName(ended.finish.outcome)) +
                      ") could not be written to the database before exit; its claim "
                      "lapses and the janitor records the run as lost",
                  {{"task", ended.task->def.id}});
  }
  return static_cast<int>(pending.size());
}

}  // namespace stagehand::engine_internal
