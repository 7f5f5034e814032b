// The operator verbs against a real backend in this process: listing as a table and as JSON,
// trigger and cancel with every exit code, the token, and config check.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "integration/cli/cli_fixture.h"
#include "stagehand/backend/backend.h"
#include "stagehand/cli/cli.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::cli {
namespace {

using ::stagehand::testing::IsOk;
using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

class CliVerbsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (backend_) {
      backend_->Stop();
    }
  }

  // Starts a backend on port 0 with two plugins: `jobs` (a yearly cron task, a local task in its
  // initial wait, manual tasks that block, finish, fail, and one whose id needs encoding) and
  // `mail` (one local cron task, in Berlin).
  void Start(bool with_token = true) {
    Result<Config> config = Config::FromYaml(Yaml(with_token), "cli_verbs_test.yaml");
    ASSERT_THAT(config, IsOk());
    BackendOptions options;
    options.config = *config;
    options.port_override = 0;
    Result<std::unique_ptr<Backend>> backend = Backend::Create(std::move(options));
    ASSERT_THAT(backend, IsOk());
    backend_ = std::move(*backend);
    ASSERT_TRUE(
        backend_
            ->AddPlugin(
                {"jobs",
                 [this](PluginServices& services) {
                   std::vector<TaskDefinition> tasks;
                   tasks.push_back(Task("yearly", CronFrequency{"0 0 1 1 *", "UTC"},
                                        TaskScope::kGlobal, [](const std::stop_token&) {}));
                   TaskDefinition warmup =
                       Task("warmup", Minutes(5), TaskScope::kLocal, [](const std::stop_token&) {});
                   warmup.initial_delay = Minutes(60);
                   tasks.push_back(std::move(warmup));
                   tasks.push_back(Task("report", ManualFrequency{}, TaskScope::kGlobal,
                                        [this](const std::stop_token& stop) {
                                          report_started_.Open();
                                          std::mutex mu;
                                          std::condition_variable_any cv;
                                          std::unique_lock lock(mu);
                                          cv.wait(lock, stop, [] { return false; });
                                          report_stopped_.Open();
                                        }));
                   tasks.push_back(Task("quick", ManualFrequency{}, TaskScope::kGlobal,
                                        [this](const std::stop_token&) { quick_ran_.Open(); }));
                   tasks.push_back(Task("fails", ManualFrequency{}, TaskScope::kGlobal,
                                        [](const std::stop_token&) -> Status {
                                          return UnavailableError(
                                              "disk full\nwhile writing the report");
                                        }));
                   tasks.push_back(Task("nightly report/v2", ManualFrequency{}, TaskScope::kGlobal,
                                        [this](const std::stop_token&) { encoded_ran_.Open(); }));
                   return services.scheduler->ScheduleTasks(std::move(tasks));
                 }})
            .ok());
    ASSERT_TRUE(backend_
                    ->AddPlugin({"mail",
                                 [](PluginServices& services) {
                                   return services.scheduler->ScheduleTask(
                                       Task("digest", CronFrequency{"30 6 * * *", "Europe/Berlin"},
                                            TaskScope::kLocal, [](const std::stop_token&) {}));
                                 }})
                    .ok());
    Status started = backend_->Start();
    ASSERT_THAT(started, IsOk());
    url_ = "http://127.0.0.1:" + std::to_string(backend_->port());
  }

  // Runs `stagehand <args>` with --url pointing at the backend (unless `with_url` is false) and
  // STAGEHAND_TOKEN set to `env_token` when given.
  Outcome Cli(const std::vector<std::string>& args,
              const std::optional<std::string>& env_token = std::nullopt, bool with_url = true) {
    return RunCli(args, with_url ? url_ : "", env_token);
  }

  // Returns the body of GET `path` on the backend, with the token.
  std::string Get(const std::string& path) {
    httplib::Client client("127.0.0.1", backend_->port());
    httplib::Result result = client.Get(path, {{"Authorization", std::string("Bearer ") + kToken}});
    return result ? result->body : "";
  }

  // Returns the table line of task `id`.
  static std::string LineOf(const std::string& table, const std::string& id) {
    std::istringstream in(table);
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::string plugin;
      std::string task;
      words >> plugin >> task;
      if (task == id.substr(0, id.find(' '))) {
        return line;
      }
    }
    return "";
  }

  // Starts `report` through the scheduler and waits until its function runs.
  void StartReport() {
    ASSERT_THAT(backend_->scheduler("jobs")->TriggerTask("report"), IsOk());
    ASSERT_TRUE(report_started_.WaitOpen());
  }

  // Triggers `fails` and waits until the listing records its error.
  void RunFailingTask() {
    ASSERT_THAT(backend_->scheduler("jobs")->TriggerTask("fails"), IsOk());
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (std::chrono::steady_clock::now() < deadline) {
      Result<std::vector<TaskListing>> listing = backend_->scheduler("jobs")->ListTasks();
      ASSERT_THAT(listing, IsOk());
      for (const TaskListing& task : *listing) {
        if (task.descriptor.id == "fails" && task.task_state && task.task_state->last_run_error) {
          return;
        }
      }
      std::this_thread::yield();
    }
    FAIL() << "the failed run was never recorded";
  }

  Latch report_started_;
  Latch report_stopped_;
  Latch quick_ran_;
  Latch encoded_ran_;
  std::unique_ptr<Backend> backend_;
  std::string url_;
};

TEST_F(CliVerbsTest, TasksListsEveryPluginAsATable) {
  Start();
  StartReport();
  RunFailingTask();
  Outcome outcome = Cli({"tasks", "--token", kToken});
  ASSERT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  EXPECT_THAT(outcome.err, IsEmpty());
  EXPECT_THAT(outcome.out,
              StartsWith("PLUGIN  TASK               SCOPE   CADENCE                     "
                         "STATE    "));
  EXPECT_THAT(outcome.out, AllOf(HasSubstr("NEXT RUN"), HasSubstr("LAST RUN ENDED  OUTCOME"),
                                 HasSubstr("DURATION  LAST ERROR\n")));
  EXPECT_THAT(
      LineOf(outcome.out, "yearly"),
      ContainsRegex("^jobs +yearly +global +0 0 1 1 \\* \\(UTC\\) +idle +in [0-9]+d([0-9]+[hm])? "
                    "\\([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8}\\) +- +- +- +-$"));
  EXPECT_THAT(LineOf(outcome.out, "warmup"),
              ContainsRegex("^jobs +warmup +local +every 5m +initial-wait +in 59m[0-9]+s \\("));
  EXPECT_THAT(LineOf(outcome.out, "report"),
              ContainsRegex("^jobs +report +global +manual +running +started (now|[0-9]+s ago) "
                            "\\([0-9:]{8}\\) +- +- +- +-$"));
  EXPECT_THAT(LineOf(outcome.out, "quick"),
              ContainsRegex("^jobs +quick +global +manual +idle +- +- +- +- +-$"));
  EXPECT_THAT(LineOf(outcome.out, "fails"),
              ContainsRegex("^jobs +fails +global +manual +idle +- +(now|[0-9]+s ago) "
                            "\\([0-9:]{8}\\) +failed +[0-9.]+m?s +disk full; while writing the "
                            "report$"));
  EXPECT_THAT(LineOf(outcome.out, "nightly"), ContainsRegex("^jobs +nightly report/v2 +global"));
  EXPECT_THAT(
      LineOf(outcome.out, "digest"),
      ContainsRegex("^mail +digest +local +30 6 \\* \\* \\* \\(Europe/Berlin\\) +idle +in "));
}

// Issue 16: a cron cadence was shown without the zone it fires in. stagehand's listing has it;
// Backstage's stays as it was, and so does --json, which prints it.
TEST_F(CliVerbsTest, ACronCadenceIsShownWithItsZoneFromStagehandsListing) {
  Start();
  nlohmann::json stagehand = nlohmann::json::parse(Get("/api/mail/.stagehand/v1/tasks"));
  ASSERT_EQ(stagehand["tasks"].size(), 1U);
  EXPECT_EQ(stagehand["tasks"][0]["timeZone"], "Europe/Berlin");
  nlohmann::json backstage = nlohmann::json::parse(Get("/api/mail/.backstage/scheduler/v1/tasks"));
  EXPECT_FALSE(backstage["tasks"][0].contains("timeZone"));
  // The task may run between the two requests: its states are compared by the REST tests.
  EXPECT_EQ(stagehand["tasks"][0]["pause"], nullptr);
  stagehand["tasks"][0].erase("timeZone");
  stagehand["tasks"][0].erase("pause");
  for (nlohmann::json* listing : {&stagehand, &backstage}) {
    (*listing)["tasks"][0].erase("taskState");
    (*listing)["tasks"][0].erase("workerState");
  }
  EXPECT_EQ(stagehand, backstage);

  Outcome table = Cli({"tasks", "--plugin", "mail"}, kToken);
  ASSERT_EQ(table.exit_code, kExitOk) << table.err;
  EXPECT_THAT(LineOf(table.out, "digest"), HasSubstr(" 30 6 * * * (Europe/Berlin) "));
  Outcome json = Cli({"tasks", "--plugin", "mail", "--json"}, kToken);
  ASSERT_EQ(json.exit_code, kExitOk) << json.err;
  EXPECT_THAT(json.out, Not(HasSubstr("timeZone")));
}

TEST_F(CliVerbsTest, PluginFlagListsOnePlugin) {
  Start();
  Outcome outcome = Cli({"tasks", "--plugin", "mail"}, kToken);
  ASSERT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  EXPECT_THAT(outcome.out, HasSubstr("digest"));
  EXPECT_THAT(outcome.out, Not(HasSubstr("jobs")));

  Outcome missing = Cli({"tasks", "--plugin", "nope"}, kToken);
  EXPECT_EQ(missing.exit_code, kExitNotFound);
  EXPECT_EQ(missing.err, "stagehand: cannot list the tasks of plugin 'nope': no plugin 'nope' at " +
                             url_ + " (404)\n");
  EXPECT_THAT(missing.out, IsEmpty());
}

TEST_F(CliVerbsTest, JsonIsTheRestListing) {
  Start();
  Outcome one = Cli({"tasks", "--plugin", "jobs", "--json"}, kToken);
  ASSERT_EQ(one.exit_code, kExitOk) << one.err;
  nlohmann::json listed = nlohmann::json::parse(one.out);
  nlohmann::json served = nlohmann::json::parse(Get("/api/jobs/.backstage/scheduler/v1/tasks"));
  ASSERT_EQ(listed["tasks"].size(), 6U);
  for (std::size_t i = 0; i < listed["tasks"].size(); ++i) {
    EXPECT_EQ(listed["tasks"][i]["taskId"], served["tasks"][i]["taskId"]);
    EXPECT_EQ(listed["tasks"][i]["settings"], served["tasks"][i]["settings"]);
  }

  Outcome all = Cli({"tasks", "--json"}, kToken);
  ASSERT_EQ(all.exit_code, kExitOk) << all.err;
  nlohmann::ordered_json by_plugin = nlohmann::ordered_json::parse(all.out);
  ASSERT_TRUE(by_plugin.is_object());
  std::vector<std::string> keys;
  for (const auto& [key, value] : by_plugin.items()) {
    keys.push_back(key);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"jobs", "mail"}));
  EXPECT_EQ(by_plugin["jobs"]["tasks"].size(), 6U);
  EXPECT_EQ(by_plugin["mail"]["tasks"][0]["taskId"], "digest");
  EXPECT_EQ(by_plugin["mail"]["tasks"][0]["settings"]["cadence"], "30 6 * * *");
}

TEST_F(CliVerbsTest, TriggerRunsTheTask) {
  Start();
  Outcome outcome = Cli({"trigger", "jobs", "quick"}, kToken);
  EXPECT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  EXPECT_EQ(outcome.out, "Triggered jobs/quick\n");
  EXPECT_THAT(outcome.err, IsEmpty());
  EXPECT_TRUE(quick_ran_.WaitOpen());
}

TEST_F(CliVerbsTest, TaskIdsArePercentEncoded) {
  Start();
  Outcome outcome = Cli({"trigger", "jobs", "nightly report/v2"}, kToken);
  EXPECT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  EXPECT_EQ(outcome.out, "Triggered jobs/nightly report/v2\n");
  EXPECT_TRUE(encoded_ran_.WaitOpen());
}

TEST_F(CliVerbsTest, ConflictsAndMissingTasksHaveTheirExitCodes) {
  Start();
  Outcome idle_cancel = Cli({"cancel", "jobs", "report"}, kToken);
  EXPECT_EQ(idle_cancel.exit_code, kExitConflict);
  EXPECT_EQ(idle_cancel.err,
            "stagehand: cannot cancel jobs/report: Task report is not running "
            "(409)\n");
  EXPECT_THAT(idle_cancel.out, IsEmpty());

  StartReport();
  Outcome busy_trigger = Cli({"trigger", "jobs", "report"}, kToken);
  EXPECT_EQ(busy_trigger.exit_code, kExitConflict);
  EXPECT_EQ(busy_trigger.err,
            "stagehand: cannot trigger jobs/report: Task report is currently "
            "running (409)\n");

  Outcome missing = Cli({"trigger", "jobs", "nope"}, kToken);
  EXPECT_EQ(missing.exit_code, kExitNotFound);
  EXPECT_EQ(missing.err, "stagehand: cannot trigger jobs/nope: Task nope does not exist (404)\n");

  Outcome no_plugin = Cli({"cancel", "nope", "report"}, kToken);
  EXPECT_EQ(no_plugin.exit_code, kExitNotFound);
  EXPECT_EQ(no_plugin.err,
            "stagehand: cannot cancel nope/report: no plugin 'nope' at " + url_ + " (404)\n");
}

TEST_F(CliVerbsTest, CancelStopsTheRunningTask) {
  Start();
  StartReport();
  Outcome outcome = Cli({"cancel", "jobs", "report"}, kToken);
  EXPECT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  EXPECT_EQ(outcome.out, "Cancelled jobs/report\n");
  EXPECT_TRUE(report_stopped_.WaitOpen());
}

// Issue 17: a pause lets the run in progress end, unless --cancel stops it.
TEST_F(CliVerbsTest, PauseOfARunningTaskWaitsForItsRunAndCancelStopsIt) {
  Start();
  StartReport();
  Outcome paused = Cli({"pause", "jobs", "report"}, kToken);
  ASSERT_EQ(paused.exit_code, kExitOk) << paused.err;
  Outcome listed = Cli({"tasks", "--token", kToken});
  EXPECT_THAT(LineOf(listed.out, "report"),
              ContainsRegex("^jobs +report +global +manual +pausing +paused when its run ends"));
  EXPECT_FALSE(report_stopped_.IsOpen()) << "the run goes on";

  Outcome cancelling = Cli({"pause", "jobs", "report", "--cancel"}, kToken);
  ASSERT_EQ(cancelling.exit_code, kExitOk) << cancelling.err;
  EXPECT_TRUE(report_stopped_.WaitOpen());
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  std::string line;
  // The state column reads "pausing" (whose note says "paused when its run ends") until the
  // cancelled run has been released, then "paused".
  const std::regex paused_row("^jobs +report +global +manual +paused +until resumed");
  while (std::chrono::steady_clock::now() < deadline) {
    line = LineOf(Cli({"tasks", "--token", kToken}).out, "report");
    if (std::regex_search(line, paused_row)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_THAT(line, ContainsRegex("^jobs +report +global +manual +paused +until resumed"));
}

// Issue 17: pause and resume, as an operator uses them.
TEST_F(CliVerbsTest, PauseHoldsATaskUntilResumeAndTasksShowsIt) {
  Start();
  Outcome paused =
      Cli({"pause", "jobs", "quick", "--until", "2h", "--reason", "storage migration"}, kToken);
  ASSERT_EQ(paused.exit_code, kExitOk) << paused.err;
  EXPECT_EQ(paused.out, "Paused jobs/quick\n");

  Outcome listed = Cli({"tasks", "--token", kToken});
  ASSERT_EQ(listed.exit_code, kExitOk) << listed.err;
  EXPECT_THAT(LineOf(listed.out, "quick"),
              ContainsRegex("^jobs +quick +global +manual +paused +resumes in (1h59m|2h)[0-9ms]* "
                            "\\(([0-9-]+ )?[0-9:]{8}\\) \\(storage migration\\)"));

  Outcome trigger = Cli({"trigger", "jobs", "quick"}, kToken);
  EXPECT_EQ(trigger.exit_code, kExitConflict);
  EXPECT_EQ(trigger.err, "stagehand: cannot trigger jobs/quick: Task quick is paused (409)\n");

  Outcome bad_until = Cli({"pause", "jobs", "quick", "--until", "soon"}, kToken);
  EXPECT_EQ(bad_until.exit_code, kExitUsage);
  EXPECT_THAT(bad_until.err, HasSubstr("--until must be an ISO-8601 instant"));

  Outcome resumed = Cli({"resume", "jobs", "quick"}, kToken);
  ASSERT_EQ(resumed.exit_code, kExitOk) << resumed.err;
  EXPECT_EQ(resumed.out, "Resumed jobs/quick\n");
  Outcome again = Cli({"resume", "jobs", "quick"}, kToken);
  EXPECT_EQ(again.exit_code, kExitConflict);
  EXPECT_EQ(again.err, "stagehand: cannot resume jobs/quick: Task quick is not paused (409)\n");

  Outcome trigger_after = Cli({"trigger", "jobs", "quick"}, kToken);
  EXPECT_EQ(trigger_after.exit_code, kExitOk) << trigger_after.err;
  EXPECT_TRUE(quick_ran_.WaitOpen());
}

TEST_F(CliVerbsTest, TheTokenComesFromTheFlagOrTheEnvironment) {
  Start(/*with_token=*/true);
  Outcome none = Cli({"tasks"});
  EXPECT_EQ(none.exit_code, kExitUnauthenticated);
  EXPECT_EQ(none.err, "stagehand: cannot list the plugins: the daemon at " + url_ +
                          " needs a token (401); pass --token or set STAGEHAND_TOKEN\n");
  Outcome wrong = Cli({"trigger", "jobs", "quick", "--token", "not-the-token"});
  EXPECT_EQ(wrong.exit_code, kExitUnauthenticated);
  EXPECT_THAT(wrong.err, HasSubstr("did not accept the token (401)"));
  Outcome wrong_env = Cli({"cancel", "jobs", "report"}, "not-the-token");
  EXPECT_EQ(wrong_env.exit_code, kExitUnauthenticated);

  EXPECT_EQ(Cli({"tasks"}, kToken).exit_code, kExitOk);
  EXPECT_EQ(Cli({"tasks", "--token", kToken}, "not-the-token").exit_code, kExitOk);
}

TEST_F(CliVerbsTest, NoTokenIsNeededWhenAuthIsDisabled) {
  Start(/*with_token=*/false);
  Outcome outcome = Cli({"tasks"});
  EXPECT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  EXPECT_THAT(outcome.out, HasSubstr("digest"));
  EXPECT_EQ(Cli({"trigger", "jobs", "quick"}).exit_code, kExitOk);
  EXPECT_TRUE(quick_ran_.WaitOpen());
}

TEST_F(CliVerbsTest, AStoppedDaemonIsUnreachable) {
  Start();
  backend_->Stop();
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"tasks"}, {"trigger", "jobs", "quick"}, {"cancel", "jobs", "report"}}) {
    Outcome outcome = Cli(args, kToken);
    EXPECT_EQ(outcome.exit_code, kExitUnreachable) << args.front();
    EXPECT_EQ(outcome.err, "stagehand: cannot reach the daemon at " + url_ +
                               ": connection refused or host unknown (is 'stagehand serve' "
                               "running? see --url)\n")
        << args.front();
    EXPECT_THAT(outcome.out, IsEmpty());
  }
}

// Files in a temporary directory, removed at the end.
class TempFiles {
 public:
  TempFiles() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "stagehand-cli-it-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) {
      dir_ = pattern;
    }
  }
  ~TempFiles() { std::filesystem::remove_all(dir_); }
  TempFiles(const TempFiles&) = delete;
  TempFiles& operator=(const TempFiles&) = delete;

  std::string Write(const std::string& name, const std::string& text) {
    std::filesystem::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

 private:
  std::filesystem::path dir_;
};

TEST_F(CliVerbsTest, ConfigFilesGiveTheAddress) {
  Start();
  TempFiles files;
  const std::string config =
      files.Write("app-config.yaml",
                  "backend:\n  listen: { host: 0.0.0.0, port: " + std::to_string(backend_->port()) +
                      " }\n  database: { client: better-sqlite3, connection: ':memory:' }\n");
  Outcome outcome = Cli({"tasks", "--plugin", "mail", "--config", config}, kToken,
                        /*with_url=*/false);
  EXPECT_EQ(outcome.exit_code, kExitOk) << outcome.err;
  EXPECT_THAT(outcome.out, HasSubstr("digest"));
}

TEST(ConfigCheckTest, ValidConfigPrintsASummary) {
  TempFiles files;
  const std::string base = files.Write(
      "app-config.yaml",
      "backend:\n  listen: { host: 127.0.0.1, port: 7007 }\n"
      "  database: { client: better-sqlite3, connection: { directory: ./data } }\n"
      "stagehand:\n  plugins:\n    jobs:\n      tasks:\n"
      "        hello:\n          schedule: { frequency: { cron: '*/10 * * * * *' }, timeout: 30s "
      "}\n"
      "          command: ['/bin/true']\n"
      "        ping:\n          schedule: { frequency: { minutes: 1 }, timeout: 10s }\n"
      "          http: { url: 'http://127.0.0.1:8080/hook' }\n"
      "    mail:\n      tasks:\n"
      "        digest:\n          schedule: { frequency: { trigger: manual }, timeout: 1m }\n"
      "          command: ['/bin/true']\n");
  const std::string overlay =
      files.Write("app-config.local.yaml", "backend:\n  listen: { port: 7100 }\n");
  std::ostringstream out;
  std::ostringstream err;
  Context context(out, err, SystemClock::Instance());
  int exit_code = RunWithContext(
      {"stagehand", "config", "check", "--config", base, "--config", overlay}, context);
  EXPECT_EQ(exit_code, kExitOk) << err.str();
  EXPECT_EQ(out.str(),
            "ok: 2 plugins, 3 tasks; database sqlite ./data; listen 127.0.0.1:7100\n"
            "  jobs: 2 tasks (hello, ping); sqlite ./data/jobs.sqlite\n"
            "  mail: 1 task (digest); sqlite ./data/mail.sqlite\n");
  EXPECT_THAT(err.str(), IsEmpty());
}

TEST(ConfigCheckTest, ListsEveryProblemWithFileAndKey) {
  TempFiles files;
  const std::string base = files.Write(
      "base.yaml",
      "backend:\n  listen: { host: 127.0.0.1, port: 99999 }\n"
      "  database: { client: better-sqlite3, connection: ':memory:' }\n"
      "  auth:\n    externalAccess:\n      - type: static\n        options: { token: short, "
      "subject: x }\n"
      "stagehand:\n  tracing: { sampler: sometimes }\n  plugins:\n    jobs:\n      tasks:\n"
      "        hello:\n          schedule: { frequency: { cron: 'not a cron' }, timeout: 30s }\n"
      "          command: ['/bin/true']\n"
      "        both:\n          schedule: { frequency: { minutes: 1 }, timeout: 10s }\n"
      "          command: ['/bin/true']\n          http: { url: 'http://127.0.0.1:1/' }\n");
  const std::string overlay =
      files.Write("overlay.yaml",
                  "stagehand:\n  plugins:\n    jobs:\n      tasks:\n"
                  "        late:\n          schedule: { frequency: { hours: 1 } }\n"
                  "          command: ['/bin/true']\n          colour: blue\n");
  std::ostringstream out;
  std::ostringstream err;
  Context context(out, err, SystemClock::Instance());
  int exit_code = RunWithContext(
      {"stagehand", "config", "check", "--config", base, "--config", overlay}, context);
  EXPECT_EQ(exit_code, kExitConfig);
  EXPECT_THAT(out.str(), IsEmpty());
  const std::string problems = err.str();
  EXPECT_THAT(problems, HasSubstr("backend.listen.port"));
  EXPECT_THAT(problems, HasSubstr("backend.auth.externalAccess"));
  EXPECT_THAT(problems, HasSubstr("stagehand.plugins.jobs.tasks.hello.schedule"));
  EXPECT_THAT(problems, HasSubstr("stagehand.plugins.jobs.tasks.both"));
  EXPECT_THAT(problems, HasSubstr("stagehand.plugins.jobs.tasks.late"));
  EXPECT_THAT(problems, HasSubstr("stagehand.tracing.sampler: unknown sampler 'sometimes'"));
  EXPECT_THAT(problems, HasSubstr("base.yaml"));
  EXPECT_THAT(problems, HasSubstr("overlay.yaml"));
  std::istringstream lines(problems);
  int count = 0;
  std::string last;
  for (std::string line; std::getline(lines, line); ++count) {
    EXPECT_THAT(line, StartsWith("stagehand: "));
    last = line;
  }
  EXPECT_GE(count, 6);
  EXPECT_EQ(last, "stagehand: config check failed: " + std::to_string(count - 1) + " problems");
}

TEST(ConfigCheckTest, UnreadableFileIsAProblem) {
  std::ostringstream out;
  std::ostringstream err;
  Context context(out, err, SystemClock::Instance());
  int exit_code = RunWithContext(
      {"stagehand", "config", "check", "--config", "/nonexistent/app-config.yaml"}, context);
  EXPECT_EQ(exit_code, kExitConfig);
  EXPECT_THAT(err.str(), HasSubstr("/nonexistent/app-config.yaml"));
  EXPECT_THAT(err.str(), HasSubstr("config check failed: 1 problem\n"));
}

}  // namespace
}  // namespace stagehand::cli
