// The run history routes over a real PluginScheduler (MemoryTaskStore, ManualClock) behind a real
// HttpServer on 127.0.0.1: the exact bytes of the RUN object, paging, the errors and a live run.
#include "stagehand/http/run_history_router.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stagehand/http/http_server.h"
#include "stagehand/http/scheduler_router.h"
#include "stagehand/service/plugin_scheduler.h"
#include "stagehand/store/memory_task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/duration.h"
#include "stagehand/time/manual_clock.h"
#include "stagehand/time/time_zone.h"
#include "unit/http/loopback_client.h"
#include "unit/service/task_probe.h"

namespace stagehand {
namespace {

using http_testing::Exchange;
using http_testing::Get;
using http_testing::RawResponse;
using service_testing::TaskProbe;
using ::stagehand::testing::IsOk;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kRuns = "/api/jobs/.stagehand/v1/tasks/nightly/runs";

WallTime At(std::string_view iso) {
  Result<WallTime> instant = ParseIsoInstant(iso);
  EXPECT_THAT(instant, IsOk()) << iso;
  return instant.ok() ? *instant : WallTime{};
}

nlohmann::json Parse(const std::string& body) {
  nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(json.is_discarded()) << body;
  return json;
}

// Returns the run ids of a page, in order.
std::vector<std::string> RunIdsOf(const std::string& body) {
  std::vector<std::string> ids;
  const nlohmann::json page = Parse(body);
  if (!page.contains("runs")) return ids;
  for (const auto& run : page["runs"]) ids.push_back(run["runId"].get<std::string>());
  return ids;
}

std::string PercentEscape(char c) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const auto byte = static_cast<unsigned char>(c);
  return {'%', kHex[byte >> 4], kHex[byte & 0x0F]};
}

// Returns a page's nextCursor, percent-encoded for a query; empty when it is null.
std::string CursorOf(const std::string& body) {
  const nlohmann::json page = Parse(body);
  if (!page.contains("nextCursor") || !page["nextCursor"].is_string()) return "";
  std::string encoded;
  for (const char c : page["nextCursor"].get<std::string>()) {
    const bool plain = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       c == '-' || c == '.' || c == '_';
    encoded += plain ? std::string(1, c) : PercentEscape(c);
  }
  return encoded;
}

// Counts the runs that ended. Thread-safe.
class EndCounter final : public SchedulerObserver {
 public:
  void OnRunFinished(const RunInfo&, const RunFinish&, std::chrono::nanoseconds) override {
    {
      std::lock_guard lock(mu_);
      ++ends_;
    }
    cv_.notify_all();
  }
  bool WaitForEnds(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, service_testing::kRealTimeout, [&] { return ends_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int ends_ = 0;
};

class RunHistoryRouterTest : public ::testing::Test {
 protected:
  RunHistoryRouterTest() {
    PluginSchedulerOptions options;
    options.plugin_id = "jobs";
    options.store = store_;
    options.clock = &clock_;
    options.observer = ends_;
    options.default_zone = TimeZone::Utc();
    scheduler_ = std::make_unique<PluginScheduler>(std::move(options));
    router_ = std::make_unique<RunHistoryRouter>("jobs", *scheduler_);
    HttpServerOptions server_options;
    server_options.port = 0;
    server_ = std::make_unique<HttpServer>(server_options);
    server_->Mount("/api/jobs",
                   [this](const HttpRequest& request) { return router_->Handle(request); });
    EXPECT_THAT(server_->Start(), IsOk());
  }

  ~RunHistoryRouterTest() override {
    server_->Stop();
    scheduler_->Shutdown();
  }

  RawResponse Fetch(const std::string& target, const std::string& method = "GET") {
    return Get(server_->port(), target, method);
  }

  void Start(const std::string& run_id, const std::string& task_id, RunOrigin origin,
             WallTime started_at) {
    RunStart start{run_id, task_id, std::move(origin), started_at};
    ASSERT_THAT(store_->RecordStarts({&start, 1}), IsOk());
  }

  void End(const std::string& run_id, RunFinish finish, WallTime ended_at) {
    RunEnd end{run_id, std::move(finish), ended_at};
    ASSERT_THAT(store_->RecordEnds({&end, 1}), IsOk());
  }

  // Records `count` ended runs of `task_id`, a minute apart, named run-0, run-1, ...
  void Seed(const std::string& task_id, int count) {
    for (int i = 0; i < count; ++i) {
      const WallTime start = At("2026-12-01T00:00:00Z") + std::chrono::minutes(i);
      const std::string id = "run-" + std::to_string(i);
      Start(id, task_id, RunOrigin{"web-1", 42, RunTrigger::kSchedule, start, 1}, start);
      End(id, RunFinish{}, start + std::chrono::seconds(1));
    }
  }

  // Declared first so that it outlives every thread waiting on it.
  testing::ManualClock clock_;
  std::shared_ptr<testing::MemoryTaskStore> store_ =
      std::make_shared<testing::MemoryTaskStore>("jobs", clock_);
  std::shared_ptr<EndCounter> ends_ = std::make_shared<EndCounter>();
  std::unique_ptr<PluginScheduler> scheduler_;
  std::unique_ptr<RunHistoryRouter> router_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(RunHistoryRouterTest, ListsRunsNewestFirstInTheDocumentedShape) {
  Start("run-a", "nightly",
        RunOrigin{"web-1", 42, RunTrigger::kSchedule, At("2026-12-01T03:00:00Z"), 1,
                  "4bf92f3577b34da6a3ce929d0e0e4736"},
        At("2026-12-01T03:00:00.250Z"));
  RunFinish failed;
  failed.outcome = RunOutcome::kFailed;
  failed.error_json = R"({"name":"Error","message":"exit status 3"})";
  failed.exit_code = 3;
  failed.output_tail = "not listed";
  End("run-a", failed, At("2026-12-01T03:00:02.750Z"));
  Start("run-b", "nightly", RunOrigin{"web-2", 7, RunTrigger::kManual, std::nullopt, 1},
        At("2026-12-01T04:00:00Z"));
  Start("run-c", "other", RunOrigin{}, At("2026-12-01T05:00:00Z"));

  const RawResponse response = Fetch(kRuns);
  EXPECT_EQ(response.status, 200);
  EXPECT_THAT(response.head, HasSubstr("Content-Type: application/json; charset=utf-8"));
  EXPECT_EQ(
      response.body,
      R"({"runs":[)"
      R"({"runId":"run-b","taskId":"nightly","pluginId":"jobs","host":"web-2","pid":7,)"
      R"("trigger":"manual","attempt":1,"traceId":null,"slot":null,)"
      R"("startedAt":"2026-12-01T04:00:00.000Z","endedAt":null,"durationMs":null,"startLagMs":null,"outcome":"running",)"
      R"("error":null,"exitCode":null,"signal":null,"httpStatus":null},)"
      R"({"runId":"run-a","taskId":"nightly","pluginId":"jobs","host":"web-1","pid":42,)"
      R"("trigger":"schedule","attempt":1,"traceId":"4bf92f3577b34da6a3ce929d0e0e4736",)"
      R"("slot":"2026-12-01T03:00:00.000Z",)"
      R"("startedAt":"2026-12-01T03:00:00.250Z","endedAt":"2026-12-01T03:00:02.750Z",)"
      R"("durationMs":2500,"startLagMs":250,"outcome":"failed",)"
      R"("error":{"name":"Error","message":"exit status 3"},"exitCode":3,"signal":null,)"
      R"("httpStatus":null}],"nextCursor":null})");
}

TEST_F(RunHistoryRouterTest, PagesWithLimitAndTheCursorOfTheLastPage) {
  Seed("nightly", 25);

  const RawResponse defaults = Fetch(kRuns);
  ASSERT_EQ(defaults.status, 200);
  const std::vector<std::string> newest = RunIdsOf(defaults.body);
  ASSERT_EQ(newest.size(), std::size_t{kDefaultRunPageSize});
  EXPECT_EQ(newest.front(), "run-24");
  EXPECT_EQ(newest.back(), "run-5");
  EXPECT_FALSE(CursorOf(defaults.body).empty());

  const RawResponse first = Fetch(std::string(kRuns) + "?limit=2");
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(RunIdsOf(first.body), (std::vector<std::string>{"run-24", "run-23"}));
  const std::string cursor = CursorOf(first.body);
  ASSERT_FALSE(cursor.empty());
  const RawResponse second = Fetch(std::string(kRuns) + "?limit=2&before=" + cursor);
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(RunIdsOf(second.body), (std::vector<std::string>{"run-22", "run-21"}));
  const RawResponse by_run_id = Fetch(std::string(kRuns) + "?before=run-1&limit=1000");
  ASSERT_EQ(by_run_id.status, 200);
  EXPECT_EQ(RunIdsOf(by_run_id.body), (std::vector<std::string>{"run-0"}));
  EXPECT_TRUE(CursorOf(by_run_id.body).empty());
}

TEST_F(RunHistoryRouterTest, ABadLimitOrCursorIs400NamingIt) {
  Seed("nightly", 1);
  const RawResponse abc = Fetch(std::string(kRuns) + "?limit=abc");
  EXPECT_EQ(abc.status, 400);
  EXPECT_EQ(abc.body,
            R"({"error":{"name":"InputError","message":"limit must be an integer between 1 and )"
            R"(1000, got 'abc'"},"request":{"method":"GET","url":)"
            R"("/.stagehand/v1/tasks/nightly/runs?limit=abc"},"response":{"statusCode":400}})");
  for (const char* query : {"limit=0", "limit=1001", "limit=-1", "limit=", "limit=1e3",
                            "limit=99999999999", "limit=1&limit=2", "limit=%ZZ"}) {
    const RawResponse response = Fetch(std::string(kRuns) + "?" + query);
    EXPECT_EQ(response.status, 400) << query;
    EXPECT_THAT(response.body, HasSubstr(R"("name":"InputError")")) << query;
    EXPECT_THAT(response.body, HasSubstr("limit")) << query;
  }
  for (const char* query : {"before=", "before=nope", "before=a&before=b", "before=%00"}) {
    const RawResponse response = Fetch(std::string(kRuns) + "?" + query);
    EXPECT_EQ(response.status, 400) << query;
    EXPECT_THAT(response.body, HasSubstr(R"("message":"before)")) << query;
  }
  EXPECT_EQ(Fetch(std::string(kRuns) + "?limit=1000&other=x").status, 200);
  EXPECT_EQ(Fetch(std::string(kRuns) + "?limit=+7").status, 400);
}

// Issue 16: the zone of a cron cadence was nowhere on the wire (Backstage's settings have none).
TEST_F(RunHistoryRouterTest, StagehandsTaskListingIsBackstagesWithTheZoneOfEachCronCadence) {
  auto probe = std::make_shared<TaskProbe>();
  for (const char* id : {"berlin", "default", "manual"}) {
    TaskDefinition task;
    task.id = id;
    task.frequency = std::string_view(id) == "manual" ? Frequency(ManualFrequency{})
                     : std::string_view(id) == "berlin"
                         ? Frequency(CronFrequency{"0 3 * * *", "Europe/Berlin"})
                         : Frequency(CronFrequency{"0 4 * * *", ""});
    task.timeout = std::chrono::minutes(1);
    task.fn = probe->Returning();
    ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());
  }
  const RawResponse listed = Fetch("/api/jobs/.stagehand/v1/tasks");
  ASSERT_EQ(listed.status, 200);
  nlohmann::json json = Parse(listed.body);
  ASSERT_EQ(json["tasks"].size(), 3U);
  EXPECT_EQ(json["tasks"][0]["timeZone"], "Europe/Berlin");
  EXPECT_EQ(json["tasks"][1]["timeZone"], "UTC");
  EXPECT_EQ(json["tasks"][2]["timeZone"], nullptr);
  EXPECT_THAT(listed.body,
              HasSubstr(R"("timeoutAfterDuration":"PT60S"},"timeZone":"Europe/Berlin",)"
                        R"("pause":null,"taskState":)"));
  // Backstage's listing, without the zones, is the same in every other byte.
  HttpRequest request;
  request.method = "GET";
  request.path = "/.backstage/scheduler/v1/tasks";
  SchedulerRestRouter backstage("jobs", *scheduler_);
  std::optional<HttpResponse> expected = backstage.Handle(request);
  ASSERT_TRUE(expected.has_value());
  std::string without = listed.body;
  for (const char* zone :
       {R"(,"timeZone":"Europe/Berlin")", R"(,"timeZone":"UTC")", R"(,"timeZone":null)"}) {
    without.erase(without.find(zone), std::string_view(zone).size());
  }
  for (std::size_t at = without.find(R"(,"pause":null)"); at != std::string::npos;
       at = without.find(R"(,"pause":null)")) {
    without.erase(at, std::string_view(R"(,"pause":null)").size());
  }
  EXPECT_EQ(without, expected->body);
}

// Issue 39: a schedule is parsed once, when it is registered; the REST listings, however often
// they are asked for and whatever they compute from the cadence, never parse it again.
TEST_F(RunHistoryRouterTest, ACronIsParsedOnceAtRegistrationAndNeverPerRequest) {
  auto probe = std::make_shared<TaskProbe>();
  TaskDefinition task;
  task.id = "nightly";
  // Local: no poll decodes the row (a row is decoded where the store reads it) while it counts.
  task.scope = TaskScope::kLocal;
  task.frequency = CronFrequency{"0 3 * * *", "Europe/Berlin"};
  task.timeout = std::chrono::minutes(1);
  task.fn = probe->Returning();
  const std::uint64_t before = CronExpression::ParseCount();
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());
  EXPECT_EQ(CronExpression::ParseCount(), before + 1);
  SchedulerRestRouter backstage("jobs", *scheduler_);
  HttpRequest backstage_listing;
  backstage_listing.method = "GET";
  backstage_listing.path = "/.backstage/scheduler/v1/tasks";
  for (int i = 0; i < 3; ++i) {
    for (const char* path :
         {"/api/jobs/.stagehand/v1/tasks", "/api/jobs/.stagehand/v1/tasks?upcoming=5"}) {
      const RawResponse listed = Fetch(path);
      ASSERT_EQ(listed.status, 200) << path << ": " << listed.body;
      EXPECT_THAT(listed.body, HasSubstr(R"("cadence":"0 3 * * *")")) << path;
    }
    const std::optional<HttpResponse> listed = backstage.Handle(backstage_listing);
    ASSERT_TRUE(listed.has_value());
    EXPECT_THAT(listed->body, HasSubstr(R"("cadence":"0 3 * * *")"));
  }
  EXPECT_EQ(CronExpression::ParseCount(), before + 1);
}

// Issue 19: the dashboard's timeline marks each task's next starts, which the listing gives on
// request, computed as the scheduler computes them (the cron in its zone, the interval from the
// next start).
TEST_F(RunHistoryRouterTest, TheListingGivesEachTasksNextStartsWhenAsked) {
  auto probe = std::make_shared<TaskProbe>();
  for (const char* id : {"berlin", "every-6h", "manual"}) {
    TaskDefinition task;
    task.id = id;
    const std::string_view name = id;
    task.frequency = name == "manual"   ? Frequency(ManualFrequency{})
                     : name == "berlin" ? Frequency(CronFrequency{"0 3 * * *", "Europe/Berlin"})
                                        : Frequency(*ParseIsoDuration("PT6H"));
    task.timeout = std::chrono::minutes(1);
    // An interval task without an initial delay is due at once and may be running when listed.
    if (name == "every-6h") task.initial_delay = std::chrono::milliseconds(std::chrono::hours(1));
    task.fn = probe->Returning();
    ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());
  }
  EXPECT_THAT(Fetch("/api/jobs/.stagehand/v1/tasks").body, Not(HasSubstr("upcoming")));

  const RawResponse listed = Fetch("/api/jobs/.stagehand/v1/tasks?upcoming=3");
  ASSERT_EQ(listed.status, 200) << listed.body;
  const nlohmann::json tasks = Parse(listed.body)["tasks"];
  ASSERT_EQ(tasks.size(), 3U);
  const auto starts = [&](std::size_t i) {
    std::vector<WallTime> out;
    for (const auto& at : tasks[i]["upcoming"]) out.push_back(At(at.get<std::string>()));
    return out;
  };
  // Daily at 03:00 in Berlin (02:00Z in winter, 01:00Z in summer): two within a day of the next.
  const std::vector<WallTime> berlin = starts(0U);
  ASSERT_EQ(berlin.size(), 2U) << tasks[0];
  EXPECT_EQ(berlin[1] - berlin[0], std::chrono::hours(24));
  EXPECT_THAT(FormatIsoInstantUtc(berlin[0]), ::testing::ContainsRegex("T0[12]:00:00"));
  EXPECT_LE(berlin[0] - At(tasks[0]["taskState"]["startsAt"].get<std::string>()),
            std::chrono::seconds(1));
  // Every 6 hours from the next start: five within the day, the first three asked for.
  const std::vector<WallTime> interval = starts(1U);
  ASSERT_EQ(interval.size(), 3U) << tasks[1];
  EXPECT_EQ(interval[0], At(tasks[1]["taskState"]["startsAt"].get<std::string>()));
  EXPECT_EQ(interval[2] - interval[1], std::chrono::hours(6));
  EXPECT_EQ(tasks[2]["upcoming"], nlohmann::json::array()) << "a manual task has none";

  for (const char* bad : {"0", "51", "x", "3&upcoming=4"}) {
    const RawResponse refused = Fetch(std::string("/api/jobs/.stagehand/v1/tasks?upcoming=") + bad);
    EXPECT_EQ(refused.status, 400) << bad;
    EXPECT_THAT(refused.body, HasSubstr("upcoming")) << bad;
  }
}

// Issue 17: pause and resume over REST, and the listing that shows the pause.
TEST_F(RunHistoryRouterTest, PauseAndResumeAGlobalTaskAndTheListingShowsThePause) {
  auto probe = std::make_shared<TaskProbe>();
  TaskDefinition task;
  task.id = "backup";
  task.frequency = Frequency(CronFrequency{"0 3 * * *", ""});
  task.timeout = std::chrono::minutes(1);
  task.fn = probe->Returning();
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());
  const auto post = [&](const std::string& path, const std::string& body) {
    return Exchange(server_->port(), "POST " + path +
                                         " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                         "Content-Type: application/json\r\nContent-Length: " +
                                         std::to_string(body.size()) + "\r\n\r\n" + body);
  };
  const std::string pause = "/api/jobs/.stagehand/v1/tasks/backup/pause";
  const std::string resume = "/api/jobs/.stagehand/v1/tasks/backup/resume";

  RawResponse refused = post(pause, R"({"reason":"x","until":"tomorrow"})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body, HasSubstr("'until' must be an ISO-8601 instant"));
  refused = post(pause, R"({"reasons":"x"})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body, HasSubstr("Unknown field 'reasons'"));
  refused = post(pause, R"({"reason":"x","until":"2000-01-01T00:00:00Z"})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body, HasSubstr("'until' is not in the future"));
  refused = post(pause, R"({"cancel":"yes"})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body, HasSubstr("'cancel' must be true or false"));
  EXPECT_EQ(post("/api/jobs/.stagehand/v1/tasks/nope/pause", "").status, 404);

  const WallTime until =
      std::chrono::floor<std::chrono::seconds>(clock_.Now()) + std::chrono::hours(2);
  const RawResponse paused =
      post(pause, R"({"by":"alice@ops","reason":"storage migration","until":")" +
                      FormatIsoInstantUtc(until) + R"("})");
  ASSERT_EQ(paused.status, 200) << paused.body;
  nlohmann::json listed = Parse(Fetch("/api/jobs/.stagehand/v1/tasks").body);
  ASSERT_EQ(listed["tasks"].size(), 1U);
  const nlohmann::json& shown = listed["tasks"][0]["pause"];
  EXPECT_EQ(shown["by"], "alice@ops");
  EXPECT_EQ(shown["reason"], "storage migration");
  EXPECT_EQ(shown["until"], FormatIsoInstantUtc(until));
  EXPECT_EQ(shown["since"],
            FormatIsoInstantUtc(std::chrono::floor<std::chrono::milliseconds>(clock_.Now())));
  EXPECT_EQ(shown["pending"], false);
  EXPECT_EQ(listed["tasks"][0]["taskState"]["status"], "running") << "as Backstage shows it";

  ASSERT_EQ(post(resume, "").status, 200);
  listed = Parse(Fetch("/api/jobs/.stagehand/v1/tasks").body);
  EXPECT_EQ(listed["tasks"][0]["pause"], nullptr);

  // Behind authentication, the token's subject is who paused it; the body's "by" is on whose
  // behalf.
  HttpRequest authenticated;
  authenticated.method = "POST";
  authenticated.path = "/.stagehand/v1/tasks/backup/pause";
  authenticated.body = R"({"by":"alice@ops"})";
  authenticated.principal = "cli-operator";
  std::optional<HttpResponse> answered = router_->Handle(authenticated);
  ASSERT_TRUE(answered.has_value());
  ASSERT_EQ(answered->status, 200) << answered->body;
  listed = Parse(Fetch("/api/jobs/.stagehand/v1/tasks").body);
  EXPECT_EQ(listed["tasks"][0]["pause"]["by"], "cli-operator (alice@ops)");
  ASSERT_EQ(post(resume, "").status, 200);
  const RawResponse again = post(resume, "");
  EXPECT_EQ(again.status, 409);
  EXPECT_THAT(again.body, HasSubstr("Task backup is not paused"));
}

TEST_F(RunHistoryRouterTest, AnUnknownTaskIs404AndAKnownOneWithoutRunsAnEmptyPage) {
  auto probe = std::make_shared<TaskProbe>();
  TaskDefinition task;
  task.id = "idle";
  task.frequency = ManualFrequency{};
  task.timeout = std::chrono::minutes(1);
  task.fn = probe->Returning();
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());

  const RawResponse unknown = Fetch("/api/jobs/.stagehand/v1/tasks/nope/runs");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.body,
            R"({"error":{"name":"NotFoundError","message":"Task nope does not exist"},)"
            R"("request":{"method":"GET","url":"/.stagehand/v1/tasks/nope/runs"},)"
            R"("response":{"statusCode":404}})");
  const RawResponse idle = Fetch("/api/jobs/.stagehand/v1/tasks/idle/runs");
  EXPECT_EQ(idle.status, 200);
  EXPECT_EQ(idle.body, R"({"runs":[],"nextCursor":null})");
}

TEST_F(RunHistoryRouterTest, ARunHasItsOutputTailWithInvalidUtf8Replaced) {
  Start("run-a", "nightly", RunOrigin{"web-1", 42, RunTrigger::kRetry, std::nullopt, 2},
        At("2026-12-01T03:00:00Z"));
  RunFinish finish;
  finish.outcome = RunOutcome::kTimedOut;
  finish.error_json = "not json";
  finish.signal = 15;
  finish.output_tail = "line 1\n\xff\n";
  End("run-a", finish, At("2026-12-01T03:00:01Z"));

  const RawResponse response = Fetch("/api/jobs/.stagehand/v1/runs/run-a");
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body,
            R"({"runId":"run-a","taskId":"nightly","pluginId":"jobs","host":"web-1","pid":42,)"
            R"("trigger":"retry","attempt":2,"traceId":null,"slot":null,)"
            R"("startedAt":"2026-12-01T03:00:00.000Z",)"
            R"("endedAt":"2026-12-01T03:00:01.000Z","durationMs":1000,"startLagMs":null,)"
            R"("outcome":"timed_out","error":{"name":"Error","message":"not json"},)"
            R"("exitCode":null,"signal":15,"httpStatus":null,)"
            "\"output\":\"line 1\\n\xEF\xBF\xBD\\n\",\"outputBytes\":9,\"live\":false}");
}

TEST_F(RunHistoryRouterTest, ARunStillGoingHereIsLiveWithItsOutputSoFar) {
  auto probe = std::make_shared<TaskProbe>();
  TaskDefinition task;
  task.id = "report";
  task.frequency = ManualFrequency{};
  task.timeout = std::chrono::minutes(1);
  task.fn = probe->BlockingWithOutput("report: started\n");
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());
  ASSERT_THAT(scheduler_->TriggerTask("report"), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));
  const std::vector<std::string> ids =
      RunIdsOf(Fetch("/api/jobs/.stagehand/v1/tasks/report/runs").body);
  ASSERT_EQ(ids.size(), 1U);

  const nlohmann::json live = Parse(Fetch("/api/jobs/.stagehand/v1/runs/" + ids[0]).body);
  EXPECT_EQ(live["outcome"], "running");
  EXPECT_EQ(live["live"], true);
  EXPECT_EQ(live["output"], "report: started\n");
  EXPECT_EQ(live["outputBytes"], 16);
  EXPECT_EQ(live["endedAt"], nullptr);

  probe->ReleaseAll();
  ASSERT_TRUE(ends_->WaitForEnds(1));
  const nlohmann::json ended = Parse(Fetch("/api/jobs/.stagehand/v1/runs/" + ids[0]).body);
  EXPECT_EQ(ended["outcome"], "succeeded");
  EXPECT_EQ(ended["live"], false);
  EXPECT_EQ(ended["output"], "report: started\n");
  EXPECT_EQ(ended["outputBytes"], 16);
}

TEST_F(RunHistoryRouterTest, AnUnknownOrMalformedRunIdIsRefused) {
  const RawResponse unknown = Fetch("/api/jobs/.stagehand/v1/runs/nope");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_THAT(unknown.body, HasSubstr(R"("message":"Run nope does not exist")"));
  const RawResponse broken = Fetch("/api/jobs/.stagehand/v1/runs/%E0%A4%A");
  EXPECT_EQ(broken.status, 400);
  EXPECT_THAT(broken.body, HasSubstr(R"("message":"Failed to decode param '%E0%A4%A'")"));
  const RawResponse nul = Fetch("/api/jobs/.stagehand/v1/runs/a%00b");
  EXPECT_EQ(nul.status, 400);
  EXPECT_THAT(nul.body, HasSubstr("a run id must not contain a NUL character"));
}

TEST_F(RunHistoryRouterTest, RoutesFollowExpressRulesAndLeaveOtherPathsAlone) {
  Seed("nightly", 1);
  EXPECT_EQ(Fetch("/api/jobs/.STAGEHAND/V1/Tasks/nightly/RUNS/").status, 200);
  EXPECT_EQ(Fetch("/api/jobs/.stagehand/v1/tasks/night%6Cy/runs").status, 200);
  const RawResponse head = Fetch(kRuns, "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  for (const char* path : {"/api/jobs/.stagehand/v1/tasks/nightly", "/api/jobs/.stagehand/v1/runs",
                           "/api/jobs/.stagehand/v1/tasks//runs", "/api/jobs/.stagehand/v2/runs/x",
                           "/api/jobs/.backstage/scheduler/v1/tasks"}) {
    const RawResponse response = Fetch(path);
    EXPECT_EQ(response.status, 404) << path;
    EXPECT_EQ(response.body, "") << path;
  }
  const RawResponse post =
      Exchange(server_->port(), std::string("POST ") + kRuns +
                                    " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                    "Content-Length: 0\r\n\r\n");
  EXPECT_EQ(post.status, 404);
}

// Issue 16: a plugin without run history answered 500 with a log id, which tells a client
// nothing.
TEST(RunHistoryRouterWithoutHistoryTest, Is501NotImplementedSayingHowToTurnItOn) {
  testing::ManualClock clock;
  auto store = std::make_shared<testing::MemoryTaskStore>("jobs", clock);
  PluginSchedulerOptions options;
  options.plugin_id = "jobs";
  options.store = store;
  options.clock = &clock;
  options.engine.record_history = false;
  PluginScheduler scheduler(std::move(options));
  RunHistoryRouter router("jobs", scheduler);
  for (const char* path : {"/.stagehand/v1/runs/x", "/.stagehand/v1/tasks/nightly/runs"}) {
    HttpRequest request;
    request.method = "GET";
    request.path = path;
    std::optional<HttpResponse> response = router.Handle(request);
    ASSERT_TRUE(response.has_value()) << path;
    EXPECT_EQ(response->status, 501) << path;
    EXPECT_EQ(response->body,
              std::string(R"({"error":{"name":"NotImplementedError","message":"The run history )"
                          R"(of plugin 'jobs' is disabled: its runs are not recorded. Turn it on )"
                          R"(with stagehand.history.enabled: true in the app config )"
                          R"((EngineOptions::record_history when embedding) and restart"},)"
                          R"("request":{"method":"GET","url":")") +
                  path + R"("},"response":{"statusCode":501}})");
  }
  scheduler.Shutdown();
}

}  // namespace
}  // namespace stagehand
