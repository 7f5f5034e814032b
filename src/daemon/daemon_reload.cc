#include "stagehand/daemon/daemon_reload.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "stagehand/backend/app_config.h"
#include "stagehand/config/config_diff.h"
#include "stagehand/config/config_problems.h"
#include "stagehand/service/scheduler.h"

namespace stagehand {
namespace {

nlohmann::json ExecutorJson(const CommandSpec& spec) {
  return {{"command", spec.argv},
          {"env", spec.env},
          {"inheritEnv", spec.inherit_env},
          {"workingDirectory", spec.working_directory},
          {"killGraceMs", spec.kill_grace.count()},
          {"outputCapBytes", spec.output_cap_bytes}};
}

nlohmann::json ExecutorJson(const HttpTaskSpec& spec) {
  return {{"url", spec.url},
          {"method", spec.method},
          {"headers", spec.headers},
          {"body", spec.body},
          {"expectStatus", spec.expect_status ? nlohmann::json(*spec.expect_status) : nullptr},
          {"connectTimeoutMs", spec.connect_timeout.count()},
          {"totalTimeoutMs", spec.total_timeout.count()},
          {"maxResponseBytes", spec.max_response_bytes},
          {"includeBodyInError", spec.include_body_in_error}};
}

const LoadedTask* FindTask(const LoadedPlugin& plugin, const std::string& id) {
  for (const LoadedTask& task : plugin.tasks) {
    if (task.id == id) return &task;
  }
  return nullptr;
}

std::string RestartProblem(const std::string& key) {
  return "'" + key +
         "' changed; it takes effect only after a restart of stagehand serve (a reload applies "
         "only stagehand.plugins.<pluginId>.tasks and inheritEnv)";
}

}  // namespace

std::string DaemonTaskFingerprint(const DaemonTask& task) {
  const ScheduleDefinition& schedule = task.schedule;
  const auto* cron = std::get_if<CronFrequency>(&schedule.frequency);
  const auto millis = [](const std::optional<DurationSpec>& duration) {
    return duration ? nlohmann::json(ToMilliseconds(*duration).count()) : nlohmann::json(nullptr);
  };
  nlohmann::json retry = nullptr;
  if (schedule.retry) {
    retry = {{"attempts", schedule.retry->attempts},
             {"backoffMs", ToMilliseconds(schedule.retry->backoff).count()},
             {"maxBackoffMs", millis(schedule.retry->max_backoff)}};
  }
  const Result<TaskSettingsV2> settings = BuildTaskSettings(schedule);
  const nlohmann::json fingerprint = {
      {"settings", settings.ok() ? settings->ToJson() : settings.status().message()},
      {"scope", TaskScopeName(schedule.scope.value_or(TaskScope::kGlobal))},
      {"zone", cron != nullptr ? cron->time_zone : ""},
      {"catchupWindowMs", millis(schedule.catchup_window)},
      {"jitterMs", millis(schedule.jitter)},
      {"retry", retry},
      {"executor", std::visit([](const auto& spec) { return ExecutorJson(spec); }, task.executor)}};
  return fingerprint.dump();
}

LoadedTask LoadedTaskOf(const DaemonTask& task) {
  return LoadedTask{task.id, task.schedule.scope.value_or(TaskScope::kGlobal),
                    DaemonTaskFingerprint(task)};
}

Result<std::vector<PluginTaskChanges>> DiffDaemonPlugins(const std::vector<LoadedPlugin>& loaded,
                                                         std::vector<DaemonPlugin> next) {
  ConfigProblems problems;
  std::map<std::string, DaemonPlugin*> next_by_id;
  for (DaemonPlugin& plugin : next) {
    next_by_id[plugin.id] = &plugin;
    const bool known = std::any_of(loaded.begin(), loaded.end(),
                                   [&](const LoadedPlugin& old) { return old.id == plugin.id; });
    if (!known) {
      problems.Add("'stagehand.plugins." + plugin.id +
                   "' is a new plugin; adding a plugin needs a restart of stagehand serve");
    }
  }
  std::vector<PluginTaskChanges> changes;
  for (const LoadedPlugin& old : loaded) {
    auto found = next_by_id.find(old.id);
    if (found == next_by_id.end()) {
      problems.Add("'stagehand.plugins." + old.id +
                   "' was removed; removing a plugin needs a restart of stagehand serve (to stop "
                   "its tasks, leave the plugin with 'tasks: {}')");
      continue;
    }
    PluginTaskChanges& plugin = changes.emplace_back();
    plugin.plugin_id = old.id;
    for (const LoadedTask& task : old.tasks) {
      const bool kept =
          std::any_of(found->second->tasks.begin(), found->second->tasks.end(),
                      [&](const DaemonTask& next_task) { return next_task.id == task.id; });
      if (!kept) plugin.removed.push_back(task.id);
    }
    for (DaemonTask& task : found->second->tasks) {
      const LoadedTask* before = FindTask(old, task.id);
      LoadedTask after = LoadedTaskOf(task);
      if (before == nullptr) {
        plugin.added.push_back(std::move(task));
      } else if (before->scope != after.scope) {
        problems.Add("'stagehand.plugins." + old.id + ".tasks." + task.id +
                     ".schedule.scope' changed from " + std::string(TaskScopeName(before->scope)) +
                     " to " + std::string(TaskScopeName(after.scope)) +
                     "; a task's scope cannot change while it is scheduled (remove the task in "
                     "one reload and add it back in the next, or restart)");
      } else if (before->fingerprint != after.fingerprint) {
        plugin.changed.push_back(std::move(task));
      } else {
        plugin.unchanged.push_back(task.id);
      }
    }
  }
  if (!problems.empty()) return problems.ToStatus();
  return changes;
}

DaemonReloader::DaemonReloader(std::vector<std::string> config_files, Config running, Clock& clock)
    : config_files_(std::move(config_files)), running_(std::move(running)), clock_(&clock) {}

BackendPlugin DaemonReloader::Adopt(DaemonPlugin plugin) {
  auto& entry = plugins_.emplace_back(std::make_unique<Plugin>());
  entry->loaded.id = plugin.id;
  for (const DaemonTask& task : plugin.tasks) entry->loaded.tasks.push_back(LoadedTaskOf(task));
  BackendPlugin backend_plugin = MakeDaemonBackendPlugin(std::move(plugin), *clock_);
  return BackendPlugin{backend_plugin.id, [init = std::move(backend_plugin.init),
                                           recorded = entry.get()](PluginServices& services) {
                         recorded->scheduler = services.scheduler;
                         recorded->logger = services.logger;
                         return init(services);
                       }};
}

Result<ReloadReport> DaemonReloader::Reload() {
  ConfigProblems problems;
  Result<Config> root = LoadAppConfig(config_files_, ProcessEnvironment());
  if (!root.ok()) {
    problems.Add(root.status());
    return problems.ToStatus();
  }
  if (Result<BackendConfig> backend = ReadBackendConfig(*root); !backend.ok()) {
    problems.Add(backend.status());
  }
  Result<std::vector<DaemonPlugin>> next = ReadDaemonPlugins(*root);
  if (!next.ok()) problems.Add(next.status());
  for (const std::string& key : ChangedConfigKeys(running_, WithoutDaemonTasks(*root))) {
    problems.Add(RestartProblem(key));
  }
  if (!problems.empty()) return problems.ToStatus();

  std::vector<LoadedPlugin> loaded;
  loaded.reserve(plugins_.size());
  for (const auto& plugin : plugins_) loaded.push_back(plugin->loaded);
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<PluginTaskChanges> changes,
                             DiffDaemonPlugins(loaded, *std::move(next)));

  ReloadReport report;
  for (std::size_t i = 0; i < plugins_.size(); ++i) {
    PluginReload& plugin_report = report.plugins.emplace_back();
    plugin_report.plugin_id = plugins_[i]->loaded.id;
    if (Status applied = Apply(*plugins_[i], changes[i], plugin_report); !applied.ok()) {
      return UnavailableError("the reload stopped part-way, in plugin '" + plugins_[i]->loaded.id +
                              "' (" + DescribeReload(report) +
                              " were applied): " + applied.message());
    }
  }
  return report;
}

Status DaemonReloader::Apply(Plugin& plugin, PluginTaskChanges& changes, PluginReload& report) {
  if (plugin.scheduler == nullptr) {
    return FailedPreconditionError("the plugin has not started");
  }
  SchedulerService& scheduler = *plugin.scheduler;
  std::shared_ptr<Logger> logger = plugin.logger ? plugin.logger : NullLogger();
  const auto forget = [&](const std::string& id) {
    std::erase_if(plugin.loaded.tasks, [&](const LoadedTask& task) { return task.id == id; });
  };
  const auto remember = [&](const DaemonTask& task) {
    forget(task.id);
    plugin.loaded.tasks.push_back(LoadedTaskOf(task));
  };
  for (const std::string& id : changes.removed) {
    Status unscheduled = scheduler.UnscheduleTask(id);
    if (!unscheduled.ok() && unscheduled.code() != StatusCode::kNotFound) {
      return unscheduled.WithPrefix("task '" + id + "': ");
    }
    forget(id);
    report.removed.push_back(id);
  }
  for (DaemonTask& task : changes.changed) {
    STAGEHAND_ASSIGN_OR_RETURN(TaskDefinition definition,
                               MakeDaemonTaskDefinition(task, logger, *clock_));
    STAGEHAND_RETURN_IF_ERROR(
        scheduler.RescheduleTask(std::move(definition)).WithPrefix("task '" + task.id + "': "));
    remember(task);
    report.changed.push_back(task.id);
  }
  std::vector<TaskDefinition> added;
  for (const DaemonTask& task : changes.added) {
    STAGEHAND_ASSIGN_OR_RETURN(TaskDefinition definition,
                               MakeDaemonTaskDefinition(task, logger, *clock_));
    added.push_back(std::move(definition));
  }
  if (!added.empty()) {
    Status scheduled = scheduler.ScheduleTasks(added);
    if (scheduled.code() == StatusCode::kConflict) {
      // A task removed by an earlier reload whose last run still goes on is still registered:
      // one at a time, RescheduleTask takes it back.
      scheduled = Status::Ok();
      for (const TaskDefinition& definition : added) {
        if (Status again = scheduler.RescheduleTask(definition); !again.ok()) {
          scheduled = again.WithPrefix("task '" + definition.id + "': ");
          break;
        }
      }
    }
    STAGEHAND_RETURN_IF_ERROR(scheduled);
    for (const DaemonTask& task : changes.added) {
      remember(task);
      report.added.push_back(task.id);
    }
  }
  report.unchanged = std::move(changes.unchanged);
  return Status::Ok();
}

}  // namespace stagehand
