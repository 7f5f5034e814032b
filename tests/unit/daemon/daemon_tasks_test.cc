#include "stagehand/daemon/daemon_tasks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <variant>
#include <vector>

#include "stagehand/base/logger.h"
#include "stagehand/service/mock_scheduler.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/clock.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::Not;
using ::testing::Pair;

Config Yaml(std::string_view text) {
  Result<Config> config = Config::FromYaml(text, "app.yaml");
  EXPECT_THAT(config, IsOk());
  return config.ok() ? *config : Config::Empty();
}

std::vector<DaemonPlugin> ReadOk(std::string_view text) {
  Result<std::vector<DaemonPlugin>> plugins = ReadDaemonPlugins(Yaml(text));
  EXPECT_THAT(plugins, IsOk());
  return plugins.ok() ? *plugins : std::vector<DaemonPlugin>{};
}

// Returns the problems of a failed read, one per line.
std::vector<std::string> Problems(std::string_view text) {
  Result<std::vector<DaemonPlugin>> plugins = ReadDaemonPlugins(Yaml(text));
  EXPECT_THAT(plugins, Not(IsOk()));
  if (plugins.ok()) return {};
  EXPECT_THAT(plugins, StatusIs(StatusCode::kInvalidArgument));
  std::vector<std::string> lines;
  std::string_view rest = plugins.status().message();
  while (true) {
    const std::size_t newline = rest.find('\n');
    lines.emplace_back(rest.substr(0, newline));
    if (newline == std::string_view::npos) break;
    rest.remove_prefix(newline + 1);
  }
  return lines;
}

TEST(ReadDaemonPluginsTest, NoBlockMeansNoPlugins) {
  EXPECT_TRUE(ReadOk("backend: {listen: {port: 7007}}").empty());
  EXPECT_TRUE(ReadOk("stagehand: {server: {}}").empty());
}

TEST(ReadDaemonPluginsTest, ReadsCommandTaskWithEnvAndWorkingDirectory) {
  std::vector<DaemonPlugin> plugins = ReadOk(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        hello:
          schedule: { frequency: { cron: '*/5 * * * * *' }, timeout: 30s, initialDelay: 5s, scope: global }
          command: ['/bin/sh', '-c', 'echo hello']
          env: { GREETING: hi, PORT: 8080, RATIO: 0.5, VERBOSE: true, EMPTY: '' }
          workingDirectory: /srv
)");
  ASSERT_EQ(plugins.size(), 1u);
  EXPECT_EQ(plugins[0].id, "jobs");
  ASSERT_EQ(plugins[0].tasks.size(), 1u);
  const DaemonTask& task = plugins[0].tasks[0];
  EXPECT_EQ(task.id, "hello");
  EXPECT_EQ(std::get<CronFrequency>(task.schedule.frequency).expression, "*/5 * * * * *");
  EXPECT_EQ(ToMilliseconds(task.schedule.timeout), std::chrono::seconds(30));
  ASSERT_TRUE(task.schedule.initial_delay.has_value());
  EXPECT_EQ(ToMilliseconds(*task.schedule.initial_delay), std::chrono::seconds(5));
  EXPECT_EQ(task.schedule.scope, TaskScope::kGlobal);
  const auto& command = std::get<CommandSpec>(task.executor);
  EXPECT_THAT(command.argv, ElementsAre("/bin/sh", "-c", "echo hello"));
  EXPECT_THAT(command.env,
              ElementsAre(Pair("EMPTY", ""), Pair("GREETING", "hi"), Pair("PORT", "8080"),
                          Pair("RATIO", "0.5"), Pair("VERBOSE", "true")));
  EXPECT_EQ(command.working_directory, "/srv");
  EXPECT_EQ(command.task_id, "hello");
}

TEST(ReadDaemonPluginsTest, InheritEnvOfTheTaskReplacesThePluginDefault) {
  std::vector<DaemonPlugin> plugins = ReadOk(R"(
stagehand:
  plugins:
    jobs:
      inheritEnv: [AWS_REGION, _CACHE_DIR]
      tasks:
        default:
          schedule: { frequency: 1m, timeout: 10s }
          command: [date]
        own:
          schedule: { frequency: 1m, timeout: 10s }
          command: [date]
          inheritEnv: [PGPASSWORD]
        none:
          schedule: { frequency: 1m, timeout: 10s }
          command: [date]
          inheritEnv: []
    other:
      tasks:
        plain:
          schedule: { frequency: 1m, timeout: 10s }
          command: [date]
)");
  ASSERT_EQ(plugins.size(), 2u);
  ASSERT_EQ(plugins[0].tasks.size(), 3u);
  EXPECT_THAT(std::get<CommandSpec>(plugins[0].tasks[0].executor).inherit_env,
              ElementsAre("AWS_REGION", "_CACHE_DIR"));
  EXPECT_THAT(std::get<CommandSpec>(plugins[0].tasks[1].executor).inherit_env,
              ElementsAre("PGPASSWORD"));
  EXPECT_TRUE(std::get<CommandSpec>(plugins[0].tasks[2].executor).inherit_env.empty());
  ASSERT_EQ(plugins[1].tasks.size(), 1u);
  EXPECT_TRUE(std::get<CommandSpec>(plugins[1].tasks[0].executor).inherit_env.empty());
}

TEST(ReadDaemonPluginsTest, InheritEnvErrorsNameTheKey) {
  EXPECT_THAT(
      Problems(R"(
stagehand:
  plugins:
    jobs:
      inheritEnv: [GOOD, 'BAD-NAME']
      tasks:
        bad-name:
          schedule: { frequency: 1m, timeout: 10s }
          command: [date]
          inheritEnv: ['1ST', 'A=B', OK]
        not-array:
          schedule: { frequency: 1m, timeout: 10s }
          command: [date]
          inheritEnv: PGPASSWORD
        on-http:
          schedule: { frequency: 1m, timeout: 10s }
          http: { url: 'http://127.0.0.1/' }
          inheritEnv: [HOME]
    other:
      inheritEnv: { A: b }
      inheritEnvs: [A]
)"),
      ElementsAre(
          "Invalid config value for key 'stagehand.plugins.jobs.inheritEnv' in 'app.yaml': "
          "'BAD-NAME' is not an environment variable name (a letter or '_', then letters, digits "
          "and '_')",
          "Invalid config value for key 'stagehand.plugins.jobs.tasks.bad-name.inheritEnv' in "
          "'app.yaml': '1ST' is not an environment variable name (a letter or '_', then letters, "
          "digits and '_')",
          "Invalid config value for key 'stagehand.plugins.jobs.tasks.bad-name.inheritEnv' in "
          "'app.yaml': 'A=B' is not an environment variable name (a letter or '_', then letters, "
          "digits and '_')",
          "Invalid type in config for key 'stagehand.plugins.jobs.tasks.not-array.inheritEnv' in "
          "'app.yaml', got string, wanted string-array",
          "Invalid config value for key 'stagehand.plugins.jobs.tasks.on-http.inheritEnv' in "
          "'app.yaml': inheritEnv applies only to command tasks",
          "Invalid config value for key 'stagehand.plugins.other.inheritEnvs' in 'app.yaml': "
          "unknown key 'inheritEnvs'; did you mean 'inheritEnv'?",
          "Invalid type in config for key 'stagehand.plugins.other.inheritEnv' in 'app.yaml', got "
          "object, wanted string-array"));
}

TEST(ReadDaemonPluginsTest, ReadsEveryScheduleForm) {
  std::vector<DaemonPlugin> plugins = ReadOk(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        cron-zoned:
          schedule: { frequency: { cron: '0 9 * * mon-fri', timeZone: Europe/Berlin }, timeout: { minutes: 5 } }
          command: [date]
        interval-object:
          schedule: { frequency: { minutes: 1 }, timeout: 10s, scope: local }
          command: [date]
        interval-string:
          schedule: { frequency: 1h, timeout: PT30S }
          command: [date]
        manual:
          schedule: { frequency: { trigger: manual }, timeout: 1m }
          command: [date]
    other-plugin-2:
      tasks: {}
    no-tasks: {}
)");
  ASSERT_EQ(plugins.size(), 3u);
  EXPECT_EQ(plugins[1].id, "other-plugin-2");
  EXPECT_TRUE(plugins[1].tasks.empty());
  EXPECT_EQ(plugins[2].id, "no-tasks");
  const std::vector<DaemonTask>& tasks = plugins[0].tasks;
  ASSERT_EQ(tasks.size(), 4u);
  EXPECT_EQ(tasks[0].id, "cron-zoned");
  EXPECT_EQ(std::get<CronFrequency>(tasks[0].schedule.frequency),
            (CronFrequency{"0 9 * * mon-fri", "Europe/Berlin"}));
  EXPECT_EQ(BuildTaskSettings(tasks[0].schedule)->timeout_after_duration, "PT5M");
  EXPECT_EQ(BuildTaskSettings(tasks[1].schedule)->cadence.text(), "PT1M");
  EXPECT_EQ(tasks[1].schedule.scope, TaskScope::kLocal);
  EXPECT_EQ(BuildTaskSettings(tasks[2].schedule)->cadence.text(), "PT1H");
  EXPECT_EQ(ToMilliseconds(tasks[2].schedule.timeout), std::chrono::seconds(30));
  EXPECT_TRUE(std::holds_alternative<ManualFrequency>(tasks[3].schedule.frequency));
  EXPECT_EQ(BuildTaskSettings(tasks[3].schedule)->cadence.text(), "manual");
}

TEST(ReadDaemonPluginsTest, ReadsHttpTaskWithTimeoutsFromTheTaskTimeout) {
  std::vector<DaemonPlugin> plugins = ReadOk(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        hook:
          schedule: { frequency: { minutes: 1 }, timeout: 2s }
          http:
            url: 'http://127.0.0.1:8080/hook?x=1'
            method: put
            headers: { Content-Type: application/json, X-Count: 3 }
            body: '{"a":1}'
            expectStatus: 204
            maxResponseBytes: 4096
            includeBodyInError: true
        defaults:
          schedule: { frequency: { minutes: 1 }, timeout: 1m }
          http: { url: 'http://localhost/' }
)");
  ASSERT_EQ(plugins.size(), 1u);
  ASSERT_EQ(plugins[0].tasks.size(), 2u);
  const auto& hook = std::get<HttpTaskSpec>(plugins[0].tasks[0].executor);
  EXPECT_EQ(hook.url, "http://127.0.0.1:8080/hook?x=1");
  EXPECT_EQ(hook.method, "PUT");
  EXPECT_THAT(hook.headers,
              ElementsAre(Pair("Content-Type", "application/json"), Pair("X-Count", "3")));
  EXPECT_EQ(hook.body, R"({"a":1})");
  EXPECT_EQ(hook.expect_status, 204);
  EXPECT_EQ(hook.total_timeout, std::chrono::seconds(2));
  EXPECT_EQ(hook.connect_timeout, std::chrono::seconds(2));
  EXPECT_EQ(hook.task_id, "hook");
  EXPECT_EQ(hook.max_response_bytes, 4096U);
  EXPECT_TRUE(hook.include_body_in_error);

  const auto& defaults = std::get<HttpTaskSpec>(plugins[0].tasks[1].executor);
  EXPECT_EQ(defaults.method, "POST");
  EXPECT_TRUE(defaults.headers.empty());
  EXPECT_EQ(defaults.body, "");
  EXPECT_FALSE(defaults.expect_status.has_value());
  EXPECT_EQ(defaults.total_timeout, std::chrono::minutes(1));
  EXPECT_EQ(defaults.connect_timeout, std::chrono::seconds(5));
  EXPECT_EQ(defaults.max_response_bytes, std::size_t{1024} * 1024);
  EXPECT_FALSE(defaults.include_body_in_error);
}

TEST(ReadDaemonPluginsTest, UnknownTaskKeyIsNamedWithTheKeyMeant) {
  EXPECT_THAT(
      Problems(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        hello:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          comand: [date]
)"),
      ElementsAre("Invalid config value for key 'stagehand.plugins.jobs.tasks.hello.comand' "
                  "in 'app.yaml': unknown key 'comand'; did you mean 'command'?",
                  "Invalid config value for key 'stagehand.plugins.jobs.tasks.hello' in "
                  "'app.yaml': a task needs an executor: 'command' (the program and its "
                  "arguments) or 'http' ({url, method, headers, body, expectStatus, "
                  "maxResponseBytes, includeBodyInError})"));
}

TEST(ReadDaemonPluginsTest, BothExecutorsIsAnError) {
  EXPECT_THAT(Problems(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        hello:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          command: [date]
          http: { url: 'http://localhost/' }
)"),
              ElementsAre("Invalid config value for key 'stagehand.plugins.jobs.tasks.hello' in "
                          "'app.yaml': a task has exactly one executor, but both 'command' and "
                          "'http' are set"));
}

TEST(ReadDaemonPluginsTest, ScheduleErrorsCarryBackstagesMessageAfterTheKey) {
  EXPECT_THAT(
      Problems(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        missing:
          command: [date]
        bad-duration:
          schedule: { frequency: 1m 3s, timeout: 10s }
          command: [date]
        bad-scope:
          schedule: { frequency: { minutes: 1 }, timeout: 10s, scope: everywhere }
          command: [date]
        no-timeout:
          schedule: { frequency: { minutes: 1 } }
          command: [date]
        bad-cron:
          schedule: { frequency: { cron: '*/0 * * * *' }, timeout: 10s }
          command: [date]
        wrong-type:
          schedule: { frequency: { minutes: 1 }, timeout: 10s, scope: 3 }
          command: [date]
)"),
      ElementsAre(
          "Missing required config value at 'stagehand.plugins.jobs.tasks.missing.schedule' in "
          "'app.yaml'",
          "Invalid config value for key 'stagehand.plugins.jobs.tasks.bad-duration.schedule' in "
          "'app.yaml': Invalid duration '1m 3s' in config at 'frequency', Error: Not a valid "
          "duration string, try a number followed by a unit such as '1d' or '2 seconds'",
          "Invalid config value for key 'stagehand.plugins.jobs.tasks.bad-scope.schedule' in "
          "'app.yaml': Only \"global\" or \"local\" are allowed for "
          "TaskScheduleDefinition.scope, but got: everywhere",
          "Failed to read duration from config, Error: Missing required config value at "
          "'stagehand.plugins.jobs.tasks.no-timeout.schedule.timeout' in 'app.yaml'",
          "Invalid cron expression at 'stagehand.plugins.jobs.tasks.bad-cron.schedule.frequency."
          "cron' in 'app.yaml': Field (minute) has a step of zero",
          "Invalid type in config for key 'stagehand.plugins.jobs.tasks.wrong-type.schedule.scope' "
          "in 'app.yaml', got number, wanted string"));
}

TEST(ReadDaemonPluginsTest, CommandErrors) {
  EXPECT_THAT(
      Problems(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        empty:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          command: []
        not-array:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          command: 'echo hello'
        number-arg:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          command: [sleep, 5]
        bad-env:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          command: [date]
          env: { LIST: [a, b] }
          workingDirectory: 7
)"),
      ElementsAre(
          "Invalid config value for key 'stagehand.plugins.jobs.tasks.empty.command' in "
          "'app.yaml': the command is empty; give the program and its arguments, e.g. "
          "['/bin/sh', '-c', 'echo hello']",
          "Invalid type in config for key 'stagehand.plugins.jobs.tasks.not-array.command' in "
          "'app.yaml', got string, wanted string-array",
          "Invalid type in config for key 'stagehand.plugins.jobs.tasks.number-arg.command[1]' in "
          "'app.yaml', got number, wanted string-array",
          "Invalid type in config for key 'stagehand.plugins.jobs.tasks.bad-env.env.LIST' in "
          "'app.yaml', got array, wanted string",
          "Invalid type in config for key 'stagehand.plugins.jobs.tasks.bad-env.workingDirectory' "
          "in 'app.yaml', got number, wanted string"));
}

TEST(ReadDaemonPluginsTest, HttpErrors) {
  EXPECT_THAT(
      Problems(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        bad-values:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          http: { url: 'ftp://example.com/', method: 'GE T', expectStatus: 2000, body: 5, timeot: 1 }
        bad-bounds:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          http: { url: 'http://localhost/', maxResponseBytes: -1, includeBodyInError: 3 }
        no-url:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          http: { method: GET }
          env: { A: b }
          workingDirectory: /tmp
        not-object:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          http: 'http://localhost/'
)"),
      ElementsAre(
          "Invalid config value for key 'stagehand.plugins.jobs.tasks.bad-values.http.timeot' in "
          "'app.yaml': unknown key 'timeot'; expected url, method, headers, body, expectStatus, "
          "maxResponseBytes, includeBodyInError",
          "Invalid config value for key 'stagehand.plugins.jobs.tasks.bad-values.http.url' in "
          "'app.yaml': " +
              ParseHttpTaskUrl("ftp://example.com/").status().message(),
          "Invalid config value for key 'stagehand.plugins.jobs.tasks.bad-values.http.method' in "
          "'app.yaml': 'GE T' is not an HTTP method, e.g. GET or POST",
          "Invalid type in config for key 'stagehand.plugins.jobs.tasks.bad-values.http.body' in "
          "'app.yaml', got number, wanted string",
          "Invalid config value for key "
          "'stagehand.plugins.jobs.tasks.bad-values.http.expectStatus' in 'app.yaml': 2000 is not "
          "an HTTP status (an integer in 100..599)",
          "Invalid config value for key "
          "'stagehand.plugins.jobs.tasks.bad-bounds.http.maxResponseBytes' in 'app.yaml': -1 is "
          "not a byte count in 0..1073741824",
          "Unable to convert config value for key "
          "'stagehand.plugins.jobs.tasks.bad-bounds.http.includeBodyInError' in 'app.yaml' to a "
          "boolean",
          "Invalid config value for key 'stagehand.plugins.jobs.tasks.no-url.env' in 'app.yaml': "
          "env applies only to command tasks",
          "Invalid config value for key 'stagehand.plugins.jobs.tasks.no-url.workingDirectory' in "
          "'app.yaml': workingDirectory applies only to command tasks",
          "Missing required config value at 'stagehand.plugins.jobs.tasks.no-url.http.url' in "
          "'app.yaml'",
          "Invalid type in config for key 'stagehand.plugins.jobs.tasks.not-object.http' in "
          "'app.yaml', got string, wanted object"));
}

TEST(ReadDaemonPluginsTest, PluginAndTaskIdErrors) {
  EXPECT_THAT(
      Problems(R"(
stagehand:
  plugins:
    Jobs: { tasks: {} }
    2jobs: { tasks: {} }
    my_jobs: { tasks: {} }
    good:
      task: {}
      tasks:
        ' ':
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          command: [date]
        a.b:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          command: [date]
        scalar: 5
    worse: [1]
    tasks-not-object: { tasks: [1] }
)"),
      ElementsAre(
          "Invalid config value for key 'stagehand.plugins' in 'app.yaml': 'Jobs' is not a valid "
          "plugin id; use lowercase letters, digits and dashes, starting with a letter "
          "(e.g. 'jobs', 'nightly-reports')",
          "Invalid config value for key 'stagehand.plugins' in 'app.yaml': '2jobs' is not a valid "
          "plugin id; use lowercase letters, digits and dashes, starting with a letter "
          "(e.g. 'jobs', 'nightly-reports')",
          "Invalid config value for key 'stagehand.plugins' in 'app.yaml': 'my_jobs' is not a "
          "valid plugin id; use lowercase letters, digits and dashes, starting with a letter "
          "(e.g. 'jobs', 'nightly-reports')",
          "Invalid config value for key 'stagehand.plugins.good.task' in 'app.yaml': unknown key "
          "'task'; did you mean 'tasks'?",
          "Invalid config value for key 'stagehand.plugins.good.tasks' in 'app.yaml': task id ' ': "
          "  is not a valid ID, expected non-empty string",
          "Invalid config value for key 'stagehand.plugins.good.tasks' in 'app.yaml': task id "
          "'a.b' cannot contain '.'",
          "Invalid type in config for key 'stagehand.plugins.good.tasks.scalar' in 'app.yaml', got "
          "number, wanted object",
          "Invalid type in config for key 'stagehand.plugins.worse' in 'app.yaml', got array, "
          "wanted object",
          "Invalid type in config for key 'stagehand.plugins.tasks-not-object.tasks' in "
          "'app.yaml', got array, wanted object"));
}

TEST(ReadDaemonPluginsTest, ProblemsNameTheFileEachValueCameFrom) {
  Result<Config> base = Config::FromYaml(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        hello:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          command: [date]
)",
                                         "base.yaml");
  Result<Config> overlay = Config::FromYaml(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        hello:
          http: { url: 'http://localhost/' }
)",
                                            "overlay.yaml");
  ASSERT_TRUE(base.ok() && overlay.ok());
  Result<std::vector<DaemonPlugin>> plugins = ReadDaemonPlugins(Config::Merge({*base, *overlay}));
  ASSERT_THAT(plugins, Not(IsOk()));
  EXPECT_THAT(plugins.status().message(), ::testing::HasSubstr("in 'overlay.yaml'"));
  EXPECT_THAT(plugins.status().message(), ::testing::HasSubstr("both 'command' and 'http'"));
}

TEST(ReadDaemonPluginsTest, StagehandPluginsMustBeAnObject) {
  EXPECT_THAT(Problems("stagehand: { plugins: [jobs] }"),
              ElementsAre("Invalid type in config for key 'stagehand.plugins' in 'app.yaml', got "
                          "array, wanted object"));
}

// Issue 13: `frequency: 0s` and `frequency: {minutes: -1}` passed and the daemon ran the task
// without pause.
TEST(ReadDaemonPluginsTest, SchedulesThatCannotWorkAreRejectedNamingTheKey) {
  const std::string key = "Invalid config value for key 'stagehand.plugins.jobs.tasks.";
  EXPECT_THAT(Problems(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        zero:
          schedule: { frequency: 0s, timeout: 10s }
          command: [date]
        negative:
          schedule: { frequency: { minutes: -1 }, timeout: 10s }
          command: [date]
        iso:
          schedule: { frequency: PT0S, timeout: PT0S }
          command: [date]
        delay:
          schedule: { frequency: 1m, timeout: { seconds: 0 }, initialDelay: PT-1S }
          command: [date]
        feb31:
          schedule: { frequency: { cron: '0 0 31 2 *' }, timeout: 10s }
          command: [date]
)"),
              ElementsAre(key + "zero.schedule.frequency' in 'app.yaml': must be longer than "
                                "zero, got PT0S",
                          key + "negative.schedule.frequency' in 'app.yaml': must be longer than "
                                "zero, got PT-1M",
                          key + "iso.schedule.frequency' in 'app.yaml': must be longer than zero, "
                                "got PT0S",
                          key + "iso.schedule.timeout' in 'app.yaml': must be longer than zero, "
                                "got PT0S",
                          key + "delay.schedule.timeout' in 'app.yaml': must be longer than zero, "
                                "got PT0S",
                          key + "delay.schedule.initialDelay' in 'app.yaml': cannot be negative, "
                                "got PT-1S",
                          "Invalid cron expression at "
                          "'stagehand.plugins.jobs.tasks.feb31.schedule.frequency.cron' in "
                          "'app.yaml': Something went wrong. No execution date was found in the "
                          "next 8 years."));
}

TEST(ReadDaemonPluginsTest, ZeroInitialDelayMeansNoDelay) {
  std::vector<DaemonPlugin> plugins = ReadOk(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        now:
          schedule: { frequency: 1m, timeout: 10s, initialDelay: 0s }
          command: [date]
)");
  ASSERT_EQ(plugins.size(), 1u);
  ASSERT_TRUE(plugins[0].tasks[0].schedule.initial_delay.has_value());
  EXPECT_EQ(ToMilliseconds(*plugins[0].tasks[0].schedule.initial_delay),
            std::chrono::milliseconds(0));
}

// Issue 13: a misspelt key inside `schedule` was ignored and the task ran with the default.
TEST(ReadDaemonPluginsTest, TyposInsideTheScheduleNameTheKeyMeant) {
  const std::string key = "Invalid config value for key 'stagehand.plugins.jobs.tasks.";
  EXPECT_THAT(
      Problems(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        delayed:
          schedule: { frequency: 1m, timeout: 10s, intialDelay: 1m }
          command: [date]
        zoned:
          schedule: { frequency: { cron: '0 3 * * *' }, timeZone: Europe/Berlin, timeout: 10s }
          command: [date]
        every:
          schedule: { frequency: { minuts: 5 }, timeout: { secnds: 30 } }
          command: [date]
)"),
      ElementsAre(key + "delayed.schedule.intialDelay' in 'app.yaml': unknown key "
                        "'intialDelay'; did you mean 'initialDelay'?",
                  key + "zoned.schedule.timeZone' in 'app.yaml': unknown key 'timeZone'; did you "
                        "mean 'frequency.timeZone'?",
                  key + "every.schedule.frequency.minuts' in 'app.yaml': unknown key 'minuts'; "
                        "did you mean 'minutes'?",
                  key + "every.schedule.timeout.secnds' in 'app.yaml': unknown key 'secnds'; did "
                        "you mean 'seconds'?"));
}

TEST(ReadDaemonPluginsTest, UnknownKeysFarFromAnyKnownOneListTheExpectedKeys) {
  EXPECT_THAT(Problems(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        hello:
          schedule: { frequency: 1m, timeout: 10s, owners: 3 }
          command: [date]
          priority: high
)"),
              ElementsAre("Invalid config value for key "
                          "'stagehand.plugins.jobs.tasks.hello.priority' in 'app.yaml': unknown "
                          "key 'priority'; expected schedule, command, http, env, "
                          "inheritEnv, workingDirectory",
                          "Invalid config value for key "
                          "'stagehand.plugins.jobs.tasks.hello.schedule.owners' in 'app.yaml': "
                          "unknown key 'owners'; expected frequency, timeout, initialDelay, "
                          "scope, catchupWindow, jitter, retry"));
}

TEST(ValidatePluginIdTest, AcceptsBackstageStyleIds) {
  for (const char* id : {"a", "jobs", "my-jobs-2", "a1b2", "x-1", "a-", "a--b"}) {
    EXPECT_THAT(ValidatePluginId(id), IsOk()) << id;
  }
  for (const char* id : {"", "A", "1a", "-a", "a_b", "a.b", "a b", "jöbs", "aB"}) {
    EXPECT_THAT(ValidatePluginId(id), StatusIs(StatusCode::kInvalidArgument)) << id;
  }
}

TEST(MakeDaemonBackendPluginTest, InitSchedulesEveryTaskAndRunsCommands) {
  std::vector<DaemonPlugin> plugins = ReadOk(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        ok:
          schedule: { frequency: { cron: '*/10 * * * * *' }, timeout: 10s }
          command: ['/bin/sh', '-c', 'test "$GREETING" = hi']
          env: { GREETING: hi }
        fails:
          schedule: { frequency: { trigger: manual }, timeout: 10s, scope: local }
          command: ['/bin/sh', '-c', 'echo boom >&2; exit 3']
)");
  ASSERT_EQ(plugins.size(), 1u);
  BackendPlugin plugin = MakeDaemonBackendPlugin(plugins[0], SystemClock::Instance());
  EXPECT_EQ(plugin.id, "jobs");

  testing::MockScheduler scheduler;
  PluginServices services;
  services.plugin_id = "jobs";
  services.logger = NullLogger();
  services.scheduler = &scheduler;
  ASSERT_THAT(plugin.init(services), IsOk());

  std::vector<TaskDescriptor> tasks = scheduler.GetScheduledTasks();
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].id, "ok");
  EXPECT_EQ(tasks[0].scope, TaskScope::kGlobal);
  EXPECT_EQ(tasks[0].settings.cadence.text(), "*/10 * * * * *");
  EXPECT_EQ(tasks[1].id, "fails");
  EXPECT_EQ(tasks[1].scope, TaskScope::kLocal);
  EXPECT_EQ(tasks[1].settings.cadence.text(), "manual");

  std::shared_future<Status> ok_run = scheduler.WaitForTask("ok");
  ASSERT_THAT(scheduler.TriggerTask("ok"), IsOk());
  EXPECT_THAT(ok_run.get(), IsOk());

  std::shared_future<Status> failed_run = scheduler.WaitForTask("fails");
  ASSERT_THAT(scheduler.TriggerTask("fails"), IsOk());
  EXPECT_THAT(failed_run.get(), StatusIs(StatusCode::kUnavailable, "3"));
  EXPECT_THAT(failed_run.get().message(), ::testing::HasSubstr("boom"));
}

// A scheduler that refuses every task, to see the init name the task.
class RefusingScheduler final : public SchedulerService {
 public:
  Status ScheduleTask(TaskDefinition) override { return ConflictError("already registered"); }
  Status TriggerTask(std::string_view) override { return Status::Ok(); }
  using SchedulerService::TriggerTask;
  Status CancelTask(std::string_view) override { return Status::Ok(); }
  std::vector<TaskDescriptor> GetScheduledTasks() const override { return {}; }
  Result<std::vector<TaskListing>> ListTasks() const override { return std::vector<TaskListing>{}; }
};

TEST(MakeDaemonBackendPluginTest, InitFailsNamingTheRefusedTask) {
  std::vector<DaemonPlugin> plugins = ReadOk(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        hello:
          schedule: { frequency: { minutes: 1 }, timeout: 10s }
          command: [date]
)");
  ASSERT_EQ(plugins.size(), 1u);
  BackendPlugin plugin = MakeDaemonBackendPlugin(plugins[0], SystemClock::Instance());
  RefusingScheduler scheduler;
  PluginServices services;
  services.scheduler = &scheduler;
  Status status = plugin.init(services);
  EXPECT_THAT(status, StatusIs(StatusCode::kConflict));
  EXPECT_EQ(status.message(), "task 'hello': already registered");
}

}  // namespace
}  // namespace stagehand
