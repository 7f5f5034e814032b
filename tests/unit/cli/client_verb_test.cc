#include "cli/client_verb.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/rest_client.h"
#include "stagehand/cli/cli.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"

namespace stagehand::cli {
namespace {

using ::stagehand::testing::IsOk;
using ::testing::HasSubstr;
using ::testing::Not;

ServerUrl Local() { return ParseServerUrl("http://127.0.0.1:7007").value(); }

TEST(ParseServerUrlTest, ReadsHostPortAndBasePath) {
  ServerUrl url = ParseServerUrl("http://127.0.0.1:7007").value();
  EXPECT_EQ(url.host, "127.0.0.1");
  EXPECT_EQ(url.port, 7007);
  EXPECT_EQ(url.base_path, "");
  EXPECT_EQ(url.ToString(), "http://127.0.0.1:7007");

  url = ParseServerUrl("HTTP://scheduler.internal/stagehand/").value();
  EXPECT_EQ(url.host, "scheduler.internal");
  EXPECT_EQ(url.port, 80);
  EXPECT_EQ(url.base_path, "/stagehand");

  url = ParseServerUrl("localhost:8080").value();
  EXPECT_EQ(url.host, "localhost");
  EXPECT_EQ(url.port, 8080);

  url = ParseServerUrl("http://[::1]:7007").value();
  EXPECT_EQ(url.host, "::1");
  EXPECT_EQ(url.ToString(), "http://[::1]:7007");
}

TEST(ParseServerUrlTest, RejectsWhatItCannotReach) {
  for (const char* bad :
       {"https://127.0.0.1:7007", "ftp://x", "http://", "http://:7007", "http://h:0",
        "http://h:70000", "http://h:7x", "http://h:", "http://h/a?b", "http://h/#x", "http://[::1",
        "h:7007?x", "http://[::1]x", "http://[zz]:7007"}) {
    Result<ServerUrl> url = ParseServerUrl(bad);
    EXPECT_THAT(url, Not(IsOk())) << bad;
    if (!url.ok()) {
      EXPECT_THAT(url.status().message(), HasSubstr("invalid --url")) << bad;
    }
  }
}

// --url once accepted what the HTTP task's URL parser refused (both now share ParseUrl): user
// information and spaces went into the host, and an unbracketed IPv6 address was split at its
// last ':'.
TEST(ParseServerUrlTest, RefusesWhatTheUrlParserRefuses) {
  for (const char* bad : {"http://user@127.0.0.1:7007", "http://::1:7007", "::1:7007",
                          "http://a b:7007", "http://h!:7007", "http://h:7007:1"}) {
    Result<ServerUrl> url = ParseServerUrl(bad);
    EXPECT_THAT(url, Not(IsOk())) << bad;
    if (!url.ok()) {
      EXPECT_THAT(url.status().message(), HasSubstr("invalid --url '" + std::string(bad) + "'"));
    }
  }
  EXPECT_THAT(ParseServerUrl("http://h:0").status().message(), HasSubstr("invalid port '0'"));
  EXPECT_THAT(ParseServerUrl("https://h").status().message(), HasSubstr("TLS proxy"));
  EXPECT_THAT(ParseServerUrl("ftp://h").status().message(), HasSubstr("the scheme must be http"));
}

TEST(ConnectableHostTest, WildcardsBecomeLoopback) {
  EXPECT_EQ(ConnectableHost("0.0.0.0"), "127.0.0.1");
  EXPECT_EQ(ConnectableHost(""), "127.0.0.1");
  EXPECT_EQ(ConnectableHost("::"), "[::1]");
  EXPECT_EQ(ConnectableHost("fe80::1"), "[fe80::1]");
  EXPECT_EQ(ConnectableHost("10.1.2.3"), "10.1.2.3");
}

TEST(EncodePathSegmentTest, KeepsUnreservedAndEscapesTheRest) {
  EXPECT_EQ(EncodePathSegment("report-2_b.c~d"), "report-2_b.c~d");
  EXPECT_EQ(EncodePathSegment("a/b c"), "a%2Fb%20c");
  EXPECT_EQ(EncodePathSegment("50%+?#"), "50%25%2B%3F%23");
  EXPECT_EQ(EncodePathSegment("é"), "%C3%A9");
}

TEST(ExitCodeForHttpStatusTest, EachAnswerHasItsCode) {
  EXPECT_EQ(ExitCodeForHttpStatus(404), kExitNotFound);
  EXPECT_EQ(ExitCodeForHttpStatus(409), kExitConflict);
  EXPECT_EQ(ExitCodeForHttpStatus(401), kExitUnauthenticated);
  EXPECT_EQ(ExitCodeForHttpStatus(403), kExitUnauthenticated);
  EXPECT_EQ(ExitCodeForHttpStatus(500), kExitServerError);
  EXPECT_EQ(ExitCodeForHttpStatus(503), kExitServerError);
  EXPECT_EQ(ExitCodeForHttpStatus(501), kExitNotOffered);
  EXPECT_EQ(ExitCodeForHttpStatus(400), kExitFailure);
}

TEST(ExitCodesTest, AreDistinct) {
  const int codes[] = {kExitOk,         kExitFailure,         kExitUsage,       kExitNotFound,
                       kExitConflict,   kExitUnauthenticated, kExitServerError, kExitUnreachable,
                       kExitNotOffered, kExitUnavailable,     kExitConfig};
  std::map<int, int> seen;
  for (int code : codes) {
    EXPECT_EQ(++seen[code], 1) << code;
  }
}

TEST(DescribeHttpFailureTest, UsesTheServerMessage) {
  ClientFailure failure = DescribeHttpFailure(
      {404, R"({"error":{"name":"NotFoundError","message":"Task nope does not exist"},)"
            R"("request":{"method":"POST","url":"/x"},"response":{"statusCode":404}})"},
      "cannot trigger jobs/nope", "no plugin 'jobs'", Local(), true);
  EXPECT_EQ(failure.exit_code, kExitNotFound);
  EXPECT_EQ(failure.message, "cannot trigger jobs/nope: Task nope does not exist (404)");

  failure = DescribeHttpFailure(
      {409, R"({"error":{"name":"ConflictError","message":"Task report is currently running"}})"},
      "cannot trigger jobs/report", "", Local(), true);
  EXPECT_EQ(failure.exit_code, kExitConflict);
  EXPECT_EQ(failure.message, "cannot trigger jobs/report: Task report is currently running (409)");
}

TEST(DescribeHttpFailureTest, NotFoundWithoutBodyUsesTheHint) {
  ClientFailure failure =
      DescribeHttpFailure({404, ""}, "cannot trigger nope/x",
                          "no plugin 'nope' at http://127.0.0.1:7007", Local(), false);
  EXPECT_EQ(failure.exit_code, kExitNotFound);
  EXPECT_EQ(failure.message,
            "cannot trigger nope/x: no plugin 'nope' at http://127.0.0.1:7007 (404)");
}

TEST(DescribeHttpFailureTest, UnauthenticatedAdviceDependsOnTheToken) {
  const std::string body =
      R"({"error":{"name":"AuthenticationError","message":"Missing credentials"}})";
  ClientFailure without = DescribeHttpFailure({401, body}, "cannot list the plugins", "", Local(),
                                              /*had_token=*/false);
  EXPECT_EQ(without.exit_code, kExitUnauthenticated);
  EXPECT_EQ(without.message,
            "cannot list the plugins: the daemon at http://127.0.0.1:7007 needs a token (401); "
            "pass --token or set STAGEHAND_TOKEN");
  ClientFailure with = DescribeHttpFailure({401, body}, "cannot list the plugins", "", Local(),
                                           /*had_token=*/true);
  EXPECT_THAT(with.message, HasSubstr("did not accept the token (401)"));
}

TEST(DescribeHttpFailureTest, ServerErrorsAndOthersStayOnOneLine) {
  ClientFailure failure =
      DescribeHttpFailure({500, R"({"error":{"name":"Error","message":"db down\nretry later"}})"},
                          "cannot list the tasks of plugin 'jobs'", "", Local(), true);
  EXPECT_EQ(failure.exit_code, kExitServerError);
  EXPECT_EQ(failure.message,
            "cannot list the tasks of plugin 'jobs': the daemon failed (500 Error: db down; "
            "retry later)");
  failure = DescribeHttpFailure({502, "<html>bad gateway</html>"}, "cannot cancel jobs/x", "",
                                Local(), true);
  EXPECT_EQ(failure.exit_code, kExitServerError);
  EXPECT_EQ(failure.message, "cannot cancel jobs/x: the daemon failed (502)");
  failure = DescribeHttpFailure({400, R"({"error":{"name":"InputError","message":"bad"}})"},
                                "cannot cancel jobs/x", "", Local(), true);
  EXPECT_EQ(failure.exit_code, kExitFailure);
  EXPECT_EQ(failure.message, "cannot cancel jobs/x: unexpected answer (400 InputError: bad)");
}

// Issue 16: runs, logs and trigger --wait of a plugin without run history printed "the daemon
// failed (500 Error: An internal error occurred logId=...)".
TEST(DescribeHttpFailureTest, NotImplementedGivesTheDaemonsAdviceAsItIs) {
  ClientFailure failure = DescribeHttpFailure(
      {501, R"({"error":{"name":"NotImplementedError","message":"The run history of plugin )"
            R"('jobs' is disabled: its runs are not recorded. Turn it on with )"
            R"(stagehand.history.enabled: true"},"response":{"statusCode":501}})"},
      "cannot list the runs of jobs/report", "", Local(), true);
  EXPECT_EQ(failure.exit_code, kExitNotOffered);
  EXPECT_EQ(failure.message,
            "cannot list the runs of jobs/report: The run history of plugin 'jobs' is disabled: "
            "its runs are not recorded. Turn it on with stagehand.history.enabled: true");
  failure = DescribeHttpFailure({501, ""}, "cannot read run x of plugin 'jobs'", "", Local(), true);
  EXPECT_EQ(failure.exit_code, kExitNotOffered);
  EXPECT_EQ(failure.message,
            "cannot read run x of plugin 'jobs': the daemon does not offer this (501)");
}

TEST(DescribeUnreachableTest, HasItsOwnCode) {
  ClientFailure failure =
      DescribeUnreachable(UnavailableError("cannot reach the daemon at http://127.0.0.1:1: x"));
  EXPECT_EQ(failure.exit_code, kExitUnreachable);
  EXPECT_THAT(failure.message, HasSubstr("cannot reach the daemon at http://127.0.0.1:1: x"));
  EXPECT_THAT(failure.message, Not(HasSubstr("\n")));
}

class MakeClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("stagehand-cli-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    std::filesystem::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  ClientOrFailure Make(const ClientOptions& options,
                       const std::optional<std::string>& env_token = std::nullopt) {
    Context context(out_, err_, clock_);
    context.environment = [env_token](const std::string& name) -> std::optional<std::string> {
      return name == "STAGEHAND_TOKEN" ? env_token : std::nullopt;
    };
    return MakeClient(options, context);
  }

  std::filesystem::path dir_;
  std::ostringstream out_;
  std::ostringstream err_;
  testing::ManualClock clock_;
};

TEST_F(MakeClientTest, DefaultsToTheLocalPort) {
  ClientOrFailure made = Make({});
  ASSERT_TRUE(made.client.has_value());
  EXPECT_EQ(made.client->url().ToString(), "http://127.0.0.1:7007");
  EXPECT_FALSE(made.client->has_token());
}

TEST_F(MakeClientTest, TakesTheAddressFromTheEnvironmentUnlessGivenOtherwise) {
  Context context(out_, err_, clock_);
  context.environment = [](const std::string& name) -> std::optional<std::string> {
    return name == "STAGEHAND_URL" ? std::optional<std::string>("http://127.0.0.1:7200")
                                   : std::nullopt;
  };
  ClientOrFailure made = MakeClient({}, context);
  ASSERT_TRUE(made.client.has_value()) << made.failure.message;
  EXPECT_EQ(made.client->url().ToString(), "http://127.0.0.1:7200");

  ClientOptions options;
  options.url = "http://127.0.0.1:7300";
  made = MakeClient(options, context);
  ASSERT_TRUE(made.client.has_value());
  EXPECT_EQ(made.client->url().ToString(), "http://127.0.0.1:7300");
}

TEST_F(MakeClientTest, TakesTheAddressFromTheConfigListen) {
  ClientOptions options;
  options.config_files.push_back(
      Write("a.yaml",
            "backend:\n  listen: { host: 0.0.0.0, port: 7123 }\n"
            "  database: { client: better-sqlite3, connection: ':memory:' }\n"));
  ClientOrFailure made = Make(options);
  ASSERT_TRUE(made.client.has_value()) << made.failure.message;
  EXPECT_EQ(made.client->url().ToString(), "http://127.0.0.1:7123");

  options.url = "http://10.0.0.9:9000";
  made = Make(options);
  ASSERT_TRUE(made.client.has_value());
  EXPECT_EQ(made.client->url().ToString(), "http://10.0.0.9:9000");
}

TEST_F(MakeClientTest, BadConfigOrUrlFails) {
  ClientOptions options;
  options.config_files.push_back((dir_ / "missing.yaml").string());
  ClientOrFailure made = Make(options);
  EXPECT_FALSE(made.client.has_value());
  EXPECT_EQ(made.failure.exit_code, kExitConfig);
  EXPECT_THAT(made.failure.message, HasSubstr("missing.yaml"));

  ClientOptions bad_url;
  bad_url.url = "https://x";
  made = Make(bad_url);
  EXPECT_FALSE(made.client.has_value());
  EXPECT_EQ(made.failure.exit_code, kExitUsage);
}

TEST_F(MakeClientTest, TokenFromFlagElseEnvironment) {
  EXPECT_TRUE(Make({}, "from-env").client->has_token());
  EXPECT_FALSE(Make({}, "").client->has_token());
  ClientOptions options;
  options.token = "from-flag";
  EXPECT_TRUE(Make(options).client->has_token());
}

// A loopback stub of the daemon for PostTaskAction: answers each POST with the next of `statuses`
// (200 once they are used up) and records the Idempotency-Key each one came with.
class StubDaemon {
 public:
  explicit StubDaemon(std::vector<int> statuses) : statuses_(std::move(statuses)) {
    server_.Post(".*", [this](const httplib::Request& request, httplib::Response& response) {
      std::lock_guard lock(mu_);
      keys_.push_back(request.get_header_value("Idempotency-Key"));
      response.status = keys_.size() <= statuses_.size() ? statuses_[keys_.size() - 1] : 200;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~StubDaemon() {
    server_.stop();
    thread_.join();
  }

  ServerUrl url() const {
    return ParseServerUrl("http://127.0.0.1:" + std::to_string(port_)).value();
  }
  std::vector<std::string> keys() {
    std::lock_guard lock(mu_);
    return keys_;
  }

 private:
  httplib::Server server_;
  std::vector<int> statuses_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> keys_;
};

TEST(PostTaskActionTest, SendsARequestThatMetA503AgainWithTheSameKey) {
  StubDaemon daemon({503, 503});
  RestClient client(daemon.url(), std::nullopt);
  EXPECT_EQ(PostTaskAction(client, "trigger", "jobs", "report"), std::nullopt);
  const std::vector<std::string> keys = daemon.keys();
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[0].size(), 36u) << "a UUID";
  EXPECT_EQ(keys[1], keys[0]);
  EXPECT_EQ(keys[2], keys[0]);

  StubDaemon other({200});
  RestClient again(other.url(), std::nullopt);
  EXPECT_EQ(PostTaskAction(again, "trigger", "jobs", "report"), std::nullopt);
  ASSERT_EQ(other.keys().size(), 1u);
  EXPECT_NE(other.keys()[0], keys[0]) << "each action has a key of its own";
}

TEST(PostTaskActionTest, GivesUpOnA503AfterFourRepeatsAndNeverRepeatsAnAnswer) {
  StubDaemon down({503, 503, 503, 503, 503, 503});
  RestClient client(down.url(), std::nullopt);
  std::optional<ClientFailure> failure = PostTaskAction(client, "cancel", "jobs", "report");
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->exit_code, ExitCodeForHttpStatus(503));
  EXPECT_EQ(down.keys().size(), 5u);

  StubDaemon conflict({409});
  RestClient other(conflict.url(), std::nullopt);
  failure = PostTaskAction(other, "trigger", "jobs", "report");
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->exit_code, ExitCodeForHttpStatus(409));
  EXPECT_EQ(conflict.keys().size(), 1u);
}

}  // namespace
}  // namespace stagehand::cli
