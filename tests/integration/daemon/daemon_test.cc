// `stagehand serve` as a subprocess on SQLite: command tasks (success, failure, timeout and cancel
// kill their whole process group), HTTP tasks against a loopback server, SIGTERM, SIGQUIT
// and SIGINT during a run, the ready file, the access log's levels, the bearer-token policy, and
// the descriptors of the daemon and of a running command.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <string.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

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

// The output itself goes to the run history (issue 16); the log keeps one line per run, with the
// last line printed.
TEST_F(DaemonTest, CommandTaskRunsWithEnvAndWorkingDirectoryAndLogsItsLastLine) {
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
    if (record.value("task", "") == "hello" && record.value("last_line", "") == "said-hello") {
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
// the row released (left claimed, it would read `running` for the ten-minute timeout). SIGHUP
// reloads the config instead (reload_test.cc).
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

INSTANTIATE_TEST_SUITE_P(Signals, ShutdownSignalTest, ::testing::Values(SIGTERM, SIGQUIT, SIGINT),
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

// One open descriptor of a process: its number, what it names and its open flags (the octal
// `flags:` of /proc/<pid>/fdinfo, where close-on-exec shows as O_CLOEXEC).
struct OpenDescriptor {
  int fd = -1;
  std::string target;
  unsigned long flags = 0;
};

// Returns the open descriptors of `pid`; one that closes while they are listed is left out.
std::vector<OpenDescriptor> OpenDescriptors(pid_t pid) {
  const std::filesystem::path proc = "/proc/" + std::to_string(pid);
  std::vector<OpenDescriptor> descriptors;
  std::error_code listed;
  for (const std::filesystem::directory_entry& entry :
       std::filesystem::directory_iterator(proc / "fd", listed)) {
    OpenDescriptor descriptor;
    descriptor.fd = std::stoi(entry.path().filename().string());
    std::error_code gone;
    descriptor.target = std::filesystem::read_symlink(entry.path(), gone).string();
    std::istringstream info(ReadFile(proc / "fdinfo" / entry.path().filename()));
    bool has_flags = false;
    for (std::string line; std::getline(info, line);) {
      if (line.rfind("flags:", 0) == 0) {
        descriptor.flags = std::stoul(line.substr(6), nullptr, 8);
        has_flags = true;
      }
    }
    if (!gone && has_flags) descriptors.push_back(std::move(descriptor));
  }
  EXPECT_FALSE(listed) << "cannot list " << (proc / "fd") << ": " << listed.message();
  return descriptors;
}

std::string Describe(const OpenDescriptor& descriptor) {
  std::ostringstream out;
  out << "  fd " << descriptor.fd << " -> " << descriptor.target << " (flags 0" << std::oct
      << descriptor.flags << ")\n";
  return out.str();
}

// Every descriptor the daemon opens is close-on-exec, and a running command holds only 0 to 2,
// while the daemon holds what it holds in service: keep-alive REST connections, an HTTP task's
// connection in flight, the SQLite files, the running command's pipes and channel. Accepted
// sockets used to be inherited: a task held other clients' keep-alive connections (issue 14).
TEST_F(DaemonTest, EveryDescriptorIsCloseOnExecAndACommandHoldsOnlyStdio) {
  constexpr int kKeepAliveClients = 4;
  httplib::Server server;
  std::atomic<int> calls{0};
  std::atomic<bool> release{false};
  server.Get("/slow", [&](const httplib::Request&, httplib::Response& response) {
    ++calls;
    PollUntil([&] { return release.load(); }, 30s);
    response.set_content("done", "text/plain");
  });
  const int server_port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(server_port, 0);
  std::jthread serving([&] { server.listen_after_bind(); });
  struct StopServer {
    httplib::Server& server;
    std::atomic<bool>& release;
    ~StopServer() {
      release = true;
      server.stop();
    }
  } stop_server{server, release};
  ASSERT_TRUE(PollUntil([&] { return server.is_running(); }, 5s));

  const int port = Start(AppConfig(dir_,
                                   "        hold:\n"
                                   "          schedule: { frequency: { trigger: manual }, "
                                   "timeout: 2m }\n"
                                   "          command: ['/bin/sh', '-c', 'echo $$ > hold.pid; "
                                   "exec sleep 60']\n"
                                   "          workingDirectory: '" +
                                       dir_.path().string() +
                                       "'\n"
                                       "        call:\n"
                                       "          schedule: { frequency: { trigger: manual }, "
                                       "timeout: 1m }\n"
                                       "          http: { url: 'http://127.0.0.1:" +
                                       std::to_string(server_port) + "/slow', method: GET }\n"));
  ASSERT_NE(port, 0);
  // The daemon is non-dumpable, so its /proc/<pid>/fd belongs to root: reading it takes root or
  // CAP_SYS_PTRACE.
  std::error_code readable;
  std::filesystem::directory_iterator("/proc/" + std::to_string(daemon_->pid()) + "/fd", readable);
  if (readable == std::errc::permission_denied) {
    if (std::getenv("CI") != nullptr) FAIL() << "cannot read the daemon's descriptors: run as root";
    GTEST_SKIP() << "cannot read the daemon's descriptors without root or CAP_SYS_PTRACE";
  }
  std::vector<std::unique_ptr<httplib::Client>> clients;
  const auto refresh_clients = [&] {
    for (const std::unique_ptr<httplib::Client>& client : clients) {
      httplib::Result result = client->Get("/.backstage/health/v1/liveness");
      EXPECT_TRUE(result && result->status == 200);
    }
  };
  for (int i = 0; i < kKeepAliveClients; ++i) {
    clients.push_back(std::make_unique<httplib::Client>("127.0.0.1", port));
    clients.back()->set_keep_alive(true);
    clients.back()->set_read_timeout(5, 0);
  }
  refresh_clients();

  SchedulerApi api(port, "jobs");
  ASSERT_EQ(api.Post("hold", "trigger"), 200);
  ASSERT_EQ(api.Post("call", "trigger"), 200);
  std::optional<pid_t> command;
  ASSERT_TRUE(PollUntil(
      [&] {
        command = ReadPid(dir_ / "hold.pid");
        return command && ReadFile("/proc/" + std::to_string(*command) + "/comm") == "sleep\n";
      },
      10s))
      << "the command did not start; log:\n"
      << daemon_->Log();
  ASSERT_TRUE(PollUntil([&] { return calls.load() > 0; }, 10s)) << daemon_->Log();
  // Within the server's keep-alive idle limit, whatever it is.
  refresh_clients();

  std::string leaks;
  int sockets = 0;
  bool database = false;
  for (const OpenDescriptor& descriptor : OpenDescriptors(daemon_->pid())) {
    if (descriptor.target.rfind("socket:", 0) == 0) ++sockets;
    if (descriptor.target.find(".sqlite") != std::string::npos) database = true;
    // 0 to 2 are the streams the daemon was started with; the shim replaces them in every child.
    if (descriptor.fd > 2 && (descriptor.flags & O_CLOEXEC) == 0) leaks += Describe(descriptor);
  }
  EXPECT_TRUE(leaks.empty()) << "descriptors of the daemon without close-on-exec:\n" << leaks;
  // The listener, the HTTP task's connection, the keep-alive clients, the command's channel.
  EXPECT_GE(sockets, kKeepAliveClients + 3);
  EXPECT_TRUE(database) << "the SQLite database is not open";

  // The command's program may hold a file of its own for a moment as it starts (a clean-clone run
  // caught `sleep` reading a locale file); a descriptor inherited from the daemon stays.
  std::set<int> command_fds;
  std::string listing;
  PollUntil(
      [&] {
        command_fds.clear();
        listing.clear();
        for (const OpenDescriptor& descriptor : OpenDescriptors(*command)) {
          command_fds.insert(descriptor.fd);
          listing += Describe(descriptor);
        }
        return command_fds == std::set<int>{0, 1, 2};
      },
      2s);
  EXPECT_EQ(command_fds, (std::set<int>{0, 1, 2})) << "the command holds:\n" << listing;

  release = true;
  EXPECT_EQ(api.Post("hold", "cancel"), 200);
  api.WaitForRunEnd("hold");
  api.WaitForRunEnd("call");
}

}  // namespace
}  // namespace stagehand::daemon_test
