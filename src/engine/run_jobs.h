// A run's job on the executor (TaskEngine): calls the task function with the run's tokens,
// catching what it throws, and hands the end on: a global run's to the Releaser, which releases
// its claim, a local run's to the planner. Whether the function is called at all, what an end
// means and what follows it are the Planner's (StartRun, PlanGlobalRunEnd, FinishLocalRun).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/engine_reporter.h"
#include "engine/planner.h"
#include "engine/planner_access.h"
#include "engine/releaser.h"
#include "stagehand/store/run_history.h"
#include "stagehand/time/clock.h"
#include "stagehand/trace/span.h"

namespace stagehand::engine_internal {

// The engine's side of its runs' jobs. Called on a run's thread, holding no lock.
class RunJobsEngine : public PlannerAccess {
 public:
  // Adds to the engine's counts of runs in flight and of runs outside their task function (those
  // starting or finishing), which Shutdown and WaitIdleForTesting wait on.
  virtual void CountRuns(int in_flight, int outside_function) = 0;
  // Queues history writes that no claim or release carries, and wakes the dispatcher.
  virtual void QueueHistory(std::optional<RunStart> start, std::optional<RunEnd> end) = 0;
};

struct RunJobsContext {
  Clock* clock = nullptr;
  const EngineReporter* reporter = nullptr;
  Releaser* releaser = nullptr;
  // Where a sampled run's spans go (EngineOptions::span_sink); may be null.
  std::shared_ptr<SpanSink> span_sink;
};

// Thread-safe: each run's job calls it on its own executor thread.
class RunJobs {
 public:
  RunJobs(RunJobsEngine& engine, RunJobsContext context);

  // The job of global run `run`: its end goes to the Releaser, whether or not this host still
  // knew its claim to hold (the release is guarded by the ticket).
  void RunGlobal(TaskPtr task, RunPtr run);
  // The job of local run `run`: its end goes to the planner, its history to the queue.
  void RunLocal(TaskPtr task, RunPtr run);

 private:
  // How a run's function ended: the error JSON (nullopt on success) and why it was stopped.
  struct Outcome {
    std::optional<std::string> error;
    StopReason reason{};
    bool started = true;  // false: the function was never called
  };
  // Calls the task function, reporting the start (`info`) just before; a run the planner does
  // not start (its claim at risk, its host shutting down) is neither called nor reported. A
  // stopped run's error message starts with the reason ("timed out after 2s: ...").
  Outcome Invoke(const PlannedTask& task, PlannedRun& run, const RunInfo& info);
  // The history's account of how `run` ended.
  static RunFinish FinishOf(const PlannedRun& run, const Outcome& outcome);

  RunJobsEngine& engine_;
  RunJobsContext context_;
  Clock& clock_;
  const EngineReporter& reporter_;
};

}  // namespace stagehand::engine_internal
