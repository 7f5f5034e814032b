#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "stagehand/executors/http_task.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

HttpTaskUrl Parsed(const std::string& url) {
  Result<HttpTaskUrl> parsed = ParseHttpTaskUrl(url);
  EXPECT_THAT(parsed, IsOk()) << url;
  return parsed.ok() ? *parsed : HttpTaskUrl{};
}

std::string ErrorOf(const std::string& url) {
  Result<HttpTaskUrl> parsed = ParseHttpTaskUrl(url);
  EXPECT_THAT(parsed, Not(IsOk())) << url;
  if (parsed.ok()) {
    return "";
  }
  EXPECT_THAT(parsed, StatusIs(StatusCode::kInvalidArgument));
  return parsed.status().message();
}

TEST(ParseHttpTaskUrlTest, SplitsHostPortAndTarget) {
  HttpTaskUrl url = Parsed("http://127.0.0.1:8080/hook?x=1#frag");
  EXPECT_EQ(url.scheme, "http");
  EXPECT_EQ(url.host, "127.0.0.1");
  EXPECT_EQ(url.port, 8080);
  EXPECT_EQ(url.target, "/hook?x=1");
}

TEST(ParseHttpTaskUrlTest, DefaultsPortAndPath) {
  HttpTaskUrl url = Parsed("HTTP://example.com");
  EXPECT_EQ(url.scheme, "http");
  EXPECT_EQ(url.host, "example.com");
  EXPECT_EQ(url.port, 80);
  EXPECT_EQ(url.target, "/");
  EXPECT_EQ(Parsed("http://example.com?q=1").target, "/?q=1");
}

TEST(ParseHttpTaskUrlTest, AcceptsBracketedIpv6) {
  HttpTaskUrl url = Parsed("http://[::1]:9000/x");
  EXPECT_EQ(url.host, "::1");
  EXPECT_EQ(url.port, 9000);
  EXPECT_EQ(url.target, "/x");
}

TEST(ParseHttpTaskUrlTest, HttpsDependsOnTheBuild) {
  Result<HttpTaskUrl> parsed = ParseHttpTaskUrl("https://example.com/");
  if (HttpsSupported()) {
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(parsed->port, 443);
  } else {
    ASSERT_THAT(parsed, Not(IsOk()));
    EXPECT_THAT(parsed.status().message(), HasSubstr("https is not supported in this build"));
  }
}

TEST(ParseHttpTaskUrlTest, RejectsBadUrlsWithAReason) {
  EXPECT_THAT(ErrorOf("example.com/hook"), HasSubstr("expected an absolute URL"));
  EXPECT_THAT(ErrorOf("ftp://example.com/"), HasSubstr("unsupported scheme 'ftp'"));
  EXPECT_THAT(ErrorOf("http:///path"), HasSubstr("missing host"));
  EXPECT_THAT(ErrorOf("http://user:pw@example.com/"), HasSubstr("user information"));
  EXPECT_THAT(ErrorOf("http://example.com:/"), HasSubstr("empty port"));
  EXPECT_THAT(ErrorOf("http://example.com:0/"), HasSubstr("invalid port '0'"));
  EXPECT_THAT(ErrorOf("http://example.com:65536/"), HasSubstr("invalid port"));
  EXPECT_THAT(ErrorOf("http://example.com:99999999999/"), HasSubstr("invalid port"));
  EXPECT_THAT(ErrorOf("http://example.com:80x/"), HasSubstr("invalid port"));
  EXPECT_THAT(ErrorOf("http://exa mple.com/"), HasSubstr("space or a control character"));
  EXPECT_THAT(ErrorOf("http://[::1/"), HasSubstr("unterminated IPv6"));
  EXPECT_THAT(ErrorOf("http://[zz]/"), HasSubstr("invalid IPv6"));
  EXPECT_THAT(ErrorOf("http://[::1]x/"), HasSubstr("after the IPv6"));
  EXPECT_THAT(ErrorOf("http://ex!ample.com/"), HasSubstr("invalid host"));
  EXPECT_THAT(ErrorOf("http://example.com\n/"), HasSubstr("control character"));
  EXPECT_THAT(ErrorOf("ftp://x/"), HasSubstr("invalid URL 'ftp://x/'"));
}

}  // namespace
}  // namespace stagehand
