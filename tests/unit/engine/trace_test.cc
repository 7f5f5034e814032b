// Issue 18: each run's W3C trace context (EngineOptions::trace_runs): the task function reads it
// from RunControl::trace and observers from RunInfo::trace; a run triggered by a traced caller on
// this host is a span of the caller's trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine_harness.h"
#include "integration/executors/recording_logger.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;

constexpr char kCaller[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

// A task function that keeps the trace context of each of its runs.
class TraceProbe {
 public:
  TaskFunction Fn() {
    return [this](const RunControl& run) {
      std::lock_guard lock(mu_);
      seen_.push_back(run.trace);
    };
  }
  std::vector<TraceContext> seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<TraceContext> seen_;
};

TEST_F(EngineTest, TheEnginesLinesAboutATracedRunCarryItsTraceAndSpanIds) {
  auto lines = std::make_shared<testing::RecordingLogger>();
  logger_ = lines;
  EngineOptions options = Options();
  options.trace_runs = SamplerConfig{};
  TaskEngine& engine = StartEngine(store_, options);
  TraceProbe probe;
  EngineTask task = Task("r", Schedule("manual"), [&probe](const RunControl& run) -> Status {
    (void)probe.Fn()(run);
    return InternalError("disk full");
  });
  RetryPolicy retry;
  retry.attempts = 1;
  retry.backoff = std::chrono::seconds(1);
  task.retry = retry;
  ASSERT_THAT(engine.Register(std::move(task)), IsOk());
  Settle();
  ASSERT_THAT(engine.Trigger("r", *ParseTraceparent(kCaller, "")), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("failed", "r", 1));
  Settle();
  ASSERT_EQ(probe.seen().size(), 1u);
  const TraceContext run = probe.seen()[0];
  const std::vector<testing::LogRecord> records = lines->Records();
  for (const std::string_view text : {"failed on attempt 1 of 2", "Task r failed, "}) {
    const auto line = std::find_if(records.begin(), records.end(), [&](const auto& record) {
      return record.message.find(text) != std::string::npos;
    });
    ASSERT_NE(line, records.end()) << "no line with: " << text;
    EXPECT_EQ(line->Field("task"), "r") << text;
    EXPECT_EQ(line->Field("trace_id"), HexOf(run.trace_id)) << text;
    EXPECT_EQ(line->Field("span_id"), HexOf(run.span_id)) << text;
  }
}

TEST_F(EngineTest, ATracedRunIsAChildOfItsCallerOrTheRootOfANewTrace) {
  EngineOptions options = Options();
  options.trace_runs = SamplerConfig{};
  TaskEngine& engine = StartEngine(store_, options);
  TraceProbe global;
  TraceProbe local;
  ASSERT_THAT(engine.Register(Task("g", Schedule("manual"), global.Fn())), IsOk());
  ASSERT_THAT(engine.Register(Task("l", Schedule("manual"), local.Fn(), TaskScope::kLocal)),
              IsOk());
  Settle();
  const TraceContext caller = *ParseTraceparent(kCaller, "vendor=1");

  ASSERT_THAT(engine.Trigger("g", caller), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "g", 1));
  ASSERT_THAT(engine.Trigger("l", caller), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 1));
  Settle();
  ASSERT_THAT(engine.Trigger("g"), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "g", 2));

  for (const char* id : {"g", "l"}) {
    const std::vector<std::pair<TraceContext, TraceContext>> traces = recorder_->Traces(id);
    ASSERT_GE(traces.size(), 1u) << id;
    const auto& [span, parent] = traces[0];
    EXPECT_TRUE(span.valid()) << id;
    EXPECT_EQ(span.trace_id, caller.trace_id) << id;
    EXPECT_NE(span.span_id, caller.span_id) << id;
    EXPECT_TRUE(span.sampled()) << id;
    EXPECT_EQ(span.trace_state, "vendor=1") << id;
    EXPECT_EQ(parent, caller) << id;
  }
  EXPECT_EQ(global.seen().at(0), recorder_->Traces("g").at(0).first);
  EXPECT_EQ(local.seen().at(0), recorder_->Traces("l").at(0).first);

  // Untraced trigger: a new trace, sampled by the default sampler, no caller.
  const auto [root, no_caller] = recorder_->Traces("g").at(1);
  EXPECT_TRUE(root.valid());
  EXPECT_NE(root.trace_id, caller.trace_id);
  EXPECT_TRUE(root.sampled());
  EXPECT_FALSE(no_caller.valid());
}

TEST_F(EngineTest, AnotherHostsTracedTriggerMakesThisHostsRunItsChild) {
  EngineOptions options = Options();
  options.trace_runs = SamplerConfig{};
  TaskEngine& triggering = StartEngine(store_, options);
  TaskEngine& running = StartEngine(OtherHostStore(), options);
  TraceProbe probe;
  ASSERT_THAT(running.Register(Task("g", Schedule("manual"), probe.Fn())), IsOk());
  Settle();
  const TraceContext caller = *ParseTraceparent(kCaller, "vendor=1");
  ASSERT_THAT(triggering.Trigger("g", caller), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "g", 1));
  ASSERT_EQ(probe.seen().size(), 1u);
  EXPECT_EQ(probe.seen()[0].trace_id, caller.trace_id);
  EXPECT_EQ(recorder_->Traces("g").at(0).second, caller);
}

TEST_F(EngineTest, AnUnsampledCallerMakesAnUnsampledRunUnderTheParentBasedSampler) {
  EngineOptions options = Options();
  options.trace_runs = SamplerConfig{};
  TaskEngine& engine = StartEngine(store_, options);
  TraceProbe probe;
  ASSERT_THAT(engine.Register(Task("l", Schedule("manual"), probe.Fn(), TaskScope::kLocal)),
              IsOk());
  TraceContext caller = *ParseTraceparent(kCaller);
  caller.flags = 0;
  ASSERT_THAT(engine.Trigger("l", caller), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 1));
  ASSERT_EQ(probe.seen().size(), 1u);
  EXPECT_TRUE(probe.seen()[0].valid());
  EXPECT_FALSE(probe.seen()[0].sampled());
}

TEST_F(EngineTest, RunsCarryNoTraceContextUnlessTracingIsOn) {
  TaskEngine& engine = StartEngine();
  TraceProbe probe;
  ASSERT_THAT(engine.Register(Task("g", Schedule("manual"), probe.Fn())), IsOk());
  Settle();
  ASSERT_THAT(engine.Trigger("g", *ParseTraceparent(kCaller)), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "g", 1));
  ASSERT_EQ(probe.seen().size(), 1u);
  EXPECT_FALSE(probe.seen()[0].valid());
  EXPECT_FALSE(recorder_->Traces("g").at(0).first.valid());
  EXPECT_TRUE(recorder_->Traces("g").at(0).second.valid()) << "the caller is still reported";
}

// Issue 19: the run history keeps a run's trace id when its trace is sampled (a global run's from
// its claim on), so that the dashboard can link it; an unsampled or untraced run has none.
TEST_F(EngineTest, TheHistoryKeepsTheTraceIdOfASampledRunOnly) {
  EngineOptions options = Options();
  options.trace_runs = SamplerConfig{};
  TaskEngine& engine = StartEngine(store_, options);
  ASSERT_THAT(engine.Register(Task("g", Schedule("manual"), [](const RunControl&) {})), IsOk());
  ASSERT_TRUE(engine
                  .Register(Task(
                      "l", Schedule("manual"), [](const RunControl&) {}, TaskScope::kLocal))
                  .ok());
  Settle();
  const TraceContext caller = *ParseTraceparent(kCaller);
  TraceContext unsampled = caller;
  unsampled.flags = 0;
  ASSERT_THAT(engine.Trigger("g", caller), IsOk());
  ASSERT_THAT(engine.Trigger("l", caller), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "g", 1));
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 1));
  Settle();
  ASSERT_THAT(engine.Trigger("l", unsampled), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 2));
  Settle();

  const auto runs_of = [this](const std::string& task) {
    Result<RunPage> page = store_->history()->ListRuns(task, 10, std::nullopt);
    EXPECT_THAT(page, IsOk());
    return page.ok() ? page->runs : std::vector<TaskRun>{};
  };
  const std::vector<TaskRun> global = runs_of("g");
  ASSERT_EQ(global.size(), 1u);
  EXPECT_EQ(global[0].origin.trace_id, HexOf(caller.trace_id));
  EXPECT_EQ(global[0].finish.outcome, RunOutcome::kSucceeded);
  const std::vector<TaskRun> local = runs_of("l");
  ASSERT_EQ(local.size(), 2u);
  for (const TaskRun& run : local) {
    EXPECT_EQ(run.finish.outcome, RunOutcome::kSucceeded) << run.run_id;
  }
  const std::vector<std::pair<TraceContext, TraceContext>> traces = recorder_->Traces("l");
  ASSERT_EQ(traces.size(), 2u);
  EXPECT_TRUE(traces[0].first.sampled());
  EXPECT_TRUE(traces[1].first.valid());
  EXPECT_FALSE(traces[1].first.sampled());
  std::vector<std::optional<std::string>> ids;
  for (const TaskRun& run : local) ids.push_back(run.origin.trace_id);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::optional<std::string>>{std::nullopt, HexOf(caller.trace_id)}))
      << "the unsampled run has none";
}

TEST_F(EngineTest, AnUntracedRunHasNoTraceIdInTheHistory) {
  TaskEngine& engine = StartEngine();
  ASSERT_THAT(engine.Register(Task("g", Schedule("manual"), [](const RunControl&) {})), IsOk());
  Settle();
  ASSERT_THAT(engine.Trigger("g", *ParseTraceparent(kCaller)), IsOk());
  ASSERT_TRUE(recorder_->WaitFor("completed", "g", 1));
  Settle();
  Result<RunPage> page = store_->history()->ListRuns("g", 10, std::nullopt);
  ASSERT_THAT(page, IsOk());
  ASSERT_EQ(page->runs.size(), 1u);
  EXPECT_FALSE(page->runs[0].origin.trace_id.has_value());
}

}  // namespace
}  // namespace stagehand::engine_internal
