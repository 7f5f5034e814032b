// What the subcommands of `stagehand db` (db_command.cc: migrate; db_prune_command.cc: prune)
// share: the config check and the plugins of the app-config they work on. Called on the CLI's one
// thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cli/app_config_check.h"
#include "cli/command.h"
#include "stagehand/cli/cli.h"

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11's namespace
class App;
}  // namespace CLI

namespace stagehand::cli {

// The plugins a `db` subcommand works on, and the config it read them from. A value type.
struct DbPlugins {
  AppConfigCheck check;
  std::vector<std::string> ids;  // sorted; not empty unless `exit_code` says the command ends
  // kExitOk to go on; otherwise the command ends with it (the problem was written to context.err).
  int exit_code = kExitOk;
};

// Checks `config_files` as `stagehand config check` does and returns the plugins they name (the
// keys of `stagehand.plugins` and of `backend.database.plugin`), or only `requested` (`--plugin`,
// each of which the config must name). `what` ("migrate", "prune") completes "no plugins to ...".
// Writes warnings and problems to context.err; exit codes: kExitConfig for an invalid config, an
// unknown --plugin or no plugin at all.
DbPlugins SelectDbPlugins(const std::vector<std::string>& config_files,
                          const std::vector<std::string>& requested, std::string_view what,
                          const Context& context);

// Adds `prune` to the `db` command (`stagehand db prune ...`), as AddCronCommand does.
void AddDbPruneCommand(CLI::App& db, Action& action);

}  // namespace stagehand::cli
