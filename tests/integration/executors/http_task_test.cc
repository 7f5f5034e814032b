#include "stagehand/executors/http_task.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "integration/executors/recording_logger.h"
#include "stagehand/model/run_report.h"
#include "stagehand/model/task_run.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::LogRecord;
using ::stagehand::testing::RecordingLogger;
using ::stagehand::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::size_t kMiB = 1024 * 1024;
constexpr std::size_t kHugeBodyBytes = 300 * kMiB;
constexpr std::size_t kBombInflatedBytes = 256 * kMiB;
// How far the test process (client and server) may grow while a huge body is refused.
constexpr long kMaxGrowthKb = 64 * 1024;

// Returns the value, in kB, of `key` ("VmRSS:", "VmHWM:") in /proc/self/status, or -1.
long ProcStatusKb(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key, 0) == 0) {
      return std::stol(line.substr(key.size()));
    }
  }
  return -1;
}

// Resets the peak RSS (VmHWM) to the current RSS; returns whether the kernel allowed it.
bool ResetPeakRss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return clear_refs.good();
}

// Returns a gzip stream of `size` zero bytes, compressed piece by piece so that the zeros are
// never held at once. Uses cpp-httplib's own gzip compressor (zlib), which the library exports.
std::string GzipOfZeros(std::size_t size) {
  httplib::detail::gzip_compressor compressor;
  std::string out;
  const std::string zeros(kMiB, '\0');
  for (std::size_t done = 0; done < size; done += zeros.size()) {
    bool last = done + zeros.size() >= size;
    bool ok =
        compressor.compress(zeros.data(), zeros.size(), last, [&](const char* data, size_t n) {
          out.append(data, n);
          return true;
        });
    if (!ok) {
      return "";
    }
  }
  return out;
}

// A loopback server whose /slow handler blocks until Release() (or 5 s).
class HttpTaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Post("/ok", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_body_ = req.body;
        last_header_ = req.get_header_value("X-Token");
        last_traceparent_ = req.get_header_value("traceparent");
        last_tracestate_ = req.get_header_value("tracestate");
        last_method_ = req.method;
      }
      res.set_content("fine", "text/plain");
    });
    server_.Put("/ok", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_method_ = req.method;
      }
      res.status = 204;
    });
    server_.Post("/fail", [](const httplib::Request&, httplib::Response& res) {
      res.status = 500;
      res.set_content("boom: " + std::string(300, 'x'), "text/plain");
    });
    server_.Post("/fail-long", [](const httplib::Request&, httplib::Response& res) {
      res.status = 503;
      res.set_content(std::string(10000, 'y'), "text/plain");
    });
    server_.Get("/huge", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_accept_encoding_ = req.get_header_value("Accept-Encoding");
      }
      res.set_content_provider(kHugeBodyBytes, "application/octet-stream",
                               [chunk = std::string(64 * 1024, 'z')](
                                   std::size_t, std::size_t length, httplib::DataSink& sink) {
                                 return sink.write(chunk.data(), std::min(length, chunk.size()));
                               });
    });
    server_.Get("/bomb", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      last_accept_encoding_ = req.get_header_value("Accept-Encoding");
      res.set_header("Content-Encoding", "gzip");
      res.set_content(bomb_, "application/octet-stream");
    });
    server_.Post("/created",
                 [](const httplib::Request&, httplib::Response& res) { res.status = 201; });
    server_.Post("/slow", [this](const httplib::Request&, httplib::Response& res) {
      std::unique_lock<std::mutex> lock(mu_);
      entered_slow_ = true;
      cv_.notify_all();
      cv_.wait_for(lock, std::chrono::seconds(5), [this] { return released_; });
      res.set_content("late", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    listener_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) {
      std::this_thread::yield();
    }
  }

  void TearDown() override {
    Release();
    server_.stop();
    listener_.join();
  }

  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }

  bool WaitUntilSlowEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [this] { return entered_slow_; });
  }

  HttpTaskSpec Spec(const std::string& path) {
    HttpTaskSpec spec;
    spec.url = "http://127.0.0.1:" + std::to_string(port_) + path;
    spec.task_id = "hook";
    return spec;
  }

  Status Run(const HttpTaskSpec& spec) {
    return RunHttpTask(spec, logger_, SystemClock::Instance(), std::stop_token());
  }

  httplib::Server server_;
  std::thread listener_;
  int port_ = 0;
  RecordingLogger logger_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_slow_ = false;
  bool released_ = false;
  std::string last_body_;
  std::string last_header_;
  std::string last_method_;
  std::string last_accept_encoding_;
  std::string last_traceparent_;
  std::string last_tracestate_;
  std::string bomb_;
};

TEST_F(HttpTaskTest, SucceedsOn200AndSendsBodyAndHeaders) {
  HttpTaskSpec spec = Spec("/ok");
  spec.body = R"({"a":1})";
  spec.headers = {{"X-Token", "secret"}, {"Content-Type", "application/json"}};
  Status status = Run(spec);
  ASSERT_THAT(status, IsOk());
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(last_method_, "POST");
  EXPECT_EQ(last_body_, R"({"a":1})");
  EXPECT_EQ(last_header_, "secret");
}

// Issue 18: a traced run's request carries its trace context, so the receiver continues the trace.
TEST_F(HttpTaskTest, ATracedRunSendsTraceparentAndTracestate) {
  const TraceContext trace =
      *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "v=1");
  Status status = RunHttpTask(Spec("/ok"), logger_, SystemClock::Instance(),
                              RunControl{std::stop_token(), std::stop_token(), nullptr, trace});
  ASSERT_THAT(status, IsOk());
  {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(last_traceparent_, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    EXPECT_EQ(last_tracestate_, "v=1");
  }
  ASSERT_THAT(Run(Spec("/ok")), IsOk());
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(last_traceparent_, "") << "an untraced run sends none";
}

// Keeps the spans it is given. Thread-safe.
class RecordingSpanSink final : public SpanSink {
 public:
  void OnEnd(SpanData span) override {
    std::lock_guard<std::mutex> lock(mu_);
    spans_.push_back(std::move(span));
  }
  std::vector<SpanData> spans() {
    std::lock_guard<std::mutex> lock(mu_);
    return spans_;
  }

 private:
  std::mutex mu_;
  std::vector<SpanData> spans_;
};

std::optional<AttributeValue> FindAttribute(const SpanData& span, const std::string& key) {
  for (const auto& [name, value] : span.attributes) {
    if (name == key) return value;
  }
  return std::nullopt;
}

// Issue 18: with a sink for its spans, a sampled run's request is a client span of its own, child
// of the run's span, and the request's traceparent names it.
TEST_F(HttpTaskTest, ASampledRunsRequestIsAClientSpanNamedInItsTraceparent) {
  const TraceContext run =
      *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "v=1");
  RecordingSpanSink sink;
  HttpTaskSpec spec = Spec("/ok?token=hush");
  spec.method = "post";
  spec.expect_status = 201;
  Status status =
      RunHttpTask(spec, logger_, SystemClock::Instance(),
                  RunControl{std::stop_token(), std::stop_token(), nullptr, run, &sink});
  ASSERT_THAT(status, StatusIs(StatusCode::kUnavailable));

  const std::vector<SpanData> spans = sink.spans();
  ASSERT_EQ(spans.size(), 1u);
  const SpanData& span = spans[0];
  EXPECT_EQ(span.name, "POST");
  EXPECT_EQ(span.kind, SpanKind::kClient);
  EXPECT_EQ(span.context.trace_id, run.trace_id);
  EXPECT_NE(span.context.span_id, run.span_id);
  EXPECT_EQ(span.parent_span_id, std::optional<SpanId>(run.span_id));
  EXPECT_LE(span.start, span.end);
  EXPECT_EQ(span.status, SpanStatusCode::kError);
  EXPECT_THAT(span.status_message, HasSubstr("status 200"));
  EXPECT_EQ(FindAttribute(span, "http.request.method"), AttributeValue(std::string("POST")));
  EXPECT_EQ(FindAttribute(span, "http.response.status_code"), AttributeValue(std::int64_t{200}));
  EXPECT_EQ(FindAttribute(span, "error.type"), AttributeValue(std::string("200")));
  EXPECT_EQ(FindAttribute(span, "server.address"), AttributeValue(std::string("127.0.0.1")));
  EXPECT_EQ(FindAttribute(span, "server.port"), AttributeValue(std::int64_t{port_}));
  EXPECT_EQ(FindAttribute(span, "url.full"),
            AttributeValue("http://127.0.0.1:" + std::to_string(port_) + "/ok?token=***"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(last_traceparent_, FormatTraceparent(span.context));
    EXPECT_EQ(last_tracestate_, "v=1");
  }

  TraceContext unsampled = run;
  unsampled.flags = 0;
  ASSERT_TRUE(
      RunHttpTask(Spec("/ok"), logger_, SystemClock::Instance(),
                  RunControl{std::stop_token(), std::stop_token(), nullptr, unsampled, &sink})
          .ok());
  EXPECT_EQ(sink.spans().size(), 1u) << "an unsampled run's request makes no span";
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(last_traceparent_, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
}

TEST_F(HttpTaskTest, UsesTheConfiguredMethod) {
  HttpTaskSpec spec = Spec("/ok");
  spec.method = "put";
  Status status = Run(spec);
  ASSERT_THAT(status, IsOk());
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(last_method_, "PUT");
}

// Issue 14: the start of a failed response's body went into lastRunError whether or not it held
// anything secret.
TEST_F(HttpTaskTest, ServerErrorFailsWithStatusAndReasonButNoBody) {
  Status status = Run(Spec("/fail"));
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(status.message(), AllOf(HasSubstr("status 500 Internal Server Error (expected 2xx)"),
                                      Not(HasSubstr("boom")), Not(HasSubstr("body"))));
}

TEST_F(HttpTaskTest, ServerErrorQuotesTheBodyWhenAskedTo) {
  HttpTaskSpec spec = Spec("/fail");
  spec.include_body_in_error = true;
  Status status = Run(spec);
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("status 500"), HasSubstr("expected 2xx"), HasSubstr("boom: xxx")));
  std::string body_excerpt = status.message().substr(status.message().find("boom"));
  EXPECT_EQ(body_excerpt.size(), 200U);
}

TEST_F(HttpTaskTest, ErrorSaysTheBodyWasTruncatedAtTheCap) {
  HttpTaskSpec spec = Spec("/fail-long");
  spec.max_response_bytes = 1024;
  spec.include_body_in_error = true;
  HttpTaskResponse response;
  Status status = RunHttpTask(spec, logger_, SystemClock::Instance(), std::stop_token(), &response);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("status 503"), HasSubstr("body truncated at 1024 bytes"),
                    HasSubstr("body: yyy")));
  EXPECT_EQ(response.status, 503);
  EXPECT_EQ(response.body, std::string(1024, 'y'));
  EXPECT_TRUE(response.body_truncated);
}

// Issue 14: a 300 MB response grew the daemon by 464 MB.
TEST_F(HttpTaskTest, HugeResponseIsCutAtTheCapAndMemoryStaysBounded) {
  HttpTaskSpec spec = Spec("/huge");
  spec.method = "GET";
  ASSERT_EQ(spec.max_response_bytes, kMiB);
  long rss_before_kb = ProcStatusKb("VmRSS:");
  ASSERT_GT(rss_before_kb, 0);
  bool peak_reset = ResetPeakRss();
  HttpTaskResponse response;
  Status status = RunHttpTask(spec, logger_, SystemClock::Instance(), std::stop_token(), &response);
  long peak_kb = peak_reset ? ProcStatusKb("VmHWM:") : ProcStatusKb("VmRSS:");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body.size(), kMiB);
  EXPECT_TRUE(response.body_truncated);
  RecordProperty("peak_growth_kb", std::to_string(peak_kb - rss_before_kb));
  EXPECT_LT(peak_kb - rss_before_kb, kMaxGrowthKb) << "peak measured: " << peak_reset;
  std::optional<LogRecord> record = logger_.WaitFor("http task response");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->Field("body_truncated"), "true");
  EXPECT_EQ(record->Field("body_bytes"), std::to_string(kMiB));
}

// Issue 14: a 510 KB gzip bomb grew the daemon by 218 MB.
TEST_F(HttpTaskTest, GzipBombIsNotInflated) {
  std::string bomb = GzipOfZeros(kBombInflatedBytes);
  ASSERT_FALSE(bomb.empty());
  ASSERT_LT(bomb.size(), kMiB);
  {
    std::lock_guard<std::mutex> lock(mu_);
    bomb_ = bomb;
  }
  HttpTaskSpec spec = Spec("/bomb");
  spec.method = "GET";
  long rss_before_kb = ProcStatusKb("VmRSS:");
  ASSERT_GT(rss_before_kb, 0);
  bool peak_reset = ResetPeakRss();
  HttpTaskResponse response;
  Status status = RunHttpTask(spec, logger_, SystemClock::Instance(), std::stop_token(), &response);
  long peak_kb = peak_reset ? ProcStatusKb("VmHWM:") : ProcStatusKb("VmRSS:");
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(response.body.size(), bomb.size());
  EXPECT_TRUE(response.body == bomb);
  EXPECT_FALSE(response.body_truncated);
  RecordProperty("peak_growth_kb", std::to_string(peak_kb - rss_before_kb));
  EXPECT_LT(peak_kb - rss_before_kb, kMaxGrowthKb) << "peak measured: " << peak_reset;
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(last_accept_encoding_, "identity");
}

TEST(RedactUrlTest, HidesUserInformationAndQueryValues) {
  EXPECT_EQ(RedactUrl("https://host/path?api_key=s3cret&x=1"),
            "https://host/path?api_key=***&x=***");
  EXPECT_EQ(RedactUrl("http://user:pw@host:8080/p?token"), "http://***@host:8080/p?***");
  EXPECT_EQ(RedactUrl("http://a@b@host/p?k=v=w&&z=#frag?x=1"), "http://***@host/p?k=***&&z=***");
  EXPECT_EQ(RedactUrl("http://host:80/a/b"), "http://host:80/a/b");
  EXPECT_EQ(RedactUrl("http://host/p?"), "http://host/p?");
  EXPECT_EQ(RedactUrl("http://host?q=1"), "http://host?q=***");
  EXPECT_EQ(RedactUrl("http://host/p@x?q=1"), "http://host/p@x?q=***");
  EXPECT_EQ(RedactUrl("not a url?secret=1"), "not a url?secret=***");
  EXPECT_EQ(RedactUrl(""), "");
}

// Issue 14: the full URL of an HTTP task, with any ?api_key=, was logged on every run.
TEST_F(HttpTaskTest, LogsAndErrorsNameTheRedactedUrl) {
  HttpTaskSpec spec = Spec("/fail?api_key=s3cret");
  Status status = Run(spec);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("/fail?api_key=***"), Not(HasSubstr("s3cret"))));
  std::vector<LogRecord> records = logger_.Records();
  ASSERT_FALSE(records.empty());
  for (const LogRecord& record : records) {
    EXPECT_EQ(record.Field("url"),
              "http://127.0.0.1:" + std::to_string(port_) + "/fail?api_key=***");
    for (const auto& [key, value] : record.fields) {
      EXPECT_THAT(value, Not(HasSubstr("s3cret"))) << key;
    }
  }
  Result<HttpTaskUrl> bad = ParseHttpTaskUrl("http://user:hunter2@host/?k=s3cret");
  EXPECT_THAT(bad.status().message(), AllOf(HasSubstr("user information"),
                                            Not(HasSubstr("hunter2")), Not(HasSubstr("s3cret"))));
}

TEST_F(HttpTaskTest, NotFoundFails) {
  Status status = Run(Spec("/missing"));
  EXPECT_THAT(status.message(), HasSubstr("status 404"));
}

TEST_F(HttpTaskTest, ExpectStatusIsHonoured) {
  HttpTaskSpec spec = Spec("/created");
  spec.expect_status = 201;
  EXPECT_THAT(Run(spec), IsOk());
  spec.expect_status = 200;
  Status status = Run(spec);
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(status.message(), AllOf(HasSubstr("status 201"), HasSubstr("expected 200")));
  spec = Spec("/fail");
  spec.expect_status = 500;
  EXPECT_THAT(Run(spec), IsOk());
}

TEST_F(HttpTaskTest, ConnectionRefusedFails) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int unused_port = ntohs(addr.sin_port);
  close(fd);
  HttpTaskSpec spec;
  spec.url = "http://127.0.0.1:" + std::to_string(unused_port) + "/";
  Status status = Run(spec);
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable, "Connection"));
}

TEST_F(HttpTaskTest, StopDuringASlowResponseReturnsPromptly) {
  std::stop_source stop;
  std::future<Status> run = std::async(std::launch::async, [&] {
    return RunHttpTask(Spec("/slow"), logger_, SystemClock::Instance(), stop.get_token());
  });
  ASSERT_TRUE(WaitUntilSlowEntered());
  auto stopped_at = std::chrono::steady_clock::now();
  stop.request_stop();
  Status status = run.get();
  EXPECT_LT(std::chrono::steady_clock::now() - stopped_at, std::chrono::milliseconds(500));
  EXPECT_THAT(status, StatusIs(StatusCode::kCancelled));
}

TEST_F(HttpTaskTest, TotalTimeoutEndsASlowResponse) {
  HttpTaskSpec spec = Spec("/slow");
  spec.total_timeout = std::chrono::milliseconds(200);
  auto started = std::chrono::steady_clock::now();
  Status status = Run(spec);
  auto elapsed = std::chrono::steady_clock::now() - started;
  EXPECT_THAT(status, StatusIs(StatusCode::kDeadlineExceeded, "200 ms"));
  EXPECT_GE(elapsed, std::chrono::milliseconds(200));
  EXPECT_LT(elapsed, std::chrono::milliseconds(1000));
}

TEST_F(HttpTaskTest, MakeHttpTaskValidatesAtConstruction) {
  HttpTaskSpec spec = Spec("/ok");
  spec.url = "ftp://127.0.0.1/";
  EXPECT_THAT(MakeHttpTask(spec, nullptr, SystemClock::Instance()),
              StatusIs(StatusCode::kInvalidArgument));
  spec = Spec("/ok");
  spec.method = "PO ST";
  EXPECT_THAT(MakeHttpTask(spec, nullptr, SystemClock::Instance()), Not(IsOk()));
  spec = Spec("/ok");
  spec.headers = {{"X-Bad", "a\r\nInjected: 1"}};
  EXPECT_THAT(MakeHttpTask(spec, nullptr, SystemClock::Instance()), Not(IsOk()));
  Result<TaskFunction> task = MakeHttpTask(Spec("/ok"), nullptr, SystemClock::Instance());
  ASSERT_THAT(task, IsOk());
  EXPECT_THAT((*task)(std::stop_token()), IsOk());
}

// Issue 16: the run history shows an HTTP task's status and the start of the body it got.
TEST_F(HttpTaskTest, ReportGetsTheStatusAndTheBody) {
  auto report = std::make_shared<RunReport>(kDefaultRunOutputTailBytes);
  Status status = RunHttpTask(Spec("/ok"), logger_, SystemClock::Instance(),
                              RunControl{std::stop_token(), std::stop_token(), report});
  ASSERT_THAT(status, IsOk());
  RunReport::Snapshot snapshot = report->Read();
  EXPECT_EQ(snapshot.http_status, 200);
  EXPECT_EQ(snapshot.output_tail, "fine");
  EXPECT_FALSE(snapshot.exit_code.has_value());
}

TEST_F(HttpTaskTest, ReportGetsTheStatusOfAFailure) {
  auto report = std::make_shared<RunReport>(kDefaultRunOutputTailBytes);
  Status status = RunHttpTask(Spec("/fail"), logger_, SystemClock::Instance(),
                              RunControl{std::stop_token(), std::stop_token(), report});
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable));
  RunReport::Snapshot snapshot = report->Read();
  EXPECT_EQ(snapshot.http_status, 500);
  EXPECT_EQ(snapshot.output_tail, "boom: " + std::string(300, 'x'));
}

TEST_F(HttpTaskTest, ReportGetsOnlyTheFirstBytesOfALongBody) {
  auto report = std::make_shared<RunReport>(kDefaultRunOutputTailBytes);
  HttpTaskSpec spec = Spec("/huge");
  spec.method = "GET";
  spec.max_response_bytes = 4 * kDefaultRunOutputTailBytes;
  Status status = RunHttpTask(spec, logger_, SystemClock::Instance(),
                              RunControl{std::stop_token(), std::stop_token(), report});
  ASSERT_THAT(status, IsOk());
  RunReport::Snapshot snapshot = report->Read();
  EXPECT_EQ(snapshot.http_status, 200);
  EXPECT_EQ(snapshot.output_bytes, kDefaultRunOutputTailBytes);
  EXPECT_EQ(snapshot.output_tail, std::string(kDefaultRunOutputTailBytes, 'z'));
}

TEST_F(HttpTaskTest, NoAnswerLeavesTheReportEmpty) {
  auto report = std::make_shared<RunReport>(kDefaultRunOutputTailBytes);
  HttpTaskSpec spec = Spec("/ok");
  server_.stop();
  Status status = RunHttpTask(spec, logger_, SystemClock::Instance(),
                              RunControl{std::stop_token(), std::stop_token(), report});
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable));
  RunReport::Snapshot snapshot = report->Read();
  EXPECT_FALSE(snapshot.http_status.has_value());
  EXPECT_EQ(snapshot.output_bytes, 0U);
}

}  // namespace
}  // namespace stagehand
