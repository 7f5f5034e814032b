#include "stagehand/http/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "stagehand/http/scheduler_router.h"
#include "stagehand/service/mock_scheduler.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"
#include "unit/http/loopback_client.h"

namespace stagehand {
namespace {

using http_testing::Client;
using http_testing::Exchange;
using http_testing::Get;
using http_testing::Post;
using http_testing::RawResponse;
using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

// Keeps every record; WaitFor blocks until a given number has arrived (the access log is written
// after the response, so a client can see the response first).
class RecordingLogger final : public Logger {
 public:
  struct Record {
    LogLevel level;
    std::string message;
    LogFields fields;
  };

  void Log(LogLevel level, std::string_view message, const LogFields& fields) override {
    {
      std::lock_guard lock(mu_);
      records_.push_back({level, std::string(message), fields});
    }
    cv_.notify_all();
  }
  bool Enabled(LogLevel) const override { return true; }

  std::vector<Record> WaitFor(std::size_t count) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return records_.size() >= count; });
    return records_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Record> records_;
};

std::string Field(const LogFields& fields, std::string_view key) {
  for (const auto& [name, value] : fields) {
    if (name == key) {
      return value;
    }
  }
  return "<absent>";
}

// Keeps a copy of every HttpRequestRecord the server reports; WaitFor blocks until a given number
// has arrived (they are reported after the response is written).
class RequestRecorder {
 public:
  struct Record {
    std::string method;
    std::string route;
    int status = 0;
    std::chrono::nanoseconds duration{0};
  };

  void Add(const HttpRequestRecord& record) {
    {
      std::lock_guard lock(mu_);
      records_.push_back(
          {std::string(record.method), std::string(record.route), record.status, record.duration});
    }
    cv_.notify_all();
  }

  std::vector<Record> WaitFor(std::size_t count) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return records_.size() >= count; });
    return records_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Record> records_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  HttpServerOptions Options() {
    HttpServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.max_request_body_bytes = 1024;
    options.logger = logger_;
    options.on_request = [requests = requests_](const HttpRequestRecord& record) {
      requests->Add(record);
    };
    return options;
  }
  void StartServer() {
    ASSERT_THAT(server_.Start(), IsOk());
    ASSERT_NE(server_.port(), 0);
  }
  std::uint16_t port() const { return server_.port(); }

  std::shared_ptr<RecordingLogger> logger_ = std::make_shared<RecordingLogger>();
  std::shared_ptr<RequestRecorder> requests_ = std::make_shared<RequestRecorder>();
  HttpServer server_{Options()};
};

TEST_F(HttpServerTest, LivenessIsAlwaysOk) {
  StartServer();
  RawResponse response = Get(port(), "/.backstage/health/v1/liveness");
  EXPECT_EQ(response.status, 200);
  EXPECT_THAT(response.head, HasSubstr("Content-Type: application/json; charset=utf-8"));
  EXPECT_EQ(response.body, R"({"status":"ok"})");
  EXPECT_EQ(Get(port(), "/.Backstage/Health/v1/liveness/").status, 200);
}

TEST_F(HttpServerTest, ReadinessFollowsSetReady) {
  StartServer();
  RawResponse before = Get(port(), "/.backstage/health/v1/readiness");
  EXPECT_EQ(before.status, 503);
  EXPECT_EQ(before.body, R"({"status":"error","message":"Backend is not ready"})");
  server_.SetReady(true);
  RawResponse ready = Get(port(), "/.backstage/health/v1/readiness");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body, R"({"status":"ok"})");
  server_.SetReady(false);
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/readiness").status, 503);
}

TEST_F(HttpServerTest, AReadinessCheckThatGivesAReasonMakesReadiness503WithIt) {
  std::atomic<bool> database_away{false};
  server_.SetReadinessCheck([&]() -> std::optional<std::string> {
    if (!database_away.load()) return std::nullopt;
    return std::string("the database of plugin \"jobs\" has been unreachable for 3 s");
  });
  StartServer();
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/readiness").status, 503) << "before SetReady";
  server_.SetReady(true);
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/readiness").status, 200);
  database_away = true;
  RawResponse away = Get(port(), "/.backstage/health/v1/readiness");
  EXPECT_EQ(away.status, 503);
  EXPECT_EQ(away.body, R"({"status":"error","message":"the database of plugin \"jobs\" has been )"
                       R"(unreachable for 3 s"})");
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200) << "alive all the same";
  database_away = false;
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/readiness").status, 200);
}

TEST_F(HttpServerTest, MountSeesPathRelativeToPrefix) {
  std::mutex mu;
  std::vector<HttpRequest> seen;
  server_.Mount("/api/myplugin", [&](const HttpRequest& request) -> std::optional<HttpResponse> {
    std::lock_guard lock(mu);
    seen.push_back(request);
    if (request.path == "/missing") {
      return std::nullopt;
    }
    HttpResponse response;
    response.status = 201;
    response.headers.emplace_back("X-Seen", request.path);
    response.body = request.method + " " + request.path + " " + request.query + " " + request.body;
    return response;
  });
  StartServer();
  RawResponse response = Get(port(), "/api/myplugin/a%2Fb/c?x=1&y");
  EXPECT_EQ(response.status, 201);
  EXPECT_THAT(response.head, HasSubstr("X-Seen: /a%2Fb/c"));
  EXPECT_EQ(response.body, "GET /a%2Fb/c x=1&y ");
  EXPECT_EQ(Post(port(), "/API/MyPlugin", "hello").body, "POST /  hello");
  EXPECT_EQ(Get(port(), "/api/myplugin/", "DELETE").body, "DELETE /  ");
  RawResponse missing = Get(port(), "/api/myplugin/missing");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.body, "");
  RawResponse other = Get(port(), "/api/mypluginx/a");
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(other.body, "");
  std::lock_guard lock(mu);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].path, "/a%2Fb/c");
  EXPECT_EQ(seen[0].query, "x=1&y");
  EXPECT_EQ(seen[1].path, "/");
  EXPECT_EQ(seen[1].body, "hello");
}

TEST_F(HttpServerTest, EverythingElseIs404WithEmptyBody) {
  StartServer();
  for (const char* target : {"/", "/api", "/nope", "/.backstage/health/v1/other"}) {
    RawResponse response = Get(port(), target);
    EXPECT_EQ(response.status, 404) << target;
    EXPECT_EQ(response.body, "") << target;
  }
  EXPECT_EQ(Post(port(), "/.backstage/health/v1/liveness").status, 404);
}

TEST_F(HttpServerTest, ServesSchedulerRouterUnderPluginMount) {
  testing::MockScheduler scheduler;
  TaskDefinition task;
  task.id = "a/b";
  task.frequency = ManualFrequency{};
  task.timeout = std::chrono::minutes(1);
  task.fn = [](const std::stop_token&) {};
  ASSERT_THAT(scheduler.ScheduleTask(std::move(task)), IsOk());
  SchedulerRestRouter router("myplugin", scheduler);
  server_.Mount("/api/myplugin", router.AsHandler());
  StartServer();

  const std::string tasks = "/api/myplugin/.backstage/scheduler/v1/tasks";
  RawResponse list = Get(port(), tasks);
  EXPECT_EQ(list.status, 200);
  EXPECT_THAT(list.head, HasSubstr("Content-Type: application/json; charset=utf-8"));
  EXPECT_THAT(list.body, HasSubstr(R"({"tasks":[{"taskId":"a/b","pluginId":"myplugin")"));

  RawResponse head = Get(port(), tasks, "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_THAT(head.head, HasSubstr("Content-Length: " + std::to_string(list.body.size())));
  EXPECT_EQ(head.body, "");

  RawResponse trigger = Post(port(), tasks + "/a%2Fb/trigger");
  EXPECT_EQ(trigger.status, 200);
  EXPECT_EQ(trigger.body, "");

  RawResponse missing = Post(port(), tasks + "/nope/trigger?q=1");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(
      missing.body,
      R"({"error":{"name":"NotFoundError","message":"Task nope not found"},)"
      R"("request":{"method":"POST","url":"/.backstage/scheduler/v1/tasks/nope/trigger?q=1"},)"
      R"("response":{"statusCode":404}})");
  EXPECT_EQ(Post(port(), tasks + "/%zz/cancel").status, 400);
  EXPECT_EQ(Post(port(), tasks + "//trigger").status, 404);
}

TEST_F(HttpServerTest, OversizedBodyIs413AndServerKeepsRunning) {
  server_.Mount("/api/p",
                [](const HttpRequest&) { return std::optional<HttpResponse>(HttpResponse{}); });
  StartServer();
  EXPECT_EQ(Post(port(), "/api/p/x", std::string(1024, 'a')).status, 200);
  EXPECT_EQ(Post(port(), "/api/p/x", std::string(1025, 'a')).status, 413);
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
}

TEST_F(HttpServerTest, MalformedRequestLineIs400AndServerKeepsRunning) {
  StartServer();
  EXPECT_EQ(Exchange(port(), "GARBAGE\r\n\r\n").status, 400);
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
}

TEST_F(HttpServerTest, MissingVersionIs400) {
  StartServer();
  EXPECT_EQ(Exchange(port(), "GET /x\r\n\r\n").status, 400);
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
}

TEST_F(HttpServerTest, BadContentLengthIs4xx) {
  StartServer();
  EXPECT_EQ(
      Exchange(port(), "POST /x HTTP/1.1\r\nContent-Length: nope\r\nConnection: close\r\n\r\n")
              .status /
          100,
      4);
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
}

TEST_F(HttpServerTest, BodyMethodWithoutLengthHasAnEmptyBody) {
  StartServer();
  for (const std::string method : {"POST", "PUT", "PATCH", "DELETE"}) {
    EXPECT_EQ(Exchange(port(), method + " /nowhere HTTP/1.1\r\nHost: x\r\n\r\n").status, 404)
        << method;
  }
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
}

TEST_F(HttpServerTest, NegativeOrHugeContentLengthIs400AtOnce) {
  StartServer();
  for (const std::string length : {"-1", "18446744073709551616", "1e3", "0x10"}) {
    EXPECT_EQ(Exchange(port(), "POST /x HTTP/1.1\r\nContent-Length: " + length +
                                   "\r\nConnection: close\r\n\r\n")
                  .status,
              400)
        << length;
  }
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
}

TEST_F(HttpServerTest, BodyLargerThanTheLimitIs413BeforeItIsSent) {
  StartServer();
  // Only the head is sent: the answer must not wait for the announced 4 MB.
  EXPECT_EQ(Exchange(port(), "POST /x HTTP/1.1\r\nContent-Length: 4000000\r\n\r\naaaa").status,
            413);
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
}

TEST_F(HttpServerTest, StreamedBodyIs411) {
  StartServer();
  EXPECT_EQ(
      Exchange(port(), "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffff\r\nab")
          .status,
      411);
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
}

TEST_F(HttpServerTest, OverlongUriIs4xx) {
  StartServer();
  EXPECT_EQ(Get(port(), "/" + std::string(20000, 'a')).status / 100, 4);
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
}

// Issue 14: the statuses the server produces itself had empty bodies.
TEST_F(HttpServerTest, ServerErrorStatusesHaveBackstageErrorBodies) {
  StartServer();
  const RawResponse too_large =
      Exchange(port(), "POST /api/p/x?a=1 HTTP/1.1\r\nContent-Length: 4000\r\n\r\n");
  EXPECT_EQ(too_large.status, 413);
  EXPECT_THAT(too_large.head, HasSubstr("Content-Type: application/json; charset=utf-8"));
  EXPECT_EQ(too_large.body,
            R"({"error":{"name":"PayloadTooLargeError","message":"request entity too large"},)"
            R"("request":{"method":"POST","url":"/api/p/x?a=1"},"response":{"statusCode":413}})");
  const RawResponse streamed =
      Exchange(port(), "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  EXPECT_EQ(streamed.status, 411);
  EXPECT_EQ(streamed.body,
            R"({"error":{"name":"LengthRequiredError","message":"Length Required"},)"
            R"("request":{"method":"POST","url":"/x"},"response":{"statusCode":411}})");
  const RawResponse overlong = Get(port(), "/" + std::string(20000, 'a'));
  EXPECT_EQ(overlong.status, 414);
  EXPECT_THAT(overlong.body, HasSubstr(R"({"error":{"name":"URITooLongError")"));
  EXPECT_THAT(overlong.body, HasSubstr(R"("response":{"statusCode":414}})"));
  const RawResponse malformed = Exchange(port(), "GARBAGE\r\n\r\n");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_THAT(malformed.body, HasSubstr(R"({"error":{"name":"BadRequestError")"));
  EXPECT_THAT(malformed.body, HasSubstr(R"("response":{"statusCode":400}})"));
  EXPECT_EQ(Get(port(), "/nowhere").body, "");
}

// Issue 14: httplib answered 400 to a method it does not know; Express answers 404 (no route has
// the method), with the root not-found handler's empty body.
TEST_F(HttpServerTest, UnknownMethodIs404WithEmptyBody) {
  server_.Mount("/api/p",
                [](const HttpRequest&) { return std::optional<HttpResponse>(HttpResponse{}); });
  StartServer();
  for (const std::string method : {"FOO", "PROPFIND", "get", "M-SEARCH"}) {
    const RawResponse response = Get(port(), "/api/p/x", method);
    EXPECT_EQ(response.status, 404) << method;
    EXPECT_EQ(response.body, "") << method;
  }
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
}

// Issue 14: 500 requests with random methods added 501 series to /metrics.
TEST_F(HttpServerTest, OnRequestFoldsUnknownMethodsIntoOther) {
  StartServer();
  ASSERT_EQ(Get(port(), "/x", "OPTIONS").status, 404);
  ASSERT_EQ(requests_->WaitFor(1).size(), 1u);
  for (const std::string method : {"FOO", "BAR", "GARBAGE"}) {
    ASSERT_EQ(Get(port(), "/x", method).status / 100, 4) << method;
  }
  const std::vector<RequestRecorder::Record> records = requests_->WaitFor(4);
  ASSERT_EQ(records.size(), 4u);
  std::set<std::string> methods;
  for (const RequestRecorder::Record& record : records) {
    methods.insert(record.method);
  }
  EXPECT_EQ(records[0].method, "OPTIONS");
  EXPECT_EQ(methods, (std::set<std::string>{"OPTIONS", "other"}));
}

TEST_F(HttpServerTest, LongPathsAreRouted) {
  StartServer();
  EXPECT_EQ(Get(port(), "/" + std::string(8000, 'a')).status, 404);
  EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
}

TEST_F(HttpServerTest, WritesAccessLogWithoutHeaders) {
  StartServer();
  ASSERT_EQ(Exchange(port(),
                     "GET /.backstage/health/v1/liveness?token=x HTTP/1.1\r\nHost: localhost\r\n"
                     "Authorization: Bearer secret-token\r\nConnection: close\r\n\r\n")
                .status,
            200);
  const std::vector<RecordingLogger::Record> records = logger_->WaitFor(1);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].level, LogLevel::kDebug);  // a successful health probe
  EXPECT_EQ(records[0].message, "request");
  EXPECT_EQ(Field(records[0].fields, "method"), "GET");
  EXPECT_EQ(Field(records[0].fields, "path"), "/.backstage/health/v1/liveness");
  EXPECT_EQ(Field(records[0].fields, "status"), "200");
  EXPECT_THAT(Field(records[0].fields, "duration_ms"),
              ::testing::MatchesRegex(R"([0-9]+\.[0-9]{3})"));
  for (const auto& [name, value] : records[0].fields) {
    EXPECT_THAT(value, Not(HasSubstr("secret-token")));
  }
}

// Probes and scrapes would flood the log at info: their successful answers go to debug, their
// failures (a readiness 503, a scrape that fails) stay at info with every other request.
TEST_F(HttpServerTest, SuccessfulProbesAndQuietRoutesAreLoggedAtDebug) {
  HttpServerOptions options = Options();
  options.quiet_routes = {"/scrape"};
  HttpServer server(std::move(options));
  const auto answer = [](int status) {
    return [status](const HttpRequest&) -> std::optional<HttpResponse> {
      HttpResponse response;
      response.status = status;
      return response;
    };
  };
  server.Mount("/scrape", answer(200));
  server.Mount("/scrape-failing", answer(500));
  server.Mount("/api/jobs", answer(200));
  ASSERT_THAT(server.Start(), IsOk());
  const std::vector<std::pair<std::string, LogLevel>> expected = {
      {"/.backstage/health/v1/liveness", LogLevel::kDebug},
      {"/.backstage/health/v1/readiness", LogLevel::kInfo},  // 503: not ready
      {"/scrape", LogLevel::kDebug},
      {"/scrape-failing", LogLevel::kInfo},
      {"/api/jobs", LogLevel::kInfo}};
  for (const auto& [path, level] : expected) {
    Get(server.port(), path);
  }
  const std::vector<RecordingLogger::Record> records = logger_->WaitFor(expected.size());
  ASSERT_EQ(records.size(), expected.size());
  for (const auto& entry : expected) {
    const std::string& path = entry.first;
    const auto record = std::find_if(records.begin(), records.end(), [&](const auto& r) {
      return Field(r.fields, "path") == path;
    });
    ASSERT_NE(record, records.end()) << path;
    EXPECT_EQ(record->level, entry.second) << path;
  }
}

TEST_F(HttpServerTest, AccessLogCoversRequestsRefusedBeforeRouting) {
  StartServer();
  ASSERT_EQ(Exchange(port(), "GARBAGE\r\n\r\n").status, 400);
  ASSERT_EQ(Post(port(), "/api/p/x", std::string(2000, 'a')).status, 413);
  std::vector<RecordingLogger::Record> records = logger_->WaitFor(2);
  ASSERT_EQ(records.size(), 2u);
  // Each connection logs on its own thread after answering, so the two lines may come in either
  // order.
  if (Field(records[0].fields, "status") != "400") std::swap(records[0], records[1]);
  EXPECT_EQ(Field(records[0].fields, "status"), "400");
  EXPECT_EQ(Field(records[1].fields, "method"), "POST");
  EXPECT_EQ(Field(records[1].fields, "path"), "/api/p/x");
  EXPECT_EQ(Field(records[1].fields, "status"), "413");
}

TEST_F(HttpServerTest, OnRequestNamesTheRouteThatAnswered) {
  server_.Mount("/api/p/", [](const HttpRequest& request) -> std::optional<HttpResponse> {
    if (request.path == "/missing") {
      return std::nullopt;
    }
    HttpResponse response;
    response.status = 201;
    return response;
  });
  server_.Mount("/metrics",
                [](const HttpRequest&) { return std::optional<HttpResponse>(HttpResponse{}); });
  StartServer();
  struct Case {
    std::string method;
    std::string target;
    std::string route;
    int status;
  };
  const std::vector<Case> cases = {
      {"GET", "/api/p/x?y=1", "/api/p", 201},
      {"DELETE", "/API/P", "/api/p", 201},
      {"GET", "/api/p/missing", "/api/p", 404},
      {"GET", "/metrics", "/metrics", 200},
      {"GET", "/.backstage/health/v1/liveness", "/.backstage/health/v1/liveness", 200},
      {"HEAD", "/.backstage/health/v1/readiness/", "/.backstage/health/v1/readiness", 503},
      {"POST", "/.backstage/health/v1/liveness", "unmatched", 404},
      {"GET", "/api/px", "unmatched", 404},
      {"GET", "/", "unmatched", 404},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    ASSERT_EQ(
        c.method == "POST" ? Post(port(), c.target).status : Get(port(), c.target, c.method).status,
        c.status)
        << c.target;
    // One connection at a time, each reported before the next is sent: the order is fixed.
    const std::vector<RequestRecorder::Record> records = requests_->WaitFor(i + 1);
    ASSERT_EQ(records.size(), i + 1) << c.target;
    EXPECT_EQ(records[i].method, c.method) << c.target;
    EXPECT_EQ(records[i].route, c.route) << c.target;
    EXPECT_EQ(records[i].status, c.status) << c.target;
  }
}

TEST_F(HttpServerTest, OnRequestCoversRequestsRefusedBeforeRouting) {
  server_.Mount("/api/p",
                [](const HttpRequest&) { return std::optional<HttpResponse>(HttpResponse{}); });
  StartServer();
  ASSERT_EQ(Exchange(port(), "GARBAGE\r\n\r\n").status, 400);
  ASSERT_EQ(requests_->WaitFor(1).size(), 1u);
  ASSERT_EQ(Post(port(), "/api/p/x", std::string(2000, 'a')).status, 413);
  const std::vector<RequestRecorder::Record> records = requests_->WaitFor(2);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].status, 400);
  EXPECT_EQ(records[0].route, "unmatched");
  EXPECT_EQ(records[1].method, "POST");
  EXPECT_EQ(records[1].route, "/api/p");
  EXPECT_EQ(records[1].status, 413);
}

TEST_F(HttpServerTest, OnRequestReportsHandlerExceptionsAs500) {
  server_.Mount("/api/p", [](const HttpRequest&) -> std::optional<HttpResponse> {
    throw std::runtime_error("boom");
  });
  StartServer();
  ASSERT_EQ(Get(port(), "/api/p/x").status, 500);
  const std::vector<RequestRecorder::Record> records = requests_->WaitFor(1);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].route, "/api/p");
  EXPECT_EQ(records[0].status, 500);
}

TEST(HttpServerOnRequestTest, DurationIsMeasuredOnTheServersClock) {
  testing::ManualClock clock;
  auto requests = std::make_shared<RequestRecorder>();
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.clock = &clock;
  options.on_request = [requests](const HttpRequestRecord& record) { requests->Add(record); };
  HttpServer server(options);
  server.Mount("/api/slow", [&clock](const HttpRequest&) {
    clock.Advance(std::chrono::milliseconds(250));
    return std::optional<HttpResponse>(HttpResponse{});
  });
  ASSERT_THAT(server.Start(), IsOk());
  ASSERT_EQ(Get(server.port(), "/api/slow/x").status, 200);
  const std::vector<RequestRecorder::Record> records = requests->WaitFor(1);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].route, "/api/slow");
  EXPECT_EQ(records[0].duration, std::chrono::milliseconds(250));
}

TEST_F(HttpServerTest, HandlerExceptionIs500WithLogId) {
  server_.Mount("/api/p", [](const HttpRequest&) -> std::optional<HttpResponse> {
    throw std::runtime_error("secret detail");
  });
  StartServer();
  RawResponse response = Get(port(), "/api/p/x?y=1");
  EXPECT_EQ(response.status, 500);
  EXPECT_THAT(response.body, ::testing::MatchesRegex(
                                 R"(\{"error":\{"name":"Error","message":"An internal error )"
                                 R"(occurred logId=[0-9a-f]{20}"\},"request":\{"method":"GET",)"
                                 R"("url":"/api/p/x\?y=1"\},"response":\{"statusCode":500\}\})"));
  EXPECT_THAT(response.body, Not(HasSubstr("secret")));
}

// Stop closes an idle keep-alive connection at once instead of waiting for its client.
TEST_F(HttpServerTest, StopWithIdleKeepAliveConnection) {
  StartServer();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port());
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API.
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  const std::string request = "GET /x HTTP/1.1\r\nHost: localhost\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  char buffer[1024];
  ASSERT_GT(::recv(fd, buffer, sizeof buffer, 0), 0);
  server_.Stop();
  EXPECT_EQ(server_.port(), 0);
  ::close(fd);
}

TEST(HttpServerTimeoutTest, StalledHeadIsAnswered408AfterTheHeadTimeout) {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.head_timeout = std::chrono::milliseconds(200);
  HttpServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  timeval timeout{};
  timeout.tv_sec = 8;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(server.port());
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API.
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  const std::string partial = "GET /.backstage/health/v1/liveness HTTP/1.1\r\nHost: x\r\n";
  ASSERT_EQ(::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(partial.size()));
  char buffer[1024];
  // A timeout of our own receive (-1) would mean the server kept waiting.
  const ssize_t received = ::recv(fd, buffer, sizeof buffer, 0);
  ASSERT_GT(received, 0);
  const std::string answer(buffer, static_cast<std::size_t>(received));
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 408 "));
  EXPECT_THAT(answer, HasSubstr(R"({"error":{"name":"RequestTimeoutError")"));
  ::close(fd);
  EXPECT_EQ(Get(server.port(), "/.backstage/health/v1/liveness").status, 200);
}

TEST_F(HttpServerTest, StartTwiceFailsAndStopIsIdempotent) {
  StartServer();
  EXPECT_THAT(server_.Start(), StatusIs(StatusCode::kFailedPrecondition));
  server_.Stop();
  server_.Stop();
  EXPECT_EQ(server_.port(), 0);
}

TEST_F(HttpServerTest, BusyPortIsUnavailable) {
  StartServer();
  HttpServerOptions options = Options();
  options.port = port();
  HttpServer second(options);
  const Status status = second.Start();
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable, "127.0.0.1:" + std::to_string(port())));
  EXPECT_EQ(second.port(), 0);
}

TEST_F(HttpServerTest, StopClosesTheListeningSocket) {
  StartServer();
  const std::uint16_t bound = port();
  ASSERT_EQ(Get(bound, "/.backstage/health/v1/liveness").status, 200);
  server_.Stop();
  EXPECT_EQ(Get(bound, "/.backstage/health/v1/liveness").status, 0);
}

int ThreadCount() {
  return static_cast<int>(std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                                        std::filesystem::directory_iterator()));
}

// Blocks handlers until released; counts how many are waiting.
class Gate {
 public:
  void Enter() {
    std::unique_lock lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  void WaitForWaiting(int count) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return waiting_ >= count; });
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // A handler that waits at the gate, then answers 200.
  HttpHandler Handler() {
    return [this](const HttpRequest&) {
      Enter();
      return std::optional<HttpResponse>(HttpResponse{});
    };
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

// Issue 14: 8 slow connections stopped all HTTP service on the thread-per-connection server.
TEST_F(HttpServerTest, HundredsOfIdleAndSlowConnectionsNeitherStarveLivenessNorAddThreads) {
  StartServer();
  ASSERT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
  const int threads_before = ThreadCount();
  std::vector<std::unique_ptr<Client>> attackers;
  for (int i = 0; i < 300; ++i) {
    attackers.push_back(std::make_unique<Client>(port()));
    ASSERT_TRUE(attackers.back()->connected());
  }
  for (int i = 0; i < 64; ++i) {
    attackers.push_back(std::make_unique<Client>(port()));
    ASSERT_TRUE(attackers.back()->Send("GET /.backstage/health/v1/liveness HTTP/1.1\r\nX-A: "));
  }
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
  }
  EXPECT_EQ(ThreadCount(), threads_before);
}

TEST_F(HttpServerTest, TooManyHeaderFieldsAre431WithABackstageBody) {
  StartServer();
  std::string request = "GET /.backstage/health/v1/liveness HTTP/1.1\r\n";
  for (int i = 0; i < 101; ++i) {
    request += "X-" + std::to_string(i) + ": v\r\n";
  }
  const RawResponse response = Exchange(port(), request + "\r\n");
  EXPECT_EQ(response.status, 431);
  EXPECT_EQ(response.body,
            R"({"error":{"name":"RequestHeaderFieldsTooLargeError",)"
            R"("message":"Request Header Fields Too Large"},"request":{"method":"GET",)"
            R"("url":"/.backstage/health/v1/liveness"},"response":{"statusCode":431}})");
  EXPECT_EQ(Exchange(port(), "GET / HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n").status,
            431);
}

TEST(HttpServerLimitsTest, AHeadStillComingAtItsDeadlineIs408) {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.head_timeout = std::chrono::milliseconds(300);
  HttpServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  Client slow(server.port());
  ASSERT_TRUE(slow.Send("GET / HTTP/1.1\r\n"));
  // The client keeps sending, a header line every 50 ms for up to 2 s: only a deadline for the
  // whole head ends it (a per-read timeout would not).
  for (int i = 0; i < 40 && !slow.HasData(); ++i) {
    if (!slow.Send("X-" + std::to_string(i) + ": v\r\n")) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string answer = slow.ReadUntil("\r\n\r\n");
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 408 "));
}

TEST(HttpServerLimitsTest, IdleConnectionIsClosedAfterTheKeepAliveTimeout) {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.keep_alive_timeout = std::chrono::milliseconds(200);
  HttpServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  Client idle(server.port());
  ASSERT_TRUE(idle.connected());
  EXPECT_TRUE(idle.ClosedByServer());
  Client kept(server.port());
  ASSERT_TRUE(kept.Send("GET /.backstage/health/v1/liveness HTTP/1.1\r\n\r\n"));
  EXPECT_THAT(kept.ReadUntil("}"), HasSubstr("Keep-Alive: timeout=1"));
  EXPECT_TRUE(kept.ClosedByServer());
}

TEST(HttpServerLimitsTest, AClientAtItsCapDisplacesItsOldestWaitingConnection) {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.max_connections_per_client = 3;
  HttpServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  Client oldest(server.port());
  Client second(server.port());
  ASSERT_TRUE(second.Send("GET / HTTP/1.1\r\n"));
  Client third(server.port());
  ASSERT_TRUE(oldest.connected() && third.connected());
  EXPECT_EQ(Get(server.port(), "/.backstage/health/v1/liveness").status, 200);
  EXPECT_TRUE(oldest.ClosedByServer());
  Client fourth(server.port());
  ASSERT_TRUE(fourth.connected());
  // At the cap again (second, third, fourth): the oldest waiting is now the one still sending
  // its head.
  EXPECT_EQ(Get(server.port(), "/.backstage/health/v1/liveness").status, 200);
  EXPECT_TRUE(second.ClosedByServer());
}

TEST(HttpServerLimitsTest, AtTheCapWithEveryConnectionBusyANewOneGets503) {
  Gate gate;
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.max_connections = 2;
  HttpServer server(options);
  server.Mount("/api/p", gate.Handler());
  ASSERT_THAT(server.Start(), IsOk());
  Client first(server.port());
  Client second(server.port());
  ASSERT_TRUE(first.Send("GET /api/p/x HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(second.Send("GET /api/p/x HTTP/1.1\r\n\r\n"));
  gate.WaitForWaiting(2);
  const RawResponse refused = Get(server.port(), "/.backstage/health/v1/liveness");
  EXPECT_EQ(refused.status, 503);
  EXPECT_THAT(refused.body, HasSubstr(R"("name":"ServiceUnavailableError")"));
  gate.Open();
  EXPECT_THAT(first.ReadUntil("\r\n\r\n"), ::testing::StartsWith("HTTP/1.1 200 "));
}

TEST(HttpServerLimitsTest, HealthIsAnsweredWhileEveryHandlerIsBusyAndAFullQueueIs503) {
  Gate gate;
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.handler_threads = 1;
  options.max_queued_requests = 1;
  HttpServer server(options);
  server.Mount("/api/p", gate.Handler());
  ASSERT_THAT(server.Start(), IsOk());
  Client running(server.port());
  ASSERT_TRUE(running.Send("GET /api/p/x HTTP/1.1\r\n\r\n"));
  gate.WaitForWaiting(1);
  Client queued(server.port());
  ASSERT_TRUE(queued.Send("GET /api/p/x HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(Get(server.port(), "/.backstage/health/v1/liveness").status, 200);
  // The queued request may not have reached the queue yet: the liveness answer above proves the
  // I/O thread has read it (requests are read in order on one thread).
  const RawResponse overflow = Get(server.port(), "/api/p/x");
  EXPECT_EQ(overflow.status, 503);
  EXPECT_THAT(overflow.body, HasSubstr(R"("name":"ServiceUnavailableError")"));
  gate.Open();
  EXPECT_THAT(running.ReadUntil("\r\n\r\n"), ::testing::StartsWith("HTTP/1.1 200 "));
  EXPECT_THAT(queued.ReadUntil("\r\n\r\n"), ::testing::StartsWith("HTTP/1.1 200 "));
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  server_.Mount("/api/p", [](const HttpRequest& request) {
    HttpResponse response;
    response.body = request.path;
    return std::optional<HttpResponse>(response);
  });
  StartServer();
  Client client(port());
  ASSERT_TRUE(client.Send("GET /api/p/one HTTP/1.1\r\n\r\nGET /api/p/two HTTP/1.1\r\n\r\n"));
  const std::string both = client.ReadUntil("/two");
  EXPECT_LT(both.find("/one"), both.find("/two"));
}

TEST_F(HttpServerTest, ExpectContinueGetsA100BeforeTheBody) {
  server_.Mount("/api/p", [](const HttpRequest& request) {
    HttpResponse response;
    response.body = "got " + request.body;
    return std::optional<HttpResponse>(response);
  });
  StartServer();
  Client client(port());
  ASSERT_TRUE(
      client.Send("POST /api/p/x HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_EQ(client.ReadUntil("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(client.Send("abc"));
  EXPECT_THAT(client.ReadUntil("got abc"), HasSubstr("HTTP/1.1 200 OK"));
}

// Issue 14: accepted client sockets leaked into tasks.
TEST_F(HttpServerTest, EveryDescriptorOfTheServerIsCloseOnExec) {
  StartServer();
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 5; ++i) {
    clients.push_back(std::make_unique<Client>(port()));
    ASSERT_TRUE(clients.back()->Send("GET /.backstage/health/v1/liveness HTTP/1.1\r\n\r\n"));
    ASSERT_THAT(clients.back()->ReadUntil("}"), HasSubstr("200 OK"));
  }
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::stoi(entry.path().filename().string());
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (fd <= 2 || (target.rfind("socket:", 0) != 0 && target.rfind("anon_inode:", 0) != 0)) {
      continue;
    }
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags < 0) {
      continue;  // the directory listing's own descriptor, closed meanwhile
    }
    ++checked;
    EXPECT_NE(flags & FD_CLOEXEC, 0) << "fd " << fd << " -> " << target;
  }
  // Five client and five server sockets, the listener, and Asio's epoll, eventfd and timerfd.
  EXPECT_GE(checked, 11);
}

// A handler that answers every request with an event stream and keeps the writers it is given.
class StreamCollector {
 public:
  HttpHandler Handler() {
    return [this](const HttpRequest&) {
      HttpResponse response;
      response.headers.emplace_back("Content-Type", "text/event-stream");
      response.stream = [this](std::shared_ptr<HttpBodyWriter> writer) {
        {
          std::lock_guard lock(mu_);
          writers_.push_back(std::move(writer));
        }
        cv_.notify_all();
      };
      return std::optional<HttpResponse>(response);
    };
  }
  // Waits (real time, bounded) until `count` streams have started; returns their writers.
  std::vector<std::shared_ptr<HttpBodyWriter>> WaitFor(std::size_t count) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return writers_.size() >= count; });
    return writers_;
  }
  // Waits (real time, bounded) until `writer` reports that its stream closed.
  static bool WaitClosed(HttpBodyWriter& writer) {
    struct Flag {
      std::mutex mu;
      std::condition_variable cv;
      bool closed = false;
    };
    // Shared with the callback, which may run after a timed-out wait has returned.
    auto flag = std::make_shared<Flag>();
    writer.OnClose([flag] {
      std::lock_guard lock(flag->mu);
      flag->closed = true;
      flag->cv.notify_all();
    });
    std::unique_lock lock(flag->mu);
    return flag->cv.wait_for(lock, std::chrono::seconds(10), [&] { return flag->closed; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<HttpBodyWriter>> writers_;
};

// Server-sent events: each stream holds a connection, not a thread.
TEST_F(HttpServerTest, StreamsHoldNoThreadAndEndWithTheirWriter) {
  StreamCollector streams;
  server_.Mount("/api/p", streams.Handler());
  StartServer();
  ASSERT_EQ(Get(port(), "/.backstage/health/v1/liveness").status, 200);
  const int threads_before = ThreadCount();
  constexpr int kStreams = 100;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.push_back(std::make_unique<Client>(port()));
    ASSERT_TRUE(clients.back()->Send("GET /api/p/events HTTP/1.1\r\n\r\n"));
  }
  const std::vector<std::shared_ptr<HttpBodyWriter>> writers = streams.WaitFor(kStreams);
  ASSERT_EQ(writers.size(), std::size_t{kStreams});
  EXPECT_EQ(ThreadCount(), threads_before);
  for (const auto& writer : writers) {
    EXPECT_TRUE(writer->Write("data: one\n\n"));
    writer->Close();
    EXPECT_FALSE(writer->Write("data: late\n\n"));
  }
  for (const auto& client : clients) {
    const std::string received = client->ReadUntil("0\r\n\r\n");
    EXPECT_THAT(received, HasSubstr("Transfer-Encoding: chunked\r\n"));
    EXPECT_THAT(received, HasSubstr("Content-Type: text/event-stream\r\n"));
    EXPECT_THAT(received, HasSubstr("\r\n\r\nb\r\ndata: one\n\n\r\n0\r\n\r\n"));
    EXPECT_TRUE(client->ClosedByServer());
  }
}

TEST(HttpServerStreamTest, AStreamWhoseClientStopsReadingIsClosedAndAGoneClientToo) {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.max_stream_backlog_bytes = 256 * 1024;
  HttpServer server(options);
  StreamCollector streams;
  server.Mount("/api/p", streams.Handler());
  ASSERT_THAT(server.Start(), IsOk());
  // One stream after the other, so that writers[0] is the stalled client's.
  auto stalled = std::make_unique<Client>(server.port());
  ASSERT_TRUE(stalled->Send("GET /api/p/events HTTP/1.1\r\n\r\n"));
  ASSERT_EQ(streams.WaitFor(1).size(), 1U);
  auto gone = std::make_unique<Client>(server.port());
  ASSERT_TRUE(gone->Send("GET /api/p/events HTTP/1.1\r\n\r\n"));
  const std::vector<std::shared_ptr<HttpBodyWriter>> writers = streams.WaitFor(2);
  ASSERT_EQ(writers.size(), 2U);
  const std::string chunk(64 * 1024, 'x');
  std::size_t written = 0;
  // The kernel's socket buffers take some megabytes; past them the backlog fills.
  while (writers[0]->Write(chunk) && written < std::size_t{1} << 30) {
    written += chunk.size();
  }
  EXPECT_LT(written, std::size_t{1} << 30);
  EXPECT_TRUE(writers[0]->closed());
  EXPECT_TRUE(stalled->ClosedByServer());
  gone.reset();
  EXPECT_TRUE(StreamCollector::WaitClosed(*writers[1]));
  EXPECT_TRUE(writers[1]->closed());
}

TEST(HttpServerLimitsTest, BodiesBeyondTheBufferedBudgetAre503BeforeTheyAreRead) {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.max_request_body_bytes = 1000;
  options.max_buffered_body_bytes = 1500;
  HttpServer server(options);
  server.Mount("/api/p", [](const HttpRequest& request) {
    HttpResponse response;
    response.body = std::to_string(request.body.size());
    return std::optional<HttpResponse>(response);
  });
  ASSERT_THAT(server.Start(), IsOk());
  Client first(server.port());
  ASSERT_TRUE(
      first.Send("POST /api/p/x HTTP/1.1\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n"));
  // Its 100 Continue says the server has reserved 1000 of the 1500 bytes for it.
  ASSERT_EQ(first.ReadUntil("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_EQ(Exchange(server.port(), "POST /api/p/x HTTP/1.1\r\nContent-Length: 600\r\n\r\n").status,
            503);
  ASSERT_TRUE(first.Send(std::string(1000, 'a')));
  EXPECT_THAT(first.ReadUntil("\r\n\r\n1000"), HasSubstr("HTTP/1.1 200 OK"));
  EXPECT_EQ(Post(server.port(), "/api/p/x", std::string(600, 'b')).status, 200);
}

}  // namespace
}  // namespace stagehand
