// What the CLI integration tests share: a latch, the daemon's config, task definitions and running
// `stagehand <args>` through RunWithContext against a backend in the test process.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <sstream>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "cli/command.h"
#include "stagehand/backend/backend.h"
#include "stagehand/cli/cli.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::cli {

inline constexpr auto kDeadline = std::chrono::seconds(20);
inline constexpr const char* kToken = "cli-integration-token";

// A one-shot event another thread waits for. Thread-safe.
class Latch {
 public:
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool WaitOpen() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kDeadline, [this] { return open_; });
  }
  bool IsOpen() {
    std::lock_guard lock(mu_);
    return open_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Returns the daemon's config: port 7007 (overridden by the tests), the `database` connection
// (in-memory SQLite by default), the token or no auth, a fast poll.
inline std::string Yaml(bool with_token, const std::string& database = "':memory:'") {
  std::string yaml =
      "backend:\n  listen: { host: 127.0.0.1, port: 7007 }\n"
      "  database: { client: better-sqlite3, connection: " +
      database + " }\n  auth:\n";
  if (with_token) {
    yaml += "    externalAccess:\n      - type: static\n        options: { token: " +
            std::string(kToken) + ", subject: cli-tests }\n";
  } else {
    yaml += "    dangerouslyDisableDefaultAuthPolicy: true\n";
  }
  yaml += "stagehand:\n  scheduler:\n    pollInterval: { milliseconds: 50 }\n";
  return yaml;
}

inline HumanDuration Minutes(double minutes) {
  HumanDuration duration;
  duration.minutes = minutes;
  return duration;
}

inline TaskDefinition Task(std::string id, Frequency frequency, TaskScope scope, TaskFunction fn,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(60000)) {
  TaskDefinition task;
  task.id = std::move(id);
  task.frequency = std::move(frequency);
  task.timeout = timeout;
  task.scope = scope;
  task.fn = std::move(fn);
  return task;
}

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `stagehand <args>` with `--url <url>` appended (unless `url` is empty), STAGEHAND_TOKEN set
// to `env_token` when given, times shown in UTC, and `stop` ending its waits.
inline Outcome RunCli(const std::vector<std::string>& args, const std::string& url,
                      const std::optional<std::string>& env_token = std::nullopt,
                      std::stop_token stop = {}) {
  std::vector<std::string> command_line{"stagehand"};
  command_line.insert(command_line.end(), args.begin(), args.end());
  if (!url.empty()) {
    command_line.emplace_back("--url");
    command_line.push_back(url);
  }
  std::ostringstream out;
  std::ostringstream err;
  const TimeZone utc = TimeZone::Utc();
  Context context(out, err, SystemClock::Instance(), &utc);
  context.environment = [env_token](const std::string& name) -> std::optional<std::string> {
    return name == "STAGEHAND_TOKEN" ? env_token : std::nullopt;
  };
  context.stop = std::move(stop);
  Outcome outcome;
  outcome.exit_code = RunWithContext(command_line, context);
  outcome.out = out.str();
  outcome.err = err.str();
  return outcome;
}

}  // namespace stagehand::cli
