// `stagehand db migrate`: creates or updates each plugin's task tables from the app-config; and
// what the `db` subcommands share (db_command.h).

#include "cli/db_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "cli/app_config_check.h"
#include "cli/command.h"
#include "stagehand/backend/database_config.h"
#include "stagehand/backend/database_manager.h"
#include "stagehand/cli/cli.h"

namespace stagehand::cli {
namespace {

struct DbMigrateOptions {
  std::vector<std::string> config_files;
  std::vector<std::string> plugins;
};

// Returns the plugin ids the config names: the keys of `stagehand.plugins` and of
// `backend.database.plugin`, sorted.
std::set<std::string> NamedPlugins(const AppConfigCheck& check) {
  std::set<std::string> ids;
  for (const DaemonPlugin& plugin : check.plugins) {
    ids.insert(plugin.id);
  }
  for (const auto& [id, database] : check.backend.database.plugins) {
    ids.insert(id);
  }
  return ids;
}

int RunDbMigrate(const DbMigrateOptions& options, const Context& context) {
  DbPlugins selected = SelectDbPlugins(options.config_files, options.plugins, "migrate", context);
  if (selected.exit_code != kExitOk) {
    return selected.exit_code;
  }
  DatabaseManager manager(std::move(selected.check.backend.database), context.clock);
  bool failed = false;
  for (const std::string& id : selected.ids) {
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

DbPlugins SelectDbPlugins(const std::vector<std::string>& config_files,
                          const std::vector<std::string>& requested, std::string_view what,
                          const Context& context) {
  DbPlugins selected;
  selected.check = CheckAppConfig(config_files, context);
  PrintConfigWarnings(selected.check, context);
  if (!selected.check.problems.empty()) {
    for (const std::string& problem : selected.check.problems.lines()) {
      context.err << "stagehand: " << problem << '\n';
    }
    context.err.flush();
    selected.exit_code = kExitConfig;
    return selected;
  }
  const std::set<std::string> named = NamedPlugins(selected.check);
  std::set<std::string> ids = named;
  if (!requested.empty()) {
    ids.clear();
    for (const std::string& id : requested) {
      if (named.count(id) == 0) {
        std::string message = fmt::format(
            "--plugin {}: the config names no plugin '{}' under 'stagehand.plugins' or "
            "'backend.database.plugin'",
            id, id);
        if (!named.empty()) {
          message += fmt::format("; it names {}", fmt::join(named, ", "));
        }
        context.err << "stagehand: " << message << '\n';
        context.err.flush();
        selected.exit_code = kExitConfig;
        return selected;
      }
      ids.insert(id);
    }
  }
  if (ids.empty()) {
    context.err << "stagehand: no plugins to " << what
                << ": the config names none under 'stagehand.plugins' or "
                   "'backend.database.plugin'\n";
    selected.exit_code = kExitConfig;
    return selected;
  }
  selected.ids.assign(ids.begin(), ids.end());
  return selected;
}

void AddDbCommand(CLI::App& app, Action& action) {
  CLI::App* db = app.add_subcommand("db", "Manage the plugins' task databases");
  db->require_subcommand(1);
  db->footer(
      "Example:\n  stagehand db migrate --config app-config.yaml\n"
      "  stagehand db prune --config app-config.yaml --older-than 30d");

  auto options = std::make_shared<DbMigrateOptions>();
  CLI::App* migrate = db->add_subcommand(
      "migrate",
      "Check the config as 'stagehand config check' does, then create or update the task "
      "tables of every plugin the config names (keys of stagehand.plugins and "
      "backend.database.plugin), as Backstage's migrations do; safe to run again");
  migrate
      ->add_option("-c,--config", options->config_files,
                   "App-config YAML file; repeat to merge several, later files winning")
      ->required()
      ->allow_extra_args(false);
  migrate
      ->add_option("-p,--plugin", options->plugins,
                   "Migrate only this plugin id, one the config names (repeatable)")
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
  AddDbPruneCommand(*db, action);
}

}  // namespace stagehand::cli
