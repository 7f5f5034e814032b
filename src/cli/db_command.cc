// `stagehand db migrate`: creates or updates each plugin's task tables from the app-config.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "cli/command.h"
#include "stagehand/backend/app_config.h"
#include "stagehand/backend/database_config.h"
#include "stagehand/backend/database_manager.h"
#include "stagehand/cli/cli.h"
#include "stagehand/config/config.h"

namespace stagehand::cli {
namespace {

struct DbMigrateOptions {
  std::vector<std::string> config_files;
  std::vector<std::string> plugins;
};

// Writes each line of `message` as its own "stagehand: " line and returns kExitConfig.
int ConfigError(const Context& context, const std::string& message) {
  std::size_t start = 0;
  while (start <= message.size()) {
    std::size_t end = message.find('\n', start);
    if (end == std::string::npos) {
      end = message.size();
    }
    context.err << "stagehand: " << message.substr(start, end - start) << '\n';
    start = end + 1;
  }
  return kExitConfig;
}

// Returns the keys of the object at `key`, or adds a problem when it is not an object.
void CollectKeys(const Config& root, const std::string& key, std::set<std::string>& ids,
                 std::string& problems) {
  Result<std::optional<Config>> block = root.GetOptionalConfig(key);
  if (!block.ok()) {
    problems += (problems.empty() ? "" : "\n") + block.status().message();
    return;
  }
  if (!*block) {
    return;
  }
  for (const std::string& id : (*block)->Keys()) {
    ids.insert(id);
  }
}

int RunDbMigrate(const DbMigrateOptions& options, const Context& context) {
  Result<Config> loaded = LoadAppConfig(options.config_files, ProcessEnvironment());
  if (!loaded.ok()) {
    return ConfigError(context, loaded.status().message());
  }
  const Config& root = *loaded;

  std::string problems;
  Result<DatabaseConfig> database = ReadDatabaseConfig(root);
  if (!database.ok()) {
    problems = database.status().message();
  }
  std::set<std::string> ids(options.plugins.begin(), options.plugins.end());
  if (options.plugins.empty()) {
    CollectKeys(root, "stagehand.plugins", ids, problems);
    CollectKeys(root, "backend.database.plugin", ids, problems);
  }
  if (!problems.empty()) {
    return ConfigError(context, problems);
  }
  if (ids.empty()) {
    context.err << "stagehand: no plugins to migrate: the config names none under "
                   "'stagehand.plugins' or 'backend.database.plugin'; use --plugin\n";
    return kExitConfig;
  }

  DatabaseManager manager(std::move(*database), context.clock);
  bool failed = false;
  for (const std::string& id : ids) {
    Result<PluginDatabase> where = manager.Resolve(id);
    if (!where.ok()) {
      context.out << id << ": failed: " << where.status().message() << '\n';
      failed = true;
      continue;
    }
    Result<MigrationOutcome> outcome = manager.MigrateIfNeeded(id);
    if (!outcome.ok()) {
      context.out << id << ": failed: " << outcome.status().message() << '\n';
      failed = true;
    } else if (*outcome == MigrationOutcome::kSkipped) {
      context.out << id << ": skipped (skipMigrations)\n";
    } else {
      context.out << id << ": migrated (" << DatabaseManager::DisplayName(*where) << ")\n";
    }
  }
  context.out.flush();
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

void AddDbCommand(CLI::App& app, Action& action) {
  CLI::App* db = app.add_subcommand("db", "Manage the plugins' task databases");
  db->require_subcommand(1);
  db->footer("Example:\n  stagehand db migrate --config app-config.yaml");

  auto options = std::make_shared<DbMigrateOptions>();
  CLI::App* migrate = db->add_subcommand(
      "migrate",
      "Create or update the task tables of every plugin the config names (keys of "
      "stagehand.plugins and backend.database.plugin), as Backstage's migrations do; safe to "
      "run again");
  migrate
      ->add_option("-c,--config", options->config_files,
                   "App-config YAML file; repeat to merge several, later files winning")
      ->required()
      ->allow_extra_args(false);
  migrate->add_option("-p,--plugin", options->plugins, "Migrate only this plugin id (repeatable)")
      ->allow_extra_args(false);
  migrate->footer(
      "Prints one line per plugin: '<id>: migrated (<database>)', '<id>: skipped "
      "(skipMigrations)' or '<id>: failed: <reason>'.\n"
      "Exit codes: 0 all migrated or skipped, 1 a plugin failed, 2 bad usage, 78 invalid config.\n"
      "Example:\n"
      "  stagehand db migrate --config app-config.yaml --config app-config.production.yaml\n"
      "  catalog: migrated (backstage_plugin_catalog)\n"
      "  search: skipped (skipMigrations)");
  migrate->callback([options, &action] {
    action = [options](const Context& context) { return RunDbMigrate(*options, context); };
  });
}

}  // namespace stagehand::cli
