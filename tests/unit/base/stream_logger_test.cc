#include "stagehand/base/stream_logger.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::string_literals;

const std::regex kTimestamp(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");

// An in-memory stdio stream whose contents can be read back at any time.
class MemoryStream {
 public:
  MemoryStream() : stream_(open_memstream(&data_, &size_)) {}
  ~MemoryStream() {
    std::fclose(stream_);
    std::free(data_);  // NOLINT(cppcoreguidelines-no-malloc): open_memstream's buffer
  }
  MemoryStream(const MemoryStream&) = delete;
  MemoryStream& operator=(const MemoryStream&) = delete;

  std::FILE* get() { return stream_; }
  std::string contents() {
    std::fflush(stream_);
    return {data_, size_};
  }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::FILE* stream_;
};

// Returns `text` with every timestamp replaced by "<T>".
std::string MaskTimes(const std::string& text) {
  return std::regex_replace(text, kTimestamp, "<T>");
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      end = text.size();
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::string Text(const std::string& message, const LogFields& fields,
                 LogLevel level = LogLevel::kInfo) {
  MemoryStream stream;
  MakeStreamLogger(stream.get(), LogFormat::kText, LogLevel::kDebug)->Log(level, message, fields);
  return MaskTimes(stream.contents());
}

std::string Json(const std::string& message, const LogFields& fields,
                 LogLevel level = LogLevel::kInfo) {
  MemoryStream stream;
  MakeStreamLogger(stream.get(), LogFormat::kJson, LogLevel::kDebug)->Log(level, message, fields);
  return MaskTimes(stream.contents());
}

TEST(StreamLoggerTest, TextLineShape) {
  EXPECT_EQ(Text("Task worker starting", {{"plugin", "jobs"}, {"task", "nightly"}}),
            "<T> info  Task worker starting plugin=jobs task=nightly\n");
  EXPECT_EQ(Text("m", {}, LogLevel::kDebug), "<T> debug m\n");
  EXPECT_EQ(Text("m", {}, LogLevel::kWarn), "<T> warn  m\n");
  EXPECT_EQ(Text("m", {}, LogLevel::kError), "<T> error m\n");
}

TEST(StreamLoggerTest, TimestampIsUtcWithMilliseconds) {
  MemoryStream stream;
  MakeStreamLogger(stream.get(), LogFormat::kText, LogLevel::kInfo)->Info("x");
  const std::string line = stream.contents();
  ASSERT_GE(line.size(), 24u);
  EXPECT_TRUE(std::regex_match(line.substr(0, 24), kTimestamp)) << line;
}

TEST(StreamLoggerTest, TextQuotesValuesThatWouldBeAmbiguous) {
  EXPECT_EQ(Text("m", {{"a", "two words"}}), "<T> info  m a=\"two words\"\n");
  EXPECT_EQ(Text("m", {{"a", "say \"hi\""}}), "<T> info  m a=\"say \\\"hi\\\"\"\n");
  EXPECT_EQ(Text("m", {{"a", "k=v"}}), "<T> info  m a=\"k=v\"\n");
  EXPECT_EQ(Text("m", {{"a", "line\nbreak"}}), "<T> info  m a=\"line\\nbreak\"\n");
  EXPECT_EQ(Text("m", {{"a", "tab\there"}}), "<T> info  m a=\"tab\\there\"\n");
  EXPECT_EQ(Text("m", {{"a", "nul\0x"s}}), "<T> info  m a=\"nul\\u0000x\"\n");
  EXPECT_EQ(Text("m", {{"a", ""}}), "<T> info  m a=\"\"\n");
  EXPECT_EQ(Text("m", {{"two words", "v"}}), "<T> info  m \"two words\"=v\n");
  EXPECT_EQ(Text("m", {{"a", "bad\xff"}}), "<T> info  m a=\"bad\xef\xbf\xbd\"\n");
}

TEST(StreamLoggerTest, TextLeavesPlainValuesAlone) {
  EXPECT_EQ(Text("m", {{"path", "/api/jobs/a%2Fb?x=1"}}),
            "<T> info  m path=\"/api/jobs/a%2Fb?x=1\"\n");
  EXPECT_EQ(Text("m", {{"path", "/api/jobs/a%2Fb"}, {"u", "héllo"}, {"b", "back\\slash"}}),
            "<T> info  m path=/api/jobs/a%2Fb u=héllo b=back\\slash\n");
}

TEST(StreamLoggerTest, TextMessageKeepsSpacesButNotLineBreaks) {
  EXPECT_EQ(Text("plain words here", {}), "<T> info  plain words here\n");
  EXPECT_EQ(Text("two\nlines", {}), "<T> info  \"two\\nlines\"\n");
  EXPECT_EQ(Text("looks like k=v", {}), "<T> info  \"looks like k=v\"\n");
  EXPECT_EQ(Text("", {}), "<T> info  \"\"\n");
}

TEST(StreamLoggerTest, JsonLineShape) {
  EXPECT_EQ(Json("Task worker starting", {{"plugin", "jobs"}, {"task", "nightly"}}),
            "{\"time\":\"<T>\",\"level\":\"info\",\"message\":\"Task worker starting\","
            "\"plugin\":\"jobs\",\"task\":\"nightly\"}\n");
  EXPECT_EQ(Json("m", {}, LogLevel::kWarn),
            "{\"time\":\"<T>\",\"level\":\"warn\",\"message\":\"m\"}\n");
}

TEST(StreamLoggerTest, JsonEscapesEverything) {
  const std::string nasty = "q\" b\\ n\n r\r t\t nul\0 bell\x07 del\x7f é \xc3("s;
  const std::string line = Json(nasty, {{"k\"ey", nasty}});
  EXPECT_EQ(SplitLines(line).size(), 1u);
  const nlohmann::json parsed = nlohmann::json::parse(line);
  const std::string expected = "q\" b\\ n\n r\r t\t nul\0 bell\x07 del\x7f é \xef\xbf\xbd("s;
  EXPECT_EQ(parsed["message"].get<std::string>(), expected);
  EXPECT_EQ(parsed["k\"ey"].get<std::string>(), expected);
  EXPECT_THAT(line, HasSubstr(R"(q\" b\\ n\n r\r t\t nul\u0000 bell\u0007 del)"
                              "\x7f"
                              R"( é )"
                              "\xef\xbf\xbd("));
}

TEST(StreamLoggerTest, JsonRejectsInvalidUtf8Forms) {
  // Overlong '/', a UTF-16 surrogate, a code point above U+10FFFF and a truncated sequence.
  for (const std::string& bad :
       std::vector<std::string>{"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    const std::string line = Json(bad, {});
    EXPECT_TRUE(nlohmann::json::accept(line)) << line;
    EXPECT_THAT(line, HasSubstr("\xef\xbf\xbd"));
  }
  EXPECT_EQ(nlohmann::json::parse(Json("\xf0\x9f\x98\x80", {}))["message"], "\xf0\x9f\x98\x80");
}

TEST(StreamLoggerTest, JsonFieldsCannotReplaceTheRecordKeys) {
  const nlohmann::json parsed =
      nlohmann::json::parse(Json("real", {{"message", "fake"}, {"level", "x"}, {"time", "y"}}));
  EXPECT_EQ(parsed["message"], "real");
  EXPECT_EQ(parsed["level"], "info");
  EXPECT_EQ(parsed["fields.message"], "fake");
  EXPECT_EQ(parsed["fields.level"], "x");
  EXPECT_EQ(parsed["fields.time"], "y");
}

TEST(StreamLoggerTest, LevelFilter) {
  MemoryStream stream;
  std::shared_ptr<Logger> logger =
      MakeStreamLogger(stream.get(), LogFormat::kText, LogLevel::kWarn);
  EXPECT_FALSE(logger->Enabled(LogLevel::kDebug));
  EXPECT_FALSE(logger->Enabled(LogLevel::kInfo));
  EXPECT_TRUE(logger->Enabled(LogLevel::kWarn));
  EXPECT_TRUE(logger->Enabled(LogLevel::kError));
  logger->Debug("d");
  logger->Info("i");
  logger->Warn("w");
  logger->Error("e");
  EXPECT_THAT(SplitLines(MaskTimes(stream.contents())), ElementsAre("<T> warn  w", "<T> error e"));
}

TEST(StreamLoggerTest, ChildLoggerFieldsComeFirst) {
  MemoryStream stream;
  std::shared_ptr<Logger> child = ChildLogger(
      MakeStreamLogger(stream.get(), LogFormat::kText, LogLevel::kInfo), {{"plugin", "jobs"}});
  child->Info("m", {{"task", "t"}});
  EXPECT_EQ(MaskTimes(stream.contents()), "<T> info  m plugin=jobs task=t\n");
}

TEST(StreamLoggerTest, ConcurrentWritersProduceWholeLines) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  // Small stdio buffer so one line needs several flushes if it were written piecewise.
  ASSERT_EQ(std::setvbuf(file, nullptr, _IOFBF, 64), 0);
  std::shared_ptr<Logger> logger = MakeStreamLogger(file, LogFormat::kJson, LogLevel::kInfo);
  constexpr int kThreads = 4;
  constexpr int kLines = 300;
  const std::string padding(500, 'x');
  {
    std::vector<std::jthread> threads;
    threads.reserve(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&logger, &padding, t] {
        for (int i = 0; i < kLines; ++i) {
          logger->Info(
              "line",
              {{"thread", std::to_string(t)}, {"seq", std::to_string(i)}, {"padding", padding}});
        }
      });
    }
  }
  std::rewind(file);
  std::string contents;
  char buffer[4096];
  std::size_t read = 0;
  while ((read = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
    contents.append(buffer, read);
  }
  std::fclose(file);

  const std::vector<std::string> lines = SplitLines(contents);
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(kThreads * kLines));
  std::vector<int> next(kThreads, 0);
  for (const std::string& line : lines) {
    nlohmann::json parsed;
    ASSERT_NO_THROW(parsed = nlohmann::json::parse(line)) << line.substr(0, 200);
    const int thread = std::stoi(parsed["thread"].get<std::string>());
    EXPECT_EQ(std::stoi(parsed["seq"].get<std::string>()),
              next[static_cast<std::size_t>(thread)]++);
    EXPECT_EQ(parsed["padding"], padding);
  }
}

TEST(LogOptionTest, ParsesFormats) {
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  Result<LogFormat> bad = ParseLogFormat("yaml");
  ASSERT_THAT(bad, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(bad.status().message(), "Invalid log format 'yaml', expected one of: text, json");
}

TEST(LogOptionTest, ParsesLevels) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("warn"), LogLevel::kWarn);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  Result<LogLevel> bad = ParseLogLevel("verbose");
  ASSERT_THAT(bad, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(bad.status().message(),
            "Invalid log level 'verbose', expected one of: debug, info, warn, error");
}

}  // namespace
}  // namespace stagehand
