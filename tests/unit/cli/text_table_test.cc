#include "cli/text_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace stagehand::cli {
namespace {

TEST(RenderTableTest, PadsEachColumnToItsWidestCellInCodePoints) {
  EXPECT_EQ(RenderTable({{Cell{"A", {}}, Cell{"BB", {}}, Cell{"C", {}}},
                         {Cell{"ééé", {}}, Cell{"-", {}}, Cell{"last", {}}}},
                        /*colour=*/false),
            "A    BB  C\n"
            "ééé  -   last\n");
  EXPECT_EQ(RenderTable({}, false), "");
}

TEST(RenderTableTest, ColourWrapsCellsAndTheHeaderIsBold) {
  EXPECT_EQ(RenderTable({{Cell{"H", {}}, Cell{"I", {}}}, {Cell{"ok", kGreen}, Cell{"x", {}}}},
                        /*colour=*/true),
            "\033[1mH\033[0m   \033[1mI\033[0m\n"
            "\033[32mok\033[0m  x\n");
}

TEST(TruncateTest, CutsAtCodePointsWithAnEllipsis) {
  EXPECT_EQ(Truncate("abcdef", 4), "abc…");
  EXPECT_EQ(Truncate("abcd", 4), "abcd");
  EXPECT_EQ(Truncate("ééééé", 3), "éé…");
  EXPECT_EQ(DisplayWidth("ééé…"), 4U);
}

TEST(ShellQuoteTest, QuotesOnlyWhatAShellWouldSplitOrExpand) {
  EXPECT_EQ(ShellQuote("backup"), "backup");
  EXPECT_EQ(ShellQuote("MjAyNi0xMi0w=="), "MjAyNi0xMi0w==");
  EXPECT_EQ(ShellQuote("nightly report/v2"), "'nightly report/v2'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("$HOME"), "'$HOME'");
  EXPECT_EQ(ShellQuote(""), "''");
}

}  // namespace
}  // namespace stagehand::cli
