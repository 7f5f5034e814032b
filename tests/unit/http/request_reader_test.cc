#include "http/request_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace stagehand::http_internal {
namespace {

using State = RequestReader::State;

// Feeds `bytes` as a connection would: keeps what the reader did not take and appends the next
// `step` bytes, until the reader is no longer waiting or the input is used up.
State FeedInSteps(RequestReader& reader, const std::string& bytes, std::size_t step) {
  std::string pending;
  std::size_t next = 0;
  while (reader.state() == State::kNeedMore && next < bytes.size()) {
    pending += bytes.substr(next, step);
    next += step;
    pending.erase(0, reader.Feed(pending));
  }
  return reader.state();
}

TEST(RequestReaderTest, ReadsARequestWhateverTheSplit) {
  const std::string wire =
      "POST /api/jobs/tasks/a%20b/trigger?x=1 HTTP/1.1\r\nHost: h\r\nX-Two: a\r\n"
      "Content-Length: 5\r\n\r\nhello";
  for (std::size_t step = 1; step <= wire.size(); ++step) {
    RequestReader reader({});
    ASSERT_EQ(FeedInSteps(reader, wire, step), State::kComplete) << step;
    const HttpRequest& request = reader.request();
    EXPECT_EQ(request.method, "POST");
    EXPECT_EQ(request.path, "/api/jobs/tasks/a%20b/trigger");
    EXPECT_EQ(request.query, "x=1");
    EXPECT_EQ(request.body, "hello");
    EXPECT_EQ(FindHeader(request.headers, "x-two"), "a");
    EXPECT_TRUE(reader.keep_alive());
  }
}

TEST(RequestReaderTest, PipelinedRequestsAreReadOneAtATime) {
  RequestReader reader({});
  std::string wire = "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.0\r\n\r\n";
  wire.erase(0, reader.Feed(wire));
  ASSERT_EQ(reader.state(), State::kComplete);
  EXPECT_EQ(reader.request().path, "/a");
  EXPECT_EQ(wire, "GET /b HTTP/1.0\r\n\r\n");
  reader.Next();
  wire.erase(0, reader.Feed(wire));
  ASSERT_EQ(reader.state(), State::kComplete);
  EXPECT_EQ(reader.request().path, "/b");
  EXPECT_EQ(reader.version(), 10);
  EXPECT_FALSE(reader.keep_alive());
  EXPECT_TRUE(wire.empty());
}

TEST(RequestReaderTest, ConnectionCloseEndsKeepAlive) {
  RequestReader reader({});
  reader.Feed("GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(reader.state(), State::kComplete);
  EXPECT_FALSE(reader.keep_alive());
}

TEST(RequestReaderTest, BodyMethodWithoutLengthHasAnEmptyBody) {
  RequestReader reader({});
  reader.Feed("POST /x HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_EQ(reader.state(), State::kComplete);
  EXPECT_EQ(reader.request().body, "");
}

TEST(RequestReaderTest, TooManyHeaderFieldsAre431) {
  RequestLimits limits;
  limits.max_header_fields = 3;
  RequestReader reader(limits);
  reader.Feed("GET /x HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n");
  ASSERT_EQ(reader.state(), State::kRefused);
  EXPECT_EQ(reader.refused_status(), 431);
  EXPECT_EQ(reader.request().method, "GET");
}

TEST(RequestReaderTest, HeadLargerThanTheLimitIs431WithoutWaitingForItsEnd) {
  RequestLimits limits;
  limits.max_head_bytes = 1024;
  RequestReader reader(limits);
  const std::string head = "GET /x HTTP/1.1\r\nX: " + std::string(2000, 'a');
  EXPECT_EQ(FeedInSteps(reader, head, 100), State::kRefused);
  EXPECT_EQ(reader.refused_status(), 431);
}

TEST(RequestReaderTest, LongRequestLineIs414BeforeItEnds) {
  RequestLimits limits;
  limits.max_request_line_bytes = 100;
  RequestReader reader(limits);
  EXPECT_EQ(FeedInSteps(reader, "GET /" + std::string(200, 'a'), 10), State::kRefused);
  EXPECT_EQ(reader.refused_status(), 414);
}

TEST(RequestReaderTest, ContentLengthAboveTheLimitIs413BeforeTheBody) {
  RequestLimits limits;
  limits.max_body_bytes = 10;
  RequestReader reader(limits);
  reader.Feed("POST /x HTTP/1.1\r\nContent-Length: 11\r\n\r\n");
  ASSERT_EQ(reader.state(), State::kRefused);
  EXPECT_EQ(reader.refused_status(), 413);
}

TEST(RequestReaderTest, TransferEncodingIs411BeforeAnyChunk) {
  for (const std::string encoding : {"chunked", "gzip, chunked", "identity"}) {
    RequestReader reader({});
    reader.Feed("POST /x HTTP/1.1\r\nTransfer-Encoding: " + encoding + "\r\n\r\nffffffff\r\n");
    ASSERT_EQ(reader.state(), State::kRefused) << encoding;
    EXPECT_EQ(reader.refused_status(), 411) << encoding;
  }
}

TEST(RequestReaderTest, InvalidContentLengthIs400WithAMessage) {
  for (const std::string length : {"-1", "nope", "1e3", "18446744073709551616", "1, 2"}) {
    RequestReader reader({});
    reader.Feed("POST /x HTTP/1.1\r\nContent-Length: " + length + "\r\n\r\n");
    ASSERT_EQ(reader.state(), State::kRefused) << length;
    EXPECT_EQ(reader.refused_status(), 400) << length;
    EXPECT_EQ(reader.refused_message(), "Invalid Content-Length header") << length;
  }
}

TEST(RequestReaderTest, MalformedRequestsAre400) {
  for (const std::string wire :
       {"GARBAGE\r\n\r\n", "GET /x\r\n\r\n", "GET /x HTTP/2.0\r\n\r\n",
        "GET /x HTTP/1.1\r\nNo colon\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\n"}) {
    RequestReader reader({});
    reader.Feed(wire);
    ASSERT_EQ(reader.state(), State::kRefused) << wire;
    EXPECT_EQ(reader.refused_status(), 400) << wire;
  }
}

TEST(RequestReaderTest, AnyMethodTokenIsRead) {
  RequestReader reader({});
  reader.Feed("M-SEARCH /x HTTP/1.1\r\n\r\n");
  ASSERT_EQ(reader.state(), State::kComplete);
  EXPECT_EQ(reader.request().method, "M-SEARCH");
}

}  // namespace
}  // namespace stagehand::http_internal
