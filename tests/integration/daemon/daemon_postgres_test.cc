// Two `stagehand serve` processes on the test PostgreSQL form one fleet: a global task triggered
// over REST on one of them runs exactly once, on either; and a trigger with a `traceparent` on one
// makes the run on the other part of the caller's trace. Fails (does not skip) under CI without
// STAGEHAND_TEST_POSTGRES_URL.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>

#include "integration/daemon/daemon_process.h"
#include "integration/otlp_receiver.h"
#include "integration/postgres/test_server.h"

namespace stagehand::daemon_test {
namespace {

class DaemonPostgresTest : public pg_test::ServerTest {
 protected:
  void TearDown() override {
    daemons_.clear();
    if (!prefix_.empty()) pg_test::DropDatabase(url(), prefix_ + "jobs");
  }

  // A fleet's config with `tasks` (YAML, indented for the plugin's `tasks:` block).
  std::string Config(const std::string& tasks) {
    if (prefix_.empty()) prefix_ = pg_test::UniqueDatabaseName("daemon") + "_";
    return "backend:\n"
           "  listen: { host: 127.0.0.1 }\n"
           "  database:\n"
           "    client: pg\n"
           "    connection: '" +
           url() +
           "'\n"
           "    prefix: '" +
           prefix_ +
           "'\n"
           "  auth: { dangerouslyDisableDefaultAuthPolicy: true }\n"
           "stagehand:\n"
           "  plugins:\n"
           "    jobs:\n"
           "      tasks:\n" +
           tasks;
  }

  TempDir dir_;
  std::string prefix_;
  std::vector<std::unique_ptr<DaemonProcess>> daemons_;
};

TEST_F(DaemonPostgresTest, TaskTriggeredOnOneDaemonRunsExactlyOnceOnEither) {
  WriteFile(dir_ / "app.yaml", Config(OnceTaskYaml(dir_ / "runs")));
  ExpectATriggerRunsOnceOnEither(dir_.path(), dir_ / "app.yaml", daemons_);
}

// Issue 18's end to end: host A only knows another task, so the run of `report` is host B's; the
// caller's trace goes from A's REST trigger through the database to B's run, its HTTP request and
// the receiver of that request.
TEST_F(DaemonPostgresTest, ATracedTriggerOnOneHostTracesTheRunOnTheOther) {
  test_otlp::OtlpReceiver collector;
  std::mutex mu;
  std::string hook_traceparent;
  test_otlp::LocalHttpServer hook([&](httplib::Server& server) {
    server.Post("/hook", [&](const httplib::Request& request, httplib::Response& response) {
      std::lock_guard lock(mu);
      hook_traceparent = request.get_header_value("traceparent");
      response.set_content("ok", "text/plain");
    });
  });
  // The daemons go before the servers they send to, whatever assertion ends the test.
  struct StopDaemonsFirst {
    std::vector<std::unique_ptr<DaemonProcess>>& daemons;
    ~StopDaemonsFirst() { daemons.clear(); }
  } stop_daemons_first{daemons_};
  WriteFile(dir_ / "a.yaml", Config("        elsewhere:\n"
                                    "          schedule: { frequency: { trigger: manual }, "
                                    "timeout: 30s }\n"
                                    "          command: ['/bin/true']\n"));
  WriteFile(dir_ / "b.yaml", Config("        report:\n"
                                    "          schedule: { frequency: { trigger: manual }, "
                                    "timeout: 30s }\n"
                                    "          http: { url: '" +
                                    hook.base_url() + "/hook' }\n"));
  for (const char* name : {"a", "b"}) {
    daemons_.push_back(std::make_unique<DaemonProcess>(
        std::vector<std::string>{(dir_ / (std::string(name) + ".yaml")).string()},
        dir_ / (std::string(name) + ".log"),
        std::vector<std::pair<std::string, std::string>>{
            {"OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint()},
            {"OTEL_SERVICE_NAME", std::string("host-") + name},
            {"OTEL_BSP_SCHEDULE_DELAY", "20"}}));
  }
  const int port_a = daemons_[0]->WaitUntilReady();
  ASSERT_NE(port_a, 0);
  ASSERT_NE(daemons_[1]->WaitUntilReady(), 0);

  httplib::Client client("127.0.0.1", port_a);
  const httplib::Headers caller{
      {"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}};
  const auto trigger_sent = std::chrono::steady_clock::now();
  const httplib::Result triggered =
      client.Post("/api/jobs/.backstage/scheduler/v1/tasks/report/trigger", caller, "", "");
  ASSERT_TRUE(triggered);
  ASSERT_EQ(triggered->status, 200) << triggered->body;

  const auto in_trace = [](const std::string& name) {
    return [name](const nlohmann::json& span) {
      return span.at("name") == name && span.at("traceId") == "0af7651916cd43dd8448eb211c80319c";
    };
  };
  // A's server span of the trigger, the caller's child.
  const nlohmann::json request = collector.WaitForSpan(
      in_trace("POST /api/jobs/.backstage/scheduler/v1/tasks/{taskId}/trigger"), 5s);
  ASSERT_FALSE(request.is_null()) << "no server span from host A";
  EXPECT_EQ(request.at("parentSpanId"), "b7ad6b7169203331");
  EXPECT_EQ(request.at("resource").at("attributes").at(0).at("value").at("stringValue"), "host-a");

  // B's run span, the server span's child, within 5 s of the trigger.
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      5s - (std::chrono::steady_clock::now() - trigger_sent));
  const nlohmann::json run =
      collector.WaitForSpan(in_trace("task report"), std::max(left, std::chrono::milliseconds(0)));
  ASSERT_FALSE(run.is_null()) << "no run span in the caller's trace within 5 s of the trigger";
  EXPECT_EQ(run.at("parentSpanId"), request.at("spanId"));
  EXPECT_EQ(run.at("scope"), "backstage-service-scheduler");
  EXPECT_EQ(run.at("resource").at("attributes").at(0).at("value").at("stringValue"), "host-b");
  EXPECT_EQ(test_otlp::Attribute(run, "taskId"), "report");
  EXPECT_EQ(test_otlp::Attribute(run, "scope"), "global");
  EXPECT_EQ(test_otlp::Attribute(run, "stagehand.plugin_id"), "jobs");
  EXPECT_EQ(test_otlp::Attribute(run, "stagehand.trigger"), "manual");
  EXPECT_EQ(test_otlp::Attribute(run, "stagehand.outcome"), "succeeded");
  EXPECT_EQ(test_otlp::Attribute(run, "stagehand.attempt"), "\"1\"");
  EXPECT_EQ(test_otlp::Attribute(run, "process.pid"),
            "\"" + std::to_string(daemons_[1]->pid()) + "\"");
  EXPECT_EQ(test_otlp::Attribute(run, "http.response.status_code"), "\"200\"");
  EXPECT_NE(test_otlp::Attribute(run, "stagehand.run_id"), "<none>");
  EXPECT_NE(test_otlp::Attribute(run, "stagehand.start_lag_ms"), "<none>");
  EXPECT_NE(test_otlp::Attribute(run, "host.name"), "<none>");

  // The run history, read through A, names the trace (the dashboard links it).
  const httplib::Result runs = client.Get("/api/jobs/.stagehand/v1/tasks/report/runs");
  ASSERT_TRUE(runs);
  const nlohmann::json history = nlohmann::json::parse(runs->body, nullptr, false);
  ASSERT_TRUE(history.contains("runs") && !history["runs"].empty()) << runs->body;
  EXPECT_EQ(history["runs"][0]["traceId"], "0af7651916cd43dd8448eb211c80319c");
  EXPECT_EQ(history["runs"][0]["runId"], test_otlp::Attribute(run, "stagehand.run_id"));

  // B's request is the run's client span; the request carried that span's traceparent.
  const nlohmann::json request_sent = collector.WaitForSpan(in_trace("POST"), 5s);
  ASSERT_FALSE(request_sent.is_null()) << "no client span of the HTTP task";
  EXPECT_EQ(request_sent.at("parentSpanId"), run.at("spanId"));
  EXPECT_EQ(request_sent.at("kind"), 3);
  std::lock_guard lock(mu);
  EXPECT_EQ(hook_traceparent, "00-0af7651916cd43dd8448eb211c80319c-" +
                                  request_sent.at("spanId").get<std::string>() + "-01");
}

}  // namespace
}  // namespace stagehand::daemon_test
