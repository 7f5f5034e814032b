// Issue 18 over real HTTP: with an OTLP endpoint configured, a REST trigger carrying a
// `traceparent` makes a span `task <id>` in the caller's trace, exported to a local OTLP/HTTP
// receiver; with the receiver down, runs go on and the spans are counted as failed in /metrics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "integration/otlp_receiver.h"
#include "stagehand/backend/backend.h"
#include "stagehand/http/otlp_http_exporter.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"

namespace stagehand {
namespace {

using nlohmann::json;
using ::stagehand::testing::IsOk;
using ::testing::HasSubstr;
using ::testing::Not;

using test_otlp::Attribute;
using test_otlp::OtlpReceiver;

constexpr auto kDeadline = test_otlp::kReceiveDeadline;
constexpr char kCaller[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

class TracingTest : public ::testing::Test {
 protected:
  void Start(std::map<std::string, std::string> environment) {
    Result<Config> config = Config::FromYaml(
        "backend:\n  listen: { host: 127.0.0.1 }\n"
        "  database: { client: better-sqlite3, connection: ':memory:' }\n"
        "  auth: { dangerouslyDisableDefaultAuthPolicy: true }\n",
        "tracing_test.yaml");
    ASSERT_THAT(config, IsOk());
    BackendOptions options;
    options.config = *config;
    options.port_override = 0;
    options.environment = [environment](const std::string& name) -> std::optional<std::string> {
      auto found = environment.find(name);
      if (found == environment.end()) return std::nullopt;
      return found->second;
    };
    Result<std::unique_ptr<Backend>> backend = Backend::Create(std::move(options));
    ASSERT_THAT(backend, IsOk());
    backend_ = std::move(*backend);
    ASSERT_TRUE(backend_
                    ->AddPlugin({"jobs",
                                 [this](PluginServices& services) {
                                   TaskDefinition task;
                                   task.id = "report";
                                   task.timeout = std::chrono::minutes(1);
                                   task.fn = [this](const RunControl& run) {
                                     std::lock_guard lock(mu_);
                                     seen_ = run.trace;
                                     return run.trace.valid() ? Status::Ok()
                                                              : InternalError("no trace");
                                   };
                                   return services.scheduler->ScheduleTask(std::move(task));
                                 }})
                    .ok());
    ASSERT_THAT(backend_->Start(), IsOk());
  }

  int Trigger(const std::string& traceparent) {
    httplib::Client client("127.0.0.1", backend_->port());
    httplib::Headers headers{{"traceparent", traceparent}};
    httplib::Result result =
        client.Post("/api/jobs/.backstage/scheduler/v1/tasks/report/trigger", headers, "", "");
    return result ? result->status : 0;
  }

  std::string Metrics() {
    httplib::Client client("127.0.0.1", backend_->port());
    httplib::Result result = client.Get("/metrics");
    return result ? result->body : "";
  }

  // Reads /metrics until it has `line` (real time, bounded): the count follows the export's
  // answer, which comes after the receiver has the span.
  std::string MetricsWith(const std::string& line) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    std::string metrics = Metrics();
    while (metrics.find(line) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      metrics = Metrics();
    }
    return metrics;
  }

  std::unique_ptr<Backend> backend_;
  std::mutex mu_;
  TraceContext seen_;
};

TEST_F(TracingTest, ARestTriggerWithTraceparentMakesASpanInTheCallersTrace) {
  OtlpReceiver receiver;
  ASSERT_NO_FATAL_FAILURE(
      Start({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:" + std::to_string(receiver.port())},
             {"OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=k%201"},
             {"OTEL_SERVICE_NAME", "scheduler-test"},
             {"OTEL_BSP_SCHEDULE_DELAY", "20"}}));
  ASSERT_EQ(Trigger(kCaller), 200);

  // The request is a server span, child of the caller; the run is the server span's child.
  const json request =
      receiver.WaitForSpan("POST /api/jobs/.backstage/scheduler/v1/tasks/{taskId}/trigger");
  ASSERT_FALSE(request.is_null()) << "no server span arrived";
  EXPECT_EQ(request.at("traceId"), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(request.at("parentSpanId"), "00f067aa0ba902b7");
  EXPECT_EQ(request.at("kind"), 2);
  EXPECT_EQ(Attribute(request, "http.response.status_code"), "\"200\"");
  EXPECT_EQ(Attribute(request, "url.path"),
            "/api/jobs/.backstage/scheduler/v1/tasks/report/trigger");

  const json span = receiver.WaitForSpan("task report");
  ASSERT_FALSE(span.is_null()) << "no span arrived";
  EXPECT_EQ(span.at("traceId"), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(span.at("parentSpanId"), request.at("spanId"));
  EXPECT_EQ(span.at("scope"), "backstage-service-scheduler");
  EXPECT_EQ(Attribute(span, "taskId"), "report");
  EXPECT_EQ(Attribute(span, "scope"), "global");
  EXPECT_EQ(Attribute(span, "stagehand.plugin_id"), "jobs");
  EXPECT_EQ(Attribute(span, "stagehand.trigger"), "manual");
  EXPECT_EQ(Attribute(span, "stagehand.outcome"), "succeeded");
  EXPECT_EQ(span.at("resource").at("attributes").at(0).at("value").at("stringValue"),
            "scheduler-test");
  {
    std::lock_guard lock(mu_);
    EXPECT_EQ(HexOf(seen_.span_id), span.at("spanId").get<std::string>())
        << "the function saw its own span's context";
  }
  EXPECT_THAT(receiver.content_types().at(0), HasSubstr("application/json"));
  EXPECT_EQ(receiver.auth().at(0), "k 1");
  const std::string exported = "stagehand_trace_spans_total{result=\"exported\"} 2";
  EXPECT_THAT(MetricsWith(exported), HasSubstr(exported));
  backend_.reset();  // before the receiver, whose stop waits for the exporter's open connection
}

TEST_F(TracingTest, WithTheCollectorDownRunsGoOnAndTheSpansCountAsFailed) {
  int closed_port = 0;
  {
    OtlpReceiver gone;
    closed_port = gone.port();
  }
  ASSERT_NO_FATAL_FAILURE(Start({{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                                  "http://127.0.0.1:" + std::to_string(closed_port) + "/v1/traces"},
                                 {"OTEL_EXPORTER_OTLP_TIMEOUT", "500"},
                                 {"OTEL_BSP_SCHEDULE_DELAY", "20"}}));
  ASSERT_EQ(Trigger(kCaller), 200);
  // The request's server span and the run's.
  const std::string failed = "stagehand_trace_spans_total{result=\"failed\"} 2";
  EXPECT_THAT(MetricsWith(failed), HasSubstr(failed));
  std::lock_guard lock(mu_);
  EXPECT_TRUE(seen_.valid()) << "the run ran, traced";
}

TEST(OtlpHttpExporterTest, AfterAnUnansweredRequestItBacksOffWithoutEncodingOrConnecting) {
  int closed_port = 0;
  {
    OtlpReceiver gone;
    closed_port = gone.port();
  }
  testing::ManualClock clock;
  OtlpHttpOptions options;
  options.endpoint = "http://127.0.0.1:" + std::to_string(closed_port) + "/v1/traces";
  options.clock = &clock;
  Result<std::unique_ptr<OtlpHttpExporter>> exporter = OtlpHttpExporter::Create(options);
  ASSERT_THAT(exporter, IsOk());
  const std::vector<SpanData> batch(1);
  EXPECT_THAT((*exporter)->Export(batch).message(), HasSubstr("failed"));
  EXPECT_THAT((*exporter)->Export(batch).message(), HasSubstr("skipped"));
  clock.Advance(std::chrono::milliseconds(999));
  EXPECT_THAT((*exporter)->Export(batch).message(), HasSubstr("skipped"));
  clock.Advance(std::chrono::milliseconds(1));
  EXPECT_THAT((*exporter)->Export(batch).message(), HasSubstr("failed"));
  clock.Advance(std::chrono::milliseconds(1000));
  EXPECT_THAT((*exporter)->Export(batch).message(), HasSubstr("skipped")) << "now 2 s";

  OtlpReceiver back;
  OtlpHttpOptions answered = options;
  answered.endpoint = "http://127.0.0.1:" + std::to_string(back.port()) + "/v1/traces";
  Result<std::unique_ptr<OtlpHttpExporter>> working = OtlpHttpExporter::Create(answered);
  ASSERT_THAT(working, IsOk());
  EXPECT_THAT((*working)->Export(batch), IsOk());
  EXPECT_THAT((*working)->Export(batch), IsOk());
}

TEST_F(TracingTest, BadTracingSettingsFailTheStartNamingTheVariable) {
  Result<Config> config = Config::FromYaml(
      "backend:\n  listen: { host: 127.0.0.1 }\n"
      "  database: { client: better-sqlite3, connection: ':memory:' }\n",
      "t.yaml");
  ASSERT_THAT(config, IsOk());
  BackendOptions options;
  options.config = *config;
  options.environment = [](const std::string& name) -> std::optional<std::string> {
    if (name == "OTEL_EXPORTER_OTLP_ENDPOINT") return "https://collector:4318";
    return std::nullopt;
  };
  Result<std::unique_ptr<Backend>> backend = Backend::Create(std::move(options));
  ASSERT_THAT(backend, Not(IsOk()));
  EXPECT_THAT(backend.status().message(), HasSubstr("only http is supported"));
}

}  // namespace
}  // namespace stagehand
