// The test backend for plugin authors (stagehand/testing/test_backend.h) over real HTTP: plugins
// start with mock schedulers, their non-manual tasks run once at startup, a trigger through the
// mock runs them again, and their routes and the scheduler REST API answer at base_url().
#include "stagehand/testing/test_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stagehand/config/config.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"

namespace stagehand::testing {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

// A plugin that counts the runs of its tasks and serves the counts at GET /counts
// ({"<task>": n, ...}) and echoes POST /echo. Its tasks: `every-hour` (runs at startup),
// `by-hand` (manual) and `later` (initially delayed).
class CountingPlugin {
 public:
  explicit CountingPlugin(std::string id) : id_(std::move(id)) {}

  BackendPlugin plugin() {
    return {id_, [this](PluginServices& services) { return Init(services); }};
  }

  int runs(const std::string& task) const { return counts_.at(task)->load(); }

 private:
  Status Init(PluginServices& services) {
    for (const char* task : {"every-hour", "by-hand", "later"}) {
      counts_[task] = std::make_unique<std::atomic<int>>(0);
    }
    TaskDefinition every_hour;
    every_hour.id = "every-hour";
    every_hour.frequency = std::chrono::hours(1);
    every_hour.timeout = std::chrono::minutes(1);
    every_hour.fn = [this](std::stop_token) { ++*counts_["every-hour"]; };
    STAGEHAND_RETURN_IF_ERROR(services.scheduler->ScheduleTask(std::move(every_hour)));
    TaskDefinition by_hand;
    by_hand.id = "by-hand";
    by_hand.timeout = std::chrono::minutes(1);
    by_hand.fn = [this](std::stop_token) { ++*counts_["by-hand"]; };
    STAGEHAND_RETURN_IF_ERROR(services.scheduler->ScheduleTask(std::move(by_hand)));
    TaskDefinition later;
    later.id = "later";
    later.frequency = std::chrono::hours(1);
    later.initial_delay = std::chrono::minutes(5);
    later.timeout = std::chrono::minutes(1);
    later.fn = [this](std::stop_token) { ++*counts_["later"]; };
    STAGEHAND_RETURN_IF_ERROR(services.scheduler->ScheduleTask(std::move(later)));

    services.router->Use([this](const HttpRequest& request) -> std::optional<HttpResponse> {
      HttpResponse response;
      if (request.method == "GET" && request.path == "/counts") {
        response.body = "{";
        for (const auto& [task, count] : counts_) {
          if (response.body.size() > 1) response.body += ",";
          response.body += "\"" + task + "\":" + std::to_string(count->load());
        }
        response.body += "}";
        return response;
      }
      if (request.method == "POST" && request.path == "/echo") {
        response.body = request.body;
        return response;
      }
      return std::nullopt;
    });
    return Status::Ok();
  }

  std::string id_;
  std::map<std::string, std::unique_ptr<std::atomic<int>>> counts_;
};

TEST(TestBackendTest, NonManualTasksRunOnceAtStartupAndATriggerThroughTheMockRunsAgain) {
  CountingPlugin counting("counting");
  TestBackendOptions options;
  options.plugins.push_back(counting.plugin());
  Result<std::unique_ptr<TestBackend>> backend = StartTestBackend(std::move(options));
  ASSERT_THAT(backend, IsOk());

  EXPECT_EQ(counting.runs("every-hour"), 1);
  EXPECT_EQ(counting.runs("by-hand"), 0);
  EXPECT_EQ(counting.runs("later"), 0);
  Result<TestResponse> counts = (*backend)->Get("/api/counting/counts");
  ASSERT_THAT(counts, IsOk());
  EXPECT_EQ(counts->status, 200);
  EXPECT_EQ(counts->body, R"({"by-hand":0,"every-hour":1,"later":0})");

  // Any HTTP client reaches the same routes at base_url().
  httplib::Client client((*backend)->base_url());
  httplib::Result direct = client.Get("/api/counting/counts");
  ASSERT_TRUE(direct) << httplib::to_string(direct.error());
  EXPECT_EQ(direct->body, counts->body);
  EXPECT_EQ((*backend)->base_url(), "http://127.0.0.1:" + std::to_string((*backend)->port()));

  MockScheduler* mock = (*backend)->scheduler("counting");
  ASSERT_NE(mock, nullptr);
  ASSERT_THAT(mock->TriggerTask("every-hour"), IsOk());
  ASSERT_THAT(mock->TriggerTask("by-hand"), IsOk());
  counts = (*backend)->Get("/api/counting/counts");
  ASSERT_THAT(counts, IsOk());
  EXPECT_EQ(counts->body, R"({"by-hand":1,"every-hour":2,"later":0})");
}

TEST(TestBackendTest, TheSchedulerRestApiListsAndTriggersTheMocksTasks) {
  CountingPlugin counting("counting");
  TestBackendOptions options;
  options.plugins.push_back(counting.plugin());
  Result<std::unique_ptr<TestBackend>> backend = StartTestBackend(std::move(options));
  ASSERT_THAT(backend, IsOk());

  Result<TestResponse> tasks = (*backend)->Get("/api/counting/.backstage/scheduler/v1/tasks");
  ASSERT_THAT(tasks, IsOk());
  EXPECT_EQ(tasks->status, 200);
  EXPECT_THAT(tasks->body, HasSubstr(R"("taskId":"by-hand")"));
  EXPECT_THAT(tasks->body, HasSubstr(R"("taskId":"later")"));
  EXPECT_THAT(FindHeader(tasks->headers, "content-type").value_or(""),
              HasSubstr("application/json"));

  Result<TestResponse> triggered =
      (*backend)->Post("/api/counting/.backstage/scheduler/v1/tasks/by-hand/trigger");
  ASSERT_THAT(triggered, IsOk());
  EXPECT_EQ(triggered->status, 200);
  EXPECT_EQ(counting.runs("by-hand"), 1);

  Result<TestResponse> runs = (*backend)->Get("/api/counting/.stagehand/v1/tasks/by-hand/runs");
  ASSERT_THAT(runs, IsOk());
  EXPECT_EQ(runs->status, 200);
  EXPECT_THAT(runs->body, HasSubstr(R"("outcome":"succeeded")"));

  Result<TestResponse> unknown =
      (*backend)->Post("/api/counting/.backstage/scheduler/v1/tasks/nope/trigger");
  ASSERT_THAT(unknown, IsOk());
  EXPECT_EQ(unknown->status, 404);

  Result<TestResponse> echoed = (*backend)->Post("/api/counting/echo", R"({"a":1})");
  ASSERT_THAT(echoed, IsOk());
  EXPECT_EQ(echoed->body, R"({"a":1})");
}

TEST(TestBackendTest, EachPluginHasItsOwnMockUnlessTheTestSharesOne) {
  CountingPlugin first("first");
  CountingPlugin second("second");
  {
    TestBackendOptions options;
    options.plugins.push_back(first.plugin());
    options.plugins.push_back(second.plugin());
    Result<std::unique_ptr<TestBackend>> backend = StartTestBackend(std::move(options));
    ASSERT_THAT(backend, IsOk());
    ASSERT_NE((*backend)->scheduler("first"), nullptr);
    EXPECT_NE((*backend)->scheduler("first"), (*backend)->scheduler("second"));
    EXPECT_EQ((*backend)->scheduler("third"), nullptr);
    EXPECT_EQ((*backend)->backend().scheduler("first"), (*backend)->scheduler("first"));
    ASSERT_NE((*backend)->services("second"), nullptr);
    EXPECT_EQ((*backend)->services("second")->scheduler, (*backend)->scheduler("second"));
    EXPECT_EQ(first.runs("every-hour"), 1);
    EXPECT_EQ(second.runs("every-hour"), 1);
  }

  // A shared mock holds both plugins' tasks (the same ids: the second registration replaces the
  // first) and runs its startup once, not once per plugin.
  CountingPlugin third("third");
  CountingPlugin fourth("fourth");
  MockScheduler shared;
  TestBackendOptions options;
  options.plugins.push_back(third.plugin());
  options.plugins.push_back(fourth.plugin());
  options.scheduler = &shared;
  Result<std::unique_ptr<TestBackend>> backend = StartTestBackend(std::move(options));
  ASSERT_THAT(backend, IsOk());
  EXPECT_EQ((*backend)->scheduler("third"), &shared);
  EXPECT_EQ((*backend)->scheduler("fourth"), &shared);
  EXPECT_EQ(third.runs("every-hour") + fourth.runs("every-hour"), 1);
}

TEST(TestBackendTest, TheMocksRunOnTheGivenClockAndItsOptionsApply) {
  ManualClock clock;
  clock.SetWallTime(WallTime(std::chrono::hours(24 * 365 * 50)));
  CountingPlugin counting("counting");
  TestBackendOptions options;
  options.plugins.push_back(counting.plugin());
  options.clock = &clock;
  options.mock.include_manual_tasks_on_startup = true;
  Result<std::unique_ptr<TestBackend>> backend = StartTestBackend(std::move(options));
  ASSERT_THAT(backend, IsOk());
  EXPECT_EQ(counting.runs("by-hand"), 1);
  EXPECT_EQ(counting.runs("later"), 0);

  Result<RunPage> runs = (*backend)->scheduler("counting")->GetTaskRuns("by-hand", 10, {});
  ASSERT_THAT(runs, IsOk());
  ASSERT_EQ(runs->runs.size(), 1u);
  EXPECT_EQ(runs->runs[0].started_at, clock.Now());
}

TEST(TestBackendTest, AuthIsOffUnlessTheConfigTurnsItOn) {
  CountingPlugin counting("counting");
  Result<Config> config = Config::FromYaml(R"(
backend:
  auth:
    externalAccess:
      - type: static
        options:
          token: test-token
          subject: tests
)",
                                           "test config");
  ASSERT_THAT(config, IsOk());
  TestBackendOptions options;
  options.plugins.push_back(counting.plugin());
  options.config = *config;
  Result<std::unique_ptr<TestBackend>> backend = StartTestBackend(std::move(options));
  ASSERT_THAT(backend, IsOk());

  Result<TestResponse> refused = (*backend)->Get("/api/counting/counts");
  ASSERT_THAT(refused, IsOk());
  EXPECT_EQ(refused->status, 401);
  Result<TestResponse> allowed =
      (*backend)->Get("/api/counting/counts", {{"Authorization", "Bearer test-token"}});
  ASSERT_THAT(allowed, IsOk());
  EXPECT_EQ(allowed->status, 200);
}

TEST(TestBackendTest, SqliteFilesLiveInATemporaryDirectoryThatGoesWithTheBackend) {
  const std::filesystem::path scratch =
      std::filesystem::temp_directory_path() /
      ("test-backend-" + std::to_string(::getpid()) + "-" +
       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::create_directories(scratch);
  const char* previous = std::getenv("TMPDIR");
  const std::string saved = previous != nullptr ? previous : "";
  ::setenv("TMPDIR", scratch.c_str(), 1);

  CountingPlugin counting("counting");
  TestBackendOptions options;
  options.plugins.push_back(counting.plugin());
  options.sqlite_files = true;
  Result<std::unique_ptr<TestBackend>> backend = StartTestBackend(std::move(options));
  if (previous != nullptr) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  ASSERT_THAT(backend, IsOk());

  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(scratch)) {
    if (entry.is_regular_file()) files.push_back(entry.path().filename());
  }
  EXPECT_THAT(files, ::testing::Contains(std::filesystem::path("counting.sqlite")));
  ASSERT_NE((*backend)->services("counting"), nullptr);
  EXPECT_NE((*backend)->services("counting")->database, nullptr);

  backend->reset();
  EXPECT_TRUE(std::filesystem::is_empty(scratch));
  std::filesystem::remove_all(scratch);
}

TEST(TestBackendTest, AFailingInitFailsTheStartNamingThePlugin) {
  TestBackendOptions options;
  options.plugins.push_back(
      {"broken", [](PluginServices&) { return InvalidArgumentError("no widgets configured"); }});
  Result<std::unique_ptr<TestBackend>> backend = StartTestBackend(std::move(options));
  ASSERT_THAT(backend, Not(IsOk()));
  EXPECT_THAT(backend.status().message(), HasSubstr("plugin 'broken' init: no widgets configured"));

  TestBackendOptions bad_id;
  bad_id.plugins.push_back({"Not An Id", [](PluginServices&) { return Status::Ok(); }});
  backend = StartTestBackend(std::move(bad_id));
  ASSERT_THAT(backend, StatusIs(StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace stagehand::testing
