#include "stagehand/base/text.h"

#include <gtest/gtest.h>

namespace stagehand {
namespace {

TEST(OneLineTest, JoinsLines) {
  EXPECT_EQ(OneLine("a\nb"), "a; b");
  EXPECT_EQ(OneLine("  a  \r\n\n  b\n"), "a; b");
  EXPECT_EQ(OneLine("connection failed\n\tIs the server running?\n"),
            "connection failed; Is the server running?");
  EXPECT_EQ(OneLine("single"), "single");
  EXPECT_EQ(OneLine("a b  c"), "a b  c");
}

TEST(OneLineTest, EmptyAndBlankTextIsEmpty) {
  EXPECT_EQ(OneLine(""), "");
  EXPECT_EQ(OneLine("\n \n\t\r\n"), "");
}

}  // namespace
}  // namespace stagehand
