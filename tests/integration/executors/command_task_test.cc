#include "stagehand/executors/command_task.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <future>
#include <stop_token>
#include <string>
#include <vector>

#include "integration/executors/recording_logger.h"
#include "stagehand/time/manual_clock.h"

namespace stagehand {
namespace {

using ::stagehand::testing::LogRecord;
using ::stagehand::testing::RecordingLogger;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class CommandTaskTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(BecomeChildSubreaper().ok()); }

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

  RecordingLogger logger_;
  std::stop_source stop_;
};

TEST_F(CommandTaskTest, SucceedsAndLogsStdoutLines) {
  Status status = Run(Shell("echo hello; echo world"));
  ASSERT_TRUE(status.ok()) << status;
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
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
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
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("line16\n"), HasSubstr("line25"), Not(HasSubstr("line15\n"))));
}

TEST_F(CommandTaskTest, FailureMessageKeepsAtMostOneKibOfStderr) {
  Status status = Run(Shell("for i in 1 2 3; do printf '%0600d\\n' $i >&2; done; exit 1"));
  ASSERT_FALSE(status.ok());
  EXPECT_LE(status.message().size(), 1024U + 100U);
  EXPECT_THAT(status.message(), HasSubstr("3"));
}

TEST_F(CommandTaskTest, SignalDeathIsReported) {
  Status status = Run(Shell("kill -USR1 $$"));
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("signal 10 (SIGUSR1)"));
}

TEST_F(CommandTaskTest, AppliesEnvironmentAndWorkingDirectory) {
  std::filesystem::path dir = std::filesystem::canonical(std::filesystem::temp_directory_path());
  CommandSpec spec = Shell("echo $FOO; echo $HOME_SEEN; pwd");
  spec.env = {{"FOO", "bar baz"}, {"HOME_SEEN", "${HOME}"}};
  spec.working_directory = dir.string();
  Status status = Run(spec);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(logger_.Lines("stdout"), ElementsAre("bar baz", "${HOME}", dir.string()));
}

TEST_F(CommandTaskTest, InheritsTheParentEnvironment) {
  // No other thread of this test reads the environment at this point.
  int set = setenv("STAGEHAND_EXECUTOR_TEST_VAR", "inherited", 1);  // NOLINT(concurrency-mt-unsafe)
  ASSERT_EQ(set, 0);
  Status status = Run(Shell("echo $STAGEHAND_EXECUTOR_TEST_VAR"));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(logger_.Lines("stdout"), ElementsAre("inherited"));
}

TEST_F(CommandTaskTest, CapsLoggedOutputAndNotesTheTruncation) {
  CommandSpec spec = Shell("seq 1 5000; echo done >&2");
  spec.output_cap_bytes = 100;
  Status status = Run(spec);
  ASSERT_TRUE(status.ok()) << status;
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
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("/nonexistent/stagehand-no-such-program"),
                                      HasSubstr("No such file or directory")));
}

TEST_F(CommandTaskTest, ProgramIsLookedUpInPath) {
  CommandSpec spec;
  spec.argv = {"stagehand-no-such-program-in-path"};
  EXPECT_EQ(Run(spec).code(), StatusCode::kFailedPrecondition);
  spec.argv = {"true"};
  EXPECT_TRUE(Run(spec).ok());
}

TEST_F(CommandTaskTest, MissingWorkingDirectoryIsNamed) {
  CommandSpec spec = Shell("true");
  spec.working_directory = "/nonexistent/stagehand-dir";
  Status status = Run(spec);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("/nonexistent/stagehand-dir"));
}

TEST_F(CommandTaskTest, EmptyArgvIsRejected) {
  EXPECT_EQ(Run(CommandSpec{}).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(MakeCommandTask(CommandSpec{}, nullptr, SystemClock::Instance()).ok());
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
  EXPECT_EQ(status.code(), StatusCode::kCancelled);
  EXPECT_THAT(status.message(), HasSubstr("SIGTERM"));
  EXPECT_LT(elapsed, std::chrono::seconds(1));
  EXPECT_TRUE(GroupGone(pgid));
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
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("signal 15 (SIGTERM)"));
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
  EXPECT_EQ(status.code(), StatusCode::kCancelled);
  EXPECT_THAT(status.message(), HasSubstr("SIGKILL after a grace of 200 ms"));
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
  EXPECT_EQ(status.code(), StatusCode::kCancelled);
  EXPECT_THAT(status.message(), HasSubstr("SIGKILL"));
  EXPECT_TRUE(GroupGone(pgid));
}

TEST_F(CommandTaskTest, StopKillsGrandchildrenInTheGroup) {
  std::future<Status> run = Start(Shell("sleep 30 & echo $!; wait"));
  pid_t pgid = StartedGroup();
  std::optional<LogRecord> echoed =
      logger_.WaitFor([](const LogRecord& r) { return r.Field("stream") == "stdout"; });
  ASSERT_TRUE(echoed.has_value());
  auto grandchild = static_cast<pid_t>(std::stol(echoed->message));
  stop_.request_stop();
  EXPECT_EQ(run.get().code(), StatusCode::kCancelled);
  EXPECT_TRUE(GroupGone(pgid));
  EXPECT_TRUE(kill(grandchild, 0) != 0 && errno == ESRCH);
}

TEST_F(CommandTaskTest, BackgroundProcessesDoNotOutliveASuccessfulRun) {
  Status status = Run(Shell("sleep 30 & echo $!"));
  ASSERT_TRUE(status.ok()) << status;
  std::vector<std::string> lines = logger_.Lines("stdout");
  ASSERT_EQ(lines.size(), 1U);
  auto grandchild = static_cast<pid_t>(std::stol(lines.front()));
  EXPECT_TRUE(kill(grandchild, 0) != 0 && errno == ESRCH);
}

TEST_F(CommandTaskTest, StopRequestedBeforeTheRunStartsNothing) {
  stop_.request_stop();
  Status status =
      RunCommand(Shell("echo never"), logger_, SystemClock::Instance(), stop_.get_token());
  EXPECT_EQ(status.code(), StatusCode::kCancelled);
  EXPECT_TRUE(logger_.Lines("stdout").empty());
}

TEST_F(CommandTaskTest, MakeCommandTaskRunsTheCommand) {
  auto logger = std::make_shared<RecordingLogger>();
  Result<TaskFunction> task =
      MakeCommandTask(Shell("echo via task"), logger, SystemClock::Instance());
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_TRUE((*task)(std::stop_token()).ok());
  EXPECT_THAT(logger->Lines("stdout"), ElementsAre("via task"));
}

}  // namespace
}  // namespace stagehand
