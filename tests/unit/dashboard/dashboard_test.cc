// The dashboard's page as the daemon serves it (issue 19): where, with what filled in, with which
// headers, and what it leaves to other routes.
#include "stagehand/dashboard/dashboard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;

std::optional<HttpResponse> Get(const HttpHandler& handler, std::string path,
                                HttpHeaders headers = {}) {
  HttpRequest request;
  request.method = "GET";
  request.path = std::move(path);
  request.headers = std::move(headers);
  return handler(request);
}

std::optional<std::string> Header(const HttpResponse& response, std::string_view name) {
  std::optional<std::string_view> value = FindHeader(response.headers, name);
  if (!value) return std::nullopt;
  return std::string(*value);
}

TEST(DashboardPathTest, IsNormalisedToEndInASlash) {
  EXPECT_EQ(NormalizeDashboardPath("/").value(), "/");
  EXPECT_EQ(NormalizeDashboardPath("/ops/scheduler").value(), "/ops/scheduler/");
  EXPECT_EQ(NormalizeDashboardPath("/dash/").value(), "/dash/");
}

TEST(DashboardPathTest, BadPathsAreRefusedSayingWhy) {
  EXPECT_THAT(NormalizeDashboardPath("dash").status().message(), HasSubstr("does not start"));
  EXPECT_THAT(NormalizeDashboardPath("").status().message(), HasSubstr("does not start"));
  EXPECT_THAT(NormalizeDashboardPath("/a b").status().message(), HasSubstr("character ' '"));
  EXPECT_THAT(NormalizeDashboardPath("/a?b").status().message(), HasSubstr("character '?'"));
  EXPECT_THAT(NormalizeDashboardPath("/a//b").status().message(), HasSubstr("empty"));
  EXPECT_THAT(NormalizeDashboardPath("/a/../b").status().message(), HasSubstr("'..'"));
  EXPECT_THAT(NormalizeDashboardPath("/api/ui").status().message(), HasSubstr("/api"));
  EXPECT_THAT(NormalizeDashboardPath("/API").status().message(), HasSubstr("/api"));
  EXPECT_THAT(NormalizeDashboardPath("/.stagehand/ui").status().message(),
              HasSubstr("/.stagehand"));
  EXPECT_THAT(NormalizeDashboardPath("/metrics").status().message(), HasSubstr("/metrics"));
  EXPECT_THAT(NormalizeDashboardPath("/apis"), IsOk()) << "only whole segments collide";
}

TEST(DashboardTest, ThePageAtTheRootIsToldTheRootAndTheAuthMode) {
  const HttpHandler handler = MakeDashboardHandler({"/", true, ""});
  std::optional<HttpResponse> page = Get(handler, "/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_THAT(Header(*page, "Content-Type"), Optional(std::string("text/html; charset=utf-8")));
  EXPECT_THAT(page->body, ContainsRegex("stagehand-root\"[^>]*content=\"\\./\""));
  EXPECT_THAT(page->body, ContainsRegex("stagehand-auth\"[^>]*content=\"token\""));
  EXPECT_THAT(page->body, Not(HasSubstr("%STAGEHAND_")));
  EXPECT_THAT(Get(handler, "/index.html"),
              Optional(::testing::Field(&HttpResponse::body, page->body)));

  const HttpHandler open = MakeDashboardHandler({"/", false, ""});
  EXPECT_THAT(Get(open, "/")->body, ContainsRegex("stagehand-auth\"[^>]*content=\"development\""));
}

TEST(DashboardTest, ThePageIsToldTheTraceUrlEscapedOrNoneWithoutOne) {
  const HttpHandler plain = MakeDashboardHandler({"/", true, ""});
  EXPECT_THAT(Get(plain, "/")->body, ContainsRegex("stagehand-trace-url\"[^>]*content=\"\""));

  DashboardOptions options;
  options.trace_url = "https://tempo.example/explore?a=1&trace=\"{traceId}\"<x>'";
  const HttpHandler linked = MakeDashboardHandler(options);
  const std::string body = Get(linked, "/")->body;
  EXPECT_THAT(body, HasSubstr("<meta name=\"stagehand-trace-url\" content=\"https://tempo.example/"
                              "explore?a=1&amp;trace=&quot;{traceId}&quot;&lt;x&gt;&#39;\">"));
  EXPECT_THAT(body, Not(HasSubstr("%STAGEHAND_")));
}

TEST(DashboardTraceUrlTest, NeedsAnHttpUrlWithTheTraceId) {
  EXPECT_THAT(CheckDashboardTraceUrl("http://jaeger:16686/trace/{traceId}"), IsOk());
  EXPECT_THAT(CheckDashboardTraceUrl("https://grafana/explore?trace={traceId}&x=1"), IsOk());
  EXPECT_THAT(CheckDashboardTraceUrl("http://jaeger:16686/trace/").message(),
              HasSubstr("{traceId}"));
  EXPECT_THAT(CheckDashboardTraceUrl("ftp://jaeger/{traceId}").message(),
              HasSubstr("http or https"));
  EXPECT_THAT(CheckDashboardTraceUrl("javascript:alert(1)//{traceId}").code(),
              StatusCode::kInvalidArgument);
  EXPECT_THAT(CheckDashboardTraceUrl("/trace/{traceId}").code(), StatusCode::kInvalidArgument);
}

TEST(DashboardTest, ThePageIsServedWithAStrictContentSecurityPolicy) {
  const HttpHandler handler = MakeDashboardHandler({});
  for (const char* path : {"/", "/app.js", "/style.css"}) {
    std::optional<HttpResponse> response = Get(handler, path);
    ASSERT_TRUE(response) << path;
    const std::optional<std::string> policy = Header(*response, "Content-Security-Policy");
    ASSERT_TRUE(policy) << path;
    EXPECT_THAT(*policy, HasSubstr("default-src 'self'"));
    EXPECT_THAT(*policy, HasSubstr("script-src 'self'"));
    EXPECT_THAT(*policy, HasSubstr("frame-ancestors 'none'"));
    EXPECT_THAT(Header(*response, "X-Content-Type-Options"), Optional(std::string("nosniff")));
  }
  EXPECT_THAT(Header(*Get(handler, "/app.js"), "Content-Type"),
              Optional(std::string("text/javascript; charset=utf-8")));
  EXPECT_THAT(Header(*Get(handler, "/style.css"), "Content-Type"),
              Optional(std::string("text/css; charset=utf-8")));
}

TEST(DashboardTest, AnUnchangedFileIsNotSentAgain) {
  const HttpHandler handler = MakeDashboardHandler({});
  std::optional<HttpResponse> first = Get(handler, "/app.js");
  ASSERT_TRUE(first);
  const std::optional<std::string> etag = Header(*first, "ETag");
  ASSERT_TRUE(etag);
  std::optional<HttpResponse> again = Get(handler, "/app.js", {{"If-None-Match", *etag}});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 304);
  EXPECT_EQ(again->body, "");
  EXPECT_EQ(Get(handler, "/app.js", {{"If-None-Match", "\"other\""}})->status, 200);
  EXPECT_EQ(Get(handler, "/app.js", {{"If-None-Match", "\"x\", W/" + *etag}})->status, 304);
}

TEST(DashboardTest, AtASubPathTheRootIsRelativeAndTheBarePathRedirects) {
  const HttpHandler handler = MakeDashboardHandler({"/ops/scheduler/", true, ""});
  std::optional<HttpResponse> page = Get(handler, "/ops/scheduler/");
  ASSERT_TRUE(page);
  EXPECT_THAT(page->body, ContainsRegex("stagehand-root\"[^>]*content=\"\\.\\./\\.\\./\""));
  EXPECT_TRUE(Get(handler, "/ops/scheduler/app.js"));

  HttpRequest bare;
  bare.method = "GET";
  bare.path = "/ops/scheduler";
  bare.query = "plugin=jobs";
  std::optional<HttpResponse> redirect = handler(bare);
  ASSERT_TRUE(redirect);
  EXPECT_EQ(redirect->status, 308);
  EXPECT_THAT(Header(*redirect, "Location"), Optional(std::string("scheduler/?plugin=jobs")));

  EXPECT_FALSE(Get(handler, "/"));
  EXPECT_FALSE(Get(handler, "/app.js"));
}

TEST(DashboardTest, OtherPathsAndMethodsAreLeftToOtherRoutes) {
  const HttpHandler handler = MakeDashboardHandler({});
  EXPECT_FALSE(Get(handler, "/nope.js"));
  EXPECT_FALSE(Get(handler, "/assets/app.js"));
  EXPECT_FALSE(Get(handler, "/../app.js"));
  HttpRequest post;
  post.method = "POST";
  post.path = "/";
  EXPECT_FALSE(handler(post));
}

}  // namespace
}  // namespace stagehand
