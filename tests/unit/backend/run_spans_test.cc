// Issue 18: a sampled run becomes one span named as Backstage names it, with Backstage's and
// stagehand's attributes, parented to its caller, and marked as an error when the run did not
// succeed.
#include "stagehand/backend/run_spans.h"

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "stagehand/time/manual_clock.h"

namespace stagehand {
namespace {

using std::chrono::milliseconds;

class RecordingSink final : public SpanSink {
 public:
  void OnEnd(SpanData span) override {
    std::lock_guard lock(mu_);
    spans_.push_back(std::move(span));
  }
  std::vector<SpanData> spans() {
    std::lock_guard lock(mu_);
    return spans_;
  }

 private:
  std::mutex mu_;
  std::vector<SpanData> spans_;
};

const AttributeValue* Find(const SpanData& span, std::string_view key) {
  for (const auto& [name, value] : span.attributes) {
    if (name == key) return &value;
  }
  return nullptr;
}

class RunSpansTest : public ::testing::Test {
 protected:
  RunInfo Run(const TraceContext* trace, const TraceContext* caller = nullptr) {
    RunInfo run;
    run.plugin_id = "jobs";
    run.task_id = "nightly";
    run.scope = TaskScope::kGlobal;
    run.ticket = "run-1";
    run.run_id = "run-1";
    run.trigger = RunTrigger::kManual;
    run.attempt = 2;
    run.trace = trace;
    run.caller = caller;
    return run;
  }

  testing::ManualClock clock_;
  RecordingSink sink_;
  RunSpanObserver observer_{sink_, clock_, "host-a", 4242};
  TraceContext caller_ =
      *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  TraceContext trace_{caller_.trace_id, NewSpanId(), 0x01, ""};
};

TEST_F(RunSpansTest, ASucceededRunIsOneSpanWithBackstagesNameAndAttributes) {
  RunInfo run = Run(&trace_, &caller_);
  run.lag = milliseconds(12);
  const WallTime started = clock_.Now();
  clock_.Advance(milliseconds(1500));
  RunFinish finish;
  finish.exit_code = 0;
  observer_.OnRunFinished(run, finish, milliseconds(1500));

  const std::vector<SpanData> spans = sink_.spans();
  ASSERT_EQ(spans.size(), 1u);
  const SpanData& span = spans[0];
  EXPECT_EQ(span.name, "task nightly");
  EXPECT_EQ(span.context, trace_);
  ASSERT_TRUE(span.parent_span_id.has_value());
  EXPECT_EQ(*span.parent_span_id, caller_.span_id);
  EXPECT_EQ(span.start, started);
  EXPECT_EQ(span.end, started + milliseconds(1500));
  EXPECT_EQ(span.status, SpanStatusCode::kUnset);
  EXPECT_TRUE(span.events.empty());
  EXPECT_EQ(std::get<std::string>(*Find(span, "taskId")), "nightly");
  EXPECT_EQ(std::get<std::string>(*Find(span, "scope")), "global");
  EXPECT_EQ(std::get<std::string>(*Find(span, "stagehand.plugin_id")), "jobs");
  EXPECT_EQ(std::get<std::string>(*Find(span, "stagehand.run_id")), "run-1");
  EXPECT_EQ(std::get<std::string>(*Find(span, "host.name")), "host-a");
  EXPECT_EQ(std::get<std::int64_t>(*Find(span, "process.pid")), 4242);
  EXPECT_EQ(std::get<std::string>(*Find(span, "stagehand.trigger")), "manual");
  EXPECT_EQ(std::get<std::int64_t>(*Find(span, "stagehand.attempt")), 2);
  EXPECT_EQ(std::get<std::string>(*Find(span, "stagehand.outcome")), "succeeded");
  EXPECT_EQ(std::get<double>(*Find(span, "stagehand.start_lag_ms")), 12.0);
  EXPECT_EQ(std::get<std::int64_t>(*Find(span, "process.exit.code")), 0);
  EXPECT_EQ(Find(span, "stagehand.slot"), nullptr);
}

TEST_F(RunSpansTest, AFailedRunIsAnErrorWithAnExceptionEvent) {
  RunInfo run = Run(&trace_);
  run.slot = WallTime(std::chrono::hours(24 * 20000));
  RunFinish finish;
  finish.outcome = RunOutcome::kTimedOut;
  finish.error_json = R"({"name":"Error","message":"timed out after 30s"})";
  observer_.OnRunFinished(run, finish, milliseconds(30000));

  const std::vector<SpanData> spans = sink_.spans();
  ASSERT_EQ(spans.size(), 1u);
  const SpanData& span = spans[0];
  EXPECT_FALSE(span.parent_span_id.has_value()) << "no caller: a root span of its trace";
  EXPECT_EQ(span.status, SpanStatusCode::kError);
  EXPECT_EQ(span.status_message, "timed out after 30s");
  ASSERT_EQ(span.events.size(), 1u);
  EXPECT_EQ(span.events[0].name, "exception");
  EXPECT_EQ(std::get<std::string>(span.events[0].attributes.at(0).second), "Error");
  EXPECT_EQ(std::get<std::string>(span.events[0].attributes.at(1).second), "timed out after 30s");
  EXPECT_EQ(std::get<std::string>(*Find(span, "stagehand.outcome")), "timed_out");
  EXPECT_EQ(std::get<std::string>(*Find(span, "stagehand.slot")), "2024-10-04T00:00:00.000Z");
}

TEST_F(RunSpansTest, UnsampledAndUntracedRunsMakeNoSpan) {
  TraceContext unsampled = trace_;
  unsampled.flags = 0;
  for (const TraceContext* trace :
       {static_cast<const TraceContext*>(nullptr), static_cast<const TraceContext*>(&unsampled)}) {
    const RunInfo run = Run(trace);
    observer_.OnRunFinished(run, RunFinish{}, milliseconds(5));
  }
  EXPECT_TRUE(sink_.spans().empty());
}

TEST_F(RunSpansTest, EachAnsweredRequestIsAServerSpanNamedByItsRoute) {
  std::vector<std::string> seen_traceparents;
  HttpHandler handler = TraceRequests(
      [&](const HttpRequest& request) -> std::optional<HttpResponse> {
        seen_traceparents.emplace_back(FindHeader(request.headers, "traceparent").value_or(""));
        if (request.path == "/unanswered") return std::nullopt;
        HttpResponse response;
        response.status = request.path == "/broken" ? 500 : 200;
        return response;
      },
      "/api/jobs", "jobs", sink_, clock_, SamplerConfig{});
  const auto call = [&](std::string method, std::string path, std::string traceparent = "") {
    HttpRequest request;
    request.method = std::move(method);
    request.path = std::move(path);
    if (!traceparent.empty()) request.headers.emplace_back("TraceParent", traceparent);
    return handler(request);
  };
  ASSERT_TRUE(
      call("POST", "/.backstage/scheduler/v1/tasks/nightly/trigger", FormatTraceparent(caller_)));
  ASSERT_TRUE(call("GET", "/.stagehand/v1/runs/run-1"));
  ASSERT_TRUE(call("GET", "/.stagehand/v1/tasks/nightly/runs"));
  ASSERT_TRUE(call("GET", "/seats/A1"));
  ASSERT_TRUE(call("GET", "/broken"));
  EXPECT_FALSE(call("GET", "/unanswered"));
  TraceContext unsampled = caller_;
  unsampled.flags = 0;
  ASSERT_TRUE(call("GET", "/.backstage/scheduler/v1/tasks", FormatTraceparent(unsampled)));

  const std::vector<SpanData> spans = sink_.spans();
  ASSERT_EQ(spans.size(), 5u) << "none for the unanswered request nor the unsampled caller";
  EXPECT_EQ(spans[0].name, "POST /api/jobs/.backstage/scheduler/v1/tasks/{taskId}/trigger");
  EXPECT_EQ(spans[0].kind, SpanKind::kServer);
  EXPECT_EQ(spans[0].context.trace_id, caller_.trace_id);
  ASSERT_TRUE(spans[0].parent_span_id.has_value());
  EXPECT_EQ(*spans[0].parent_span_id, caller_.span_id);
  EXPECT_EQ(seen_traceparents[0], FormatTraceparent(spans[0].context))
      << "the handler sees the server span as the caller";
  EXPECT_EQ(std::get<std::string>(*Find(spans[0], "url.path")),
            "/api/jobs/.backstage/scheduler/v1/tasks/nightly/trigger");
  EXPECT_EQ(spans[1].name, "GET /api/jobs/.stagehand/v1/runs/{runId}");
  EXPECT_FALSE(spans[1].parent_span_id.has_value());
  EXPECT_EQ(spans[2].name, "GET /api/jobs/.stagehand/v1/tasks/{taskId}/runs");
  EXPECT_EQ(spans[3].name, "GET /api/jobs") << "a plugin's own route: its path is not a name";
  EXPECT_EQ(spans[4].status, SpanStatusCode::kError);
  EXPECT_EQ(std::get<std::int64_t>(*Find(spans[4], "http.response.status_code")), 500);
  EXPECT_EQ(seen_traceparents.back().substr(53), "00") << "an unsampled caller stays unsampled";
}

}  // namespace
}  // namespace stagehand
