// `stagehand serve` on bad input: invalid configs exit 78 listing every problem with its file and
// key; a busy port exits 69 with one line; oversized and malformed HTTP requests get a 4xx while
// the daemon keeps answering.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "integration/daemon/daemon_process.h"

namespace stagehand::daemon_test {
namespace {

using ::testing::ContainerEq;
using ::testing::HasSubstr;

constexpr int kExitUnavailable = 69;
constexpr int kExitConfig = 78;

// Returns the lines of `text`.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class BadInputTest : public ::testing::Test {
 protected:
  // Runs `stagehand serve` on `files` (names under the temp dir, written from `contents`) and
  // returns its exit code; its output is in Log().
  std::optional<int> Serve(const std::vector<std::pair<std::string, std::string>>& files,
                           std::vector<std::string> extra_args = {"--port", "0"}) {
    std::vector<std::string> paths;
    for (const auto& [name, text] : files) {
      WriteFile(dir_ / name, text);
      paths.push_back((dir_ / name).string());
    }
    daemon_.emplace(paths, dir_ / "daemon.log", std::vector<std::pair<std::string, std::string>>{},
                    std::move(extra_args));
    return daemon_->WaitForExit(15s);
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Log() const { return daemon_->Log(); }

  TempDir dir_;
  std::optional<DaemonProcess> daemon_;
};

TEST_F(BadInputTest, MalformedYamlFilesAreEachReportedWithExit78) {
  EXPECT_EQ(Serve({{"first.yaml", "backend:\n  listen: [unclosed\n"},
                   {"second.yaml", "stagehand:\n  plugins: {jobs: \n"}}),
            kExitConfig);
  const std::vector<std::string> lines = Lines(Log());
  ASSERT_EQ(lines.size(), 2u) << Log();
  EXPECT_THAT(lines[0], HasSubstr("stagehand: "));
  EXPECT_THAT(lines[0], HasSubstr(Path("first.yaml")));
  EXPECT_THAT(lines[1], HasSubstr(Path("second.yaml")));
}

TEST_F(BadInputTest, EveryTaskAndBackendProblemIsListedWithFileAndKey) {
  const std::string file = Path("app.yaml");
  EXPECT_EQ(Serve({{"app.yaml",
                    "backend:\n"
                    "  listen: { port: not-a-port }\n"
                    "  database: { client: better-sqlite3, connection: ':memory:' }\n"
                    "stagehand:\n"
                    "  plugins:\n"
                    "    jobs:\n"
                    "      tasks:\n"
                    "        typo:\n"
                    "          schedule: { frequency: { minutes: 1 }, timeout: 10s }\n"
                    "          comand: [date]\n"
                    "        both:\n"
                    "          schedule: { frequency: { minutes: 1 }, timeout: 10s }\n"
                    "          command: [date]\n"
                    "          http: { url: 'http://127.0.0.1:1/' }\n"
                    "        bad-schedule:\n"
                    "          schedule: { frequency: { cron: 'not cron' }, timeout: 10s }\n"
                    "          command: [date]\n"}}),
            kExitConfig);
  const std::string log = Log();
  const std::vector<std::string> lines = Lines(log);
  for (const std::string& line : lines) {
    EXPECT_THAT(line, HasSubstr("stagehand: ")) << line;
    EXPECT_THAT(line, HasSubstr(file)) << line;
  }
  EXPECT_THAT(log, HasSubstr("'backend.listen.port'"));
  EXPECT_THAT(log, HasSubstr("'stagehand.plugins.jobs.tasks.typo.comand' in '" + file +
                             "': unknown key 'comand'; did you mean 'command'?"));
  EXPECT_THAT(log, HasSubstr("'stagehand.plugins.jobs.tasks.both' in '" + file +
                             "': a task has exactly one executor, but both 'command' and 'http' "
                             "are set"));
  EXPECT_THAT(log, HasSubstr("Invalid cron expression at "
                             "'stagehand.plugins.jobs.tasks.bad-schedule.schedule.frequency.cron' "
                             "in '" +
                             file + "'"));
  // typo (unknown key + no executor), both, bad-schedule, and the port.
  EXPECT_EQ(lines.size(), 5u) << log;
}

// Issue 13: these passed `config check`, and the daemon ran the zero and negative cadences without
// pause and the misspelt keys with their defaults.
constexpr const char* kSchedulesThatCannotWork =
    "backend:\n"
    "  database: { client: better-sqlite3, connection: ':memory:' }\n"
    "stagehand:\n"
    "  plugins:\n"
    "    jobs:\n"
    "      tasks:\n"
    "        zero:\n"
    "          schedule: { frequency: 0s, timeout: 10s }\n"
    "          command: ['true']\n"
    "        negative:\n"
    "          schedule: { frequency: { minutes: -1 }, timeout: 10s }\n"
    "          command: ['true']\n"
    "        iso:\n"
    "          schedule: { frequency: PT0S, timeout: PT-1S, initialDelay: PT-1M }\n"
    "          command: ['true']\n"
    "        feb31:\n"
    "          schedule: { frequency: { cron: '0 0 31 2 *' }, timeout: 10s }\n"
    "          command: ['true']\n"
    "        typo:\n"
    "          schedule: { frequency: 1m, timeout: 10s, intialDelay: 1m }\n"
    "          command: ['true']\n"
    "  schedular: { lease: 5s }\n";

// The lines of the problems kSchedulesThatCannotWork holds, after "stagehand: ", for `file`.
std::vector<std::string> ExpectedScheduleProblems(const std::string& file) {
  const std::string task = "Invalid config value for key 'stagehand.plugins.jobs.tasks.";
  return {
      "stagehand: " + task + "zero.schedule.frequency' in '" + file +
          "': must be longer than zero, got PT0S",
      "stagehand: " + task + "negative.schedule.frequency' in '" + file +
          "': must be longer than zero, got PT-1M",
      "stagehand: " + task + "iso.schedule.frequency' in '" + file +
          "': must be longer than zero, got PT0S",
      "stagehand: " + task + "iso.schedule.timeout' in '" + file +
          "': must be longer than zero, got PT-1S",
      "stagehand: " + task + "iso.schedule.initialDelay' in '" + file +
          "': cannot be negative, got PT-1M",
      "stagehand: Invalid cron expression at "
      "'stagehand.plugins.jobs.tasks.feb31.schedule.frequency.cron' in '" +
          file + "': Something went wrong. No execution date was found in the next 8 years.",
      "stagehand: " + task + "typo.schedule.intialDelay' in '" + file +
          "': unknown key 'intialDelay'; did you mean 'initialDelay'?",
  };
}

// A `stagehand` command run to completion: its exit code and its stdout and stderr, interleaved.
struct Finished {
  int code = -1;
  std::string output;
};

// Runs the stagehand binary with `args`, its output going to `log`, and waits for it to exit.
Finished RunStagehand(const std::vector<std::string>& args, const std::filesystem::path& log) {
  std::vector<std::string> strings = {STAGEHAND_BINARY};
  strings.insert(strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : strings) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EXPECT_GE(log_fd, 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  Finished finished;
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status)) {
    finished.code = WEXITSTATUS(status);
  }
  finished.output = ReadFile(log);
  return finished;
}

TEST_F(BadInputTest, ConfigCheckRejectsSchedulesThatCannotWorkAndTypos) {
  const std::string file = Path("app.yaml");
  WriteFile(file, kSchedulesThatCannotWork);
  const Finished check = RunStagehand({"config", "check", "--config", file}, dir_ / "check.log");
  EXPECT_EQ(check.code, kExitConfig) << check.output;
  // The backend's problems come first, then the tasks'.
  std::vector<std::string> expected = {
      "stagehand: Invalid config value for key 'stagehand.schedular' in '" + file +
      "': unknown key 'schedular'; did you mean 'scheduler'?"};
  for (const std::string& problem : ExpectedScheduleProblems(file)) expected.push_back(problem);
  expected.push_back("stagehand: config check failed: 8 problems");
  EXPECT_THAT(Lines(check.output), ContainerEq(expected));
}

TEST_F(BadInputTest, ServeRejectsSchedulesThatCannotWorkWithExit78) {
  EXPECT_EQ(Serve({{"app.yaml", kSchedulesThatCannotWork}}), kExitConfig);
  const std::vector<std::string> lines = Lines(Log());
  for (const std::string& problem : ExpectedScheduleProblems(Path("app.yaml"))) {
    EXPECT_THAT(lines, ::testing::Contains(problem));
  }
}

TEST_F(BadInputTest, DbMigrateRejectsWhatConfigCheckRejectsAndUnnamedPlugins) {
  const std::string file = Path("app.yaml");
  WriteFile(file, kSchedulesThatCannotWork);
  const Finished migrate = RunStagehand({"db", "migrate", "--config", file}, dir_ / "migrate.log");
  EXPECT_EQ(migrate.code, kExitConfig) << migrate.output;
  EXPECT_THAT(Lines(migrate.output), ::testing::IsSupersetOf(ExpectedScheduleProblems(file)));

  const std::string data = (dir_ / "data").string();
  const std::string valid = Path("valid.yaml");
  WriteFile(valid, "backend:\n  database: { client: better-sqlite3, connection: { directory: '" +
                       data + "' } }\nstagehand:\n  plugins:\n    jobs: {}\n");
  const Finished nope =
      RunStagehand({"db", "migrate", "--config", valid, "--plugin", "nope"}, dir_ / "nope.log");
  EXPECT_EQ(nope.code, kExitConfig);
  EXPECT_EQ(nope.output,
            "stagehand: --plugin nope: the config names no plugin 'nope' under "
            "'stagehand.plugins' or 'backend.database.plugin'; it names jobs\n");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "data" / "nope.sqlite"));
}

TEST_F(BadInputTest, UnsetVariableIsAConfigError) {
  ::unsetenv("STAGEHAND_DAEMON_TEST_UNSET");
  EXPECT_EQ(Serve({{"app.yaml",
                    "backend:\n"
                    "  auth:\n"
                    "    externalAccess:\n"
                    "      - type: static\n"
                    "        options: { token: '${STAGEHAND_DAEMON_TEST_UNSET}', subject: x }\n"}}),
            kExitConfig);
  EXPECT_THAT(Log(), HasSubstr("STAGEHAND_DAEMON_TEST_UNSET"));
  EXPECT_THAT(Log(), HasSubstr(Path("app.yaml")));
}

TEST_F(BadInputTest, BusyPortExits69WithOneLine) {
  httplib::Server blocker;
  const int busy = blocker.bind_to_any_port("127.0.0.1");
  ASSERT_GT(busy, 0);
  const std::string config =
      "backend:\n  listen: { host: 127.0.0.1 }\n  database: { client: "
      "better-sqlite3, connection: ':memory:' }\n";
  EXPECT_EQ(Serve({{"app.yaml", config}}, {"--port", std::to_string(busy)}), kExitUnavailable);
  std::vector<std::string> errors;
  for (const std::string& line : Lines(Log())) {
    if (line.rfind("stagehand: ", 0) == 0) errors.push_back(line);
  }
  ASSERT_EQ(errors.size(), 1u) << Log();
  EXPECT_THAT(errors[0], HasSubstr("cannot start"));
  EXPECT_THAT(errors[0], HasSubstr(std::to_string(busy)));
}

// Sends `raw` on a new connection and returns what comes back until the end of the response
// head or until the server closes.
std::string RawExchange(int port, const std::string& raw) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    ::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL);
    char buffer[4096];
    for (ssize_t n; reply.find("\r\n\r\n") == std::string::npos &&
                    (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) {
      reply.append(buffer, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return reply;
}

TEST_F(BadInputTest, OversizedAndMalformedRequestsGet4xxAndTheDaemonKeepsAnswering) {
  WriteFile(dir_ / "app.yaml",
            "backend:\n"
            "  listen: { host: 127.0.0.1 }\n"
            "  database: { client: better-sqlite3, connection: { directory: '" +
                (dir_ / "data").string() +
                "' } }\n"
                "  auth: { dangerouslyDisableDefaultAuthPolicy: true }\n"
                "stagehand:\n"
                "  server: { maxRequestBodySize: 1024 }\n"
                "  plugins:\n"
                "    jobs:\n"
                "      tasks:\n"
                "        noop:\n"
                "          schedule: { frequency: { trigger: manual }, timeout: 10s }\n"
                "          command: ['true']\n");
  daemon_.emplace(std::vector<std::string>{Path("app.yaml")}, dir_ / "daemon.log");
  const int port = daemon_->WaitUntilReady();
  ASSERT_NE(port, 0);
  SchedulerApi api(port, "jobs");

  httplib::Result oversized = api.client().Post((api.base() + "/tasks/noop/trigger").c_str(),
                                                std::string(64 * 1024, 'x'), "text/plain");
  ASSERT_TRUE(oversized);
  EXPECT_EQ(oversized->status, 413);

  httplib::Result bad_escape = api.client().Post((api.base() + "/tasks/%zz/trigger").c_str());
  ASSERT_TRUE(bad_escape);
  EXPECT_EQ(bad_escape->status, 400);

  EXPECT_THAT(RawExchange(port, "THIS IS NOT HTTP\r\n\r\n"), HasSubstr("HTTP/1.1 400"));
  EXPECT_THAT(RawExchange(port,
                          "GET /.backstage/health/v1/liveness HTTP/1.1\r\nHost: x\r\n"
                          "X-Huge: " +
                              std::string(64 * 1024, 'a') + "\r\n\r\n"),
              HasSubstr("HTTP/1.1 431"));

  EXPECT_THAT(RawExchange(port, "POST " + api.base() +
                                    "/tasks/noop/trigger HTTP/1.1\r\nHost: x\r\n"
                                    "Content-Length: nope\r\n\r\n"),
              HasSubstr("HTTP/1.1 400"));
  // A POST without Content-Length (curl -X POST) has an empty body: answered at once.
  EXPECT_THAT(RawExchange(port, "POST " + api.base() +
                                    "/tasks/nope/trigger HTTP/1.1\r\n"
                                    "Host: x\r\n\r\n"),
              HasSubstr("HTTP/1.1 404"));

  EXPECT_FALSE(daemon_->Exited());
  EXPECT_EQ(api.Post("noop", "trigger"), 200);
  EXPECT_TRUE(api.WaitForRunEnd("noop").is_object());
  httplib::Result ready = api.client().Get("/.backstage/health/v1/readiness");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
}

}  // namespace
}  // namespace stagehand::daemon_test
