#include "engine/engine_reporter.h"

#include <utility>

#include "stagehand/time/duration.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::engine_internal {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using Outcome = Planner::RenewalOutcome;

EngineReporter::EngineReporter(std::shared_ptr<Logger> logger,
                               std::shared_ptr<SchedulerObserver> observer, std::string plugin_id)
    : logger_(std::move(logger)),
      observer_(std::move(observer)),
      plugin_id_(std::move(plugin_id)),
      debug_(logger_->Enabled(LogLevel::kDebug)) {}

LogFields EngineReporter::RunFields(const std::string& task_id, const TraceContext& trace) {
  LogFields fields = {{"task", task_id}};
  AddTraceFields(trace, fields);
  return fields;
}

RunInfo EngineReporter::InfoOf(const PlannedTask& task, const PlannedRun& run) const {
  return RunInfo{plugin_id_,
                 task.def.id,
                 task.def.scope,
                 run.ticket,
                 run.run_id,
                 run.trigger,
                 run.attempt,
                 run.slot,
                 run.lag,
                 run.trace.valid() ? &run.trace : nullptr,
                 run.caller.valid() ? &run.caller : nullptr};
}

void EngineReporter::TaskFinished(const std::string& id) const {
  logger_->Info("Task worker finished: " + id, {{"task", id}});
}

void EngineReporter::SlotSkipped(const PlannedTask& task, WallTime slot, nanoseconds late,
                                 const std::optional<WallTime>& next) const {
  const std::string& id = task.def.id;
  logger_->Info("Skipped the slot of task \"" + id + "\" due at " + FormatRestTime(slot, kRestUtc) +
                    ": it was " +
                    FormatShortDuration(std::chrono::duration_cast<milliseconds>(late)) +
                    " late, beyond its catch-up window of " +
                    FormatShortDuration(task.def.catchup_window.value_or(milliseconds(0))) +
                    "; next run at " + (next ? FormatRestTime(*next, kRestUtc) : "none"),
                {{"task", id}});
  observer_->OnSlotSkipped(plugin_id_, id, slot, late);
}

void EngineReporter::RetryScheduled(const PlannedTask& task, const RunInfo& run, int attempt,
                                    milliseconds delay) const {
  observer_->OnRetryScheduled(run, attempt, delay);
  logger_->Info("Task " + task.def.id + " failed on attempt " + std::to_string(attempt) + " of " +
                    std::to_string(task.def.retry->attempts + 1) + "; retrying in " +
                    FormatShortDuration(delay),
                RunFields(task.def.id, run.trace != nullptr ? *run.trace : TraceContext{}));
}

void EngineReporter::RunFailed(const PlannedTask& task, const PlannedRun& run,
                               const std::optional<std::string>& error, StopReason reason) const {
  if (!error) return;
  const std::string line = "Task " + task.def.id + " failed, " + *error;
  LogFields fields = RunFields(task.def.id, run.trace);
  if (Planner::StoppedByOperator(reason)) {
    logger_->Warn(line, fields);
  } else {
    logger_->Error(line, fields);
  }
}

void EngineReporter::RunEnded(const RunInfo& info, nanoseconds duration,
                              const RunFinish& finish) const {
  if (finish.error_json) {
    observer_->OnRunFailed(info, duration, *finish.error_json);
  } else {
    observer_->OnRunCompleted(info, duration);
  }
  observer_->OnRunFinished(info, finish, duration);
}

void EngineReporter::LeaseFenced(const PlannedTask& task, const PlannedRun& run) const {
  logger_->Warn("Task \"" + task.def.id +
                    "\" could not renew its lease in time; stopping the run (it is killed "
                    "before the lease lapses if still running)",
                RunFields(task.def.id, run.trace));
  observer_->OnLeaseLost(InfoOf(task, run));
}

void EngineReporter::RunOverdue(const PlannedTask& task, const PlannedRun& run,
                                milliseconds lease) const {
  logger_->Warn("Task \"" + task.def.id + "\" is overdue: its function has not returned " +
                    FormatShortDuration(lease) + " after its timeout of " +
                    FormatShortDuration(task.def.timeout) + "; its claim is held until it does",
                RunFields(task.def.id, run.trace));
  observer_->OnRunOverdue(InfoOf(task, run));
}

std::optional<std::string> EngineReporter::LogRenewal(const PlannedTask& task,
                                                      const PlannedRun& run, Outcome outcome,
                                                      bool after_server_change, bool reclaimed,
                                                      const Status& status) const {
  const std::string& id = task.def.id;
  const LogFields fields = RunFields(id, run.trace);
  switch (outcome) {
    case Outcome::kRetry:
      if (!after_server_change) {
        logger_->Warn("Failed to renew the lease of task \"" + id + "\", " + status.message(),
                      fields);
        return std::nullopt;
      }
      logger_->Warn("Task \"" + id + "\" could not confirm its claim on the new database " +
                        "server, " + status.message() + "; stopping the run",
                    fields);
      return "its claim could not be confirmed on the new database server";
    case Outcome::kLost:
      if (!after_server_change) {
        logger_->Warn("Task ticket for \"" + id + "\" is no longer valid; killing the run", fields);
        return std::nullopt;
      }
      logger_->Warn("Task \"" + id + "\": its claim is missing on the new database server " +
                        "and the task's row has changed since; killing the run",
                    fields);
      return "its claim was missing on the new database server, where another host has claimed "
             "or changed the task since";
    case Outcome::kCancelNoticed:
      logger_->Info("Task \"" + id + "\" was cancelled; stopping the run", fields);
      return std::nullopt;
    case Outcome::kRenewed:
      if (reclaimed) {
        logger_->Info("Task \"" + id + "\": its claim was missing on the new database " +
                          "server; claimed again there with the same ticket, the run goes on",
                      fields);
      }
      return std::nullopt;
    case Outcome::kReclaim:
    case Outcome::kStale:
      break;
  }
  return std::nullopt;
}

void EngineReporter::ObserveRenewal(const PlannedTask& task, const PlannedRun& run, Outcome outcome,
                                    bool reclaimed) const {
  switch (outcome) {
    case Outcome::kRetry:
      observer_->OnLeaseRenewalFailed(InfoOf(task, run));
      break;
    case Outcome::kLost:
      observer_->OnLeaseLost(InfoOf(task, run));
      break;
    case Outcome::kCancelNoticed:
      observer_->OnLeaseRenewed(InfoOf(task, run));
      break;
    case Outcome::kRenewed:
      if (reclaimed) observer_->OnWriteReplayed(plugin_id_, task.def.id);
      observer_->OnLeaseRenewed(InfoOf(task, run));
      break;
    case Outcome::kReclaim:
    case Outcome::kStale:
      break;
  }
}

void EngineReporter::PollAnswered(const Planner::PollOutcome& outcome, const PollResult& polled,
                                  std::size_t found) const {
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
  for (const std::string& id : polled.swept_ids) {
    logger_->Warn("Task timed out and was lost: " + id, {{"task", id}});
    observer_->OnReclaimed(plugin_id_, id);
  }
  if (debug_) logger_->Debug("Poll found " + std::to_string(found) + " ready task(s)");
}

void EngineReporter::SkipFailed(const std::string& id, const Status& status) const {
  if (status.code() == StatusCode::kUnimplemented) return;
  logger_->Warn("Failed to skip a missed slot of task \"" + id + "\", " + status.message(),
                {{"task", id}});
}

void EngineReporter::ClaimAnswered(const std::vector<ClaimRequest>& claims,
                                   const Result<std::vector<ClaimResult>>& claimed) const {
  if (debug_) {
    std::size_t won = 0;
    if (claimed.ok()) {
      for (const ClaimResult& result : *claimed) won += result.claimed ? 1 : 0;
    }
    logger_->Debug("Claim of " + std::to_string(claims.size()) + " task(s): " +
                   (claimed.ok() ? std::to_string(won) + " claimed" : claimed.status().message()));
  }
  if (claimed.ok()) return;
  for (const ClaimRequest& claim : claims) {
    logger_->Warn("Failed to claim task \"" + claim.id + "\", " + claimed.status().message(),
                  {{"task", claim.id}});
  }
}

void EngineReporter::TasksRegistered(const std::vector<TaskPtr>& tasks) const {
  for (const TaskPtr& task : tasks) {
    logger_->Info(
        "Registered scheduled task: " + task->def.id + ", " + task->def.schedule.settings.ToJson(),
        {{"task", task->def.id}});
  }
}

void EngineReporter::TaskRedefined(const std::string& id, const std::string& settings_json) const {
  logger_->Info("Redefined scheduled task: " + id + ", " + settings_json, {{"task", id}});
}

void EngineReporter::TaskRetired(const std::string& id, bool finished) const {
  logger_->Info(finished ? "Task worker finished: " + id
                         : "Task " + id + " unscheduled; its run in progress goes on",
                {{"task", id}});
}

void EngineReporter::ServerChanged() const {
  logger_->Warn("The database of plugin '" + plugin_id_ +
                "' is served by another server than before (a failover): every claim of this "
                "host is confirmed again there, and its last releases are written again where "
                "they are missing");
}

std::string EngineReporter::NotReadyWhy(const Planner::DatabaseReadiness& readiness) const {
  using State = Planner::DatabaseReadiness::State;
  const std::string database = "the database of plugin '" + plugin_id_ + "'";
  switch (readiness.state) {
    case State::kUnreachable:
      return database + " has been unreachable for " +
             FormatShortDuration(std::chrono::duration_cast<milliseconds>(readiness.down)) +
             (readiness.health.reason.empty() ? "" : ": " + readiness.health.reason);
    case State::kConfirmingClaims:
      return database + " is back; this host is confirming its claims there";
    default:
      return "";
  }
}

void EngineReporter::RunAbandoned(const PlannedTask& task, const PlannedRun& run) const {
  logger_->Warn("Task \"" + task.def.id +
                    "\" did not return after the shutdown grace period and a kill; its lease "
                    "will lapse",
                RunFields(task.def.id, run.trace));
}

}  // namespace stagehand::engine_internal
