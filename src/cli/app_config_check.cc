#include "cli/app_config_check.h"

#include <optional>
#include <ostream>
#include <utility>

#include "stagehand/backend/backend.h"
#include "stagehand/config/config.h"

namespace stagehand::cli {

AppConfigCheck CheckAppConfig(const std::vector<std::string>& config_files,
                              const Context& context) {
  AppConfigCheck check;
  const EnvironmentLookup environment = [&context](const std::string& name) {
    return LookupEnvironment(context, name);
  };
  Result<Config> root = LoadAppConfig(config_files, environment);
  if (!root.ok()) {
    check.problems.Add(root.status());
    return check;
  }
  check.warnings = BackendConfigWarnings(*root);
  Result<BackendConfig> backend = ReadBackendConfig(*root);
  if (!backend.ok()) {
    check.problems.Add(backend.status());
  }
  Result<std::vector<DaemonPlugin>> plugins = ReadDaemonPlugins(*root);
  if (!plugins.ok()) {
    check.problems.Add(plugins.status());
  }
  if (Result<TracingConfig> tracing = ReadTracingConfig(*root, environment); !tracing.ok()) {
    check.problems.Add(tracing.status());
  }

  // Every plugin serve would start, even when its tasks have problems.
  std::vector<std::string> plugin_ids;
  if (plugins.ok()) {
    for (const DaemonPlugin& plugin : *plugins) {
      plugin_ids.push_back(plugin.id);
    }
  } else if (Result<std::optional<Config>> block = root->GetOptionalConfig("stagehand.plugins");
             block.ok() && block->has_value()) {
    for (const std::string& id : (*block)->Keys()) {
      if (ValidatePluginId(id).ok()) {
        plugin_ids.push_back(id);
      }
    }
  }
  std::vector<PluginDatabase> databases;
  if (backend.ok()) {
    for (const std::string& id : plugin_ids) {
      Result<PluginDatabase> database = ResolvePluginDatabase(backend->database, id);
      if (!database.ok()) {
        check.problems.Add(database.status());
      } else {
        databases.push_back(*std::move(database));
      }
    }
  }
  if (check.problems.empty()) {
    check.backend = *std::move(backend);
    check.plugins = *std::move(plugins);
    check.plugin_databases = std::move(databases);
  }
  return check;
}

void PrintConfigWarnings(const AppConfigCheck& check, const Context& context) {
  for (const std::string& warning : check.warnings) {
    context.err << "stagehand: warning: " << warning << '\n';
  }
  context.err.flush();
}

}  // namespace stagehand::cli
