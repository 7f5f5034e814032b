#include "stagehand/http/scheduler_router.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fixtures/task_schedules.h"
#include "stagehand/http/error_response.h"
#include "stagehand/service/mock_scheduler.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::Pair;

// A scheduler whose answers the test sets: a fixed listing, and per-id results for trigger and
// cancel (OK for ids not set). Records the ids it was asked about.
class FakeScheduler final : public SchedulerService {
 public:
  Status ScheduleTask(TaskDefinition) override { return InternalError("not used"); }
  Status TriggerTask(std::string_view id) override { return TriggerTask(id, TraceContext{}); }
  Status TriggerTask(std::string_view id, const TraceContext& caller) override {
    triggered.emplace_back(id);
    callers.push_back(caller);
    return ResultFor(trigger_results, id);
  }
  Status CancelTask(std::string_view id) override {
    cancelled.emplace_back(id);
    return ResultFor(cancel_results, id);
  }
  std::vector<TaskDescriptor> GetScheduledTasks() const override { return {}; }
  Result<std::vector<TaskListing>> ListTasks() const override {
    if (!list_status.ok()) {
      return list_status;
    }
    return listing;
  }

  std::vector<TaskListing> listing;
  Status list_status;
  std::map<std::string, Status, std::less<>> trigger_results;
  std::map<std::string, Status, std::less<>> cancel_results;
  std::vector<std::string> triggered;
  std::vector<TraceContext> callers;  // the trace context each trigger came with
  std::vector<std::string> cancelled;

 private:
  static Status ResultFor(const std::map<std::string, Status, std::less<>>& results,
                          std::string_view id) {
    auto it = results.find(id);
    return it == results.end() ? Status::Ok() : it->second;
  }
};

// Keeps every record, for assertions on what was logged.
class RecordingLogger final : public Logger {
 public:
  void Log(LogLevel level, std::string_view message, const LogFields& fields) override {
    std::lock_guard lock(mu_);
    records_.push_back({level, std::string(message), fields});
  }
  bool Enabled(LogLevel) const override { return true; }

  struct Record {
    LogLevel level;
    std::string message;
    LogFields fields;
  };
  std::vector<Record> records() const {
    std::lock_guard lock(mu_);
    return records_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Record> records_;
};

HttpRequest Request(std::string method, std::string path, std::string query = "") {
  HttpRequest request;
  request.method = std::move(method);
  request.path = std::move(path);
  request.query = std::move(query);
  return request;
}

std::string Field(const LogFields& fields, std::string_view key) {
  for (const auto& [name, value] : fields) {
    if (name == key) {
      return value;
    }
  }
  return "";
}

TaskSettingsV2 Settings(std::string cadence, std::optional<std::string> initial_delay = {}) {
  TaskSettingsV2 settings;
  settings.cadence = testing::ParsedCadence(cadence);
  settings.initial_delay_duration = std::move(initial_delay);
  settings.timeout_after_duration = "PT1M";
  return settings;
}

TaskListing Listing(std::string id, TaskScope scope, TaskSettingsV2 settings,
                    std::optional<TaskState> state, std::optional<WorkerStatus> worker) {
  TaskListing listing;
  listing.descriptor.id = std::move(id);
  listing.descriptor.scope = scope;
  listing.descriptor.settings = std::move(settings);
  listing.task_state = std::move(state);
  listing.worker_state = worker;
  return listing;
}

constexpr const char* kTasks = "/.backstage/scheduler/v1/tasks";

class SchedulerRestRouterTest : public ::testing::Test {
 protected:
  std::optional<HttpResponse> Handle(const HttpRequest& request) { return router_.Handle(request); }
  HttpResponse Post(std::string path, std::string query = "") {
    std::optional<HttpResponse> response =
        Handle(Request("POST", std::move(path), std::move(query)));
    EXPECT_TRUE(response.has_value());
    return response.value_or(HttpResponse{});
  }
  std::string ListBody() {
    std::optional<HttpResponse> response = Handle(Request("GET", kTasks));
    EXPECT_TRUE(response.has_value());
    if (!response) {
      return "";
    }
    EXPECT_EQ(response->status, 200);
    return response->body;
  }

  FakeScheduler scheduler_;
  std::shared_ptr<RecordingLogger> logger_ = std::make_shared<RecordingLogger>();
  SchedulerRestRouter router_{"myplugin", scheduler_, logger_};
};

TEST_F(SchedulerRestRouterTest, ListsNoTasks) {
  std::optional<HttpResponse> response = Handle(Request("GET", kTasks));
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_THAT(response->headers,
              ElementsAre(Pair("Content-Type", "application/json; charset=utf-8")));
  EXPECT_EQ(response->body, R"({"tasks":[]})");
}

TEST_F(SchedulerRestRouterTest, ListsIdleGlobalTaskWithCancelledLastRun) {
  TaskState state;
  state.starts_at = "2026-11-30T04:18:13.000+00:00";
  state.last_run_ended_at = "2026-11-30T04:13:13.000+00:00";
  state.last_run_error = R"({"name":"Error","message":"Task was cancelled"})";
  scheduler_.listing = {
      Listing("g1", TaskScope::kGlobal, Settings("PT10M"), state, WorkerStatus::kIdle)};
  EXPECT_EQ(ListBody(),
            R"({"tasks":[{"taskId":"g1","pluginId":"myplugin","scope":"global",)"
            R"("settings":{"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT1M"},)"
            R"("taskState":{"status":"idle","startsAt":"2026-11-30T04:18:13.000+00:00",)"
            R"("lastRunEndedAt":"2026-11-30T04:13:13.000+00:00",)"
            R"("lastRunError":"{\"name\":\"Error\",\"message\":\"Task was cancelled\"}"},)"
            R"("workerState":{"status":"idle"}}]})");
}

TEST_F(SchedulerRestRouterTest, ListsRunningTask) {
  TaskState state;
  state.status = TaskState::Status::kRunning;
  state.started_at = "2026-11-30T04:20:00.000+00:00";
  state.times_out_at = "2026-11-30T04:21:00.000+00:00";
  state.last_run_ended_at = "2026-11-30T04:10:00.000+00:00";
  scheduler_.listing = {
      Listing("r", TaskScope::kGlobal, Settings("*/5 * * * *"), state, WorkerStatus::kRunning)};
  EXPECT_EQ(ListBody(),
            R"({"tasks":[{"taskId":"r","pluginId":"myplugin","scope":"global",)"
            R"("settings":{"version":2,"cadence":"*/5 * * * *","timeoutAfterDuration":"PT1M"},)"
            R"("taskState":{"status":"running","startedAt":"2026-11-30T04:20:00.000+00:00",)"
            R"("timesOutAt":"2026-11-30T04:21:00.000+00:00",)"
            R"("lastRunEndedAt":"2026-11-30T04:10:00.000+00:00"},)"
            R"("workerState":{"status":"running"}}]})");
}

TEST_F(SchedulerRestRouterTest, ListsFailedTaskWithDoubleEncodedError) {
  TaskState state;
  state.starts_at = "2026-11-30T04:30:00.000+00:00";
  state.last_run_ended_at = "2026-11-30T04:20:00.000+00:00";
  state.last_run_error = R"({"name":"TypeError","message":"bad \"type\"\n"})";
  scheduler_.listing = {
      Listing("f", TaskScope::kGlobal, Settings("PT10M"), state, WorkerStatus::kIdle)};
  EXPECT_EQ(ListBody(),
            R"({"tasks":[{"taskId":"f","pluginId":"myplugin","scope":"global",)"
            R"("settings":{"version":2,"cadence":"PT10M","timeoutAfterDuration":"PT1M"},)"
            R"("taskState":{"status":"idle","startsAt":"2026-11-30T04:30:00.000+00:00",)"
            R"("lastRunEndedAt":"2026-11-30T04:20:00.000+00:00",)"
            R"("lastRunError":"{\"name\":\"TypeError\",\"message\":\"bad \\\"type\\\"\\n\"}"},)"
            R"("workerState":{"status":"idle"}}]})");
}

TEST_F(SchedulerRestRouterTest, ListsManualLocalAndInitialWaitTasksInOrder) {
  TaskState initial;
  initial.starts_at = "2026-11-30T05:13:13.010Z";
  scheduler_.listing = {
      Listing("l1", TaskScope::kLocal, Settings("PT10M", "PT1H"), initial,
              WorkerStatus::kInitialWait),
      Listing("man", TaskScope::kGlobal, Settings("manual"), TaskState{}, WorkerStatus::kIdle),
      Listing("elsewhere", TaskScope::kGlobal, Settings("PT1M"), std::nullopt, std::nullopt)};
  EXPECT_EQ(ListBody(),
            R"({"tasks":[)"
            R"({"taskId":"l1","pluginId":"myplugin","scope":"local",)"
            R"("settings":{"version":2,"cadence":"PT10M","initialDelayDuration":"PT1H",)"
            R"("timeoutAfterDuration":"PT1M"},)"
            R"("taskState":{"status":"idle","startsAt":"2026-11-30T05:13:13.010Z"},)"
            R"("workerState":{"status":"initial-wait"}},)"
            R"({"taskId":"man","pluginId":"myplugin","scope":"global",)"
            R"("settings":{"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"},)"
            R"("taskState":{"status":"idle"},"workerState":{"status":"idle"}},)"
            R"({"taskId":"elsewhere","pluginId":"myplugin","scope":"global",)"
            R"("settings":{"version":2,"cadence":"PT1M","timeoutAfterDuration":"PT1M"},)"
            R"("taskState":null,"workerState":null}]})");
}

TEST_F(SchedulerRestRouterTest, EscapesIdsAndPluginIdAsJsonStrings) {
  SchedulerRestRouter router("p\"q", scheduler_, logger_);
  scheduler_.listing = {
      Listing("a\"b\\c/\x01", TaskScope::kGlobal, Settings("manual"), std::nullopt, std::nullopt)};
  std::optional<HttpResponse> response = router.Handle(Request("GET", kTasks));
  ASSERT_TRUE(response.has_value());
  EXPECT_THAT(response->body,
              HasSubstr(R"({"taskId":"a\"b\\c/\u0001","pluginId":"p\"q","scope":"global")"));
}

TEST_F(SchedulerRestRouterTest, ListingFromMockScheduler) {
  testing::MockScheduler mock;
  TaskDefinition task;
  task.id = "mocked";
  task.frequency = std::chrono::minutes(10);
  task.timeout = std::chrono::minutes(1);
  task.fn = [](const std::stop_token&) {};
  ASSERT_THAT(mock.ScheduleTask(std::move(task)), IsOk());
  SchedulerRestRouter router("myplugin", mock);
  std::optional<HttpResponse> response = router.Handle(Request("GET", kTasks));
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->body,
            R"({"tasks":[{"taskId":"mocked","pluginId":"myplugin","scope":"global",)"
            R"("settings":{"version":2,"cadence":"PT600S","timeoutAfterDuration":"PT60S"},)"
            R"("taskState":null,"workerState":{"status":"idle"}}]})");
  response = router.Handle(Request("POST", std::string(kTasks) + "/mocked/trigger"));
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
}

TEST_F(SchedulerRestRouterTest, HeadAnswersLikeGet) {
  std::optional<HttpResponse> get = Handle(Request("GET", kTasks));
  std::optional<HttpResponse> head = Handle(Request("HEAD", kTasks));
  ASSERT_TRUE(get.has_value());
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->headers, get->headers);
  EXPECT_EQ(head->body, get->body);
}

TEST_F(SchedulerRestRouterTest, TriggerAndCancelAnswerEmpty200) {
  HttpResponse trigger = Post(std::string(kTasks) + "/t1/trigger");
  EXPECT_EQ(trigger.status, 200);
  EXPECT_EQ(trigger.body, "");
  HttpResponse cancel = Post(std::string(kTasks) + "/t1/cancel");
  EXPECT_EQ(cancel.status, 200);
  EXPECT_EQ(cancel.body, "");
  EXPECT_THAT(scheduler_.triggered, ElementsAre("t1"));
  EXPECT_THAT(scheduler_.cancelled, ElementsAre("t1"));
}

TEST_F(SchedulerRestRouterTest, ATriggerCarriesTheCallersTraceContext) {
  HttpRequest traced = Request("POST", std::string(kTasks) + "/t1/trigger");
  traced.headers.emplace_back("TraceParent",
                              "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  traced.headers.emplace_back("tracestate", "vendor=value");
  ASSERT_EQ(Handle(traced).value_or(HttpResponse{}).status, 200);
  HttpRequest malformed = Request("POST", std::string(kTasks) + "/t1/trigger");
  malformed.headers.emplace_back("traceparent", "00-not-a-trace-01");
  ASSERT_EQ(Handle(malformed).value_or(HttpResponse{}).status, 200);
  ASSERT_EQ(Post(std::string(kTasks) + "/t1/trigger").status, 200);

  ASSERT_EQ(scheduler_.callers.size(), 3u);
  EXPECT_EQ(FormatTraceparent(scheduler_.callers[0]),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_EQ(scheduler_.callers[0].trace_state, "vendor=value");
  EXPECT_FALSE(scheduler_.callers[1].valid());
  EXPECT_FALSE(scheduler_.callers[2].valid());
}

TEST_F(SchedulerRestRouterTest, NotFoundHasBackstageErrorBody) {
  scheduler_.trigger_results["nope"] = NotFoundError("Task nope does not exist");
  HttpResponse response = Post(std::string(kTasks) + "/nope/trigger");
  EXPECT_EQ(response.status, 404);
  EXPECT_THAT(response.headers,
              ElementsAre(Pair("Content-Type", "application/json; charset=utf-8")));
  EXPECT_EQ(response.body,
            R"({"error":{"name":"NotFoundError","message":"Task nope does not exist"},)"
            R"("request":{"method":"POST","url":"/.backstage/scheduler/v1/tasks/nope/trigger"},)"
            R"("response":{"statusCode":404}})");
}

TEST_F(SchedulerRestRouterTest, ConflictOnTriggerAndCancel) {
  scheduler_.trigger_results["busy"] = ConflictError("Task busy is currently running");
  scheduler_.cancel_results["idle"] = ConflictError("Task idle is not running");
  EXPECT_EQ(Post(std::string(kTasks) + "/busy/trigger").body,
            R"({"error":{"name":"ConflictError","message":"Task busy is currently running"},)"
            R"("request":{"method":"POST","url":"/.backstage/scheduler/v1/tasks/busy/trigger"},)"
            R"("response":{"statusCode":409}})");
  HttpResponse cancel = Post(std::string(kTasks) + "/idle/cancel");
  EXPECT_EQ(cancel.status, 409);
  EXPECT_EQ(cancel.body,
            R"({"error":{"name":"ConflictError","message":"Task idle is not running"},)"
            R"("request":{"method":"POST","url":"/.backstage/scheduler/v1/tasks/idle/cancel"},)"
            R"("response":{"statusCode":409}})");
}

TEST_F(SchedulerRestRouterTest, ErrorUrlKeepsPathAndQueryAsReceived) {
  scheduler_.cancel_results["a/b"] = NotFoundError("Task a/b does not exist");
  HttpResponse response = Post("/.Backstage/Scheduler/v1/tasks/a%2Fb/cancel/", "x=1&y=%20");
  EXPECT_EQ(response.body,
            R"({"error":{"name":"NotFoundError","message":"Task a/b does not exist"},)"
            R"("request":{"method":"POST",)"
            R"("url":"/.Backstage/Scheduler/v1/tasks/a%2Fb/cancel/?x=1&y=%20"},)"
            R"("response":{"statusCode":404}})");
}

TEST_F(SchedulerRestRouterTest, MalformedPercentEncodingIsInputError) {
  HttpResponse response = Post(std::string(kTasks) + "/a%zz/trigger");
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(response.body,
            R"({"error":{"name":"InputError","message":"Failed to decode param 'a%zz'"},)"
            R"("request":{"method":"POST","url":"/.backstage/scheduler/v1/tasks/a%zz/trigger"},)"
            R"("response":{"statusCode":400}})");
  EXPECT_EQ(Post(std::string(kTasks) + "/%E2%82/cancel").status, 400);
  EXPECT_EQ(Post(std::string(kTasks) + "/%/cancel").status, 400);
  EXPECT_TRUE(scheduler_.triggered.empty());
  EXPECT_TRUE(scheduler_.cancelled.empty());
}

// Issue 14: "report%00x" reached PostgreSQL as "report" (libpq ends text at NUL) and triggered it.
TEST_F(SchedulerRestRouterTest, NulInTaskIdIsInputErrorAndNeverReachesTheScheduler) {
  HttpResponse response = Post(std::string(kTasks) + "/report%00x/trigger");
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(response.body,
            R"({"error":{"name":"InputError","message":"Invalid param 'report%00x': a task id )"
            R"(must not contain a NUL character"},)"
            R"("request":{"method":"POST","url":"/.backstage/scheduler/v1/tasks/report%00x/)"
            R"(trigger"},"response":{"statusCode":400}})");
  EXPECT_EQ(Post(std::string(kTasks) + "/%00/cancel").status, 400);
  EXPECT_TRUE(scheduler_.triggered.empty());
  EXPECT_TRUE(scheduler_.cancelled.empty());
}

// Issue 14: raw bytes that are not UTF-8 gave a 500 from the store.
TEST_F(SchedulerRestRouterTest, InvalidUtf8InTaskIdIsInputErrorAndNeverReachesTheScheduler) {
  for (const std::string raw : {"a\xFF"
                                "b",
                                "\xC3", "\xC0\xAF", "\xED\xA0\x80", "%C3%A9\xE2"}) {
    HttpResponse response = Post(std::string(kTasks) + "/" + raw + "/trigger");
    EXPECT_EQ(response.status, 400) << raw;
    EXPECT_THAT(response.body, HasSubstr("a task id must be valid UTF-8")) << raw;
    EXPECT_THAT(response.body, HasSubstr(R"("name":"InputError")")) << raw;
  }
  EXPECT_TRUE(scheduler_.triggered.empty());
  EXPECT_EQ(Post(std::string(kTasks) + "/\xC3\xA9%C3%A9/trigger").status, 200);
  EXPECT_THAT(scheduler_.triggered, ElementsAre("\xC3\xA9\xC3\xA9"));
}

TEST_F(SchedulerRestRouterTest, IdIsPercentDecodedPathSegment) {
  Post(std::string(kTasks) + "/a%2Fb/trigger");
  Post(std::string(kTasks) + "/a%2fb%20c/trigger");
  Post(std::string(kTasks) + "/a+b/trigger");
  Post(std::string(kTasks) + "/%E2%82%AC/trigger");
  Post(std::string(kTasks) + "/%25/trigger");
  EXPECT_THAT(scheduler_.triggered, ElementsAre("a/b", "a/b c", "a+b", "\xE2\x82\xAC", "%"));
}

TEST_F(SchedulerRestRouterTest, PathsAreCaseInsensitiveWithOptionalTrailingSlash) {
  EXPECT_TRUE(Handle(Request("GET", "/.BACKSTAGE/scheduler/V1/Tasks")).has_value());
  EXPECT_TRUE(Handle(Request("GET", std::string(kTasks) + "/")).has_value());
  EXPECT_TRUE(Handle(Request("GET", kTasks, "limit=1")).has_value());
  EXPECT_EQ(Post(std::string(kTasks) + "/Id/TRIGGER/").status, 200);
  EXPECT_EQ(Post(std::string(kTasks) + "/Id/Cancel").status, 200);
  EXPECT_THAT(scheduler_.triggered, ElementsAre("Id"));
  EXPECT_THAT(scheduler_.cancelled, ElementsAre("Id"));
}

TEST_F(SchedulerRestRouterTest, UnknownRoutesAndMethodsDoNotMatch) {
  const std::string id_path = std::string(kTasks) + "/x/trigger";
  for (const HttpRequest& request : {
           Request("POST", kTasks),
           Request("DELETE", kTasks),
           Request("PUT", id_path),
           Request("GET", id_path),
           Request("POST", std::string(kTasks) + "//trigger"),
           Request("POST", std::string(kTasks) + "/x/trigger//"),
           Request("POST", std::string(kTasks) + "/x/run"),
           Request("POST", std::string(kTasks) + "/x/y/trigger"),
           Request("GET", std::string(kTasks) + "//"),
           Request("GET", std::string(kTasks) + "/x"),
           Request("GET", "/.backstage/scheduler/v1"),
           Request("GET", "/.backstage/scheduler/v2/tasks"),
           Request("GET", "/"),
           Request("GET", ""),
           Request("GET", ".backstage/scheduler/v1/tasks"),
           Request("get", kTasks),
       }) {
    EXPECT_FALSE(Handle(request).has_value()) << request.method << " " << request.path;
  }
  EXPECT_TRUE(scheduler_.triggered.empty());
}

TEST_F(SchedulerRestRouterTest, InternalErrorsHideDetailsBehindLogId) {
  scheduler_.trigger_results["x"] = InternalError("SELECT * FROM secret_table failed");
  HttpResponse response = Post(std::string(kTasks) + "/x/trigger");
  EXPECT_EQ(response.status, 500);
  EXPECT_THAT(response.body,
              MatchesRegex(R"(\{"error":\{"name":"Error","message":"An internal error occurred )"
                           R"(logId=[0-9a-f]{20}"\},"request":\{"method":"POST",)"
                           R"("url":"/\.backstage/scheduler/v1/tasks/x/trigger"\},)"
                           R"("response":\{"statusCode":500\}\})"));
  EXPECT_THAT(response.body, ::testing::Not(HasSubstr("secret_table")));
  const std::string log_id = response.body.substr(response.body.find("logId=") + 6, 20);
  const auto records = logger_->records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].level, LogLevel::kError);
  EXPECT_EQ(records[0].message, "Request failed with status 500");
  EXPECT_EQ(Field(records[0].fields, "logId"), log_id);
  EXPECT_THAT(Field(records[0].fields, "error"), HasSubstr("secret_table"));
}

TEST_F(SchedulerRestRouterTest, ListingDatabaseErrorIsHidden) {
  scheduler_.list_status = UnavailableError("could not connect to server at db.internal:5432");
  std::optional<HttpResponse> response = Handle(Request("GET", kTasks));
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 503);
  EXPECT_THAT(response->body,
              MatchesRegex(R"(\{"error":\{"name":"ServiceUnavailableError","message":"An internal )"
                           R"(error occurred logId=[0-9a-f]{20}"\},"request":\{"method":"GET",)"
                           R"("url":"/\.backstage/scheduler/v1/tasks"\},)"
                           R"("response":\{"statusCode":503\}\})"));
  EXPECT_THAT(response->body, ::testing::Not(HasSubstr("db.internal")));
  const auto records = logger_->records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].level, LogLevel::kWarn) << "an outage is not an error of the request";
  EXPECT_THAT(Field(records[0].fields, "error"), HasSubstr("db.internal"));
}

TEST_F(SchedulerRestRouterTest, LogIdsDiffer) {
  scheduler_.trigger_results["x"] = InternalError("boom");
  EXPECT_NE(Post(std::string(kTasks) + "/x/trigger").body,
            Post(std::string(kTasks) + "/x/trigger").body);
}

TEST(HttpErrorClassTest, MapsEveryStatusCode) {
  EXPECT_EQ(HttpErrorClassFor(StatusCode::kInvalidArgument).status, 400);
  EXPECT_EQ(HttpErrorClassFor(StatusCode::kInvalidArgument).name, "InputError");
  EXPECT_EQ(HttpErrorClassFor(StatusCode::kNotFound).status, 404);
  EXPECT_EQ(HttpErrorClassFor(StatusCode::kNotFound).name, "NotFoundError");
  EXPECT_EQ(HttpErrorClassFor(StatusCode::kConflict).status, 409);
  EXPECT_EQ(HttpErrorClassFor(StatusCode::kConflict).name, "ConflictError");
  EXPECT_EQ(HttpErrorClassFor(StatusCode::kUnauthenticated).status, 401);
  EXPECT_EQ(HttpErrorClassFor(StatusCode::kUnauthenticated).name, "AuthenticationError");
  EXPECT_EQ(HttpErrorClassFor(StatusCode::kUnavailable).status, 503);
  EXPECT_EQ(HttpErrorClassFor(StatusCode::kUnavailable).name, "ServiceUnavailableError");
  EXPECT_FALSE(HttpErrorClassFor(StatusCode::kUnavailable).shows_message);
  EXPECT_EQ(HttpErrorClassFor(StatusCode::kUnimplemented).status, 501);
  EXPECT_EQ(HttpErrorClassFor(StatusCode::kUnimplemented).name, "NotImplementedError");
  EXPECT_TRUE(HttpErrorClassFor(StatusCode::kUnimplemented).shows_message);
  for (StatusCode code : {StatusCode::kCancelled, StatusCode::kDeadlineExceeded,
                          StatusCode::kFailedPrecondition, StatusCode::kInternal}) {
    EXPECT_EQ(HttpErrorClassFor(code).status, 500);
    EXPECT_EQ(HttpErrorClassFor(code).name, "Error");
  }
}

TEST(DecodeUriComponentTest, DecodesLikeJavaScript) {
  EXPECT_EQ(*DecodeUriComponent("plain"), "plain");
  EXPECT_EQ(*DecodeUriComponent("a%2Fb%20c+d"), "a/b c+d");
  EXPECT_EQ(*DecodeUriComponent("%c3%a9"), "\xC3\xA9");
  EXPECT_EQ(*DecodeUriComponent("%F0%9F%98%80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(*DecodeUriComponent(""), "");
}

TEST(DecodeUriComponentTest, RejectsWhatJavaScriptRejects) {
  for (const char* bad : {"%", "%2", "a%g0", "%zz", "%80", "%C3", "%C3%28", "%C0%AF", "%ED%A0%80",
                          "%F4%90%80%80", "%FF", "%E2%82"}) {
    Result<std::string> decoded = DecodeUriComponent(bad);
    EXPECT_THAT(decoded, Not(IsOk())) << bad;
    if (!decoded.ok()) {
      EXPECT_THAT(decoded, StatusIs(StatusCode::kInvalidArgument));
    }
  }
}

}  // namespace
}  // namespace stagehand
