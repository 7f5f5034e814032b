// `stagehand serve` as a subprocess on SQLite: command tasks (success, failure, timeout and cancel
// kill their whole process group), HTTP tasks against a loopback server, SIGTERM, SIGHUP, SIGQUIT
// and SIGINT during a run, the ready file, the access log's levels and the bearer-token policy.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <string.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "integration/daemon/daemon_process.h"

namespace stagehand::daemon_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Returns an app-config on SQLite under `dir`/data, auth off, with `tasks` (YAML indented for
// stagehand.plugins.jobs.tasks) and `extra` appended at the top level.
std::string AppConfig(const TempDir& dir, const std::string& tasks, const std::string& extra = {}) {
  return "backend:\n"
         "  listen: { host: 127.0.0.1, port: 7007 }\n"
         "  database:\n"
         "    client: better-sqlite3\n"
         "    connection: { directory: '" +
         (dir / "data").string() +
         "' }\n"
         "  auth: { dangerouslyDisableDefaultAuthPolicy: true }\n" +
         extra +
         "stagehand:\n"
         "  plugins:\n"
         "    jobs:\n"
         "      tasks:\n" +
         tasks;
}

// A manual task running `script` with /bin/sh.
std::string ManualShellTask(const std::string& id, const std::string& script,
                            const std::string& timeout = "30s") {
  return "        " + id +
         ":\n          schedule: { frequency: { trigger: manual }, timeout: " + timeout +
         " }\n          command: ['/bin/sh', '-c', '" + script + "']\n";
}

// The lastRunError of a listing entry, decoded (Backstage stores it as a JSON string).
nlohmann::json LastRunError(const nlohmann::json& task) {
  if (!task["taskState"].is_object() || !task["taskState"].contains("lastRunError")) {
    return nullptr;
  }
  return nlohmann::json::parse(task["taskState"]["lastRunError"].get<std::string>());
}

class DaemonTest : public ::testing::Test {
 protected:
  // Writes the config, starts the daemon and waits for readiness.
  int Start(const std::string& config) {
    WriteFile(dir_ / "app-config.yaml", config);
    daemon_.emplace(std::vector<std::string>{(dir_ / "app-config.yaml").string()},
                    dir_ / "daemon.log");
    return daemon_->WaitUntilReady();
  }

  TempDir dir_;
  std::optional<DaemonProcess> daemon_;
};

TEST_F(DaemonTest, CommandTaskRunsWithEnvAndWorkingDirectoryAndLogsItsOutput) {
  std::filesystem::create_directories(dir_ / "work");
  const int port = Start(AppConfig(dir_,
                                   "        hello:\n"
                                   "          schedule: { frequency: { trigger: manual }, "
                                   "timeout: 10s }\n"
                                   "          command: ['/bin/sh', '-c', 'pwd > out; echo "
                                   "\"$GREETING\" >> out; echo said-hello']\n"
                                   "          env: { GREETING: hi-there }\n"
                                   "          workingDirectory: '" +
                                       (dir_ / "work").string() + "'\n"));
  ASSERT_NE(port, 0);
  SchedulerApi api(port, "jobs");
  ASSERT_EQ(api.Post("hello", "trigger"), 200);
  nlohmann::json task = api.WaitForRunEnd("hello");
  EXPECT_TRUE(LastRunError(task).is_null()) << task.dump();
  EXPECT_EQ(ReadFile(dir_ / "work" / "out"),
            std::filesystem::canonical(dir_ / "work").string() + "\nhi-there\n");
  bool logged = false;
  for (const nlohmann::json& record : daemon_->Records()) {
    if (record.value("message", "") == "said-hello" && record.value("task", "") == "hello") {
      logged = true;
    }
  }
  EXPECT_TRUE(logged) << daemon_->Log();
}

TEST_F(DaemonTest, FailingCommandRecordsExitCodeAndStderrTail) {
  const int port = Start(
      AppConfig(dir_, ManualShellTask("fails", "echo first >&2; echo last-words >&2; exit 7")));
  ASSERT_NE(port, 0);
  SchedulerApi api(port, "jobs");
  ASSERT_EQ(api.Post("fails", "trigger"), 200);
  nlohmann::json error = LastRunError(api.WaitForRunEnd("fails"));
  ASSERT_TRUE(error.is_object());
  EXPECT_EQ(error["name"], "Error");
  const std::string message = error["message"].get<std::string>();
  EXPECT_THAT(message, HasSubstr("7"));
  EXPECT_THAT(message, HasSubstr("first"));
  EXPECT_THAT(message, HasSubstr("last-words"));
}

// The command leaves a background child in its group and waits; the stop must end both.
constexpr char kSleeperScript[] = "sleep 30 & echo $! > child.pid; wait";

TEST_F(DaemonTest, TimeoutKillsTheWholeProcessGroup) {
  const int port = Start(AppConfig(dir_,
                                   "        slow:\n"
                                   "          schedule: { frequency: { trigger: manual }, "
                                   "timeout: 1s }\n"
                                   "          command: ['/bin/sh', '-c', '" +
                                       std::string(kSleeperScript) +
                                       "']\n"
                                       "          workingDirectory: '" +
                                       dir_.path().string() + "'\n"));
  ASSERT_NE(port, 0);
  SchedulerApi api(port, "jobs");
  ASSERT_EQ(api.Post("slow", "trigger"), 200);
  std::optional<pid_t> child;
  ASSERT_TRUE(PollUntil([&] { return (child = ReadPid(dir_ / "child.pid")).has_value(); }, 5s));
  nlohmann::json error = LastRunError(api.WaitForRunEnd("slow", 10s));
  ASSERT_TRUE(error.is_object());
  EXPECT_TRUE(PollUntil([&] { return !ProcessExists(*child); }, 5s))
      << "the background sleep survived the timeout";
}

TEST_F(DaemonTest, CancelOverRestKillsTheWholeProcessGroup) {
  const int port = Start(AppConfig(dir_,
                                   "        slow:\n"
                                   "          schedule: { frequency: { trigger: manual }, "
                                   "timeout: 1m }\n"
                                   "          command: ['/bin/sh', '-c', '" +
                                       std::string(kSleeperScript) +
                                       "']\n"
                                       "          workingDirectory: '" +
                                       dir_.path().string() + "'\n"));
  ASSERT_NE(port, 0);
  SchedulerApi api(port, "jobs");
  ASSERT_EQ(api.Post("slow", "cancel"), 409);
  ASSERT_EQ(api.Post("slow", "trigger"), 200);
  std::optional<pid_t> child;
  ASSERT_TRUE(PollUntil([&] { return (child = ReadPid(dir_ / "child.pid")).has_value(); }, 5s));
  EXPECT_EQ(api.Post("slow", "trigger"), 409);
  ASSERT_EQ(api.Post("slow", "cancel"), 200);
  nlohmann::json error = LastRunError(api.WaitForRunEnd("slow", 5s));
  ASSERT_TRUE(error.is_object());
  EXPECT_TRUE(PollUntil([&] { return !ProcessExists(*child); }, 5s))
      << "the background sleep survived the cancel";
}

TEST_F(DaemonTest, HttpTasksCallTheServerAndFailOnAnUnexpectedStatus) {
  httplib::Server server;
  std::mutex mu;
  std::vector<std::string> seen;
  server.Post("/hook", [&](const httplib::Request& request, httplib::Response& response) {
    std::lock_guard lock(mu);
    seen.push_back(request.method + " " + request.get_header_value("X-Token") + " " + request.body);
    response.status = 201;
  });
  server.Get("/broken", [&](const httplib::Request&, httplib::Response& response) {
    response.status = 500;
    response.set_content("database on fire", "text/plain");
  });
  const int server_port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(server_port, 0);
  std::jthread serving([&] { server.listen_after_bind(); });
  struct StopServer {
    httplib::Server& server;
    ~StopServer() { server.stop(); }
  } stop_server{server};
  ASSERT_TRUE(PollUntil([&] { return server.is_running(); }, 5s));
  const std::string base = "http://127.0.0.1:" + std::to_string(server_port);

  const int port =
      Start(AppConfig(dir_,
                      "        hook:\n"
                      "          schedule: { frequency: { trigger: manual }, "
                      "timeout: 5s }\n"
                      "          http: { url: '" +
                          base +
                          "/hook', method: POST, headers: { X-Token: abc }, "
                          "body: 'payload', expectStatus: 201 }\n"
                          "        broken:\n"
                          "          schedule: { frequency: { trigger: manual }, "
                          "timeout: 5s }\n"
                          "          http: { url: '" +
                          base + "/broken', method: GET, includeBodyInError: true }\n"));
  ASSERT_NE(port, 0);
  SchedulerApi api(port, "jobs");
  ASSERT_EQ(api.Post("hook", "trigger"), 200);
  ASSERT_EQ(api.Post("broken", "trigger"), 200);
  nlohmann::json hook = api.WaitForRunEnd("hook");
  nlohmann::json broken = api.WaitForRunEnd("broken");

  EXPECT_TRUE(LastRunError(hook).is_null()) << hook.dump();
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(seen, std::vector<std::string>{"POST abc payload"});
  }
  nlohmann::json error = LastRunError(broken);
  ASSERT_TRUE(error.is_object()) << broken.dump();
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("500"));
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("database on fire"));
}

// Each of these signals stops the daemon cleanly: exit 0, the running command's whole tree ended,
// the row released (left claimed, it would read `running` for the ten-minute timeout). SIGHUP used
// to kill the daemon at once, leaving the command running as an orphan and the row claimed.
class ShutdownSignalTest : public DaemonTest, public ::testing::WithParamInterface<int> {};

TEST_P(ShutdownSignalTest, StopsCleanlyDuringARunWithoutOrphans) {
  const int signal = GetParam();
  const std::string config = AppConfig(dir_,
                                       "        slow:\n"
                                       "          schedule: { frequency: { trigger: manual }, "
                                       "timeout: 10m }\n"
                                       "          command: ['/bin/sh', '-c', 'echo $$ > "
                                       "command.pid; " +
                                           std::string(kSleeperScript) +
                                           "']\n"
                                           "          workingDirectory: '" +
                                           dir_.path().string() + "'\n");
  int port = Start(config);
  ASSERT_NE(port, 0);
  {
    SchedulerApi api(port, "jobs");
    ASSERT_EQ(api.Post("slow", "trigger"), 200);
  }
  std::optional<pid_t> command;
  std::optional<pid_t> child;
  ASSERT_TRUE(PollUntil(
      [&] {
        command = ReadPid(dir_ / "command.pid");
        child = ReadPid(dir_ / "child.pid");
        return command && child;
      },
      5s));

  daemon_->Signal(signal);
  EXPECT_EQ(daemon_->WaitForExit(15s), 0) << daemon_->Log();
  EXPECT_THAT(daemon_->Log(),
              HasSubstr(std::string("Received SIG") + sigabbrev_np(signal) + ", shutting down"));
  EXPECT_TRUE(PollUntil([&] { return !ProcessExists(*command) && !ProcessExists(*child); }, 5s))
      << "the command or its background sleep survived the shutdown";

  // Started again on the same database, the task reads idle at once: the row was released.
  daemon_.reset();
  port = Start(config);
  ASSERT_NE(port, 0);
  SchedulerApi api(port, "jobs");
  nlohmann::json task = api.Task("slow");
  ASSERT_TRUE(task["taskState"].is_object()) << task.dump();
  EXPECT_EQ(task["taskState"]["status"], "idle") << task.dump();
  EXPECT_TRUE(task["taskState"].contains("lastRunEndedAt")) << task.dump();
}

INSTANTIATE_TEST_SUITE_P(Signals, ShutdownSignalTest,
                         ::testing::Values(SIGTERM, SIGHUP, SIGQUIT, SIGINT),
                         [](const ::testing::TestParamInfo<int>& param) {
                           return std::string("SIG") + sigabbrev_np(param.param);
                         });

// backend.listen.port 0 without --port: the daemon picks a port and the ready file names it; the
// file goes away when shutdown begins.
TEST_F(DaemonTest, ReadyFileNamesThePortListenPortZeroBound) {
  std::string config = AppConfig(dir_, ManualShellTask("noop", "true"));
  const std::string fixed = "port: 7007";
  config.replace(config.find(fixed), fixed.size(), "port: 0");
  WriteFile(dir_ / "app-config.yaml", config);
  daemon_.emplace(std::vector<std::string>{(dir_ / "app-config.yaml").string()},
                  dir_ / "daemon.log", std::vector<std::pair<std::string, std::string>>{},
                  std::vector<std::string>{});
  const int port = daemon_->WaitUntilReady();
  ASSERT_NE(port, 0);
  ASSERT_NE(port, 7007);
  const nlohmann::json ready = nlohmann::json::parse(ReadFile(daemon_->ready_path()));
  EXPECT_EQ(ready["host"], "127.0.0.1") << ready.dump();
  EXPECT_EQ(ready["pid"], daemon_->pid()) << ready.dump();
  EXPECT_THAT(daemon_->Log(), HasSubstr("Listening on 127.0.0.1:" + std::to_string(port)));

  daemon_->Signal(SIGTERM);
  EXPECT_EQ(daemon_->WaitForExit(15s), 0) << daemon_->Log();
  EXPECT_FALSE(std::filesystem::exists(daemon_->ready_path()));
}

// Health probes and /metrics scrapes would flood the log at info: their successful answers are
// logged at debug; other requests stay at info.
TEST_F(DaemonTest, HealthProbesAndMetricsScrapesAreLoggedAtDebug) {
  WriteFile(dir_ / "app-config.yaml", AppConfig(dir_, ManualShellTask("noop", "true")));
  daemon_.emplace(std::vector<std::string>{(dir_ / "app-config.yaml").string()},
                  dir_ / "daemon.log", std::vector<std::pair<std::string, std::string>>{},
                  std::vector<std::string>{"--port", "0", "--log-level", "debug"});
  const int port = daemon_->WaitUntilReady();
  ASSERT_NE(port, 0);
  SchedulerApi api(port, "jobs");
  for (const char* path :
       {"/.backstage/health/v1/liveness", "/.backstage/health/v1/readiness", "/metrics"}) {
    httplib::Result result = api.client().Get(path);
    ASSERT_TRUE(result) << path;
    EXPECT_EQ(result->status, 200) << path;
  }
  ASSERT_FALSE(api.Tasks().is_null());

  const std::string tasks_path = api.base() + "/tasks";
  std::map<std::string, std::string> levels;  // path -> level of its last "request" record
  EXPECT_TRUE(PollUntil(
      [&] {
        levels.clear();
        for (const nlohmann::json& record : daemon_->Records()) {
          if (record.value("message", "") == "request") {
            levels[record.value("path", "")] = record.value("level", "");
          }
        }
        return levels.count(tasks_path) != 0 && levels.count("/metrics") != 0 &&
               levels.count("/.backstage/health/v1/liveness") != 0;
      },
      5s))
      << daemon_->Log();
  EXPECT_EQ(levels["/.backstage/health/v1/liveness"], "debug");
  EXPECT_EQ(levels["/.backstage/health/v1/readiness"], "debug");
  EXPECT_EQ(levels["/metrics"], "debug");
  EXPECT_EQ(levels[tasks_path], "info");
}

TEST_F(DaemonTest, TokenIsRequiredWhenAuthIsOn) {
  const std::string config =
      "backend:\n"
      "  listen: { host: 127.0.0.1, port: 7007 }\n"
      "  database: { client: better-sqlite3, connection: { directory: '" +
      (dir_ / "data").string() +
      "' } }\n"
      "  auth:\n"
      "    externalAccess:\n"
      "      - type: static\n"
      "        options: { token: '${TEST_TOKEN}', subject: tests }\n"
      "stagehand:\n"
      "  plugins:\n"
      "    jobs:\n"
      "      tasks:\n" +
      ManualShellTask("noop", "true");
  WriteFile(dir_ / "app-config.yaml", config);
  daemon_.emplace(std::vector<std::string>{(dir_ / "app-config.yaml").string()},
                  dir_ / "daemon.log",
                  std::vector<std::pair<std::string, std::string>>{
                      {"TEST_TOKEN", "0123456789abcdef-test-token"}});
  const int port = daemon_->WaitUntilReady();
  ASSERT_NE(port, 0);

  SchedulerApi anonymous(port, "jobs");
  std::string body;
  EXPECT_EQ(anonymous.Post("noop", "trigger", &body), 401);
  EXPECT_EQ(nlohmann::json::parse(body)["error"]["name"], "AuthenticationError") << body;
  SchedulerApi wrong(port, "jobs", "0123456789abcdef-wrong-token");
  EXPECT_EQ(wrong.Post("noop", "trigger"), 401);
  SchedulerApi operator_api(port, "jobs", "0123456789abcdef-test-token");
  EXPECT_EQ(operator_api.Post("noop", "trigger"), 200);
  EXPECT_THAT(daemon_->Log(), Not(HasSubstr("0123456789abcdef-test-token")));
}

}  // namespace
}  // namespace stagehand::daemon_test
