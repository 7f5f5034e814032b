// Issue 17, item 5: `stagehand serve` reloads its config on SIGHUP and on POST
// /.stagehand/v1/reload: a new task starts being scheduled, a removed one stops, and a broken
// config changes nothing, is reported, and sets stagehand_config_last_reload_successful to 0.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <csignal>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon_process.h"

namespace stagehand::daemon_test {
namespace {

using ::testing::HasSubstr;

// An app-config on SQLite under `dir`, auth off, with `tasks` under stagehand.plugins.jobs.tasks.
std::string ReloadConfig(const TempDir& dir, const std::string& tasks) {
  return "backend:\n"
         "  listen: { host: 127.0.0.1, port: 7007 }\n"
         "  database:\n"
         "    client: better-sqlite3\n"
         "    connection: { directory: '" +
         (dir / "data").string() +
         "' }\n"
         "  auth: { dangerouslyDisableDefaultAuthPolicy: true }\n"
         "stagehand:\n"
         "  plugins:\n"
         "    jobs:\n"
         "      tasks:\n" +
         tasks;
}

// A task appending its name to `dir`/<id>.log every second.
std::string Ticker(const TempDir& dir, const std::string& id) {
  return "        " + id +
         ":\n          schedule: { frequency: { cron: '* * * * * *' }, timeout: 10s }\n"
         "          command: ['/bin/sh', '-c', 'echo " +
         id + " >> " + (dir / (id + ".log")).string() + "']\n";
}

std::size_t Lines(const std::filesystem::path& path) {
  const std::string text = ReadFile(path);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

double Metric(httplib::Client& client, const std::string& name) {
  httplib::Result result = client.Get("/metrics");
  if (!result || result->status != 200) return -1;
  const std::string& body = result->body;
  for (std::size_t at = body.find(name); at != std::string::npos; at = body.find(name, at + 1)) {
    if ((at == 0 || body[at - 1] == '\n') && body[at + name.size()] == ' ') {
      return std::stod(body.substr(at + name.size() + 1));
    }
  }
  return -1;
}

TEST(DaemonReloadTest, SighupAddsAndRemovesTasksAndABrokenConfigChangesNothing) {
  TempDir dir;
  const std::filesystem::path config = dir / "app-config.yaml";
  WriteFile(config, ReloadConfig(dir, Ticker(dir, "old")));
  DaemonProcess daemon({config.string()}, dir / "daemon.log");
  const int port = daemon.WaitUntilReady();
  ASSERT_NE(port, 0) << daemon.Log();
  httplib::Client client("127.0.0.1", port);
  EXPECT_EQ(Metric(client, "stagehand_config_last_reload_successful"), 1);
  ASSERT_TRUE(PollUntil([&] { return Lines(dir / "old.log") >= 1; }, 5s)) << daemon.Log();

  WriteFile(config, ReloadConfig(dir, Ticker(dir, "new")));
  daemon.Signal(SIGHUP);
  ASSERT_TRUE(PollUntil([&] { return Lines(dir / "new.log") >= 1; }, 5s)) << daemon.Log();
  EXPECT_THAT(daemon.Log(), HasSubstr("Config reloaded: added 1 (jobs/new), removed 1 (jobs/old)"));
  const std::size_t old_runs = Lines(dir / "old.log");
  const double reloaded_at =
      Metric(client, "stagehand_config_last_reload_success_timestamp_seconds");
  EXPECT_GT(reloaded_at, 0);

  WriteFile(config, ReloadConfig(dir, Ticker(dir, "new") + "        broken: { command: [] }\n"));
  daemon.Signal(SIGHUP);
  ASSERT_TRUE(
      PollUntil([&] { return Metric(client, "stagehand_config_last_reload_successful") == 0; }, 5s))
      << daemon.Log();
  EXPECT_THAT(daemon.Log(), HasSubstr("stagehand.plugins.jobs.tasks.broken"));
  EXPECT_EQ(Metric(client, "stagehand_config_last_reload_success_timestamp_seconds"), reloaded_at);
  const std::size_t new_runs = Lines(dir / "new.log");
  ASSERT_TRUE(PollUntil([&] { return Lines(dir / "new.log") > new_runs; }, 5s))
      << "the old tasks keep running after a refused reload";
  EXPECT_LE(Lines(dir / "old.log"), old_runs + 1) << "the removed task stopped";

  httplib::Result refused = client.Post("/.stagehand/v1/reload", "{}", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  const nlohmann::json problems = nlohmann::json::parse(refused->body)["problems"];
  ASSERT_TRUE(problems.is_array()) << refused->body;
  EXPECT_THAT(problems.dump(), HasSubstr("stagehand.plugins.jobs.tasks.broken"));

  WriteFile(config, ReloadConfig(dir, Ticker(dir, "new") + Ticker(dir, "old")));
  httplib::Result reloaded = client.Post("/.stagehand/v1/reload", "{}", "application/json");
  ASSERT_TRUE(reloaded);
  ASSERT_EQ(reloaded->status, 200) << reloaded->body;
  const nlohmann::json report = nlohmann::json::parse(reloaded->body);
  EXPECT_EQ(report["added"], 1) << reloaded->body;
  EXPECT_EQ(report["unchanged"], 1) << reloaded->body;
  EXPECT_EQ(Metric(client, "stagehand_config_last_reload_successful"), 1);

  std::string moved = ReloadConfig(dir, Ticker(dir, "new"));
  moved.replace(moved.find("port: 7007"), 10, "port: 7008");
  WriteFile(config, moved);
  httplib::Result restart_only = client.Post("/.stagehand/v1/reload", "{}", "application/json");
  ASSERT_TRUE(restart_only);
  EXPECT_EQ(restart_only->status, 400);
  EXPECT_THAT(restart_only->body, HasSubstr("backend.listen.port' changed"));

  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.WaitForExit(15s), 0) << daemon.Log();
}

}  // namespace
}  // namespace stagehand::daemon_test
