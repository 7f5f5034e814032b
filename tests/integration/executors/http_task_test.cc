#include "stagehand/executors/http_task.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

#include "integration/executors/recording_logger.h"

namespace stagehand {
namespace {

using ::stagehand::testing::RecordingLogger;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A loopback server whose /slow handler blocks until Release() (or 5 s).
class HttpTaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Post("/ok", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_body_ = req.body;
        last_header_ = req.get_header_value("X-Token");
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
};

TEST_F(HttpTaskTest, SucceedsOn200AndSendsBodyAndHeaders) {
  HttpTaskSpec spec = Spec("/ok");
  spec.body = R"({"a":1})";
  spec.headers = {{"X-Token", "secret"}, {"Content-Type", "application/json"}};
  Status status = Run(spec);
  ASSERT_TRUE(status.ok()) << status;
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(last_method_, "POST");
  EXPECT_EQ(last_body_, R"({"a":1})");
  EXPECT_EQ(last_header_, "secret");
}

TEST_F(HttpTaskTest, UsesTheConfiguredMethod) {
  HttpTaskSpec spec = Spec("/ok");
  spec.method = "put";
  Status status = Run(spec);
  ASSERT_TRUE(status.ok()) << status;
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(last_method_, "PUT");
}

TEST_F(HttpTaskTest, ServerErrorFailsWithStatusAndBodyExcerpt) {
  Status status = Run(Spec("/fail"));
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("status 500"), HasSubstr("expected 2xx"), HasSubstr("boom: xxx")));
  std::string body_excerpt = status.message().substr(status.message().find("boom"));
  EXPECT_EQ(body_excerpt.size(), 200U);
}

TEST_F(HttpTaskTest, NotFoundFails) {
  Status status = Run(Spec("/missing"));
  EXPECT_THAT(status.message(), HasSubstr("status 404"));
}

TEST_F(HttpTaskTest, ExpectStatusIsHonoured) {
  HttpTaskSpec spec = Spec("/created");
  spec.expect_status = 201;
  EXPECT_TRUE(Run(spec).ok());
  spec.expect_status = 200;
  Status status = Run(spec);
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("status 201"), HasSubstr("expected 200")));
  spec = Spec("/fail");
  spec.expect_status = 500;
  EXPECT_TRUE(Run(spec).ok());
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
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("Connection"));
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
  EXPECT_EQ(status.code(), StatusCode::kCancelled);
}

TEST_F(HttpTaskTest, TotalTimeoutEndsASlowResponse) {
  HttpTaskSpec spec = Spec("/slow");
  spec.total_timeout = std::chrono::milliseconds(200);
  auto started = std::chrono::steady_clock::now();
  Status status = Run(spec);
  auto elapsed = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("200 ms"));
  EXPECT_GE(elapsed, std::chrono::milliseconds(200));
  EXPECT_LT(elapsed, std::chrono::milliseconds(1000));
}

TEST_F(HttpTaskTest, MakeHttpTaskValidatesAtConstruction) {
  HttpTaskSpec spec = Spec("/ok");
  spec.url = "ftp://127.0.0.1/";
  EXPECT_EQ(MakeHttpTask(spec, nullptr, SystemClock::Instance()).status().code(),
            StatusCode::kInvalidArgument);
  spec = Spec("/ok");
  spec.method = "PO ST";
  EXPECT_FALSE(MakeHttpTask(spec, nullptr, SystemClock::Instance()).ok());
  spec = Spec("/ok");
  spec.headers = {{"X-Bad", "a\r\nInjected: 1"}};
  EXPECT_FALSE(MakeHttpTask(spec, nullptr, SystemClock::Instance()).ok());
  Result<TaskFunction> task = MakeHttpTask(Spec("/ok"), nullptr, SystemClock::Instance());
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_TRUE((*task)(std::stop_token()).ok());
}

}  // namespace
}  // namespace stagehand
