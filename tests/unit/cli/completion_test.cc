#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/completion_script.h"
#include "stagehand/cli/cli.h"

namespace stagehand::cli {
namespace {

using ::testing::HasSubstr;

std::string Script(const std::string& shell) {
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(Run({"stagehand", "completion", shell}, out, err), kExitOk) << err.str();
  return out.str();
}

bool HaveProgram(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

// A script written to a temporary file, removed at the end.
class ScriptFile {
 public:
  explicit ScriptFile(const std::string& text) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "stagehand-completion-XXXXXX").string();
    int fd = mkstemp(pattern.data());
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = pattern;
    std::ofstream(path_) << text;
  }
  ~ScriptFile() { std::filesystem::remove(path_); }
  ScriptFile(const ScriptFile&) = delete;
  ScriptFile& operator=(const ScriptFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `command` with sh; returns its exit status and what it printed (stdout and stderr).
std::pair<int, std::string> Shell(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    return {-1, ""};
  }
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) {
    output += buffer.data();
  }
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// Returns what bash's completion offers for the words of `line` (the last one is being typed).
std::string BashCompletes(const ScriptFile& script, const std::string& line) {
  auto [status, output] = Shell("bash -c 'source " + script.path() + "; COMP_WORDS=(" + line +
                                "); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); "
                                "[[ \"" +
                                line +
                                "\" == *\" \" ]] && { COMP_WORDS+=(\"\"); "
                                "COMP_CWORD=$((COMP_CWORD + 1)); }; _stagehand; "
                                "echo \"${COMPREPLY[*]}\"'");
  EXPECT_EQ(status, 0) << output;
  return output;
}

TEST(CompletionTest, EveryScriptNamesEveryVerbAndOption) {
  for (const char* shell : {"bash", "zsh", "fish"}) {
    const std::string script = Script(shell);
    for (const char* word :
         {"cron",         "next",    "db",          "migrate",  "serve",  "tasks",
          "trigger",      "cancel",  "config",      "check",    "runs",   "logs",
          "completion",   "--url",   "--token",     "--follow", "--wait", "--timeout",
          "--watch",      "--limit", "--before",    "--json",   "--tz",   "--log-format",
          "--ready-file", "prune",   "--older-than"}) {
      const std::string name = std::string(word).starts_with("--") && std::string(shell) == "fish"
                                   ? "-l " + std::string(word).substr(2)
                                   : std::string(word);
      EXPECT_THAT(script, HasSubstr(name)) << shell << ": " << word;
    }
  }
}

TEST(CompletionTest, BashScriptParses) {
  ScriptFile script(Script("bash"));
  auto [status, output] = Shell("bash -n " + script.path());
  EXPECT_EQ(status, 0) << output;
}

TEST(CompletionTest, BashCompletesVerbsOptionsAndValues) {
  ScriptFile script(Script("bash"));
  EXPECT_EQ(BashCompletes(script, "stagehand tr"), "trigger\n");
  EXPECT_EQ(BashCompletes(script, "stagehand c"), "cron cancel config completion\n");
  EXPECT_EQ(BashCompletes(script, "stagehand cron n"), "next\n");
  EXPECT_EQ(BashCompletes(script, "stagehand trigger jobs backup --w"), "--wait\n");
  EXPECT_EQ(BashCompletes(script, "stagehand logs --fo"), "--follow\n");
  EXPECT_EQ(BashCompletes(script, "stagehand serve --log-format "), "text json\n");
  EXPECT_EQ(BashCompletes(script, "stagehand completion "), "bash zsh fish\n");
  EXPECT_EQ(BashCompletes(script, "stagehand tasks --url "), "\n");
  EXPECT_EQ(BashCompletes(script, "stagehand tasks --json --pl"), "--plugin\n");
  EXPECT_EQ(BashCompletes(script, "stagehand --help c"), "cron cancel config completion\n");
  EXPECT_EQ(BashCompletes(script, "stagehand db p"), "prune\n");
  EXPECT_EQ(BashCompletes(script, "stagehand db prune --inc"), "--include-backstage-only\n");
}

TEST(CompletionTest, ZshScriptParses) {
  if (!HaveProgram("zsh")) {
    GTEST_SKIP() << "zsh is not installed (apt-get install zsh)";
  }
  ScriptFile script(Script("zsh"));
  auto [status, output] = Shell("zsh -n " + script.path());
  EXPECT_EQ(status, 0) << output;
}

// zsh's completion system needs a terminal; the script's own logic is checked with stand-ins for
// the completion builtins it calls, which print what they are given.
TEST(CompletionTest, ZshOffersWhatTheCommandLineCallsFor) {
  if (!HaveProgram("zsh")) {
    GTEST_SKIP() << "zsh is not installed (apt-get install zsh)";
  }
  ScriptFile script(Script("zsh"));
  auto [status, output] = Shell(
      "zsh -f -c 'compdef() { :; }; source " + script.path() +
      R"(; _describe() { local -a items; items=("${(@P)4}"); print -r -- "${(j: :)items[@]%%:*}"; }
         compadd() { shift; print -r -- "$*"; }
         _files() { print files; }
         words=(stagehand cron ""); CURRENT=3; PREFIX=""; _stagehand
         words=(stagehand serve --log-format ""); CURRENT=4; PREFIX=""; _stagehand
         words=(stagehand logs jobs x --f); CURRENT=5; PREFIX="--f"; _stagehand
         words=(stagehand serve --config ""); CURRENT=4; PREFIX=""; _stagehand
         words=(stagehand completion ""); CURRENT=3; PREFIX=""; _stagehand')");
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output,
            "next\n"
            "text json\n"
            "--help -h --url --token --config -c --follow -f\n"
            "files\n"
            "bash zsh fish\n");
}

TEST(CompletionTest, FishScriptParsesAndCompletes) {
  if (!HaveProgram("fish")) {
    GTEST_SKIP() << "fish is not installed (apt-get install fish)";
  }
  ScriptFile script(Script("fish"));
  auto [status, output] = Shell("fish --no-execute " + script.path());
  EXPECT_EQ(status, 0) << output;
  auto [completed, offered] = Shell("fish --no-config -c 'source " + script.path() +
                                    "; complete -C \"stagehand trig\"; complete -C \"stagehand "
                                    "serve --log-format \"; complete -C \"stagehand runs --li\"'");
  EXPECT_EQ(completed, 0) << offered;
  EXPECT_THAT(offered, HasSubstr("trigger\tRun a task of a running daemon as soon as possible"));
  EXPECT_THAT(offered, HasSubstr("text\tLog lines on stderr: text or json\n"));
  EXPECT_THAT(offered, HasSubstr("json\tLog lines on stderr: text or json\n"));
  EXPECT_THAT(offered, HasSubstr("--limit\tHow many runs to list, 1 to 1000"));
}

TEST(ShortDescriptionTest, KeepsTheFirstClause) {
  EXPECT_EQ(ShortDescription("Run a task now (POST ...); fails with 409"), "Run a task now");
  EXPECT_EQ(ShortDescription("Bearer token. Sent as a header"), "Bearer token");
  EXPECT_EQ(ShortDescription(std::string(100, 'x')), std::string(69, 'x') + "…");
}

TEST(CompletionScriptTest, QuotesDescriptionsForEachShell) {
  CompletionCommand program;
  program.name = "stagehand";
  CompletionCommand verb;
  verb.name = "say";
  verb.description = "Say 'it' \\ now";
  verb.options.push_back({{"--as", "-a"}, "Who's saying it", true, {"me", "you"}, false});
  program.subcommands.push_back(verb);
  EXPECT_THAT(CompletionScript("zsh", program), HasSubstr("'say:Say '\\''it'\\'' \\ now'"));
  EXPECT_THAT(CompletionScript("fish", program), HasSubstr("-d 'Say \\'it\\' \\\\ now'"));
  EXPECT_THAT(CompletionScript("fish", program),
              HasSubstr("-l as -s a -x -a 'me you' -d 'Who\\'s saying it'"));
  EXPECT_THAT(CompletionScript("bash", program),
              HasSubstr("stagehand/say:--as|stagehand/say:-a) COMPREPLY=($(compgen -W 'me you'"));
  EXPECT_EQ(CompletionScript("tcsh", program), "");
}

}  // namespace
}  // namespace stagehand::cli
