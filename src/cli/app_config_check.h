// Reading app-config files the way `stagehand serve` does, for the verbs that must refuse exactly
// what serve would refuse (`config check`, `db migrate`): one function, so that they cannot drift.
#pragma once

#include <string>
#include <vector>

#include "cli/command.h"
#include "stagehand/backend/app_config.h"
#include "stagehand/backend/database_config.h"
#include "stagehand/config/config_problems.h"
#include "stagehand/daemon/daemon_tasks.h"

namespace stagehand::cli {

// The outcome of CheckAppConfig. A value type; thread-compatible.
struct AppConfigCheck {
  // Every problem, one line each, naming the file and the key. Empty when the config is valid.
  ConfigProblems problems;
  // Keys that are ignored (BackendConfigWarnings), one line each; reported even with problems.
  std::vector<std::string> warnings;
  // Filled only when `problems` is empty: what serve would run with, and where each plugin of
  // `plugins` keeps its tables (`plugin_databases[i]` belongs to `plugins[i]`).
  BackendConfig backend;
  std::vector<DaemonPlugin> plugins;
  std::vector<PluginDatabase> plugin_databases;
};

// Loads `config_files` in order (later files winning; `${VAR}` from context.environment) and reads
// them as serve does: the backend (ReadBackendConfig), every task (ReadDaemonPlugins) and the
// database of every plugin under `stagehand.plugins`. Opens no database and no port.
AppConfigCheck CheckAppConfig(const std::vector<std::string>& config_files, const Context& context);

// Writes each warning of `check` to context.err as "stagehand: warning: <line>".
void PrintConfigWarnings(const AppConfigCheck& check, const Context& context);

}  // namespace stagehand::cli
