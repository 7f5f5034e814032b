// The backend host over real HTTP: plugins, the scheduler REST API, the run history routes and the
// event stream, auth, health, metrics and the start and stop order, with SQLite databases in memory
// or in a temp directory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "integration/executors/recording_logger.h"
#include "stagehand/backend/backend.h"
#include "stagehand/testing/status_matchers.h"
#include "unit/http/loopback_client.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::LogRecord;
using ::stagehand::testing::RecordingLogger;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr auto kDeadline = std::chrono::seconds(20);
constexpr const char* kToken = "integration-token";

// A one-shot event another thread waits for. Thread-safe.
class Latch {
 public:
  // Notifies under the lock, so a waiter that returns and destroys the latch cannot race with it.
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Returns whether the latch opened within `limit` of real time.
  bool WaitOpen(std::chrono::seconds limit = kDeadline) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [this] { return open_; });
  }
  bool IsOpen() {
    std::lock_guard lock(mu_);
    return open_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Blocks until `stop` is requested.
void WaitForStop(const std::stop_token& stop) {
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock lock(mu);
  cv.wait(lock, stop, [] { return false; });
}

std::string Yaml(
    bool auth_disabled = false,
    const std::string& database = "{ client: better-sqlite3, connection: ':memory:' }") {
  std::string yaml =
      "backend:\n  listen: { host: 127.0.0.1, port: 7007 }\n  database: " + database +
      "\n  auth:\n";
  if (auth_disabled) {
    yaml += "    dangerouslyDisableDefaultAuthPolicy: true\n";
  } else {
    yaml += "    externalAccess:\n      - type: static\n        options: { token: " +
            std::string(kToken) + ", subject: integration-tests }\n";
  }
  yaml +=
      "stagehand:\n  scheduler:\n    pollInterval: { milliseconds: 100 }\n"
      "    shutdownGrace: { seconds: 10 }\n";
  return yaml;
}

// A response as the test sees it; status 0 when the request failed on the wire.
struct Reply {
  int status = 0;
  std::string body;
  std::string content_type;
};

class BackendHttpTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (backend_) {
      backend_->Stop();
    }
  }

  // Creates backend_ from `yaml` (port 0).
  void Create(const std::string& yaml = Yaml()) {
    backend_ = MakeBackend(yaml);
    ASSERT_NE(backend_, nullptr);
  }

  std::unique_ptr<Backend> MakeBackend(const std::string& yaml,
                                       std::optional<std::uint16_t> port = 0) {
    Result<Config> config = Config::FromYaml(yaml, "backend_http_test.yaml");
    EXPECT_THAT(config, IsOk());
    if (!config.ok()) {
      return nullptr;
    }
    BackendOptions options;
    options.config = *config;
    options.logger = logger_;
    options.port_override = port;
    Result<std::unique_ptr<Backend>> backend = Backend::Create(std::move(options));
    EXPECT_THAT(backend, IsOk());
    return backend.ok() ? std::move(*backend) : nullptr;
  }

  void AddPlugin(std::string id, std::function<Status(PluginServices&)> init) {
    ASSERT_THAT(backend_->AddPlugin(BackendPlugin{std::move(id), std::move(init)}), IsOk());
  }

  Reply Send(const std::string& method, const std::string& path,
             std::optional<std::string> token = kToken) {
    httplib::Client client("127.0.0.1", backend_->port());
    client.set_connection_timeout(10);
    client.set_read_timeout(10);
    httplib::Headers headers;
    if (token) {
      headers.emplace("Authorization", "Bearer " + *token);
    }
    httplib::Result result =
        method == "GET" ? client.Get(path, headers) : client.Post(path, headers, "", "");
    Reply reply;
    if (result) {
      reply.status = result->status;
      reply.body = result->body;
      reply.content_type = result->get_header_value("Content-Type");
    }
    return reply;
  }

  Reply Tasks(std::optional<std::string> token = kToken) {
    return Send("GET", "/api/jobs/.backstage/scheduler/v1/tasks", std::move(token));
  }

  Reply Readiness() { return Send("GET", "/.backstage/health/v1/readiness", std::nullopt); }

  int CountLogged(LogLevel level, std::string_view text) const {
    int count = 0;
    for (const LogRecord& record : logger_->Records()) {
      if (record.level == level && record.message.find(text) != std::string::npos) {
        ++count;
      }
    }
    return count;
  }

  // Registers a plugin `jobs` with a manual global task `id` running `fn`.
  void AddJobsPluginWithTask(const std::string& id, const TaskFunction& fn) {
    AddPlugin("jobs", [this, id, fn](PluginServices& services) {
      store_ = services.database;
      TaskDefinition task;
      task.id = id;
      task.frequency = ManualFrequency{};
      task.timeout = std::chrono::milliseconds(60000);
      task.scope = TaskScope::kGlobal;
      task.fn = fn;
      return services.scheduler->ScheduleTask(std::move(task));
    });
  }

  std::shared_ptr<RecordingLogger> logger_ = std::make_shared<RecordingLogger>();
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<TaskStore> store_;
};

TEST_F(BackendHttpTest, PluginHandlersAreReachableUnderTheMount) {
  Create();
  AddPlugin("jobs", [](PluginServices& services) {
    services.router->Use([](const HttpRequest& request) -> std::optional<HttpResponse> {
      if (request.path != "/hello") {
        return std::nullopt;
      }
      return HttpResponse{200, {{"Content-Type", "text/plain"}}, "hello from jobs", {}};
    });
    services.router->Use([](const HttpRequest& request) -> std::optional<HttpResponse> {
      if (request.path != "/second") {
        return std::nullopt;
      }
      return HttpResponse{202, {}, "second handler", {}};
    });
    return Status::Ok();
  });
  ASSERT_THAT(backend_->Start(), IsOk());

  Reply hello = Send("GET", "/api/jobs/hello");
  EXPECT_EQ(hello.status, 200);
  EXPECT_EQ(hello.body, "hello from jobs");
  Reply second = Send("GET", "/api/jobs/second");
  EXPECT_EQ(second.status, 202);
  EXPECT_EQ(second.body, "second handler");
  EXPECT_EQ(Send("GET", "/api/jobs/missing").status, 404);
  EXPECT_EQ(Send("GET", "/api/other/hello").status, 404);
  EXPECT_EQ(Send("GET", "/unknown").status, 404);
}

TEST_F(BackendHttpTest, SchedulerRestApiListsTriggersAndCancels) {
  Create();
  Latch started;
  Latch returned;
  AddJobsPluginWithTask("blocker", [&](const std::stop_token& stop) {
    started.Open();
    WaitForStop(stop);
    returned.Open();
    return Status::Ok();
  });
  ASSERT_THAT(backend_->Start(), IsOk());

  Reply listing = Tasks();
  EXPECT_EQ(listing.status, 200);
  EXPECT_THAT(listing.content_type, HasSubstr("application/json"));
  EXPECT_THAT(listing.body, HasSubstr(R"("taskId":"blocker")"));
  EXPECT_THAT(listing.body, HasSubstr(R"("pluginId":"jobs")"));

  Reply cancel_idle = Send("POST", "/api/jobs/.backstage/scheduler/v1/tasks/blocker/cancel");
  EXPECT_EQ(cancel_idle.status, 409);
  EXPECT_THAT(cancel_idle.body, HasSubstr("ConflictError"));

  Reply trigger = Send("POST", "/api/jobs/.backstage/scheduler/v1/tasks/blocker/trigger");
  EXPECT_EQ(trigger.status, 200);
  EXPECT_EQ(trigger.body, "");
  ASSERT_TRUE(started.WaitOpen());
  EXPECT_THAT(Tasks().body, HasSubstr(R"("status":"running")"));

  Reply again = Send("POST", "/api/jobs/.backstage/scheduler/v1/tasks/blocker/trigger");
  EXPECT_EQ(again.status, 409);
  EXPECT_THAT(again.body, HasSubstr("Task blocker is currently running"));

  Reply cancel = Send("POST", "/api/jobs/.backstage/scheduler/v1/tasks/blocker/cancel");
  EXPECT_EQ(cancel.status, 200);
  EXPECT_EQ(cancel.body, "");
  EXPECT_TRUE(returned.WaitOpen());

  Reply missing = Send("POST", "/api/jobs/.backstage/scheduler/v1/tasks/nope/trigger");
  EXPECT_EQ(missing.status, 404);
  EXPECT_THAT(missing.body, HasSubstr("NotFoundError"));
  EXPECT_THAT(missing.body, HasSubstr("Task nope does not exist"));
  backend_->Stop();
}

TEST_F(BackendHttpTest, PluginRoutesNeedTheBearerToken) {
  Create();
  AddPlugin("jobs", [](PluginServices&) { return Status::Ok(); });
  ASSERT_THAT(backend_->Start(), IsOk());

  Reply anonymous = Tasks(std::nullopt);
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_THAT(anonymous.body, HasSubstr("AuthenticationError"));
  Reply wrong = Tasks("not-the-token");
  EXPECT_EQ(wrong.status, 401);
  EXPECT_THAT(wrong.body, HasSubstr("AuthenticationError"));
  EXPECT_EQ(Tasks().status, 200);

  EXPECT_EQ(Send("GET", "/.stagehand/v1/plugins", std::nullopt).status, 401);
  EXPECT_EQ(Send("GET", "/.stagehand/v1/plugins").status, 200);
  // Health and metrics are open, like Backstage's health routes and a scrape target.
  EXPECT_EQ(Send("GET", "/metrics", std::nullopt).status, 200);
  EXPECT_EQ(Readiness().status, 200);
  EXPECT_EQ(CountLogged(LogLevel::kWarn, "AUTHENTICATION IS DISABLED"), 0);
  for (const LogRecord& record : logger_->Records()) {
    EXPECT_THAT(record.message, Not(HasSubstr("not-the-token")));
    for (const auto& [key, value] : record.fields) {
      EXPECT_THAT(value, Not(HasSubstr("not-the-token"))) << key;
      EXPECT_THAT(value, Not(HasSubstr(kToken))) << key;
    }
  }
}

TEST_F(BackendHttpTest, DisabledAuthLogsOneWarningAndLetsRequestsThrough) {
  Create(Yaml(/*auth_disabled=*/true));
  AddPlugin("jobs", [](PluginServices&) { return Status::Ok(); });
  AddPlugin("more", [](PluginServices&) { return Status::Ok(); });
  ASSERT_THAT(backend_->Start(), IsOk());

  EXPECT_EQ(CountLogged(LogLevel::kWarn, "AUTHENTICATION IS DISABLED"), 1);
  EXPECT_EQ(CountLogged(LogLevel::kWarn, "local development only"), 1);
  EXPECT_EQ(Tasks(std::nullopt).status, 200);
  EXPECT_EQ(Send("GET", "/api/more/.backstage/scheduler/v1/tasks", std::nullopt).status, 200);
  EXPECT_EQ(Send("GET", "/.stagehand/v1/plugins", std::nullopt).status, 200);
}

TEST_F(BackendHttpTest, ReadinessIsUnavailableUntilStartupHooksFinish) {
  Create();
  Latch in_hook;
  Latch release;
  backend_->root_lifecycle().AddStartupHook([&] {
    in_hook.Open();
    release.WaitOpen();
    return Status::Ok();
  });
  std::future<Status> start = std::async(std::launch::async, [this] { return backend_->Start(); });
  ASSERT_TRUE(in_hook.WaitOpen());

  ASSERT_NE(backend_->port(), 0);
  Reply not_ready = Readiness();
  EXPECT_EQ(not_ready.status, 503);
  EXPECT_THAT(not_ready.body, HasSubstr("Backend is not ready"));
  EXPECT_EQ(Send("GET", "/.backstage/health/v1/liveness", std::nullopt).status, 200);

  release.Open();
  ASSERT_EQ(start.wait_for(kDeadline), std::future_status::ready);
  EXPECT_THAT(start.get(), IsOk());
  EXPECT_EQ(Readiness().status, 200);
}

TEST_F(BackendHttpTest, ReadinessIsUnavailableOnceStopBegins) {
  Create();
  Latch in_hook;
  Latch release;
  backend_->root_lifecycle().AddShutdownHook([&] {
    in_hook.Open();
    release.WaitOpen();
  });
  ASSERT_THAT(backend_->Start(), IsOk());
  EXPECT_EQ(Readiness().status, 200);

  std::future<void> stop = std::async(std::launch::async, [this] { backend_->Stop(); });
  ASSERT_TRUE(in_hook.WaitOpen());
  EXPECT_EQ(Readiness().status, 503);
  EXPECT_EQ(Send("GET", "/.backstage/health/v1/liveness", std::nullopt).status, 200);

  release.Open();
  ASSERT_EQ(stop.wait_for(kDeadline), std::future_status::ready);
  EXPECT_EQ(backend_->port(), 0);
}

TEST_F(BackendHttpTest, MetricsShowACompletedRunAfterATrigger) {
  Create();
  AddJobsPluginWithTask("quick", [](const std::stop_token&) { return Status::Ok(); });
  ASSERT_THAT(backend_->Start(), IsOk());

  Reply first = Send("GET", "/metrics", std::nullopt);
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_THAT(first.body, HasSubstr("# TYPE backend_tasks_task_runs_count_total counter"));

  ASSERT_EQ(Send("POST", "/api/jobs/.backstage/scheduler/v1/tasks/quick/trigger").status, 200);
  const std::string completed =
      R"(backend_tasks_task_runs_count_total{plugin="jobs",taskId="quick",scope="global",)"
      R"(result="completed"} 1)";
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  Reply metrics;
  do {
    metrics = Send("GET", "/metrics", std::nullopt);
  } while (metrics.body.find(completed) == std::string::npos &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_THAT(metrics.body, HasSubstr(completed));
  EXPECT_THAT(
      metrics.body,
      HasSubstr(
          R"(backend_tasks_task_runs_duration_seconds_count{plugin="jobs",taskId="quick",scope="global",result="completed"} 1)"));
  EXPECT_THAT(
      metrics.body,
      HasSubstr(R"(stagehand_http_requests_total{route="/metrics",method="GET",status="200"})"));
}

TEST_F(BackendHttpTest, RunHistoryAndEventStreamAreServedBehindTheToken) {
  Create();
  AddJobsPluginWithTask("quick", [](const RunControl& control) {
    control.report->AppendOutput("quick: done\n");
    return Status::Ok();
  });
  ASSERT_THAT(backend_->Start(), IsOk());
  const std::string runs = "/api/jobs/.stagehand/v1/tasks/quick/runs";
  EXPECT_EQ(Send("GET", runs, std::nullopt).status, 401);
  EXPECT_EQ(Send("GET", "/.stagehand/v1/events", std::nullopt).status, 401);
  Reply empty = Send("GET", runs);
  EXPECT_EQ(empty.status, 200);
  EXPECT_EQ(empty.body, R"({"runs":[],"nextCursor":null})");
  EXPECT_EQ(Send("GET", "/api/jobs/.stagehand/v1/tasks/nope/runs").status, 404);

  http_testing::Client events(backend_->port());
  ASSERT_TRUE(events.Send("GET /.stagehand/v1/events HTTP/1.1\r\nAuthorization: Bearer " +
                          std::string(kToken) + "\r\n\r\n"));
  ASSERT_THAT(events.ReadUntil(": connected\n\n"), HasSubstr("text/event-stream"));
  ASSERT_EQ(Send("POST", "/api/jobs/.backstage/scheduler/v1/tasks/quick/trigger").status, 200);
  const std::string stream = events.ReadUntil(R"("httpStatus":null})"
                                              "\n\n");
  EXPECT_THAT(stream,
              HasSubstr("event: run.started\ndata: {\"pluginId\":\"jobs\",\"taskId\":\"quick\""));
  EXPECT_THAT(stream,
              HasSubstr("event: run.ended\ndata: {\"pluginId\":\"jobs\",\"taskId\":\"quick\""));

  // A global run's end is in the history before its run.ended event is sent.
  Reply listed = Send("GET", runs);
  EXPECT_EQ(listed.status, 200);
  EXPECT_THAT(listed.body, HasSubstr(R"("outcome":"succeeded")"));
  const std::size_t id_at = listed.body.find(R"("runId":")");
  ASSERT_NE(id_at, std::string::npos);
  const std::string run_id = listed.body.substr(id_at + 9, 36);
  Reply run = Send("GET", "/api/jobs/.stagehand/v1/runs/" + run_id);
  EXPECT_EQ(run.status, 200);
  EXPECT_THAT(run.body, HasSubstr(R"("output":"quick: done\n","outputBytes":12,"live":false})"));
  EXPECT_EQ(Send("GET", "/api/jobs/.stagehand/v1/runs/" + run_id, std::nullopt).status, 401);

  backend_->Stop();
  EXPECT_TRUE(events.ClosedByServer());
}

TEST_F(BackendHttpTest, PluginListIsInRegistrationOrder) {
  Create();
  AddPlugin("zeta", [](PluginServices&) { return Status::Ok(); });
  AddPlugin("alpha", [](PluginServices&) { return Status::Ok(); });
  ASSERT_THAT(backend_->Start(), IsOk());
  Reply list = Send("GET", "/.stagehand/v1/plugins");
  EXPECT_EQ(list.status, 200);
  EXPECT_THAT(list.content_type, HasSubstr("application/json"));
  EXPECT_EQ(list.body, R"({"plugins":[{"id":"zeta"},{"id":"alpha"}]})");
  EXPECT_EQ(Send("POST", "/.stagehand/v1/plugins").status, 404);
}

// Issue 19: the dashboard is served without a token (it holds no data; its API calls need one),
// after every other route, at its configured path, and not at all when disabled.
TEST_F(BackendHttpTest, TheDashboardIsServedAtItsPathAfterEveryOtherRoute) {
  Create(Yaml() + "  dashboard: { path: /ops/scheduler }\n");
  AddPlugin("jobs", [](PluginServices&) { return Status::Ok(); });
  ASSERT_THAT(backend_->Start(), IsOk());
  Reply page = Send("GET", "/ops/scheduler/", std::nullopt);
  EXPECT_EQ(page.status, 200);
  EXPECT_THAT(page.content_type, HasSubstr("text/html"));
  EXPECT_THAT(page.body, HasSubstr("content=\"../../\""));
  EXPECT_THAT(page.body, HasSubstr("content=\"token\""));
  EXPECT_EQ(Send("GET", "/ops/scheduler/app.js", std::nullopt).status, 200);
  EXPECT_EQ(Send("GET", "/", std::nullopt).status, 404) << "only at its path";
  EXPECT_EQ(Send("GET", "/.stagehand/v1/plugins", std::nullopt).status, 401)
      << "the daemon's routes keep their auth";
  EXPECT_EQ(Tasks().status, 200);

  httplib::Client client("127.0.0.1", backend_->port());
  httplib::Result bare = client.Get("/ops/scheduler");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->status, 308);
  EXPECT_EQ(bare->get_header_value("Location"), "scheduler/");
}

TEST_F(BackendHttpTest, ADisabledDashboardIsNotServed) {
  Create(Yaml(/*auth_disabled=*/true) + "  dashboard: { enabled: false }\n");
  ASSERT_THAT(backend_->Start(), IsOk());
  EXPECT_EQ(Send("GET", "/", std::nullopt).status, 404);
  EXPECT_EQ(Send("GET", "/app.js", std::nullopt).status, 404);
}

TEST_F(BackendHttpTest, PortInUseIsUnavailableAndStopsWhatStarted) {
  Create();
  ASSERT_THAT(backend_->Start(), IsOk());
  const std::uint16_t taken = backend_->port();

  std::unique_ptr<Backend> second = MakeBackend(Yaml(), taken);
  ASSERT_NE(second, nullptr);
  bool shut_down = false;
  SchedulerService* scheduler = nullptr;
  ASSERT_TRUE(second
                  ->AddPlugin(BackendPlugin{"jobs",
                                            [&](PluginServices& services) {
                                              scheduler = services.scheduler;
                                              services.lifecycle->AddShutdownHook(
                                                  [&] { shut_down = true; });
                                              return Status::Ok();
                                            }})
                  .ok());
  Status status = second->Start();
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable, "127.0.0.1:" + std::to_string(taken)));
  EXPECT_TRUE(shut_down);
  ASSERT_NE(scheduler, nullptr);
  TaskDefinition task;
  task.id = "late";
  task.timeout = std::chrono::minutes(1);
  task.fn = [](const std::stop_token&) { return Status::Ok(); };
  EXPECT_THAT(scheduler->ScheduleTask(std::move(task)), StatusIs(StatusCode::kUnavailable));
  // The first backend is unaffected.
  EXPECT_EQ(Readiness().status, 200);
}

TEST_F(BackendHttpTest, StopWaitsForARunningTaskAndReleasesItsTicket) {
  Create();
  Latch started;
  std::atomic<bool> returned{false};
  AddJobsPluginWithTask("long", [&](const std::stop_token& stop) {
    started.Open();
    WaitForStop(stop);
    returned.store(true);
    return CancelledError("stopped");
  });
  ASSERT_THAT(backend_->Start(), IsOk());
  ASSERT_EQ(Send("POST", "/api/jobs/.backstage/scheduler/v1/tasks/long/trigger").status, 200);
  ASSERT_TRUE(started.WaitOpen());
  ASSERT_NE(store_, nullptr);
  Result<std::vector<TaskRow>> running = store_->States();
  ASSERT_THAT(running, IsOk());
  ASSERT_EQ(running->size(), 1U);
  EXPECT_TRUE(running->front().current_run_ticket.has_value());

  backend_->Stop();
  EXPECT_TRUE(returned.load());
  Result<std::vector<TaskRow>> after = store_->States();
  ASSERT_THAT(after, IsOk());
  ASSERT_EQ(after->size(), 1U);
  EXPECT_FALSE(after->front().current_run_ticket.has_value());
  EXPECT_EQ(backend_->port(), 0);
}

TEST_F(BackendHttpTest, SqliteDirectoryHoldsOneFilePerPlugin) {
  const std::filesystem::path directory = std::filesystem::temp_directory_path() /
                                          ("stagehand-backend-http-" + std::to_string(::getpid()));
  std::filesystem::remove_all(directory);
  Create(Yaml(false, "{ client: better-sqlite3, connection: { directory: '" + directory.string() +
                         "' } }"));
  AddJobsPluginWithTask("quick", [](const std::stop_token&) { return Status::Ok(); });
  AddPlugin("other", [](PluginServices&) { return Status::Ok(); });
  ASSERT_THAT(backend_->Start(), IsOk());
  EXPECT_TRUE(std::filesystem::exists(directory / "jobs.sqlite"));
  EXPECT_TRUE(std::filesystem::exists(directory / "other.sqlite"));
  EXPECT_THAT(Tasks().body, HasSubstr(R"("taskId":"quick")"));
  backend_->Stop();
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace stagehand
