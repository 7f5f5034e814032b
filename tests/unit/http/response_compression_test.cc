// gzip of large text answers (the dashboard's 10,000-task listing is 2.2 MB; /metrics of
// thousands of tasks is tens of MB): when it applies, and that the bytes inflate back.
#include "http/response_compression.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

#include "stagehand/http/http_server.h"
#include "stagehand/testing/status_matchers.h"
#include "unit/http/loopback_client.h"

namespace stagehand::http_internal {
namespace {

using ::stagehand::testing::IsOk;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Gunzip(const std::string& compressed) {
  z_stream stream{};
  EXPECT_EQ(inflateInit2(&stream, 15 + 16), Z_OK);
  std::string out;
  char buffer[16384];
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): zlib's API.
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  int result = Z_OK;
  while (result == Z_OK) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof buffer;
    result = inflate(&stream, Z_NO_FLUSH);
    out.append(buffer, sizeof buffer - stream.avail_out);
  }
  inflateEnd(&stream);
  EXPECT_EQ(result, Z_STREAM_END);
  return out;
}

HttpRequest Accepting(std::string accept) {
  HttpRequest request;
  request.method = "GET";
  request.path = "/";
  if (!accept.empty()) request.headers.emplace_back("Accept-Encoding", std::move(accept));
  return request;
}

HttpResponse Json(std::size_t bytes) {
  HttpResponse response;
  response.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
  response.headers.emplace_back("ETag", "\"abc\"");
  std::string body = "[";
  while (body.size() < bytes) body += R"({"taskId":"t","status":"idle"},)";
  body.back() = ']';
  response.body = std::move(body);
  return response;
}

std::optional<std::string> Header(const HttpResponse& response, std::string_view name) {
  std::optional<std::string_view> value = FindHeader(response.headers, name);
  return value ? std::optional<std::string>(*value) : std::nullopt;
}

TEST(ResponseCompressionTest, ALargeTextAnswerIsGzippedWhenAcceptedAndInflatesBack) {
  HttpResponse response = Json(100000);
  const std::string original = response.body;
  CompressIfAccepted(Accepting("gzip, deflate, br"), response);
  EXPECT_EQ(Header(response, "Content-Encoding"), "gzip");
  EXPECT_EQ(Header(response, "Vary"), "Accept-Encoding");
  EXPECT_EQ(Header(response, "ETag"), "W/\"abc\"") << "the compressed bytes are another entity";
  EXPECT_LT(response.body.size(), original.size() / 10);
  EXPECT_EQ(Gunzip(response.body), original);
}

TEST(ResponseCompressionTest, NothingIsCompressedThatTheClientOrTheBodyDoesNotAllow) {
  for (const char* accept :
       {"", "identity", "deflate, br", "gzip;q=0", "gzip; q=0.000, br", "*;q=0"}) {
    HttpResponse response = Json(5000);
    CompressIfAccepted(Accepting(accept), response);
    EXPECT_FALSE(Header(response, "Content-Encoding")) << "'" << accept << "'";
    EXPECT_EQ(Header(response, "Vary"), "Accept-Encoding") << "'" << accept << "'";
    EXPECT_EQ(Header(response, "ETag"), "\"abc\"");
  }
  for (const char* accept : {"GZIP", "gzip;q=0.5", "*", "br, *;q=0.1"}) {
    HttpResponse response = Json(5000);
    CompressIfAccepted(Accepting(accept), response);
    EXPECT_EQ(Header(response, "Content-Encoding"), "gzip") << "'" << accept << "'";
  }

  HttpResponse small = Json(kMinCompressedBodyBytes / 2);
  CompressIfAccepted(Accepting("gzip"), small);
  EXPECT_FALSE(Header(small, "Content-Encoding"));

  HttpResponse image;
  image.headers.emplace_back("Content-Type", "image/png");
  image.body = std::string(5000, 'x');
  CompressIfAccepted(Accepting("gzip"), image);
  EXPECT_FALSE(Header(image, "Content-Encoding"));
  EXPECT_FALSE(Header(image, "Vary"));

  HttpResponse streamed = Json(5000);
  streamed.stream = [](std::shared_ptr<HttpBodyWriter>) {};
  CompressIfAccepted(Accepting("gzip"), streamed);
  EXPECT_FALSE(Header(streamed, "Content-Encoding")) << "a stream is never compressed";
}

TEST(ResponseCompressionTest, TheServerSendsTheGzippedBodyWithItsLength) {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  HttpServer server(options);
  server.Mount("/big", [](const HttpRequest&) { return std::optional<HttpResponse>(Json(50000)); });
  ASSERT_THAT(server.Start(), IsOk());
  const http_testing::RawResponse plain =
      http_testing::Exchange(server.port(), "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(plain.status, 200);
  EXPECT_THAT(plain.head, Not(HasSubstr("Content-Encoding")));
  const http_testing::RawResponse gzipped = http_testing::Exchange(
      server.port(), "GET /big HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
  ASSERT_EQ(gzipped.status, 200);
  EXPECT_THAT(gzipped.head, HasSubstr("Content-Encoding: gzip"));
  EXPECT_THAT(gzipped.head, HasSubstr("Content-Length: " + std::to_string(gzipped.body.size())));
  EXPECT_EQ(Gunzip(gzipped.body), plain.body);
}

}  // namespace
}  // namespace stagehand::http_internal
