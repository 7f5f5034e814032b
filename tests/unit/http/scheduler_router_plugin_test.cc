// The REST router over a real PluginScheduler (MemoryTaskStore, ManualClock): the wire format of
// what the service actually reports and of the errors it actually returns.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>

#include "stagehand/http/scheduler_router.h"
#include "stagehand/service/plugin_scheduler.h"
#include "stagehand/store/memory_task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::testing::MatchesRegex;

constexpr const char* kTasks = "/.backstage/scheduler/v1/tasks";

class SchedulerRouterOnPluginSchedulerTest : public ::testing::Test {
 protected:
  SchedulerRouterOnPluginSchedulerTest() {
    PluginSchedulerOptions options;
    options.plugin_id = "myplugin";
    options.store = store_;
    options.clock = &clock_;
    options.default_zone = TimeZone::Utc();
    scheduler_ = std::make_unique<PluginScheduler>(std::move(options));
    router_ = std::make_unique<SchedulerRestRouter>("myplugin", *scheduler_);
  }

  void RegisterManual(std::string id) {
    TaskDefinition task;
    task.id = std::move(id);
    task.frequency = ManualFrequency{};
    task.timeout = std::chrono::minutes(1);
    task.fn = [](const std::stop_token&) {};
    ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());
  }

  HttpResponse Send(std::string method, std::string path) {
    HttpRequest request;
    request.method = std::move(method);
    request.path = std::move(path);
    std::optional<HttpResponse> response = router_->Handle(request);
    EXPECT_TRUE(response.has_value());
    return response.value_or(HttpResponse{});
  }

  // Declared first so that it outlives every thread waiting on it.
  testing::ManualClock clock_;
  std::shared_ptr<testing::MemoryTaskStore> store_ =
      std::make_shared<testing::MemoryTaskStore>("myplugin", clock_);
  std::unique_ptr<PluginScheduler> scheduler_;
  std::unique_ptr<SchedulerRestRouter> router_;
};

TEST_F(SchedulerRouterOnPluginSchedulerTest, ListsManualGlobalTask) {
  RegisterManual("man");
  HttpResponse response = Send("GET", kTasks);
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body,
            R"({"tasks":[{"taskId":"man","pluginId":"myplugin","scope":"global",)"
            R"("settings":{"version":2,"cadence":"manual","timeoutAfterDuration":"PT60S"},)"
            R"("taskState":{"status":"idle"},"workerState":{"status":"idle"}}]})");
}

TEST_F(SchedulerRouterOnPluginSchedulerTest, UnknownTaskIs404WithServiceMessage) {
  HttpResponse response = Send("POST", std::string(kTasks) + "/nope/trigger");
  EXPECT_EQ(response.status, 404);
  EXPECT_EQ(response.body,
            R"({"error":{"name":"NotFoundError","message":"Task nope does not exist"},)"
            R"("request":{"method":"POST","url":"/.backstage/scheduler/v1/tasks/nope/trigger"},)"
            R"("response":{"statusCode":404}})");
}

TEST_F(SchedulerRouterOnPluginSchedulerTest, CancellingIdleTaskIs409) {
  RegisterManual("man");
  HttpResponse response = Send("POST", std::string(kTasks) + "/man/cancel");
  EXPECT_EQ(response.status, 409);
  EXPECT_EQ(response.body,
            R"({"error":{"name":"ConflictError","message":"Task man is not running"},)"
            R"("request":{"method":"POST","url":"/.backstage/scheduler/v1/tasks/man/cancel"},)"
            R"("response":{"statusCode":409}})");
}

TEST_F(SchedulerRouterOnPluginSchedulerTest, LostDatabaseHidesDetails) {
  RegisterManual("man");
  store_->SetUnavailable(true);
  HttpResponse response = Send("GET", kTasks);
  EXPECT_EQ(response.status, 503);
  EXPECT_THAT(response.body,
              MatchesRegex(R"(\{"error":\{"name":"ServiceUnavailableError","message":"An )"
                           R"(internal error occurred logId=[0-9a-f]{20}"\},.*)"));
}

}  // namespace
}  // namespace stagehand
