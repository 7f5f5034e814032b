#include "stagehand/daemon/daemon_tasks.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "stagehand/backend/schedule_config.h"
#include "stagehand/base/check.h"
#include "stagehand/config/config_problems.h"
#include "stagehand/service/scheduler.h"

namespace stagehand {
namespace {

constexpr std::string_view kPluginsKey = "stagehand.plugins";
constexpr std::array<std::string_view, 2> kPluginKeys = {"tasks", "inheritEnv"};
constexpr std::array<std::string_view, 6> kTaskKeys = {
    "schedule", "command", "http", "env", "inheritEnv", "workingDirectory"};
constexpr std::array<std::string_view, 7> kHttpKeys = {
    "url", "method", "headers", "body", "expectStatus", "maxResponseBytes", "includeBodyInError"};
// The largest `maxResponseBytes`: a run holds up to this much of a response in memory.
constexpr double kMaxHttpResponseBytes = 1024.0 * 1024 * 1024;
constexpr std::chrono::milliseconds kMaxHttpConnectTimeout{5000};

// Returns the text of a scalar (a string, a number or a boolean) the way it reads in YAML, or
// nullopt after adding a type problem.
std::optional<std::string> ReadScalarText(const Config& config, std::string_view key,
                                          ConfigProblems& problems) {
  const ConfigNode* node = config.Node(key);
  if (node == nullptr) {
    return std::nullopt;
  }
  if (const auto* text = std::get_if<std::string>(&node->value)) {
    return *text;
  }
  if (const auto* flag = std::get_if<bool>(&node->value)) {
    return std::string(*flag ? "true" : "false");
  }
  if (const auto* number = std::get_if<double>(&node->value);
      number != nullptr && std::isfinite(*number)) {
    if (std::trunc(*number) == *number && std::fabs(*number) < 1e15) {
      return fmt::format("{}", static_cast<long long>(*number));
    }
    return fmt::format("{}", *number);
  }
  problems.Add(fmt::format("Invalid type in config for key '{}' in '{}', got {}, wanted string",
                           config.FullKey(key), config.Context(key), node->TypeName()));
  return std::nullopt;
}

// Reads an object of scalars (`env`, `headers`) at `key`.
std::map<std::string, std::string> ReadStringMap(const Config& config, std::string_view key,
                                                 ConfigProblems& problems) {
  std::map<std::string, std::string> values;
  Result<std::optional<Config>> block = config.GetOptionalConfig(key);
  if (!block.ok()) {
    problems.Add(block.status());
    return values;
  }
  if (!*block) {
    return values;
  }
  const Config& map = **block;
  for (const std::string& name : map.Keys()) {
    if (name.empty() || name.find('.') != std::string::npos) {
      problems.Add(
          InvalidConfigValue(config, key, fmt::format("the name '{}' is not valid here", name)));
      continue;
    }
    if (std::optional<std::string> value = ReadScalarText(map, name, problems)) {
      values[name] = *value;
    }
  }
  return values;
}

bool IsHttpMethod(std::string_view method) {
  return !method.empty() && std::all_of(method.begin(), method.end(), [](char c) {
    return std::isalpha(static_cast<unsigned char>(c)) != 0;
  });
}

// Reads the list of environment variable names at `key` (`inheritEnv`); nullopt when it is absent
// or after adding a problem for its type or for each name that is not a variable name.
std::optional<std::vector<std::string>> ReadInheritEnv(const Config& config, std::string_view key,
                                                       ConfigProblems& problems) {
  if (!config.Has(key)) {
    return std::nullopt;
  }
  Result<std::vector<std::string>> names = config.GetStringArray(key);
  if (!names.ok()) {
    problems.Add(names.status());
    return std::nullopt;
  }
  bool ok = true;
  for (const std::string& name : *names) {
    if (!IsEnvironmentName(name)) {
      problems.Add(InvalidConfigValue(
          config, key,
          fmt::format("'{}' is not an environment variable name (a letter or '_', then letters, "
                      "digits and '_')",
                      name)));
      ok = false;
    }
  }
  if (!ok) {
    return std::nullopt;
  }
  return *std::move(names);
}

// Reads a command task; `inherit_env` is the plugin's default for `inheritEnv`.
std::optional<CommandSpec> ReadCommand(const Config& task,
                                       const std::vector<std::string>& inherit_env,
                                       ConfigProblems& problems) {
  CommandSpec spec;
  bool ok = true;
  Result<std::vector<std::string>> argv = task.GetStringArray("command");
  if (!argv.ok()) {
    problems.Add(argv.status());
    ok = false;
  } else if (argv->empty()) {
    problems.Add(
        InvalidConfigValue(task, "command",
                           "the command is empty; give the program and its arguments, e.g. "
                           "['/bin/sh', '-c', 'echo hello']"));
    ok = false;
  } else {
    spec.argv = *std::move(argv);
  }
  spec.env = ReadStringMap(task, "env", problems);
  if (task.Has("inheritEnv")) {
    std::optional<std::vector<std::string>> names = ReadInheritEnv(task, "inheritEnv", problems);
    ok = ok && names.has_value();
    spec.inherit_env = names.value_or(std::vector<std::string>{});
  } else {
    spec.inherit_env = inherit_env;
  }
  Result<std::optional<std::string>> directory = task.GetOptionalString("workingDirectory");
  if (!directory.ok()) {
    problems.Add(directory.status());
    ok = false;
  } else if (*directory) {
    spec.working_directory = **directory;
  }
  if (!ok) {
    return std::nullopt;
  }
  return spec;
}

std::optional<HttpTaskSpec> ReadHttp(const Config& task, ConfigProblems& problems) {
  if (task.Has("env")) {
    problems.Add(InvalidConfigValue(task, "env", "env applies only to command tasks"));
  }
  if (task.Has("inheritEnv")) {
    problems.Add(
        InvalidConfigValue(task, "inheritEnv", "inheritEnv applies only to command tasks"));
  }
  if (task.Has("workingDirectory")) {
    problems.Add(InvalidConfigValue(task, "workingDirectory",
                                    "workingDirectory applies only to command tasks"));
  }
  Result<Config> http = task.GetConfig("http");
  if (!http.ok()) {
    problems.Add(http.status());
    return std::nullopt;
  }
  AddUnknownKeys(*http, kHttpKeys, problems);
  HttpTaskSpec spec;
  bool ok = true;
  Result<std::string> url = http->GetString("url");
  if (!url.ok()) {
    problems.Add(url.status());
    ok = false;
  } else if (Result<HttpTaskUrl> parsed = ParseHttpTaskUrl(*url); !parsed.ok()) {
    problems.Add(InvalidConfigValue(*http, "url", parsed.status().message()));
    ok = false;
  } else {
    spec.url = *url;
  }
  Result<std::optional<std::string>> method = http->GetOptionalString("method");
  if (!method.ok()) {
    problems.Add(method.status());
    ok = false;
  } else if (*method) {
    if (!IsHttpMethod(**method)) {
      problems.Add(InvalidConfigValue(
          *http, "method", fmt::format("'{}' is not an HTTP method, e.g. GET or POST", **method)));
      ok = false;
    } else {
      spec.method = **method;
      std::transform(spec.method.begin(), spec.method.end(), spec.method.begin(), [](char c) {
        return static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      });
    }
  }
  spec.headers = ReadStringMap(*http, "headers", problems);
  for (const auto& [name, value] : spec.headers) {
    if (value.find_first_of("\r\n") != std::string::npos) {
      problems.Add(InvalidConfigValue(*http, "headers",
                                      fmt::format("the header '{}' has a line break", name)));
      ok = false;
    }
  }
  if (http->Has("body")) {
    const ConfigNode* body = http->Node("body");
    if (const auto* text = std::get_if<std::string>(&body->value)) {
      spec.body = *text;
    } else {
      problems.Add(fmt::format("Invalid type in config for key '{}' in '{}', got {}, wanted string",
                               http->FullKey("body"), http->Context("body"), body->TypeName()));
      ok = false;
    }
  }
  Result<std::optional<double>> expect = http->GetOptionalNumber("expectStatus");
  if (!expect.ok()) {
    problems.Add(expect.status());
    ok = false;
  } else if (*expect) {
    const double status = **expect;
    if (std::trunc(status) != status || status < 100 || status > 599) {
      problems.Add(InvalidConfigValue(
          *http, "expectStatus",
          fmt::format("{} is not an HTTP status (an integer in 100..599)", status)));
      ok = false;
    } else {
      spec.expect_status = static_cast<int>(status);
    }
  }
  Result<std::optional<double>> max_bytes = http->GetOptionalNumber("maxResponseBytes");
  if (!max_bytes.ok()) {
    problems.Add(max_bytes.status());
    ok = false;
  } else if (*max_bytes) {
    const double bytes = **max_bytes;
    if (std::trunc(bytes) != bytes || bytes < 0 || bytes > kMaxHttpResponseBytes) {
      problems.Add(InvalidConfigValue(
          *http, "maxResponseBytes",
          fmt::format("{} is not a byte count in 0..{}", bytes, kMaxHttpResponseBytes)));
      ok = false;
    } else {
      spec.max_response_bytes = static_cast<std::size_t>(bytes);
    }
  }
  Result<std::optional<bool>> include_body = http->GetOptionalBoolean("includeBodyInError");
  if (!include_body.ok()) {
    problems.Add(include_body.status());
    ok = false;
  } else if (*include_body) {
    spec.include_body_in_error = **include_body;
  }
  if (!ok) {
    return std::nullopt;
  }
  return spec;
}

std::optional<ScheduleDefinition> ReadSchedule(const Config& task, ConfigProblems& problems) {
  Result<Config> block = task.GetConfig("schedule");
  if (!block.ok()) {
    problems.Add(block.status());
    return std::nullopt;
  }
  // A schedule with an unknown key is not read further: the key was meant to say something, and
  // Backstage's reader, which ignores it, would report its absence or its neighbours instead.
  if (!CheckScheduleKeys(*block, problems)) {
    return std::nullopt;
  }
  Result<ScheduleDefinition> schedule = ReadScheduleDefinitionFromConfig(*block);
  if (!schedule.ok()) {
    const std::string& message = schedule.status().message();
    // Errors of the config getters already name the full key and the file; Backstage's own
    // messages name only the key inside the schedule.
    if (message.find("'" + block->FullKey()) != std::string::npos) {
      problems.Add(schedule.status());
    } else {
      problems.Add(InvalidConfigValue(task, "schedule", message));
    }
    return std::nullopt;
  }
  return *std::move(schedule);
}

std::optional<DaemonTask> ReadTask(const Config& tasks, const std::string& id,
                                   const std::vector<std::string>& inherit_env,
                                   ConfigProblems& problems) {
  if (Status valid = ValidateTaskId(id); !valid.ok()) {
    problems.Add(
        InvalidConfigValue(tasks, {}, fmt::format("task id '{}': {}", id, valid.message())));
    return std::nullopt;
  }
  if (id.find('.') != std::string::npos) {
    problems.Add(InvalidConfigValue(tasks, {}, fmt::format("task id '{}' cannot contain '.'", id)));
    return std::nullopt;
  }
  Result<Config> task = tasks.GetConfig(id);
  if (!task.ok()) {
    problems.Add(task.status());
    return std::nullopt;
  }
  AddUnknownKeys(*task, kTaskKeys, problems);
  std::optional<ScheduleDefinition> schedule = ReadSchedule(*task, problems);

  const bool has_command = task->Has("command");
  const bool has_http = task->Has("http");
  std::optional<std::variant<CommandSpec, HttpTaskSpec>> executor;
  if (has_command && has_http) {
    problems.Add(
        InvalidConfigValue(*task, {},
                           "a task has exactly one executor, but both 'command' and 'http' "
                           "are set"));
  } else if (!has_command && !has_http) {
    problems.Add(InvalidConfigValue(
        *task, {},
        "a task needs an executor: 'command' (the program and its "
        "arguments) or 'http' ({url, method, headers, body, expectStatus, maxResponseBytes, "
        "includeBodyInError})"));
  } else if (has_command) {
    if (std::optional<CommandSpec> command = ReadCommand(*task, inherit_env, problems)) {
      command->task_id = id;
      executor = *std::move(command);
    }
  } else if (std::optional<HttpTaskSpec> http = ReadHttp(*task, problems)) {
    http->task_id = id;
    if (schedule) {
      http->total_timeout = ToMilliseconds(schedule->timeout);
      http->connect_timeout = std::min(kMaxHttpConnectTimeout, http->total_timeout);
    }
    executor = *std::move(http);
  }
  if (!schedule || !executor) {
    return std::nullopt;
  }
  return DaemonTask{id, *std::move(schedule), *std::move(executor)};
}

std::optional<DaemonPlugin> ReadPlugin(const Config& plugins, const std::string& id,
                                       ConfigProblems& problems) {
  if (Status valid = ValidatePluginId(id); !valid.ok()) {
    problems.Add(InvalidConfigValue(plugins, {}, valid.message()));
    return std::nullopt;
  }
  Result<Config> plugin = plugins.GetConfig(id);
  if (!plugin.ok()) {
    problems.Add(plugin.status());
    return std::nullopt;
  }
  AddUnknownKeys(*plugin, kPluginKeys, problems);
  std::vector<std::string> inherit_env =
      ReadInheritEnv(*plugin, "inheritEnv", problems).value_or(std::vector<std::string>{});
  Result<std::optional<Config>> tasks = plugin->GetOptionalConfig("tasks");
  if (!tasks.ok()) {
    problems.Add(tasks.status());
    return std::nullopt;
  }
  DaemonPlugin result{id, {}};
  if (*tasks) {
    for (const std::string& task_id : (*tasks)->Keys()) {
      if (std::optional<DaemonTask> task = ReadTask(**tasks, task_id, inherit_env, problems)) {
        result.tasks.push_back(*std::move(task));
      }
    }
  }
  return result;
}

// Schedules `tasks` with the plugin's scheduler in one batch (one database round trip for the
// global ones), all or nothing.
Status ScheduleDaemonTasks(const std::vector<DaemonTask>& tasks, Clock& clock,
                           PluginServices& services) {
  std::shared_ptr<Logger> logger = services.logger ? services.logger : NullLogger();
  std::vector<TaskDefinition> definitions;
  definitions.reserve(tasks.size());
  for (const DaemonTask& task : tasks) {
    STAGEHAND_ASSIGN_OR_RETURN(TaskDefinition definition,
                               MakeDaemonTaskDefinition(task, logger, clock));
    definitions.push_back(std::move(definition));
  }
  Status scheduled = services.scheduler->ScheduleTasks(std::move(definitions));
  if (!scheduled.ok() && tasks.size() == 1) {
    // A batch's error names its task; a batch of one is named here, as the scheduler's fallback
    // (one ScheduleTask per task) may not.
    return scheduled.WithPrefix("task '" + tasks.front().id + "': ");
  }
  return scheduled;
}

}  // namespace

Result<std::vector<DaemonPlugin>> ReadDaemonPlugins(const Config& root) {
  ConfigProblems problems;
  std::vector<DaemonPlugin> plugins;
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<Config> block, root.GetOptionalConfig(kPluginsKey));
  if (!block) {
    return plugins;
  }
  for (const std::string& id : block->Keys()) {
    if (std::optional<DaemonPlugin> plugin = ReadPlugin(*block, id, problems)) {
      plugins.push_back(*std::move(plugin));
    }
  }
  if (!problems.empty()) {
    return problems.ToStatus();
  }
  return plugins;
}

Config WithoutDaemonTasks(const Config& root) {
  Result<Config> without_tasks = Config::FromJson(R"({"stagehand":{"plugins":null}})", "serve");
  STAGEHAND_CHECK(without_tasks.ok());
  return Config::Merge({root, *without_tasks});
}

Result<TaskDefinition> MakeDaemonTaskDefinition(const DaemonTask& task,
                                                const std::shared_ptr<Logger>& logger,
                                                Clock& clock) {
  Result<TaskFunction> fn = std::visit(
      [&](const auto& spec) -> Result<TaskFunction> {
        using Spec = std::decay_t<decltype(spec)>;
        if constexpr (std::is_same_v<Spec, CommandSpec>) {
          return MakeCommandTask(spec, logger, clock);
        } else {
          return MakeHttpTask(spec, logger, clock);
        }
      },
      task.executor);
  if (!fn.ok()) return fn.status().WithPrefix("task '" + task.id + "': ");
  return MakeTaskDefinition(task.schedule, TaskInvocation{task.id, *std::move(fn), {}});
}

BackendPlugin MakeDaemonBackendPlugin(DaemonPlugin plugin, Clock& clock) {
  auto tasks = std::make_shared<std::vector<DaemonTask>>(std::move(plugin.tasks));
  Clock* task_clock = &clock;
  return BackendPlugin{std::move(plugin.id), [tasks, task_clock](PluginServices& services) {
                         const Status scheduled =
                             ScheduleDaemonTasks(*tasks, *task_clock, services);
                         // Each task function holds its own copy of what it runs: the
                         // definitions are not needed again (about 1 KB per task).
                         std::vector<DaemonTask>().swap(*tasks);
                         return scheduled;
                       }};
}

}  // namespace stagehand
