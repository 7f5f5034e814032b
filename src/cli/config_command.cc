// `stagehand config check`: validates app-config files as `stagehand serve` would read them,
// without opening a database or a port, and lists every problem.

#include <CLI/CLI.hpp>
#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cli/app_config_check.h"
#include "cli/command.h"
#include "stagehand/backend/database_config.h"
#include "stagehand/cli/cli.h"
#include "stagehand/daemon/daemon_tasks.h"

namespace stagehand::cli {
namespace {

struct ConfigCheckOptions {
  std::vector<std::string> config_files;
};

// Returns "1 plugin" / "2 plugins".
std::string Count(std::size_t n, std::string_view noun) {
  return std::to_string(n) + " " + std::string(noun) + (n == 1 ? "" : "s");
}

std::string ConnectionValue(const DatabaseConnection& connection, const std::string& key,
                            const std::string& fallback) {
  auto found = connection.find(key);
  return found != connection.end() && !found->second.empty() ? found->second : fallback;
}

// Returns the base database in a few words: "sqlite ./data", "sqlite :memory:",
// "postgres db.internal:5432", "mysql db.internal:3306". Never the password.
std::string DescribeDatabase(const DatabaseConfig& database) {
  if (database.client == DatabaseClient::kSqlite) {
    const std::string filename = ConnectionValue(database.connection, "filename", "");
    if (filename == ":memory:") {
      return "sqlite :memory:";
    }
    return "sqlite " + ConnectionValue(database.connection, "directory", ".");
  }
  if (database.client == DatabaseClient::kMySql) {
    const std::string socket = ConnectionValue(database.connection, "socket", "");
    return "mysql " + (socket.empty()
                           ? ConnectionValue(database.connection, "host", "localhost") + ":" +
                                 ConnectionValue(database.connection, "port", "3306")
                           : socket);
  }
  std::string text = "postgres " + ConnectionValue(database.connection, "host", "localhost") + ":" +
                     ConnectionValue(database.connection, "port", "5432");
  if (database.division_mode == PluginDivisionMode::kSchema) {
    text += " (schema per plugin)";
  }
  return text;
}

// Returns where one plugin's tables live: "sqlite ./data/jobs.sqlite", "postgres database
// backstage_plugin_jobs", "postgres schema jobs in backstage", "mysql database
// backstage_plugin_jobs".
std::string DescribePluginDatabase(const PluginDatabase& database) {
  if (database.client == DatabaseClient::kSqlite) {
    return "sqlite " + database.database;
  }
  if (database.client == DatabaseClient::kMySql) {
    return "mysql database " + database.database;
  }
  if (!database.schema.empty()) {
    return "postgres schema " + database.schema + " in " + database.database;
  }
  return "postgres database " + database.database;
}

int RunConfigCheck(const ConfigCheckOptions& options, const Context& context) {
  const AppConfigCheck check = CheckAppConfig(options.config_files, context);
  PrintConfigWarnings(check, context);
  if (check.problems.empty()) {
    std::size_t task_count = 0;
    for (const DaemonPlugin& plugin : check.plugins) {
      task_count += plugin.tasks.size();
    }
    context.out << "ok: " << Count(check.plugins.size(), "plugin") << ", "
                << Count(task_count, "task") << "; database "
                << DescribeDatabase(check.backend.database) << "; listen "
                << check.backend.listen_host << ":" << check.backend.listen_port << '\n';
    for (std::size_t i = 0; i < check.plugins.size(); ++i) {
      const DaemonPlugin& plugin = check.plugins[i];
      std::string ids;
      for (const DaemonTask& task : plugin.tasks) {
        ids += (ids.empty() ? "" : ", ") + task.id;
      }
      context.out << "  " << plugin.id << ": " << Count(plugin.tasks.size(), "task")
                  << (ids.empty() ? "" : " (" + ids + ")") << "; "
                  << DescribePluginDatabase(check.plugin_databases[i]) << '\n';
    }
    context.out.flush();
    return kExitOk;
  }
  for (const std::string& problem : check.problems.lines()) {
    context.err << "stagehand: " << problem << '\n';
  }
  context.err << "stagehand: config check failed: "
              << Count(check.problems.lines().size(), "problem") << '\n';
  context.err.flush();
  return kExitConfig;
}

}  // namespace

void AddConfigCommand(CLI::App& app, Action& action) {
  CLI::App* config = app.add_subcommand("config", "Work with app-config files");
  config->require_subcommand(1);
  config->footer("Example:\n  stagehand config check --config examples/app-config.yaml");

  auto options = std::make_shared<ConfigCheckOptions>();
  CLI::App* check = config->add_subcommand(
      "check",
      "Validate app-config files as 'stagehand serve' reads them (backend, database, auth, "
      "scheduler and every task), without opening a database or a port; print every problem "
      "with its file and key");
  check
      ->add_option("-c,--config", options->config_files,
                   "App-config YAML file; repeat to merge several, later files winning")
      ->required()
      ->allow_extra_args(false);
  check->footer(
      "Unknown keys under 'stagehand' are problems; 'backend' keys that stagehand ignores are "
      "warnings ('stagehand: warning: ...' on stderr).\n"
      "Exit codes: 0 valid (a summary on stdout), 2 bad usage, 78 invalid (every problem on its "
      "own line on stderr).\n"
      "Example:\n"
      "  stagehand config check --config examples/app-config.yaml --config "
      "examples/app-config.dev.yaml\n"
      "  ok: 1 plugin, 4 tasks; database sqlite ./data; listen 127.0.0.1:7007\n"
      "    jobs: 4 tasks (hello, disk-usage, report, self-check); sqlite data/jobs.sqlite");
  check->callback([options, &action] {
    action = [options](const Context& context) { return RunConfigCheck(*options, context); };
  });
}

}  // namespace stagehand::cli
