// Test helpers that run `stagehand serve` as a child process: a temporary directory for its
// config, data and log; the process itself (started with --log-format json, --port 0 and
// --ready-file, its port read from the ready file, so no test probes for a free port and races
// another for it); and small HTTP helpers for the scheduler REST API.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#ifndef STAGEHAND_BINARY
#error "STAGEHAND_BINARY must name the built stagehand program"
#endif

namespace stagehand::daemon_test {

using namespace std::chrono_literals;
using SteadyTime = std::chrono::steady_clock::time_point;

inline constexpr auto kPollInterval = 10ms;

// Polls `done` until it returns true or `timeout` passes; returns its last answer. Integration
// tests wait on another process this way: the event has no other channel to the test.
inline bool PollUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const SteadyTime deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
}

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A fresh directory under TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "stagehand-daemon-XXXXXX").string();
    const char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Returns whether a process with `pid` exists (zombies included).
inline bool ProcessExists(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

// Reads a pid a command wrote to `path`, once the file holds a whole line.
inline std::optional<pid_t> ReadPid(const std::filesystem::path& path) {
  const std::string text = ReadFile(path);
  if (text.empty() || text.back() != '\n') return std::nullopt;
  return static_cast<pid_t>(std::stol(text));
}

// One `stagehand serve` child process. Its stdout and stderr go to `log_path`; its ready file is
// `log_path` + ".ready". The destructor kills it (SIGKILL) if it still runs. Not thread-safe.
class DaemonProcess {
 public:
  // Starts `stagehand serve` with --log-format json, --ready-file, --port 0 (unless `extra_args`
  // names a port) and one --config per file, with `env` added to the test's environment and no
  // descriptor beyond 0 to 2.
  DaemonProcess(std::vector<std::string> config_files, std::filesystem::path log_path,
                std::vector<std::pair<std::string, std::string>> env = {},
                std::vector<std::string> extra_args = {"--port", "0"})
      : log_path_(std::move(log_path)), ready_path_(log_path_.string() + ".ready") {
    // A ready file left by an earlier daemon with the same log would announce its port.
    std::error_code ignored;
    std::filesystem::remove(ready_path_, ignored);
    std::vector<std::string> args = {STAGEHAND_BINARY, "serve",        "--log-format",
                                     "json",           "--ready-file", ready_path_.string()};
    for (std::string& file : config_files) {
      args.emplace_back("--config");
      args.push_back(std::move(file));
    }
    for (std::string& arg : extra_args) args.push_back(std::move(arg));
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);

    const int log_fd =
        ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    EXPECT_GE(log_fd, 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
      // As a service manager starts it, so that every other descriptor the daemon holds is one
      // it opened (ctest and the test binary leak a few).
      ::close_range(3, ~0U, 0);
      for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(log_fd);
    EXPECT_GT(pid_, 0);
  }

  ~DaemonProcess() {
    if (pid_ > 0 && !exit_code_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  pid_t pid() const { return pid_; }
  std::string Log() const { return ReadFile(log_path_); }

  // Returns the JSON log records (lines that are not JSON are skipped).
  std::vector<nlohmann::json> Records() const {
    std::vector<nlohmann::json> records;
    std::istringstream lines(Log());
    for (std::string line; std::getline(lines, line);) {
      nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
      if (!record.is_discarded() && record.is_object()) records.push_back(std::move(record));
    }
    return records;
  }

  // Waits for the ready file (written once the daemon listens and its plugins have started; by
  // rename, so it is whole when it exists), then checks readiness 200. Returns the port, or 0
  // after adding a test failure with the log.
  int WaitUntilReady(std::chrono::milliseconds timeout = 15s) {
    const bool ready = PollUntil(
        [&] {
          if (Exited()) return true;
          if (!std::filesystem::exists(ready_path_)) return false;
          const nlohmann::json file = nlohmann::json::parse(ReadFile(ready_path_), nullptr, false);
          if (!file.is_object() || !file.contains("port") || !file["port"].is_number()) {
            ADD_FAILURE() << "malformed ready file: " << ReadFile(ready_path_);
            return true;
          }
          port_ = file["port"].get<int>();
          return true;
        },
        timeout);
    if (!ready || port_ == 0) {
      ADD_FAILURE() << "stagehand serve did not get ready; exit " << exit_code_.value_or(-1)
                    << "; log:\n"
                    << Log();
      return 0;
    }
    const bool healthy = PollUntil(
        [&] {
          httplib::Client client("127.0.0.1", port_);
          httplib::Result result = client.Get("/.backstage/health/v1/readiness");
          return result && result->status == 200;
        },
        timeout);
    if (!healthy) {
      ADD_FAILURE() << "readiness never answered 200; log:\n" << Log();
      return 0;
    }
    return port_;
  }

  int port() const { return port_; }
  const std::filesystem::path& ready_path() const { return ready_path_; }

  // Returns whether the process has exited (reaping it), recording its exit code (128 + signal
  // for a signal).
  bool Exited() {
    if (exit_code_) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return true;
  }

  // Waits for the process to exit; returns its exit code, or nullopt after `timeout`.
  std::optional<int> WaitForExit(std::chrono::milliseconds timeout = 15s) {
    PollUntil([&] { return Exited(); }, timeout);
    return exit_code_;
  }

  void Signal(int signal) const { ::kill(pid_, signal); }

 private:
  std::filesystem::path log_path_;
  std::filesystem::path ready_path_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::optional<int> exit_code_;
};

// The REST API of plugin `plugin` on a daemon's port.
class SchedulerApi {
 public:
  SchedulerApi(int port, std::string plugin, std::string token = {})
      : client_("127.0.0.1", port),
        base_("/api/" + std::move(plugin) + "/.backstage/scheduler/v1") {
    client_.set_read_timeout(5, 0);
    if (!token.empty()) client_.set_bearer_token_auth(token.c_str());
  }

  // Returns the listing, or null after a test failure.
  nlohmann::json Tasks() {
    httplib::Result result = client_.Get((base_ + "/tasks").c_str());
    if (!result || result->status != 200) {
      ADD_FAILURE() << "GET tasks failed: " << (result ? result->status : -1);
      return nullptr;
    }
    return nlohmann::json::parse(result->body);
  }

  // Returns the listing entry of `id` (null when absent).
  nlohmann::json Task(const std::string& id) {
    nlohmann::json tasks = Tasks();
    if (tasks.is_null()) return nullptr;
    for (const nlohmann::json& task : tasks["tasks"]) {
      if (task["taskId"] == id) return task;
    }
    return nullptr;
  }

  // Returns the status of POST .../tasks/<id>/<action> ("trigger" or "cancel"), -1 without one.
  int Post(const std::string& id, const std::string& action, std::string* body = nullptr) {
    httplib::Result result = client_.Post((base_ + "/tasks/" + id + "/" + action).c_str());
    if (!result) return -1;
    if (body != nullptr) *body = result->body;
    return result->status;
  }

  // Waits until the task's state shows a finished run (lastRunEndedAt) and returns the entry.
  nlohmann::json WaitForRunEnd(const std::string& id, std::chrono::milliseconds timeout = 10s) {
    nlohmann::json task;
    const bool ended = PollUntil(
        [&] {
          task = Task(id);
          return task.is_object() && task["taskState"].is_object() &&
                 task["taskState"].contains("lastRunEndedAt") &&
                 task["taskState"].value("status", "") == "idle";
        },
        timeout);
    if (!ended) ADD_FAILURE() << "task " << id << " did not finish a run: " << task.dump();
    return task;
  }

  httplib::Client& client() { return client_; }
  const std::string& base() const { return base_; }

 private:
  httplib::Client client_;
  std::string base_;
};

// A two-host fleet's check, for every database a fleet can share. The tasks block (indented for a
// plugin's `tasks:`) of one manual task `once`, whose command appends the daemon's name
// (DAEMON_NAME) to `runs_file` and then takes three seconds (the second trigger must find the run
// pending or running even when the first one answers late on a loaded machine).
inline std::string OnceTaskYaml(const std::filesystem::path& runs_file) {
  return "        once:\n"
         "          schedule: { frequency: { trigger: manual }, timeout: 30s }\n"
         "          inheritEnv: [DAEMON_NAME]\n"
         "          command: ['/bin/sh', '-c', 'echo \"$DAEMON_NAME\" >> \"" +
         runs_file.string() + "\"; sleep 3']\n";
}

// Starts daemons "a" and "b" on `config` (plugin `jobs` with OnceTaskYaml(dir / "runs")), appended
// to `daemons`, triggers `once` on a and again on b while it is pending or running, and checks that
// it ran exactly once, on either, and that both report the same state.
inline void ExpectATriggerRunsOnceOnEither(const std::filesystem::path& dir,
                                           const std::filesystem::path& config,
                                           std::vector<std::unique_ptr<DaemonProcess>>& daemons) {
  for (const char* name : {"a", "b"}) {
    daemons.push_back(std::make_unique<DaemonProcess>(
        std::vector<std::string>{config.string()}, dir / (std::string(name) + ".log"),
        std::vector<std::pair<std::string, std::string>>{{"DAEMON_NAME", name}},
        std::vector<std::string>{"--port", "0", "--log-level", "debug"}));
  }
  const int port_a = daemons[daemons.size() - 2]->WaitUntilReady();
  const int port_b = daemons.back()->WaitUntilReady();
  ASSERT_NE(port_a, 0);
  ASSERT_NE(port_b, 0);
  SchedulerApi a(port_a, "jobs");
  SchedulerApi b(port_b, "jobs");

  ASSERT_EQ(a.Post("once", "trigger"), 200);
  // A second trigger from the other host while the first is pending or running adds no run.
  const int again = b.Post("once", "trigger");
  EXPECT_TRUE(again == 200 || again == 409) << again;
  nlohmann::json seen_by_b = b.WaitForRunEnd("once", 15s);
  nlohmann::json seen_by_a = a.WaitForRunEnd("once", 5s);
  EXPECT_EQ(seen_by_a["taskState"], seen_by_b["taskState"]);

  const std::string runs = ReadFile(dir / "runs");
  EXPECT_TRUE(runs == "a\n" || runs == "b\n")
      << "runs: '" << runs << "', second trigger: " << again << "\na's log:\n"
      << ReadFile(dir / "a.log") << "\nb's log:\n"
      << ReadFile(dir / "b.log");
}

}  // namespace stagehand::daemon_test
