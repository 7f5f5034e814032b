#include "stagehand/executors/command_task.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "executors/process_shim.h"
#include "integration/executors/recording_logger.h"
#include "stagehand/model/run_report.h"
#include "stagehand/model/task_run.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::LogRecord;
using ::stagehand::testing::RecordingLogger;
using ::stagehand::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

constexpr auto kEventLimit = std::chrono::seconds(5);
constexpr auto kPollStep = std::chrono::milliseconds(2);

// Returns whether `pid` names no process, not even a zombie.
bool Gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// Returns whether `pid` is gone within kEventLimit, reaping this process's exited children
// meanwhile (a subreaper inherits the orphans of a killed child).
bool WaitGone(pid_t pid) {
  auto limit = std::chrono::steady_clock::now() + kEventLimit;
  while (!Gone(pid) && std::chrono::steady_clock::now() < limit) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    std::this_thread::sleep_for(kPollStep);
  }
  return Gone(pid);
}

// Returns the pid written to `path`, waiting for it up to kEventLimit; 0 when none came.
pid_t WaitForPidFile(const std::filesystem::path& path) {
  auto limit = std::chrono::steady_clock::now() + kEventLimit;
  for (;;) {
    std::ifstream in(path);
    std::string line;
    if (std::getline(in, line) && !line.empty()) {
      return static_cast<pid_t>(std::stol(line));
    }
    if (std::chrono::steady_clock::now() >= limit) {
      return 0;
    }
    std::this_thread::sleep_for(kPollStep);
  }
}

// Returns this process's resident set in KiB.
long ResidentKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stol(line.substr(6));
    }
  }
  return 0;
}

class CommandTaskTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_THAT(BecomeChildSubreaper(), IsOk()); }

  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "stagehand-cmd-XXXXXX");
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }

  // Every process a run started is gone and reaped when it returns: none is left as a child
  // (or zombie) of this process, which is a subreaper.
  void TearDown() override {
    siginfo_t info{};
    int waited = waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT);
    EXPECT_TRUE(waited != 0 && errno == ECHILD) << "a child is left: " << info.si_pid;
    std::filesystem::remove_all(dir_);
  }

  CommandSpec Shell(std::string script) {
    CommandSpec spec;
    spec.argv = {"/bin/sh", "-c", std::move(script)};
    spec.task_id = "t1";
    return spec;
  }

  Status Run(const CommandSpec& spec) {
    return RunCommand(spec, logger_, SystemClock::Instance(), std::stop_token());
  }

  // Starts `spec` on a thread; the caller stops it through `stop_`.
  std::future<Status> Start(const CommandSpec& spec) {
    return std::async(std::launch::async, [this, spec] {
      return RunCommand(spec, logger_, SystemClock::Instance(), stop_.get_token());
    });
  }

  // Returns the process group id of the started command (its pid).
  pid_t StartedGroup() {
    std::optional<LogRecord> started = logger_.WaitFor("command started");
    EXPECT_TRUE(started.has_value());
    return started ? static_cast<pid_t>(std::stol(started->Field("pid"))) : 0;
  }

  static bool GroupGone(pid_t pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }

  // Returns the outcome of `run`, which must come within kEventLimit; past it, kills group `pgid`
  // so that the test ends.
  static Status Within(std::future<Status>& run, pid_t pgid) {
    if (run.wait_for(kEventLimit) != std::future_status::ready) {
      ADD_FAILURE() << "the run did not return";
      kill(-pgid, SIGKILL);
    }
    return run.get();
  }

  // Starts `spec` on a thread with both tokens of `control_`.
  std::future<Status> StartControlled(const CommandSpec& spec) {
    return std::async(std::launch::async, [this, spec] {
      return RunCommand(spec, logger_, SystemClock::Instance(),
                        RunControl{stop_.get_token(), kill_.get_token()});
    });
  }

  std::string PidFile(std::string_view name = "pid") const { return (dir_ / name).string(); }

  RecordingLogger logger_;
  std::stop_source stop_;
  std::stop_source kill_;
  std::filesystem::path dir_;
};

TEST_F(CommandTaskTest, SucceedsAndLogsStdoutLines) {
  Status status = Run(Shell("echo hello; echo world"));
  ASSERT_THAT(status, IsOk());
  EXPECT_THAT(logger_.Lines("stdout"), ElementsAre("hello", "world"));
  for (const LogRecord& record : logger_.Records()) {
    if (record.Field("stream") != "stdout") {
      continue;
    }
    EXPECT_EQ(record.level, LogLevel::kInfo);
    EXPECT_EQ(record.Field("task"), "t1");
  }
}

TEST_F(CommandTaskTest, NonZeroExitFailsWithCodeAndStderrLines) {
  Status status = Run(Shell("echo first >&2; echo second >&2; exit 3"));
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(status.message(), AllOf(HasSubstr("exited with code 3"), HasSubstr("first\nsecond")));
  EXPECT_THAT(logger_.Lines("stderr"), ElementsAre("first", "second"));
  for (const LogRecord& record : logger_.Records()) {
    if (record.Field("stream") == "stderr") {
      EXPECT_EQ(record.level, LogLevel::kWarn);
    }
  }
}

TEST_F(CommandTaskTest, FailureMessageKeepsOnlyTheLastTenStderrLines) {
  Status status = Run(Shell("for i in $(seq 1 25); do echo line$i >&2; done; exit 1"));
  ASSERT_THAT(status, Not(IsOk()));
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("line16\n"), HasSubstr("line25"), Not(HasSubstr("line15\n"))));
}

TEST_F(CommandTaskTest, FailureMessageKeepsAtMostOneKibOfStderr) {
  Status status = Run(Shell("for i in 1 2 3; do printf '%0600d\\n' $i >&2; done; exit 1"));
  ASSERT_THAT(status, Not(IsOk()));
  EXPECT_LE(status.message().size(), 1024U + 100U);
  EXPECT_THAT(status.message(), HasSubstr("3"));
}

TEST_F(CommandTaskTest, SignalDeathIsReported) {
  Status status = Run(Shell("kill -USR1 $$"));
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable, "signal 10 (SIGUSR1)"));
}

TEST_F(CommandTaskTest, AppliesEnvironmentAndWorkingDirectory) {
  std::filesystem::path dir = std::filesystem::canonical(std::filesystem::temp_directory_path());
  CommandSpec spec = Shell("echo $FOO; echo $HOME_SEEN; pwd");
  spec.env = {{"FOO", "bar baz"}, {"HOME_SEEN", "${HOME}"}};
  spec.working_directory = dir.string();
  Status status = Run(spec);
  ASSERT_THAT(status, IsOk());
  EXPECT_THAT(logger_.Lines("stdout"), ElementsAre("bar baz", "${HOME}", dir.string()));
}

// Issue 18: a traced run's command continues its trace (TRACEPARENT, TRACESTATE), and its log
// records join the trace.
TEST_F(CommandTaskTest, ATracedRunGivesTheCommandItsTraceContext) {
  const TraceContext trace =
      *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "v=1");
  CommandSpec spec = Shell("echo \"$TRACEPARENT\"; echo \"$TRACESTATE\"");
  Status status = RunCommand(spec, logger_, SystemClock::Instance(),
                             RunControl{stop_.get_token(), kill_.get_token(), nullptr, trace});
  ASSERT_THAT(status, IsOk());
  EXPECT_THAT(logger_.Lines("stdout"),
              ElementsAre("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "v=1"));
  for (const LogRecord& record : logger_.Records()) {
    if (record.Field("stream") != "stdout") continue;
    EXPECT_EQ(record.Field("trace_id"), "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_EQ(record.Field("span_id"), "00f067aa0ba902b7");
  }
}

TEST_F(CommandTaskTest, ARunGivesTheCommandItsRunAndTaskIds) {
  CommandSpec spec = Shell("echo \"$STAGEHAND_TASK_ID $STAGEHAND_RUN_ID\"");
  spec.task_id = "report";
  spec.env = {{"STAGEHAND_RUN_ID", "spoofed"}};
  RunControl control{stop_.get_token(), kill_.get_token()};
  control.run_id = "8a52dc8f-3626-4da7-a80a-3088a0411b3c";
  Status status = RunCommand(spec, logger_, SystemClock::Instance(), control);
  ASSERT_THAT(status, IsOk());
  EXPECT_THAT(logger_.Lines("stdout"), ElementsAre("report 8a52dc8f-3626-4da7-a80a-3088a0411b3c"));
}

TEST(CommandEnvironmentTest, ATraceContextIsAddedUnlessEnvSetsIt) {
  CommandSpec spec;
  spec.trace = *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  EXPECT_THAT(CommandEnvironment(spec, nullptr),
              ElementsAre(fmt::format("PATH={}", kDefaultCommandPath),
                          "TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"));
  spec.env = {{"TRACEPARENT", "mine"}};
  EXPECT_THAT(CommandEnvironment(spec, nullptr),
              ElementsAre(fmt::format("PATH={}", kDefaultCommandPath), "TRACEPARENT=mine"));
  EXPECT_THAT(CommandEnvironment(CommandSpec{}, nullptr),
              ElementsAre(fmt::format("PATH={}", kDefaultCommandPath)));
}

// Sets a variable of this process's environment for the scope. The tests that use it start no
// thread before it, so nothing reads the environment meanwhile.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    EXPECT_EQ(setenv(name, value, 1), 0);  // NOLINT(concurrency-mt-unsafe)
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() { unsetenv(name_); }  // NOLINT(concurrency-mt-unsafe)

 private:
  const char* name_;
};

TEST(CommandEnvironmentTest, KeepsOnlyTheBaseAndTheNamedVariables) {
  std::vector<const char*> parent = {"PATH=/opt/bin:/usr/bin",
                                     "HOME=/var/lib/stagehand",
                                     "USER=stagehand",
                                     "LOGNAME=stagehand",
                                     "SHELL=/bin/bash",
                                     "LANG=C.UTF-8",
                                     "LANGUAGE=en",
                                     "LC_ALL=C.UTF-8",
                                     "LC_TIME=de_DE.UTF-8",
                                     "TZ=Europe/Berlin",
                                     "TMPDIR=/var/tmp",
                                     "STAGEHAND_TOKEN=secret-token",
                                     "PGPASSWORD=secret-pg",
                                     "AWS_SECRET_ACCESS_KEY=secret-aws",
                                     "AWS_REGION=eu-central-1",
                                     "NOTIFY_SOCKET=/run/systemd/notify",
                                     "LCX=not-a-locale",
                                     nullptr};
  CommandSpec spec;
  spec.inherit_env = {"AWS_REGION", "NOT_SET_ANYWHERE"};
  spec.env = {{"HOME", "/srv/job"}, {"GREETING", "hi=there"}};
  EXPECT_THAT(CommandEnvironment(spec, parent.data()),
              ElementsAre("AWS_REGION=eu-central-1", "GREETING=hi=there", "HOME=/srv/job",
                          "LANG=C.UTF-8", "LANGUAGE=en", "LC_ALL=C.UTF-8", "LC_TIME=de_DE.UTF-8",
                          "LOGNAME=stagehand", "PATH=/opt/bin:/usr/bin", "SHELL=/bin/bash",
                          "TMPDIR=/var/tmp", "TZ=Europe/Berlin", "USER=stagehand"));
}

TEST(CommandEnvironmentTest, SecretsReachACommandOnlyWhenNamed) {
  std::vector<const char*> parent = {"PGPASSWORD=secret-pg", "STAGEHAND_TOKEN=secret-token",
                                     nullptr};
  CommandSpec spec;
  spec.inherit_env = {"PGPASSWORD"};
  EXPECT_THAT(CommandEnvironment(spec, parent.data()),
              ElementsAre(fmt::format("PATH={}", kDefaultCommandPath), "PGPASSWORD=secret-pg"));
}

TEST(CommandEnvironmentTest, PathDefaultsWhenUnsetAndEnvOverridesIt) {
  CommandSpec spec;
  EXPECT_THAT(CommandEnvironment(spec, nullptr), ElementsAre("PATH=/usr/local/bin:/usr/bin:/bin"));
  spec.env = {{"PATH", "/opt/tools"}};
  EXPECT_THAT(CommandEnvironment(spec, nullptr), ElementsAre("PATH=/opt/tools"));
}

TEST(CommandEnvironmentTest, FirstEntryOfANameWinsAsGetenvReadsIt) {
  std::vector<const char*> parent = {"TZ=UTC", "TZ=Asia/Tokyo", "malformed", nullptr};
  EXPECT_THAT(CommandEnvironment(CommandSpec{}, parent.data()),
              ElementsAre(fmt::format("PATH={}", kDefaultCommandPath), "TZ=UTC"));
}

TEST(CommandEnvironmentTest, EnvironmentNamesArePortableNames) {
  for (std::string_view name : {"PATH", "_x", "a1_B2", "LC_ALL"}) {
    EXPECT_TRUE(IsEnvironmentName(name)) << name;
  }
  for (std::string_view name : {"", "1PATH", "A-B", "A=B", "A B", "A.B", "\u00e9"}) {
    EXPECT_FALSE(IsEnvironmentName(name)) << name;
  }
}

// The daemon's secrets (issue 14): a real child's environment is exactly CommandEnvironment's,
// so a variable the stagehand process holds reaches it only when named.
TEST_F(CommandTaskTest, CommandSeesACleanEnvironmentWithoutTheDaemonsSecrets) {
  ScopedEnv token("STAGEHAND_TOKEN", "secret-token-4b1d");
  ScopedEnv password("PGPASSWORD", "secret-pg-4b1d");
  ScopedEnv named("STAGEHAND_EXECUTOR_TEST_VAR", "inherited");
  ScopedEnv locale("LC_MESSAGES", "C");
  CommandSpec spec;
  spec.argv = {"/usr/bin/env"};
  spec.env = {{"FOO", "bar baz"}};
  spec.inherit_env = {"STAGEHAND_EXECUTOR_TEST_VAR"};
  Status status = Run(spec);
  ASSERT_THAT(status, IsOk());
  std::vector<std::string> seen = logger_.Lines("stdout");
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, CommandEnvironment(spec, environ));
  EXPECT_THAT(seen, ::testing::IsSupersetOf(
                        {"FOO=bar baz", "STAGEHAND_EXECUTOR_TEST_VAR=inherited", "LC_MESSAGES=C"}));
  for (const std::string& entry : seen) {
    EXPECT_THAT(entry, Not(HasSubstr("secret"))) << entry;
  }
}

TEST_F(CommandTaskTest, ProcEnvironOfTheCommandHoldsNoSecret) {
  ScopedEnv token("STAGEHAND_TOKEN", "secret-token-4b1d");
  std::string file = (dir_ / "environ").string();
  Status status = Run(Shell(fmt::format("cat /proc/self/environ > '{}'", file)));
  ASSERT_THAT(status, IsOk());
  std::ifstream in(file, std::ios::binary);
  std::string environ_bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(environ_bytes, HasSubstr("PATH="));
  EXPECT_THAT(environ_bytes, Not(HasSubstr("STAGEHAND_TOKEN")));
}

TEST_F(CommandTaskTest, CapsLoggedOutputAndNotesTheTruncation) {
  CommandSpec spec = Shell("seq 1 5000; echo done >&2");
  spec.output_cap_bytes = 100;
  Status status = Run(spec);
  ASSERT_THAT(status, IsOk());
  std::size_t bytes = 0;
  int lines = 0;
  int notes = 0;
  for (const LogRecord& record : logger_.Records()) {
    if (record.message == "\u2026 output truncated") {
      ++notes;
    } else if (record.Field("stream") == "stdout") {
      bytes += record.message.size() + 1;
      ++lines;
    }
  }
  EXPECT_LE(bytes, 100U);
  EXPECT_GT(lines, 10);
  EXPECT_EQ(notes, 1);
  EXPECT_THAT(logger_.Lines("stderr"), Not(::testing::Contains("done")));
}

TEST_F(CommandTaskTest, MissingProgramNamesItAndTheErrno) {
  CommandSpec spec;
  spec.argv = {"/nonexistent/stagehand-no-such-program", "x"};
  Status status = Run(spec);
  EXPECT_THAT(status, StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(status.message(), AllOf(HasSubstr("/nonexistent/stagehand-no-such-program"),
                                      HasSubstr("No such file or directory")));
}

TEST_F(CommandTaskTest, ProgramIsLookedUpInPath) {
  CommandSpec spec;
  spec.argv = {"stagehand-no-such-program-in-path"};
  EXPECT_THAT(Run(spec), StatusIs(StatusCode::kFailedPrecondition));
  spec.argv = {"true"};
  EXPECT_THAT(Run(spec), IsOk());
}

TEST_F(CommandTaskTest, MissingWorkingDirectoryIsNamed) {
  CommandSpec spec = Shell("true");
  spec.working_directory = "/nonexistent/stagehand-dir";
  Status status = Run(spec);
  EXPECT_THAT(status, StatusIs(StatusCode::kFailedPrecondition, "/nonexistent/stagehand-dir"));
}

TEST_F(CommandTaskTest, EmptyArgvIsRejected) {
  EXPECT_THAT(Run(CommandSpec{}), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(MakeCommandTask(CommandSpec{}, nullptr, SystemClock::Instance()), Not(IsOk()));
}

TEST_F(CommandTaskTest, StopSendsSigtermToTheGroup) {
  CommandSpec spec;
  spec.argv = {"sleep", "30"};
  std::future<Status> run = Start(spec);
  pid_t pgid = StartedGroup();
  auto stopped_at = std::chrono::steady_clock::now();
  stop_.request_stop();
  Status status = run.get();
  auto elapsed = std::chrono::steady_clock::now() - stopped_at;
  EXPECT_THAT(status, StatusIs(StatusCode::kCancelled));
  EXPECT_EQ(status.message(), "command 'sleep' ended by SIGTERM");
  EXPECT_LT(elapsed, std::chrono::seconds(1));
  EXPECT_TRUE(GroupGone(pgid));
}

TEST_F(CommandTaskTest, ExitCodeAfterSigtermIsNamed) {
  std::future<Status> run = Start(Shell("trap 'exit 7' TERM; sleep 300 & echo ready; wait"));
  ASSERT_TRUE(logger_.WaitFor("ready").has_value());
  stop_.request_stop();
  Status status = run.get();
  EXPECT_THAT(status, StatusIs(StatusCode::kCancelled));
  EXPECT_EQ(status.message(), "command '/bin/sh' exited with code 7 after SIGTERM");
}

// The backend blocks SIGTERM and SIGINT in every thread (BlockShutdownSignals) so that one thread
// can sigwait for them; a child must not inherit that mask, or SIGTERM would never end it.
TEST_F(CommandTaskTest, ChildOfAThreadBlockingSigtermStillDiesOnSigterm) {
  CommandSpec spec = Shell("echo ready; exec sleep 30");
  std::future<Status> run = std::async(std::launch::async, [this, spec] {
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGINT);
    pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
    return RunCommand(spec, logger_, SystemClock::Instance(), stop_.get_token());
  });
  pid_t pid = StartedGroup();
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(logger_.WaitFor("ready").has_value());
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  bool ended = run.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  if (!ended) {
    stop_.request_stop();
  }
  Status status = run.get();
  EXPECT_TRUE(ended) << "the child ignored SIGTERM";
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable, "signal 15 (SIGTERM)"));
  EXPECT_TRUE(GroupGone(pid));
}

TEST_F(CommandTaskTest, ProgramIgnoringSigtermIsKilledAfterTheGrace) {
  CommandSpec spec = Shell("trap '' TERM; echo ready; sleep 30");
  spec.kill_grace = std::chrono::milliseconds(200);
  std::future<Status> run = Start(spec);
  pid_t pgid = StartedGroup();
  ASSERT_TRUE(logger_.WaitFor("ready").has_value());
  auto stopped_at = std::chrono::steady_clock::now();
  stop_.request_stop();
  Status status = run.get();
  auto elapsed = std::chrono::steady_clock::now() - stopped_at;
  EXPECT_THAT(status, StatusIs(StatusCode::kCancelled));
  EXPECT_EQ(status.message(), "command '/bin/sh' was killed after ignoring SIGTERM for 200ms");
  EXPECT_GE(elapsed, std::chrono::milliseconds(200));
  EXPECT_LT(elapsed, std::chrono::milliseconds(1500));
  EXPECT_TRUE(GroupGone(pgid));
}

TEST_F(CommandTaskTest, GraceDeadlineFollowsTheInjectedClock) {
  stagehand::testing::ManualClock clock;
  CommandSpec spec =
      Shell("trap 'echo got-term' TERM; echo ready; while :; do sleep 30 & wait $!; done");
  spec.kill_grace = std::chrono::hours(1);
  std::future<Status> run = std::async(
      std::launch::async, [&] { return RunCommand(spec, logger_, clock, stop_.get_token()); });
  pid_t pgid = StartedGroup();
  ASSERT_TRUE(logger_.WaitFor("ready").has_value());
  stop_.request_stop();
  ASSERT_TRUE(logger_.WaitFor("got-term").has_value());
  EXPECT_EQ(run.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  clock.Advance(std::chrono::hours(1));
  Status status = run.get();
  EXPECT_THAT(status, StatusIs(StatusCode::kCancelled, "was killed after ignoring SIGTERM for 1h"));
  EXPECT_TRUE(GroupGone(pgid));
}

TEST_F(CommandTaskTest, KillTokenEndsATermIgnoringCommandAtOnce) {
  CommandSpec spec = Shell("trap '' TERM; echo ready; sleep 300");
  spec.kill_grace = std::chrono::hours(1);
  std::future<Status> run = StartControlled(spec);
  pid_t pgid = StartedGroup();
  ASSERT_TRUE(logger_.WaitFor("ready").has_value());
  auto killed_at = std::chrono::steady_clock::now();
  // Alone: with the stop token as well, the run might send SIGTERM just before.
  kill_.request_stop();
  Status status = Within(run, pgid);
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, std::chrono::seconds(1));
  EXPECT_THAT(status, StatusIs(StatusCode::kCancelled));
  EXPECT_EQ(status.message(), "command '/bin/sh' was killed at once (SIGKILL)");
  EXPECT_TRUE(GroupGone(pgid));
}

TEST_F(CommandTaskTest, KillTokenDuringTheGraceEndsTheCommandAtOnce) {
  CommandSpec spec =
      Shell("trap 'echo got-term' TERM; echo ready; while :; do sleep 300 & wait $!; done");
  spec.kill_grace = std::chrono::hours(1);
  std::future<Status> run = StartControlled(spec);
  pid_t pgid = StartedGroup();
  ASSERT_TRUE(logger_.WaitFor("ready").has_value());
  stop_.request_stop();
  ASSERT_TRUE(logger_.WaitFor("got-term").has_value());
  auto killed_at = std::chrono::steady_clock::now();
  kill_.request_stop();
  Status status = Within(run, pgid);
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, std::chrono::seconds(1));
  EXPECT_THAT(status, StatusIs(StatusCode::kCancelled));
  EXPECT_THAT(status.message(),
              MatchesRegex("command '/bin/sh' was killed at once \\(SIGKILL\\) [0-9.]+m?s "
                           "after SIGTERM"));
}

TEST_F(CommandTaskTest, StopKillsGrandchildrenInTheGroup) {
  std::future<Status> run = Start(Shell("sleep 30 & echo $!; wait"));
  pid_t pgid = StartedGroup();
  std::optional<LogRecord> echoed =
      logger_.WaitFor([](const LogRecord& r) { return r.Field("stream") == "stdout"; });
  ASSERT_TRUE(echoed.has_value());
  auto grandchild = static_cast<pid_t>(std::stol(echoed->message));
  stop_.request_stop();
  EXPECT_THAT(run.get(), StatusIs(StatusCode::kCancelled));
  EXPECT_TRUE(GroupGone(pgid));
  EXPECT_TRUE(kill(grandchild, 0) != 0 && errno == ESRCH);
}

TEST_F(CommandTaskTest, BackgroundProcessesDoNotOutliveASuccessfulRun) {
  Status status = Run(Shell("sleep 30 & echo $!"));
  ASSERT_THAT(status, IsOk());
  std::vector<std::string> lines = logger_.Lines("stdout");
  ASSERT_EQ(lines.size(), 1U);
  auto grandchild = static_cast<pid_t>(std::stol(lines.front()));
  EXPECT_TRUE(kill(grandchild, 0) != 0 && errno == ESRCH);
}

TEST_F(CommandTaskTest, StopReachesASetsidGrandchild) {
  std::future<Status> run =
      Start(Shell(fmt::format("setsid sh -c 'echo $$ > {}; exec sleep 300' & wait", PidFile())));
  pid_t grandchild = WaitForPidFile(PidFile());
  ASSERT_GT(grandchild, 0);
  stop_.request_stop();
  EXPECT_THAT(run.get(), StatusIs(StatusCode::kCancelled));
  EXPECT_TRUE(Gone(grandchild));
  if (!Gone(grandchild)) {
    kill(grandchild, SIGKILL);
  }
}

TEST_F(CommandTaskTest, StopReachesADoubleForkedDaemon) {
  CommandSpec spec = Shell(
      fmt::format("(setsid sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 300' &); exec sleep 300",
                  PidFile()));
  spec.kill_grace = std::chrono::milliseconds(200);
  std::future<Status> run = Start(spec);
  pid_t daemon = WaitForPidFile(PidFile());
  ASSERT_GT(daemon, 0);
  auto stopped_at = std::chrono::steady_clock::now();
  stop_.request_stop();
  // The command ends at once; the daemon, which ignores SIGTERM, is killed after the grace.
  EXPECT_EQ(run.get().message(), "command '/bin/sh' ended by SIGTERM");
  EXPECT_GE(std::chrono::steady_clock::now() - stopped_at, std::chrono::milliseconds(200));
  EXPECT_TRUE(Gone(daemon));
  if (!Gone(daemon)) {
    kill(daemon, SIGKILL);
  }
}

TEST_F(CommandTaskTest, DaemonLeftBehindBySuccessfulRunIsKilled) {
  Status status = Run(Shell(
      fmt::format("(setsid sh -c 'echo $$ > {0}; exec sleep 300' &); until [ -s {0} ]; do :; done",
                  PidFile())));
  ASSERT_THAT(status, IsOk());
  pid_t daemon = WaitForPidFile(PidFile());
  ASSERT_GT(daemon, 0);
  EXPECT_TRUE(Gone(daemon));
  if (!Gone(daemon)) {
    kill(daemon, SIGKILL);
  }
  std::optional<LogRecord> note =
      logger_.WaitFor("killed the processes the command left behind", std::chrono::seconds(0));
  ASSERT_TRUE(note.has_value());
  EXPECT_EQ(note->level, LogLevel::kDebug);
  EXPECT_EQ(note->Field("count"), "1");
}

// The stagehand process dies abruptly (SIGKILL): the run's tree dies with it instead of living
// on under init.
TEST_F(CommandTaskTest, TreeDiesWithTheStagehandProcess) {
  std::string script =
      fmt::format("setsid sh -c 'echo $$ > {}; exec sleep 300' & echo $$ > {}; wait",
                  PidFile("grandchild"), PidFile("command"));
  pid_t host = fork();
  ASSERT_GE(host, 0);
  if (host == 0) {
    Status status =
        RunCommand(Shell(script), *NullLogger(), SystemClock::Instance(), std::stop_token());
    _exit(status.ok() ? 0 : 1);
  }
  pid_t command = WaitForPidFile(PidFile("command"));
  pid_t grandchild = WaitForPidFile(PidFile("grandchild"));
  ASSERT_EQ(kill(host, SIGKILL), 0);
  ASSERT_EQ(waitpid(host, nullptr, 0), host);
  ASSERT_GT(command, 0);
  ASSERT_GT(grandchild, 0);
  auto killed_at = std::chrono::steady_clock::now();
  EXPECT_TRUE(WaitGone(command));
  EXPECT_TRUE(WaitGone(grandchild));
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, std::chrono::seconds(1));
  for (pid_t pid : {command, grandchild}) {
    if (!Gone(pid)) {
      kill(pid, SIGKILL);
    }
  }
  while (waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
  }
}

TEST_F(CommandTaskTest, StdoutFloodIsKilledWithinTheGraceInBoundedMemory) {
  CommandSpec spec = Shell("trap '' TERM; echo ready; exec yes flood");
  spec.kill_grace = std::chrono::milliseconds(300);
  long rss_before = ResidentKib();
  std::future<Status> run = Start(spec);
  ASSERT_TRUE(logger_.WaitFor("\u2026 output truncated").has_value());
  auto stopped_at = std::chrono::steady_clock::now();
  stop_.request_stop();
  Status status = run.get();
  auto elapsed = std::chrono::steady_clock::now() - stopped_at;
  EXPECT_EQ(status.message(), "command '/bin/sh' was killed after ignoring SIGTERM for 300ms");
  EXPECT_GE(elapsed, std::chrono::milliseconds(300));
  EXPECT_LT(elapsed, std::chrono::milliseconds(800));
  EXPECT_LT(ResidentKib() - rss_before, 16 * 1024);
}

// A process that keeps the output pipe busy after the command exited does not hold the run.
TEST_F(CommandTaskTest, FloodFromAProcessLeftBehindDoesNotHoldTheRun) {
  std::future<Status> run = Start(Shell("(setsid yes flood &); echo started"));
  bool returned = run.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  if (!returned) {
    stop_.request_stop();
  }
  Status status = run.get();
  EXPECT_TRUE(returned);
  EXPECT_THAT(status, IsOk());
}

TEST_F(CommandTaskTest, CommandGetsOnlyTheStandardDescriptors) {
  // As a library of the host process might: a descriptor without O_CLOEXEC.
  int leaked = open("/dev/null", O_RDONLY);  // NOLINT(android-cloexec-open)
  ASSERT_GE(leaked, 0);
  Status status = Run(Shell("ls /proc/$$/fd"));
  close(leaked);
  ASSERT_THAT(status, IsOk());
  EXPECT_THAT(logger_.Lines("stdout"), ElementsAre("0", "1", "2"));
}

TEST_F(CommandTaskTest, BothChildSourcesFindTheWholeTree) {
  std::future<Status> run = Start(Shell("sleep 300 & setsid sleep 300 & echo ready; wait"));
  ASSERT_TRUE(logger_.WaitFor("ready").has_value());
  using executors_internal::ChildSource;
  std::array<pid_t, 16> from_files{};
  std::array<pid_t, 16> from_scan{};
  std::size_t files = executors_internal::SignalDescendants(
      getpid(), 0, ChildSource::kChildrenFiles, from_files.data(), from_files.size());
  std::size_t scanned = executors_internal::SignalDescendants(getpid(), 0, ChildSource::kParentScan,
                                                              from_scan.data(), from_scan.size());
  stop_.request_stop();
  EXPECT_THAT(run.get(), StatusIs(StatusCode::kCancelled));
  EXPECT_EQ(executors_internal::DetectChildSource(), ChildSource::kChildrenFiles);
  // The supervisor, the shell and its two sleeps.
  ASSERT_EQ(files, 4U);
  ASSERT_EQ(scanned, 4U);
  std::sort(from_files.begin(), from_files.begin() + 4);
  std::sort(from_scan.begin(), from_scan.begin() + 4);
  EXPECT_EQ(from_files, from_scan);
}

TEST_F(CommandTaskTest, StopRequestedBeforeTheRunStartsNothing) {
  stop_.request_stop();
  Status status =
      RunCommand(Shell("echo never"), logger_, SystemClock::Instance(), stop_.get_token());
  EXPECT_THAT(status, StatusIs(StatusCode::kCancelled));
  EXPECT_EQ(status.message(), "command '/bin/sh' not started");
  EXPECT_TRUE(logger_.Lines("stdout").empty());
}

TEST_F(CommandTaskTest, MakeCommandTaskRunsTheCommand) {
  auto logger = std::make_shared<RecordingLogger>();
  Result<TaskFunction> task =
      MakeCommandTask(Shell("echo via task"), logger, SystemClock::Instance());
  ASSERT_THAT(task, IsOk());
  EXPECT_THAT((*task)(std::stop_token()), IsOk());
  EXPECT_THAT(logger->Lines("stdout"), ElementsAre("via task"));
}

TEST_F(CommandTaskTest, MakeCommandTaskPassesTheKillToken) {
  CommandSpec spec = Shell("trap '' TERM; echo ready; sleep 300");
  spec.kill_grace = std::chrono::hours(1);
  auto logger = std::make_shared<RecordingLogger>();
  Result<TaskFunction> task = MakeCommandTask(spec, logger, SystemClock::Instance());
  ASSERT_THAT(task, IsOk());
  std::future<Status> run = std::async(std::launch::async, [&] {
    return (*task)(RunControl{stop_.get_token(), kill_.get_token()});
  });
  std::optional<LogRecord> started = logger->WaitFor("command started");
  ASSERT_TRUE(started.has_value());
  ASSERT_TRUE(logger->WaitFor("ready").has_value());
  kill_.request_stop();
  EXPECT_EQ(Within(run, static_cast<pid_t>(std::stol(started->Field("pid")))).message(),
            "command '/bin/sh' was killed at once (SIGKILL)");
}

// Issue 16: the output of every run went into the daemon log, up to 64 KiB per run. With a report,
// the output goes to the report and the log keeps one record per run.
class CommandReportTest : public CommandTaskTest {
 protected:
  Status RunReported(const CommandSpec& spec) {
    return RunCommand(spec, logger_, SystemClock::Instance(),
                      RunControl{std::stop_token(), std::stop_token(), report_});
  }

  // Returns the records of the run's end ("command exited ...", "command was killed ...").
  std::vector<LogRecord> EndRecords() const {
    std::vector<LogRecord> ends;
    for (const LogRecord& record : logger_.Records()) {
      if (record.message.starts_with("command exited") ||
          record.message.starts_with("command was killed")) {
        ends.push_back(record);
      }
    }
    return ends;
  }

  std::shared_ptr<RunReport> report_ = std::make_shared<RunReport>(kDefaultRunOutputTailBytes);
};

TEST_F(CommandReportTest, OutputOfBothStreamsGoesToTheReportInArrivalOrder) {
  Status status =
      RunReported(Shell("echo out1; sleep 0.1; echo err1 >&2; sleep 0.1; printf out2; exit 3"));
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(status.message(), AllOf(HasSubstr("exited with code 3"), HasSubstr("stderr:\nerr1")));
  RunReport::Snapshot report = report_->Read();
  EXPECT_EQ(report.output_tail, "out1\nerr1\nout2");
  EXPECT_EQ(report.output_bytes, 14U);
  EXPECT_EQ(report.exit_code, 3);
  EXPECT_FALSE(report.signal.has_value());
  EXPECT_FALSE(report.http_status.has_value());
  EXPECT_TRUE(logger_.Lines("stdout").empty());
  EXPECT_TRUE(logger_.Lines("stderr").empty());
}

TEST_F(CommandReportTest, TheLogKeepsOneRecordPerRun) {
  ASSERT_THAT(RunReported(Shell("echo backing up; echo 'backup done'")), IsOk());
  std::vector<LogRecord> ends = EndRecords();
  ASSERT_EQ(ends.size(), 1U);
  EXPECT_EQ(ends[0].message, "command exited with code 0");
  EXPECT_EQ(ends[0].level, LogLevel::kInfo);
  EXPECT_EQ(ends[0].Field("task"), "t1");
  EXPECT_EQ(ends[0].Field("program"), "/bin/sh");
  EXPECT_EQ(ends[0].Field("exit_code"), "0");
  EXPECT_EQ(ends[0].Field("output_bytes"), "23");
  EXPECT_EQ(ends[0].Field("last_line"), "backup done");
  for (const LogRecord& record : logger_.Records()) {
    EXPECT_TRUE(record.level == LogLevel::kDebug || record.message == ends[0].message)
        << record.message;
  }
}

TEST_F(CommandReportTest, SilentRunHasNoLastLine) {
  ASSERT_THAT(RunReported(Shell("true")), IsOk());
  std::vector<LogRecord> ends = EndRecords();
  ASSERT_EQ(ends.size(), 1U);
  EXPECT_EQ(ends[0].Field("output_bytes"), "0");
  EXPECT_EQ(ends[0].Field("last_line"), "");
  EXPECT_EQ(report_->Read().output_tail, "");
}

TEST_F(CommandReportTest, LastLineIsCutWithoutSplittingACharacter) {
  // 150 two-byte characters: 300 bytes, cut at 200.
  ASSERT_THAT(RunReported(Shell("for i in $(seq 1 150); do printf '\\303\\251'; done; echo")),
              IsOk());
  std::vector<LogRecord> ends = EndRecords();
  ASSERT_EQ(ends.size(), 1U);
  std::string expected;
  for (int i = 0; i < 100; ++i) {
    expected += "\u00e9";
  }
  EXPECT_EQ(ends[0].Field("last_line"), expected);
  EXPECT_EQ(report_->Read().output_bytes, 301U);
}

TEST_F(CommandReportTest, SignalDeathIsTheReportsSignal) {
  Status status = RunReported(Shell("echo before; kill -USR1 $$"));
  EXPECT_THAT(status.message(), HasSubstr("signal 10 (SIGUSR1)"));
  RunReport::Snapshot report = report_->Read();
  EXPECT_EQ(report.signal, SIGUSR1);
  EXPECT_FALSE(report.exit_code.has_value());
  EXPECT_EQ(report.output_tail, "before\n");
  std::vector<LogRecord> ends = EndRecords();
  ASSERT_EQ(ends.size(), 1U);
  EXPECT_EQ(ends[0].message, "command was killed by signal 10 (SIGUSR1)");
  EXPECT_EQ(ends[0].Field("signal"), "10");
}

TEST_F(CommandReportTest, OutputIsInTheReportWhileTheCommandRuns) {
  std::future<Status> run = std::async(std::launch::async, [this] {
    return RunCommand(Shell("echo first; sleep 300"), logger_, SystemClock::Instance(),
                      RunControl{stop_.get_token(), kill_.get_token(), report_});
  });
  pid_t group = StartedGroup();
  const auto limit = std::chrono::steady_clock::now() + kEventLimit;
  while (report_->Read().output_tail != "first\n" && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(kPollStep);
  }
  EXPECT_EQ(report_->Read().output_tail, "first\n");
  EXPECT_FALSE(report_->Read().exit_code.has_value());
  stop_.request_stop();
  EXPECT_THAT(Within(run, group), StatusIs(StatusCode::kCancelled));
  RunReport::Snapshot report = report_->Read();
  EXPECT_EQ(report.signal, SIGTERM);
  EXPECT_FALSE(report.exit_code.has_value());
}

TEST_F(CommandReportTest, ReportKeepsTheTailAndCountsEveryByte) {
  report_ = std::make_shared<RunReport>(1000);
  // seq 1 100000 prints 588,895 bytes.
  ASSERT_THAT(RunReported(Shell("seq 1 100000")), IsOk());
  RunReport::Snapshot report = report_->Read();
  EXPECT_EQ(report.output_bytes, 588895U);
  ASSERT_EQ(report.output_tail.size(), 1000U);
  EXPECT_TRUE(report.output_tail.ends_with("99999\n100000\n"));
  std::vector<LogRecord> ends = EndRecords();
  ASSERT_EQ(ends.size(), 1U);
  EXPECT_EQ(ends[0].Field("output_bytes"), "588895");
  EXPECT_EQ(ends[0].Field("last_line"), "100000");
  EXPECT_TRUE(logger_.Lines("stdout").empty());
}

TEST_F(CommandTaskTest, WithoutAReportTheLinesAndTheEndAreLogged) {
  ASSERT_THAT(Run(Shell("echo hello; echo world")), IsOk());
  EXPECT_THAT(logger_.Lines("stdout"), ElementsAre("hello", "world"));
  std::optional<LogRecord> end = logger_.WaitFor("command exited with code 0");
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->Field("output_bytes"), "12");
  EXPECT_EQ(end->Field("last_line"), "world");
}

}  // namespace
}  // namespace stagehand
