#include "engine/run_jobs.h"

#include <exception>
#include <utility>

namespace stagehand::engine_internal {

using std::chrono::nanoseconds;
using Wake = PlannerAccess::Wake;

RunJobs::RunJobs(RunJobsEngine& engine, RunJobsContext context)
    : engine_(engine),
      context_(std::move(context)),
      clock_(*context_.clock),
      reporter_(*context_.reporter) {}

RunJobs::Outcome RunJobs::Invoke(const PlannedTask& task, PlannedRun& run, const RunInfo& info) {
  Planner::StartVerdict verdict;
  engine_.WithPlanner(
      [&](Planner& planner) { verdict = planner.StartRun(task, run, clock_.MonoNow()); },
      Wake::kNone);
  std::optional<std::string> message = Planner::NotStartedWhy(verdict);
  // Only a run whose function is called is reported as started, and before it is inside it.
  if (!message) reporter_.observer().OnRunStarted(info, run.lag);
  engine_.CountRuns(0, -1);
  struct BackOutside {
    RunJobsEngine& engine;
    ~BackOutside() { engine.CountRuns(0, 1); }
  } back_outside{engine_};
  std::string name = "Error";
  Outcome outcome;
  if (message) {
    outcome.started = false;
  } else {
    try {
      SpanSink* spans = run.trace.sampled() ? context_.span_sink.get() : nullptr;
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
  engine_.WithPlanner([&](Planner&) { outcome.reason = run.reason; }, Wake::kNone);
  if (message)
    outcome.error = Planner::RunErrorJson(outcome.reason, task.def.timeout, *message, name);
  return outcome;
}

RunFinish RunJobs::FinishOf(const PlannedRun& run, const Outcome& outcome) {
  RunFinish finish;
  finish.outcome = OutcomeOf(outcome.reason, outcome.error.has_value());
  finish.error_json = outcome.error;
  if (run.report != nullptr) {
    RunReport::Snapshot report = run.report->Read();
    finish.exit_code = report.exit_code;
    finish.signal = report.signal;
    finish.http_status = report.http_status;
    finish.output_tail = std::move(report.output_tail);
  }
  return finish;
}

void RunJobs::RunGlobal(TaskPtr task, RunPtr run) {
  const RunInfo info = reporter_.InfoOf(*task, *run);
  const MonoTime began = clock_.MonoNow();
  Outcome outcome = Invoke(*task, *run, info);
  const nanoseconds duration = clock_.MonoNow() - began;
  reporter_.RunFailed(*task, *run, outcome.error, outcome.reason);
  bool held = false;
  engine_.WithPlanner([&](Planner& planner) { held = planner.GlobalRunReturned(*run); },
                      Wake::kNone);
  PendingRelease ended;
  ended.finish = FinishOf(*run, outcome);
  ended.task = std::move(task);
  ended.run = std::move(run);
  ended.info = info;
  ended.duration = duration;
  ended.error = std::move(outcome.error);
  ended.held = held;
  context_.releaser->PlanGlobalRunEnd(ended, outcome.started);
  context_.releaser->Push(std::move(ended));
  engine_.WithPlanner([](Planner&) {}, Wake::kDispatcher);
}

void RunJobs::RunLocal(TaskPtr task, RunPtr run) {
  const RunInfo info = reporter_.InfoOf(*task, *run);
  const MonoTime began = clock_.MonoNow();
  const Outcome outcome = Invoke(*task, *run, info);
  const nanoseconds duration = clock_.MonoNow() - began;
  reporter_.RunFailed(*task, *run, outcome.error, outcome.reason);
  const RunFinish finish = FinishOf(*run, outcome);
  engine_.QueueHistory(std::nullopt, RunEnd{run->run_id, finish, clock_.Now()});
  Planner::LocalRunEnd end;
  engine_.WithPlanner(
      [&](Planner& planner) {
        end = planner.FinishLocalRun(*task, run, outcome.error, clock_.MonoNow(), clock_.Now());
      },
      Wake::kTimer);
  engine_.CountRuns(-1, -1);
  reporter_.RunEnded(info, duration, finish);
  if (end.retry_in) reporter_.RetryScheduled(*task, info, run->attempt, *end.retry_in);
  if (end.finished) reporter_.TaskFinished(task->def.id);
}

}  // namespace stagehand::engine_internal
