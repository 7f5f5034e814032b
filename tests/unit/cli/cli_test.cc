#include "stagehand/cli/cli.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace stagehand::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

struct Outcome {
  int exit_code;
  std::string out;
  std::string err;
};

Outcome RunCli(const std::vector<std::string>& args) {
  std::vector<std::string> command_line;
  command_line.reserve(args.size() + 1);
  command_line.emplace_back("stagehand");
  for (const std::string& arg : args) {
    command_line.push_back(arg);
  }
  std::ostringstream out;
  std::ostringstream err;
  int exit_code = Run(command_line, out, err);
  return {exit_code, out.str(), err.str()};
}

TEST(CliTest, VersionPrintsNameAndVersion) {
  Outcome outcome = RunCli({"--version"});
  EXPECT_EQ(outcome.exit_code, kExitOk);
  EXPECT_THAT(outcome.out, MatchesRegex("stagehand [0-9]+\\.[0-9]+\\.[0-9]+\n"));
}

TEST(CliTest, HelpListsTheVerbs) {
  Outcome outcome = RunCli({"--help"});
  EXPECT_EQ(outcome.exit_code, kExitOk);
  EXPECT_THAT(outcome.out, HasSubstr("cron"));
  EXPECT_THAT(outcome.err, IsEmpty());
}

TEST(CliTest, EveryVerbHasHelpWithAnExample) {
  for (const std::vector<std::string>& verb :
       std::vector<std::vector<std::string>>{{"cron"}, {"cron", "next"}}) {
    std::vector<std::string> args = verb;
    args.push_back("--help");
    Outcome outcome = RunCli(args);
    EXPECT_EQ(outcome.exit_code, kExitOk) << verb.back();
    EXPECT_THAT(outcome.out, HasSubstr("Example:\n  stagehand " + verb.front())) << verb.back();
  }
}

TEST(CliTest, NoCommandIsAUsageError) {
  Outcome outcome = RunCli({});
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_THAT(outcome.err, StartsWith("stagehand: "));
}

TEST(CliTest, VerbWithoutSubcommandIsAUsageError) {
  Outcome outcome = RunCli({"cron"});
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_THAT(outcome.err, StartsWith("stagehand: "));
}

TEST(CliTest, UnknownCommandIsAUsageError) {
  Outcome outcome = RunCli({"launch"});
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_THAT(outcome.err, StartsWith("stagehand: "));
  EXPECT_THAT(outcome.err, HasSubstr("launch"));
}

TEST(CliTest, UnknownFlagIsAUsageError) {
  Outcome outcome = RunCli({"cron", "next", "* * * * *", "--colour"});
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_THAT(outcome.err, HasSubstr("--colour"));
}

}  // namespace
}  // namespace stagehand::cli
