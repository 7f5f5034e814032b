#include "stagehand/http/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace stagehand {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Records every log line, fields flattened, for checks that nothing secret is logged.
class RecordingLogger final : public Logger {
 public:
  void Log(LogLevel level, std::string_view message, const LogFields& fields) override {
    std::string line(LogLevelName(level));
    line.append(" ").append(message);
    for (const auto& [key, value] : fields) {
      line.append(" ").append(key).append("=").append(value);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    lines_.push_back(std::move(line));
  }
  bool Enabled(LogLevel) const override { return true; }

  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

class AuthTest : public ::testing::Test {
 protected:
  AuthTest()
      : logger_(std::make_shared<RecordingLogger>()),
        handler_(RequireBearerToken(
            [this](const HttpRequest& request) -> std::optional<HttpResponse> {
              ++calls_;
              HttpResponse response;
              response.body = "inner";
              response.headers.emplace_back("X-Principal", request.principal);
              return response;
            },
            {{"first-token-1", "cli"}, {"second-token-2", "ci"}, {"third-token-3", "ops"}},
            logger_)) {}

  std::optional<HttpResponse> Call(std::optional<std::string> authorization,
                                   std::string path = "/api/jobs/.backstage/scheduler/v1/tasks") {
    HttpRequest request;
    request.method = "GET";
    request.path = std::move(path);
    if (authorization) {
      request.headers.emplace_back("Authorization", *authorization);
    }
    return handler_(request);
  }

  static std::string Body(std::string_view message, std::string_view url) {
    return R"({"error":{"name":"AuthenticationError","message":")" + std::string(message) +
           R"("},"request":{"method":"GET","url":")" + std::string(url) +
           R"("},"response":{"statusCode":401}})";
  }

  void ExpectRefused(const std::optional<HttpResponse>& response, std::string_view message) {
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 401);
    EXPECT_EQ(response->body, Body(message, "/api/jobs/.backstage/scheduler/v1/tasks"));
    EXPECT_EQ(calls_, 0);
  }

  std::shared_ptr<RecordingLogger> logger_;
  std::atomic<int> calls_{0};
  HttpHandler handler_;
};

TEST_F(AuthTest, MissingHeaderIsMissingCredentials) {
  const std::optional<HttpResponse> response = Call(std::nullopt);
  ExpectRefused(response, "Missing credentials");
  ASSERT_TRUE(response.has_value());
  ASSERT_EQ(response->headers.size(), 1u);
  EXPECT_EQ(response->headers[0].first, "Content-Type");
  EXPECT_EQ(response->headers[0].second, "application/json; charset=utf-8");
}

TEST_F(AuthTest, OtherSchemesAreMissingCredentials) {
  ExpectRefused(Call("Basic Zmlyc3QtdG9rZW4tMQ=="), "Missing credentials");
  ExpectRefused(Call("first-token-1"), "Missing credentials");
  ExpectRefused(Call("Bearer"), "Missing credentials");
  ExpectRefused(Call("Bearer "), "Missing credentials");
  ExpectRefused(Call("Bearerfirst-token-1"), "Missing credentials");
  ExpectRefused(Call("Bearer\tfirst-token-1"), "Missing credentials");
  ExpectRefused(Call("Bearer first-token-1 extra"), "Missing credentials");
  ExpectRefused(Call(""), "Missing credentials");
}

TEST_F(AuthTest, WrongTokenIsIllegal) {
  ExpectRefused(Call("Bearer wrong-token"), "Illegal token");
  ExpectRefused(Call("Bearer first-token-"), "Illegal token");    // a prefix
  ExpectRefused(Call("Bearer first-token-11"), "Illegal token");  // longer
  ExpectRefused(Call("Bearer FIRST-TOKEN-1"), "Illegal token");   // tokens are case-sensitive
  ExpectRefused(Call("Bearer x"), "Illegal token");
}

TEST_F(AuthTest, EveryConfiguredTokenIsAccepted) {
  for (const std::string& token :
       std::vector<std::string>{"first-token-1", "second-token-2", "third-token-3"}) {
    const std::optional<HttpResponse> response = Call("Bearer " + token);
    ASSERT_TRUE(response.has_value()) << token;
    EXPECT_EQ(response->status, 200) << token;
    EXPECT_EQ(response->body, "inner") << token;
  }
  EXPECT_EQ(calls_, 3);
}

// Issue 17: a pause records who made it; an authenticated caller is its token's subject.
TEST_F(AuthTest, TheRouteSeesTheTokensSubjectAsThePrincipal) {
  for (const auto& [token, subject] : std::vector<std::pair<std::string, std::string>>{
           {"first-token-1", "cli"}, {"third-token-3", "ops"}}) {
    const std::optional<HttpResponse> response = Call("Bearer " + token);
    ASSERT_TRUE(response.has_value()) << token;
    ASSERT_EQ(response->headers.size(), 1u);
    EXPECT_EQ(response->headers[0].second, subject) << token;
  }
}

TEST_F(AuthTest, SchemeIsCaseInsensitiveAndSpacesAreTolerated) {
  for (const std::string& header : std::vector<std::string>{
           "bearer second-token-2", "BEARER second-token-2", "bEaReR second-token-2",
           "Bearer    second-token-2", "  Bearer second-token-2  ", "\tBearer second-token-2\t"}) {
    const std::optional<HttpResponse> response = Call(header);
    ASSERT_TRUE(response.has_value()) << header;
    EXPECT_EQ(response->status, 200) << "'" << header << "'";
  }
  EXPECT_EQ(calls_, 6);
}

TEST_F(AuthTest, HeaderNameIsCaseInsensitive) {
  HttpRequest request;
  request.method = "GET";
  request.path = "/api/jobs/x";
  request.headers.emplace_back("authorization", "Bearer third-token-3");
  const std::optional<HttpResponse> response = handler_(request);
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
}

TEST_F(AuthTest, BodyNamesTheRequestUrlWithItsQuery) {
  HttpRequest request;
  request.method = "POST";
  request.path = "/api/jobs/.backstage/scheduler/v1/tasks/a%2Fb/trigger";
  request.query = "x=1";
  const std::optional<HttpResponse> response = handler_(request);
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 401);
  EXPECT_EQ(response->body,
            R"({"error":{"name":"AuthenticationError","message":"Missing credentials"},)"
            R"("request":{"method":"POST","url":"/api/jobs/.backstage/scheduler/v1/tasks/)"
            R"(a%2Fb/trigger?x=1"},"response":{"statusCode":401}})");
  EXPECT_EQ(calls_, 0);
}

TEST_F(AuthTest, UnknownRoutesAreRefusedToo) {
  // The check comes before routing: an anonymous caller learns nothing about which routes exist.
  HttpHandler handler = RequireBearerToken(
      [](const HttpRequest&) -> std::optional<HttpResponse> { return std::nullopt; },
      {{"first-token-1", "cli"}});
  HttpRequest request;
  request.method = "GET";
  request.path = "/api/jobs/nothing";
  const std::optional<HttpResponse> refused = handler(request);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 401);
  request.headers.emplace_back("Authorization", "Bearer first-token-1");
  EXPECT_FALSE(handler(request).has_value());
}

TEST_F(AuthTest, NoTokensRefuseEveryone) {
  int calls = 0;
  HttpHandler handler = RequireBearerToken(
      [&calls](const HttpRequest&) -> std::optional<HttpResponse> {
        ++calls;
        return HttpResponse{};
      },
      {});
  HttpRequest request;
  request.method = "GET";
  request.path = "/api/jobs/x";
  request.headers.emplace_back("Authorization", "Bearer anything-at-all");
  const std::optional<HttpResponse> response = handler(request);
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 401);
  EXPECT_THAT(response->body, HasSubstr("Illegal token"));
  EXPECT_EQ(calls, 0);
}

TEST_F(AuthTest, RefusalsAreLoggedWithoutTheToken) {
  Call("Bearer some-secret-guess");
  Call(std::nullopt);
  Call("Bearer first-token-1");
  const std::vector<std::string> lines = logger_->lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], HasSubstr("debug"));
  EXPECT_THAT(lines[0], HasSubstr("method=GET"));
  EXPECT_THAT(lines[0], HasSubstr("path=/api/jobs/.backstage/scheduler/v1/tasks"));
  EXPECT_THAT(lines[0], HasSubstr("reason=Illegal token"));
  EXPECT_THAT(lines[1], HasSubstr("reason=Missing credentials"));
  for (const std::string& line : lines) {
    EXPECT_THAT(line, Not(HasSubstr("some-secret-guess")));
    EXPECT_THAT(line, Not(HasSubstr("first-token-1")));
  }
}

TEST_F(AuthTest, WorksWithoutALogger) {
  HttpHandler handler = RequireBearerToken(
      [](const HttpRequest&) -> std::optional<HttpResponse> { return HttpResponse{}; },
      {{"first-token-1", "cli"}});
  HttpRequest request;
  request.method = "GET";
  request.path = "/api/jobs/x";
  const std::optional<HttpResponse> response = handler(request);
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 401);
}

}  // namespace
}  // namespace stagehand
