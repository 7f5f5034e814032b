// Idempotency keys on the REST requests that change a task: a trigger, cancel, pause or resume
// sent again with its Idempotency-Key is answered as the first was and applied once; the key is
// kept in the plugin's database (a MemoryTaskStore here) with the writes the request made.
#include "http/keyed_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>

#include "stagehand/http/run_history_router.h"
#include "stagehand/http/scheduler_router.h"
#include "stagehand/service/plugin_scheduler.h"
#include "stagehand/store/memory_task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::testing::HasSubstr;

constexpr const char* kTasks = "/.backstage/scheduler/v1/tasks";

// A scheduler whose trigger and cancel answer what the test sets, counting the calls, with its
// keys kept in a MemoryTaskStore.
class CountingScheduler final : public SchedulerService {
 public:
  explicit CountingScheduler(testing::MemoryTaskStore& store) : store_(store) {}

  Status ScheduleTask(TaskDefinition) override { return InternalError("not used"); }
  using SchedulerService::TriggerTask;
  Status TriggerTask(std::string_view) override {
    ++triggers;
    return trigger_result;
  }
  Status CancelTask(std::string_view) override {
    ++cancels;
    return Status::Ok();
  }
  Result<KeyedOutcome> ApplyOnce(const KeyedRequest& request,
                                 const std::function<Result<KeptAnswer>()>& apply) override {
    return store_.ApplyOnce(request, apply);
  }
  std::vector<TaskDescriptor> GetScheduledTasks() const override { return {}; }
  Result<std::vector<TaskListing>> ListTasks() const override { return std::vector<TaskListing>{}; }

  Status trigger_result;
  int triggers = 0;
  int cancels = 0;

 private:
  testing::MemoryTaskStore& store_;
};

HttpRequest Post(std::string path, std::optional<std::string> key) {
  HttpRequest request;
  request.method = "POST";
  request.path = std::move(path);
  if (key) request.headers.emplace_back("idempotency-key", *std::move(key));
  return request;
}

class KeyedRequestTest : public ::testing::Test {
 protected:
  HttpResponse Send(const HttpRequest& request) {
    std::optional<HttpResponse> response = router_.Handle(request);
    EXPECT_TRUE(response.has_value());
    return response.value_or(HttpResponse{});
  }

  HttpResponse Trigger(std::optional<std::string> key, std::string id = "t") {
    return Send(Post(std::string(kTasks) + "/" + id + "/trigger", std::move(key)));
  }

  static std::optional<std::string_view> Replayed(const HttpResponse& response) {
    return FindHeader(response.headers, http_internal::kIdempotentReplayedHeader);
  }

  testing::ManualClock clock_;
  testing::MemoryTaskStore store_{"myplugin", clock_};
  CountingScheduler scheduler_{store_};
  SchedulerRestRouter router_{"myplugin", scheduler_};
};

TEST_F(KeyedRequestTest, ATriggerSentAgainWithItsKeyIsAnsweredAsTheFirstAndAppliedOnce) {
  const HttpResponse first = Trigger("k-1");
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(Replayed(first), std::nullopt);
  const HttpResponse again = Trigger("k-1");
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(Replayed(again), "true");
  EXPECT_EQ(scheduler_.triggers, 1);

  EXPECT_EQ(Trigger("k-2").status, 200);
  EXPECT_EQ(Trigger(std::nullopt).status, 200);
  EXPECT_EQ(Trigger(std::nullopt).status, 200);
  EXPECT_EQ(scheduler_.triggers, 4) << "a request without a key is applied each time";
}

TEST_F(KeyedRequestTest, AnErrorAnswerIsKeptAndSentAgainWordForWord) {
  scheduler_.trigger_result = ConflictError("Task t is currently running");
  const HttpResponse first = Trigger("k");
  ASSERT_EQ(first.status, 409);
  scheduler_.trigger_result = Status::Ok();
  const HttpResponse again = Trigger("k");
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(FindHeader(again.headers, "Content-Type"), "application/json; charset=utf-8");
  EXPECT_EQ(scheduler_.triggers, 1);
}

TEST_F(KeyedRequestTest, AnAnswerOfTheServerIsNotKeptSoTheRequestSentAgainIsApplied) {
  scheduler_.trigger_result = UnavailableError("the database does not answer");
  EXPECT_EQ(Trigger("k").status, 503);
  scheduler_.trigger_result = Status::Ok();
  const HttpResponse again = Trigger("k");
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(Replayed(again), std::nullopt);
  EXPECT_EQ(scheduler_.triggers, 2);
}

TEST_F(KeyedRequestTest, WhenTheKeysDatabaseDoesNotAnswerTheRequestIsRefused503AndNotApplied) {
  store_.SetUnavailable(true);
  EXPECT_EQ(Trigger("k").status, 503);
  EXPECT_EQ(scheduler_.triggers, 0);
  store_.SetUnavailable(false);
  EXPECT_EQ(Trigger("k").status, 200);
  EXPECT_EQ(scheduler_.triggers, 1);
}

TEST_F(KeyedRequestTest, AKeySentWithAnotherRequestIsRefused409) {
  ASSERT_EQ(Trigger("k", "a").status, 200);
  const HttpResponse other = Trigger("k", "b");
  EXPECT_EQ(other.status, 409);
  EXPECT_THAT(other.body, HasSubstr("idempotency key k was first sent with another request"));
  const HttpResponse cancel = Send(Post(std::string(kTasks) + "/a/cancel", "k"));
  EXPECT_EQ(cancel.status, 409);
  EXPECT_EQ(scheduler_.triggers, 1);
  EXPECT_EQ(scheduler_.cancels, 0);
}

TEST_F(KeyedRequestTest, AMalformedKeyIsAnInputErrorNamingTheHeader) {
  for (std::string key : {std::string(), std::string("two words"), std::string(256, 'k'),
                          std::string("caf\xc3\xa9")}) {
    const HttpResponse response = Trigger(key);
    EXPECT_EQ(response.status, 400) << key;
    EXPECT_THAT(response.body, HasSubstr("Idempotency-Key header")) << key;
  }
  EXPECT_EQ(Trigger(std::string(255, 'k')).status, 200);
  EXPECT_EQ(scheduler_.triggers, 1);
}

// Through a PluginScheduler: its store keeps the keys, for its configured retention.
TEST(KeyedRequestOnPluginSchedulerTest, PauseAndResumeAreAppliedOncePerKeyForTheRetention) {
  testing::ManualClock clock;
  auto store = std::make_shared<testing::MemoryTaskStore>("myplugin", clock);
  PluginSchedulerOptions options;
  options.plugin_id = "myplugin";
  options.store = store;
  options.clock = &clock;
  options.idempotency_key_retention = std::chrono::minutes(10);
  PluginScheduler scheduler(std::move(options));
  TaskDefinition task;
  task.id = "t";
  task.frequency = ManualFrequency{};
  task.timeout = std::chrono::minutes(1);
  task.fn = [](const std::stop_token&) {};
  ASSERT_THAT(scheduler.ScheduleTask(std::move(task)), IsOk());
  RunHistoryRouter router("myplugin", scheduler);
  const auto send = [&](std::string action, std::string key) {
    std::optional<HttpResponse> response =
        router.Handle(Post("/.stagehand/v1/tasks/t/" + action, std::move(key)));
    EXPECT_TRUE(response.has_value());
    return response.value_or(HttpResponse{});
  };
  EXPECT_EQ(send("pause", "p-1").status, 200);
  EXPECT_EQ(send("resume", "r-1").status, 200);
  // A resume sent again whose first answer was lost: answered 200 again, not "not paused".
  const HttpResponse again = send("resume", "r-1");
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(FindHeader(again.headers, http_internal::kIdempotentReplayedHeader), "true");
  // A pause sent again after the resume does not pause the task again.
  EXPECT_EQ(send("pause", "p-1").status, 200);
  EXPECT_EQ(send("resume", "r-2").status, 409) << "the replayed pause paused the task again";

  clock.Advance(std::chrono::minutes(11));
  EXPECT_EQ(send("resume", "r-1").status, 409) << "past its retention, the key is a new request";
}

}  // namespace
}  // namespace stagehand
