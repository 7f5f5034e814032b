#include "stagehand/base/json_string.h"

#include <gtest/gtest.h>

#include <string>

namespace stagehand {
namespace {

using namespace std::string_literals;

std::string Literal(std::string_view text) {
  std::string out;
  AppendJsonString(out, text);
  return out;
}

TEST(JsonStringTest, EscapesAsJsonStringify) {
  EXPECT_EQ(Literal("plain"), "\"plain\"");
  EXPECT_EQ(Literal("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(Literal("\b\f\n\r\t"), "\"\\b\\f\\n\\r\\t\"");
  EXPECT_EQ(Literal("\0\x01\x1f"s), "\"\\u0000\\u0001\\u001f\"");
  EXPECT_EQ(Literal("del\x7f/slash"), "\"del\x7f/slash\"");
  EXPECT_EQ(Literal("h\xc3\xa9 \xf0\x9f\x98\x80"), "\"h\xc3\xa9 \xf0\x9f\x98\x80\"");
}

TEST(JsonStringTest, ReplacesInvalidUtf8WithReplacementCharacter) {
  EXPECT_EQ(Literal("a\xff"
                    "b"),
            "\"a\xef\xbf\xbd"
            "b\"");
  EXPECT_EQ(Literal("\xc0\xaf"), "\"\xef\xbf\xbd\xef\xbf\xbd\"");
  EXPECT_EQ(Literal("\xed\xa0\x80"), "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
  EXPECT_EQ(Literal("\xe2\x82"), "\"\xef\xbf\xbd\xef\xbf\xbd\"");
}

TEST(JsonStringTest, Utf8SequenceLength) {
  EXPECT_EQ(Utf8SequenceLength("a", 0), 1u);
  EXPECT_EQ(Utf8SequenceLength("\xc3\xa9", 0), 2u);
  EXPECT_EQ(Utf8SequenceLength("\xe2\x82\xac", 0), 3u);
  EXPECT_EQ(Utf8SequenceLength("\xf0\x9f\x98\x80", 0), 4u);
  EXPECT_EQ(Utf8SequenceLength("\xf4\x90\x80\x80", 0), 0u);
  EXPECT_EQ(Utf8SequenceLength("\x80", 0), 0u);
}

}  // namespace
}  // namespace stagehand
