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
       std::vector<std::vector<std::string>>{{"cron"},
                                             {"cron", "next"},
                                             {"db"},
                                             {"db", "migrate"},
                                             {"db", "prune"},
                                             {"serve"},
                                             {"tasks"},
                                             {"trigger"},
                                             {"cancel"},
                                             {"config"},
                                             {"config", "check"},
                                             {"runs"},
                                             {"logs"},
                                             {"completion"}}) {
    std::vector<std::string> args = verb;
    args.push_back("--help");
    Outcome outcome = RunCli(args);
    EXPECT_EQ(outcome.exit_code, kExitOk) << verb.back();
    const std::size_t example = outcome.out.find("Example:\n  ");
    ASSERT_NE(example, std::string::npos) << verb.back();
    EXPECT_THAT(outcome.out.substr(example), HasSubstr("stagehand " + verb.front())) << verb.back();
  }
}

TEST(CliTest, HelpListsTheClientExitCodes) {
  for (const char* verb : {"tasks", "trigger", "cancel", "runs", "logs"}) {
    Outcome outcome = RunCli({verb, "--help"});
    EXPECT_THAT(outcome.out, HasSubstr("3 not found (404), 4 conflict (409), 5 not authenticated "
                                       "(401/403), 6 daemon error (5xx), 7 daemon unreachable"))
        << verb;
  }
}

TEST(CliTest, ClientVerbsCheckTheirArgumentsFirst) {
  EXPECT_EQ(RunCli({"trigger", "Jobs", "report"}).exit_code, kExitUsage);
  EXPECT_EQ(RunCli({"cancel", "jobs", " "}).exit_code, kExitUsage);
  EXPECT_EQ(RunCli({"trigger", "jobs"}).exit_code, kExitUsage);
  EXPECT_EQ(RunCli({"tasks", "--tz", "Nowhere/City"}).exit_code, kExitUsage);
  EXPECT_EQ(RunCli({"tasks", "--plugin", "-x"}).exit_code, kExitUsage);
  Outcome bad_url = RunCli({"tasks", "--url", "https://127.0.0.1:7007"});
  EXPECT_EQ(bad_url.exit_code, kExitUsage);
  EXPECT_THAT(bad_url.err, HasSubstr("https is not supported"));
}

TEST(CliTest, TriggerHelpListsTheOutcomeExitCodes) {
  Outcome outcome = RunCli({"trigger", "--help"});
  EXPECT_THAT(outcome.out, HasSubstr("0 succeeded, 10 failed, 11 timed out, 12 cancelled"));
  EXPECT_THAT(outcome.out, HasSubstr("13 lost (its host died) or fenced"));
  EXPECT_THAT(outcome.out, HasSubstr("14 --timeout passed first"));
}

TEST(CliTest, HistoryVerbsCheckTheirArgumentsFirst) {
  Outcome zero = RunCli({"runs", "jobs", "backup", "--limit", "0"});
  EXPECT_EQ(zero.exit_code, kExitUsage);
  EXPECT_THAT(zero.err, HasSubstr("--limit"));
  EXPECT_EQ(RunCli({"runs", "jobs", "backup", "--limit", "1001"}).exit_code, kExitUsage);
  EXPECT_EQ(RunCli({"runs", "Jobs", "backup"}).exit_code, kExitUsage);
  EXPECT_EQ(RunCli({"runs", "jobs"}).exit_code, kExitUsage);
  EXPECT_EQ(RunCli({"runs", "jobs", "backup", "--tz", "Nowhere/City"}).exit_code, kExitUsage);

  Outcome empty_run = RunCli({"logs", "jobs", "backup", ""});
  EXPECT_EQ(empty_run.exit_code, kExitUsage);
  EXPECT_THAT(empty_run.err, HasSubstr("RUN is empty"));
  EXPECT_EQ(RunCli({"logs", "jobs", " "}).exit_code, kExitUsage);

  Outcome timeout_alone = RunCli({"trigger", "jobs", "backup", "--timeout", "5s"});
  EXPECT_EQ(timeout_alone.exit_code, kExitUsage);
  EXPECT_THAT(timeout_alone.err, HasSubstr("--timeout requires --wait"));
  Outcome bad_timeout = RunCli({"trigger", "jobs", "backup", "--wait", "--timeout", "soon"});
  EXPECT_EQ(bad_timeout.exit_code, kExitUsage);
  EXPECT_THAT(bad_timeout.err, HasSubstr("stagehand: invalid --timeout 'soon': "));
  Outcome zero_timeout = RunCli({"trigger", "jobs", "backup", "--wait", "--timeout", "0s"});
  EXPECT_EQ(zero_timeout.exit_code, kExitUsage);
  EXPECT_THAT(zero_timeout.err, HasSubstr("invalid --timeout '0s': it must be longer than zero"));

  Outcome watch_json = RunCli({"tasks", "--watch", "--json"});
  EXPECT_EQ(watch_json.exit_code, kExitUsage);
  EXPECT_THAT(watch_json.err, HasSubstr("--json excludes --watch"));

  Outcome shell = RunCli({"completion", "tcsh"});
  EXPECT_EQ(shell.exit_code, kExitUsage);
  EXPECT_THAT(shell.err, HasSubstr("tcsh not in {bash,zsh,fish}"));
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
