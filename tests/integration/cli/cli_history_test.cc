// The run history verbs against a real backend in this process: `runs`, `logs` (and --follow),
// `trigger --wait` with the exit code of each outcome, `tasks` with the last outcome, and `tasks
// --watch`; and `logs` asked of a daemon that is not the one running the run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "integration/cli/cli_fixture.h"
#include "stagehand/backend/backend.h"
#include "stagehand/cli/cli.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::cli {
namespace {

using ::stagehand::testing::IsOk;
using ::testing::ContainsRegex;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

constexpr auto kTimeout = std::chrono::milliseconds(300);

// Reports `output` (and `exit_code`) as a command would; a run without a report (history off)
// tells nothing.
void Print(const RunControl& control, const std::string& output,
           std::optional<int> exit_code = std::nullopt) {
  if (control.report == nullptr) return;
  control.report->AppendOutput(output);
  if (exit_code) control.report->SetExitCode(*exit_code);
}

// The tasks of the `history` plugin, and what the tests observe of them. Thread-safe.
struct HistoryTasks {
  Latch streams_started;
  Latch streams_release;
  Latch blocks_started;
  Latch slow_started;
  // Which backend ran `blocks` last: 0 or 1.
  std::atomic<int> blocks_ran_on{-1};

  // Returns the plugin's tasks, as backend `index` registers them.
  std::vector<TaskDefinition> Definitions(int index) {
    std::vector<TaskDefinition> tasks;
    tasks.push_back(
        Task("prints", ManualFrequency{}, TaskScope::kGlobal, [](const RunControl& control) {
          Print(control, "line 1\n");
          Print(control, "line 2\n", 0);
        }));
    tasks.push_back(Task("breaks", ManualFrequency{}, TaskScope::kGlobal,
                         [](const RunControl& control) -> Status {
                           Print(control, "oops\n", 3);
                           return UnavailableError("command 'x' exited with code 3");
                         }));
    tasks.push_back(Task(
        "slow", ManualFrequency{}, TaskScope::kGlobal,
        [this](const RunControl& control) -> Status {
          slow_started.Open();
          std::mutex mu;
          std::condition_variable_any cv;
          std::unique_lock lock(mu);
          cv.wait(lock, control.stop, [] { return false; });
          return CancelledError("command 'x' ended by SIGTERM");
        },
        kTimeout));
    tasks.push_back(Task("blocks", ManualFrequency{}, TaskScope::kGlobal,
                         [this, index](const RunControl& control) -> Status {
                           blocks_ran_on = index;
                           Print(control, "waiting\n");
                           blocks_started.Open();
                           std::mutex mu;
                           std::condition_variable_any cv;
                           std::unique_lock lock(mu);
                           cv.wait(lock, control.stop, [] { return false; });
                           Print(control, "stopped\n");
                           return CancelledError("command 'x' ended by SIGTERM");
                         }));
    tasks.push_back(
        Task("streams", ManualFrequency{}, TaskScope::kGlobal, [this](const RunControl& control) {
          for (int tick = 1; tick <= 3; ++tick) {
            Print(control, "tick " + std::to_string(tick) + "\n");
          }
          streams_started.Open();
          streams_release.WaitOpen();
          for (int tick = 4; tick <= 6; ++tick) {
            Print(control, "tick " + std::to_string(tick) + "\n");
          }
        }));
    tasks.push_back(
        Task("never", ManualFrequency{}, TaskScope::kGlobal, [](const std::stop_token&) {}));
    return tasks;
  }
};

class CliHistoryTest : public ::testing::Test {
 protected:
  void TearDown() override {
    tasks_.streams_release.Open();
    for (std::unique_ptr<Backend>& backend : backends_) {
      backend->Stop();
    }
  }

  // Starts a backend on port 0 with the `history` plugin, on `database` (in-memory SQLite unless
  // given), with `extra_yaml` appended to its config; returns its URL.
  std::string StartBackend(const std::string& database = "':memory:'",
                           const std::string& extra_yaml = "") {
    const int index = static_cast<int>(backends_.size());
    Result<Config> config =
        Config::FromYaml(Yaml(true, database) + extra_yaml, "cli_history_test.yaml");
    EXPECT_THAT(config, IsOk());
    BackendOptions options;
    options.config = *config;
    options.port_override = 0;
    Result<std::unique_ptr<Backend>> backend = Backend::Create(std::move(options));
    EXPECT_THAT(backend, IsOk());
    backends_.push_back(std::move(*backend));
    EXPECT_TRUE(backends_.back()
                    ->AddPlugin({"history",
                                 [this, index](PluginServices& services) {
                                   return services.scheduler->ScheduleTasks(
                                       tasks_.Definitions(index));
                                 }})
                    .ok());
    Status started = backends_.back()->Start();
    EXPECT_THAT(started, IsOk());
    return "http://127.0.0.1:" + std::to_string(backends_.back()->port());
  }

  void SetUp() override { url_ = StartBackend(); }

  Outcome Cli(const std::vector<std::string>& args, std::stop_token stop = {}) {
    return RunCli(args, url_, kToken, std::move(stop));
  }

  SchedulerService& Scheduler(std::size_t index = 0) {
    return *backends_.at(index)->scheduler("history");
  }

  // Returns GET `path` on backend `index` as JSON (null when it is not).
  nlohmann::json GetJson(const std::string& path, std::size_t index = 0) {
    httplib::Client client("127.0.0.1", backends_.at(index)->port());
    httplib::Result result = client.Get(path, {{"Authorization", std::string("Bearer ") + kToken}});
    return result ? nlohmann::json::parse(result->body, nullptr, false) : nlohmann::json();
  }

  // Returns the runs of `task` as the REST API lists them, newest first.
  nlohmann::json Runs(const std::string& task) {
    return GetJson("/api/history/.stagehand/v1/tasks/" + task + "/runs")["runs"];
  }

  // Triggers `task` and waits until its newest run has ended; returns that run's id.
  std::string RunToEnd(const std::string& task) {
    const std::size_t before = Runs(task).size();
    EXPECT_THAT(Scheduler().TriggerTask(task), IsOk());
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (std::chrono::steady_clock::now() < deadline) {
      nlohmann::json runs = Runs(task);
      if (runs.is_array() && runs.size() > before && runs[0]["outcome"] != "running") {
        return runs[0]["runId"].get<std::string>();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "no run of " << task << " ended";
    return "";
  }

  HistoryTasks tasks_;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::string url_;
};

TEST_F(CliHistoryTest, RunsListsTheNewestFirst) {
  const std::string first = RunToEnd("breaks");
  const std::string second = RunToEnd("breaks");
  Outcome outcome = Cli({"runs", "history", "breaks"});
  ASSERT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  EXPECT_THAT(outcome.err, IsEmpty());
  EXPECT_THAT(outcome.out, StartsWith("STARTED "));
  EXPECT_THAT(outcome.out, ContainsRegex("HOST +TRIGGER +OUTCOME +DURATION +LAG +EXIT +RUN ID +"
                                         "ERROR\n"));
  const std::string row =
      "(now|[0-9]+s ago) \\([0-9:]{8}\\) +[^ ]+ +manual +failed +[0-9.]+m?s +- +3 +";
  EXPECT_THAT(outcome.out,
              ContainsRegex("\n" + row + second + " +command 'x' exited with code 3\n" + row +
                            first + " +command 'x' exited with code 3\n$"));
}

TEST_F(CliHistoryTest, RunsPagesWithTheCursor) {
  const std::string first = RunToEnd("prints");
  const std::string second = RunToEnd("prints");
  Outcome newest = Cli({"runs", "history", "prints", "--limit", "1"});
  ASSERT_EQ(newest.exit_code, kExitOk) << newest.err;
  EXPECT_THAT(newest.out, HasSubstr(second));
  EXPECT_THAT(newest.out, Not(HasSubstr(first)));
  const std::string cursor =
      GetJson("/api/history/.stagehand/v1/tasks/prints/runs?limit=1")["nextCursor"];
  EXPECT_EQ(newest.err, "Older runs: stagehand runs history prints --before " + cursor + "\n");

  Outcome older = Cli({"runs", "history", "prints", "--limit", "1", "--before", cursor});
  ASSERT_EQ(older.exit_code, kExitOk) << older.err;
  EXPECT_THAT(older.out, HasSubstr(first));
  EXPECT_THAT(older.out, HasSubstr(" succeeded "));
}

TEST_F(CliHistoryTest, RunsJsonIsTheRestAnswer) {
  RunToEnd("prints");
  Outcome outcome = Cli({"runs", "history", "prints", "--json"});
  ASSERT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  nlohmann::json listed = nlohmann::json::parse(outcome.out);
  EXPECT_EQ(listed, GetJson("/api/history/.stagehand/v1/tasks/prints/runs?limit=20"));
  EXPECT_EQ(listed["runs"][0]["outcome"], "succeeded");
  EXPECT_EQ(listed["runs"][0]["exitCode"], 0);
}

TEST_F(CliHistoryTest, RunsOfNothing) {
  Outcome none = Cli({"runs", "history", "never"});
  EXPECT_EQ(none.exit_code, kExitOk) << none.err;
  EXPECT_EQ(none.out, "No runs of history/never.\n");

  Outcome missing = Cli({"runs", "history", "nope"});
  EXPECT_EQ(missing.exit_code, kExitNotFound);
  EXPECT_THAT(
      missing.err,
      MatchesRegex("stagehand: cannot list the runs of history/nope: .*nope.* \\(404\\)\n"));

  Outcome no_plugin = Cli({"runs", "other", "prints"});
  EXPECT_EQ(no_plugin.exit_code, kExitNotFound);
  EXPECT_EQ(
      no_plugin.err,
      "stagehand: cannot list the runs of other/prints: no plugin 'other' at " + url_ + " (404)\n");
}

TEST_F(CliHistoryTest, LogsPrintsTheNewestOrTheGivenRun) {
  const std::string failed = RunToEnd("breaks");
  RunToEnd("prints");
  Outcome newest = Cli({"logs", "history", "prints"});
  EXPECT_EQ(newest.exit_code, kExitOk) << newest.err;
  EXPECT_EQ(newest.out, "line 1\nline 2\n");
  EXPECT_THAT(newest.err, IsEmpty());

  Outcome given = Cli({"logs", "history", "breaks", failed});
  EXPECT_EQ(given.exit_code, kExitOk) << given.err;
  EXPECT_EQ(given.out, "oops\n");

  Outcome wrong_task = Cli({"logs", "history", "prints", failed});
  EXPECT_EQ(wrong_task.exit_code, kExitNotFound);
  EXPECT_EQ(wrong_task.err,
            "stagehand: run " + failed + " is a run of history/breaks, not of history/prints\n");

  Outcome no_run = Cli({"logs", "history", "prints", "no-such-run"});
  EXPECT_EQ(no_run.exit_code, kExitNotFound);
  EXPECT_THAT(no_run.err, StartsWith("stagehand: cannot read run no-such-run of plugin 'history'"));

  Outcome never = Cli({"logs", "history", "never"});
  EXPECT_EQ(never.exit_code, kExitNotFound);
  EXPECT_EQ(never.err, "stagehand: history/never has no runs in the daemon's history yet\n");
}

TEST_F(CliHistoryTest, LogsFollowPrintsEachByteOnceUntilTheRunEnds) {
  ASSERT_THAT(Scheduler().TriggerTask("streams"), IsOk());
  ASSERT_TRUE(tasks_.streams_started.WaitOpen());
  std::future<Outcome> follow = std::async(std::launch::async, [this] {
    return Cli({"logs", "history", "streams", "--follow"});
  });
  // Let it print the first ticks and poll at least once more before the run goes on.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  tasks_.streams_release.Open();
  ASSERT_EQ(follow.wait_for(kDeadline), std::future_status::ready);
  Outcome outcome = follow.get();
  EXPECT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  EXPECT_EQ(outcome.out, "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\ntick 6\n");
  EXPECT_THAT(outcome.err, MatchesRegex("Run [-0-9a-f]+ of history/streams succeeded in [0-9.]+m?s "
                                        "on [^ ]+\n"));
}

TEST_F(CliHistoryTest, TriggerWaitPrintsTheOutputAndExitsZeroOnSuccess) {
  Outcome outcome = Cli({"trigger", "history", "prints", "--wait"});
  EXPECT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  EXPECT_EQ(outcome.out, "line 1\nline 2\n");
  EXPECT_THAT(outcome.err, StartsWith("Triggered history/prints; waiting for its run\n"));
  EXPECT_THAT(outcome.err, ContainsRegex("\nRun [-0-9a-f]+ of history/prints succeeded in "
                                         "[0-9.]+m?s on [^ ]+ \\(exit 0\\)\n$"));
}

TEST_F(CliHistoryTest, TriggerWaitExitsWithTheOutcomeOfTheRun) {
  RunToEnd("breaks");
  Outcome failed = Cli({"trigger", "history", "breaks", "--wait"});
  EXPECT_EQ(failed.exit_code, kExitRunFailed) << failed.err;
  EXPECT_EQ(failed.out, "oops\n");
  EXPECT_THAT(failed.err,
              ContainsRegex("\nRun [-0-9a-f]+ of history/breaks failed after [0-9.]+m?s "
                            "on [^ ]+ \\(exit 3\\): command 'x' exited with code 3\n$"));
  // The run it waited for is the one it started, not the one before.
  EXPECT_THAT(failed.err, HasSubstr(Runs("breaks")[0]["runId"].get<std::string>()));

  Outcome timed_out = Cli({"trigger", "history", "slow", "--wait"});
  EXPECT_EQ(timed_out.exit_code, kExitRunTimedOut) << timed_out.err;
  EXPECT_THAT(timed_out.err, HasSubstr(" timed out after "));

  std::future<Outcome> waiting = std::async(std::launch::async, [this] {
    return Cli({"trigger", "history", "blocks", "--wait"});
  });
  ASSERT_TRUE(tasks_.blocks_started.WaitOpen());
  ASSERT_THAT(Scheduler().CancelTask("blocks"), IsOk());
  ASSERT_EQ(waiting.wait_for(kDeadline), std::future_status::ready);
  Outcome cancelled = waiting.get();
  EXPECT_EQ(cancelled.exit_code, kExitRunCancelled) << cancelled.err;
  EXPECT_EQ(cancelled.out, "waiting\nstopped\n");
  EXPECT_THAT(cancelled.err, HasSubstr(" was cancelled after "));
}

TEST_F(CliHistoryTest, TriggerWaitGivesUpAtTheTimeoutAndTheRunGoesOn) {
  Outcome outcome = Cli({"trigger", "history", "blocks", "--wait", "--timeout", "1s"});
  EXPECT_EQ(outcome.exit_code, kExitStillRunning) << outcome.err;
  EXPECT_EQ(outcome.out, "waiting\n");
  const std::string run_id = Runs("blocks")[0]["runId"];
  EXPECT_THAT(outcome.err, EndsWith("stagehand: gave up waiting after 1s: run " + run_id +
                                    " is still running ('stagehand logs history blocks " + run_id +
                                    " --follow' follows it)\n"));
  EXPECT_EQ(Runs("blocks")[0]["outcome"], "running");
  ASSERT_THAT(Scheduler().CancelTask("blocks"), IsOk());
}

TEST_F(CliHistoryTest, TriggerWaitOfARunningTaskIsAConflict) {
  ASSERT_THAT(Scheduler().TriggerTask("blocks"), IsOk());
  ASSERT_TRUE(tasks_.blocks_started.WaitOpen());
  Outcome outcome = Cli({"trigger", "history", "blocks", "--wait"});
  EXPECT_EQ(outcome.exit_code, kExitConflict);
  EXPECT_EQ(outcome.err,
            "stagehand: cannot trigger history/blocks: Task blocks is currently running (409)\n");
  ASSERT_THAT(Scheduler().CancelTask("blocks"), IsOk());
}

TEST_F(CliHistoryTest, TasksShowTheLastOutcomeAndDuration) {
  RunToEnd("breaks");
  RunToEnd("prints");
  Outcome outcome = Cli({"tasks", "--plugin", "history"});
  ASSERT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  EXPECT_THAT(
      outcome.out,
      ContainsRegex("\nhistory +breaks +global +manual +idle +- +(now|[0-9]+s ago) "
                    "\\([0-9:]{8}\\) +failed +[0-9.]+m?s +command 'x' exited with code 3\n"));
  EXPECT_THAT(outcome.out, ContainsRegex("\nhistory +prints +global +manual +idle +- +(now|[0-9]+s "
                                         "ago) \\([0-9:]{8}\\) +succeeded +[0-9.]+m?s +-\n"));
  EXPECT_THAT(outcome.out,
              ContainsRegex("\nhistory +never +global +manual +idle +- +- +- +- +-\n"));
}

TEST_F(CliHistoryTest, TasksWatchRedrawsUntilStopped) {
  std::stop_source stop;
  std::future<Outcome> watching = std::async(std::launch::async, [this, &stop] {
    return Cli({"tasks", "--plugin", "history", "--watch"}, stop.get_token());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  stop.request_stop();
  ASSERT_EQ(watching.wait_for(kDeadline), std::future_status::ready);
  Outcome outcome = watching.get();
  EXPECT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  // Not a terminal: frames follow each other, a blank line apart, without escapes.
  EXPECT_THAT(outcome.out, MatchesRegex("Every 2s: stagehand tasks  [0-9:]{8}  \\(Ctrl-C to stop\\)"
                                        "\n\nPLUGIN .*\n\nEvery 2s: stagehand tasks  [0-9:]{8}  "
                                        "\\(Ctrl-C to stop\\)\n\nPLUGIN .*"));
  EXPECT_THAT(outcome.out, Not(HasSubstr("\033")));
}

// Issue 16: against a daemon whose run history is disabled, runs, logs and trigger --wait printed
// the daemon's 500 with a log id (or, for --wait, triggered and then guessed). Each prints the
// daemon's one line on what is off and how to turn it on, and exits kExitNotOffered; --wait
// triggers nothing.
TEST_F(CliHistoryTest, HistoryVerbsOfADaemonWithoutHistorySaySoPlainly) {
  url_ = StartBackend("':memory:'", "  history: { enabled: false }\n");
  const std::string advice =
      "The run history of plugin 'history' is disabled: its runs are not recorded. Turn it on "
      "with stagehand.history.enabled: true in the app config (EngineOptions::record_history "
      "when embedding) and restart\n";
  Outcome runs = Cli({"runs", "history", "prints"});
  EXPECT_EQ(runs.exit_code, kExitNotOffered) << runs.err;
  EXPECT_EQ(runs.err, "stagehand: cannot list the runs of history/prints: " + advice);
  Outcome logs = Cli({"logs", "history", "prints"});
  EXPECT_EQ(logs.exit_code, kExitNotOffered) << logs.err;
  EXPECT_EQ(logs.err, "stagehand: cannot list the runs of history/prints: " + advice);
  Outcome wait = Cli({"trigger", "history", "prints", "--wait", "--timeout", "30s"});
  EXPECT_EQ(wait.exit_code, kExitNotOffered) << wait.err;
  EXPECT_EQ(wait.err, "stagehand: cannot list the runs of history/prints: " + advice);
  EXPECT_EQ(wait.out, "");
}

// A fleet of two daemons on one SQLite file: `logs --follow` asked of the daemon that does not run
// the run says so and prints the output when the run ends.
TEST_F(CliHistoryTest, LogsOfARunOnAnotherHostWaitsForItsEnd) {
  for (std::unique_ptr<Backend>& backend : backends_) {
    backend->Stop();
  }
  backends_.clear();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("stagehand-cli-history-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string database = "{ directory: '" + dir.string() + "' }";
  const std::vector<std::string> urls = {StartBackend(database), StartBackend(database)};
  ASSERT_THAT(Scheduler(0).TriggerTask("blocks"), IsOk());
  ASSERT_TRUE(tasks_.blocks_started.WaitOpen());
  const int runner = tasks_.blocks_ran_on;
  ASSERT_TRUE(runner == 0 || runner == 1);
  const std::string other_url = urls.at(static_cast<std::size_t>(1 - runner));

  std::future<Outcome> follow = std::async(std::launch::async, [&] {
    return RunCli({"logs", "history", "blocks", "--follow"}, other_url, kToken);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  ASSERT_THAT(Scheduler(static_cast<std::size_t>(runner)).CancelTask("blocks"), IsOk());
  ASSERT_EQ(follow.wait_for(kDeadline), std::future_status::ready);
  Outcome outcome = follow.get();
  EXPECT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  EXPECT_EQ(outcome.out, "waiting\nstopped\n");
  EXPECT_THAT(outcome.err,
              MatchesRegex("Run [-0-9a-f]+ is running on [^ ]+ \\(pid [0-9]+\\), not "
                           "on the daemon at " +
                           other_url +
                           "; its output is shown when it ends.\n"
                           "Run [-0-9a-f]+ of history/blocks was cancelled after .*\n"));
  Outcome now = RunCli({"logs", "history", "blocks"}, other_url, kToken);
  EXPECT_EQ(now.out, "waiting\nstopped\n");
  for (std::unique_ptr<Backend>& backend : backends_) {
    backend->Stop();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace stagehand::cli
