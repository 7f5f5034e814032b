// `stagehand db prune`: lists, and with --yes deletes, the tasks that no host has registered for a
// while, with their run history and registrations (TaskRegistrations). Dry run by default.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/db_command.h"
#include "cli/task_table.h"
#include "cli/text_table.h"
#include "stagehand/backend/database_config.h"
#include "stagehand/backend/database_manager.h"
#include "stagehand/cli/cli.h"
#include "stagehand/store/task_registrations.h"
#include "stagehand/time/duration.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::cli {
namespace {

using std::chrono::milliseconds;

constexpr char kDefaultOlderThan[] = "30d";
// Twice the refresh interval: a shorter window could take a running host's tasks for gone.
constexpr milliseconds kMinOlderThan = 2 * kRegistrationRefreshInterval;

struct DbPruneOptions {
  std::vector<std::string> config_files;
  std::vector<std::string> plugins;
  std::string older_than = kDefaultOlderThan;
  bool yes = false;
  bool include_backstage_only = false;
  bool json = false;
};

// One plugin's part of the run: its candidates and what became of them.
struct PluginPrune {
  std::string plugin;
  std::string database;                // DatabaseManager::DisplayName
  std::optional<std::string> skipped;  // why the plugin has nothing to prune (no database yet)
  std::optional<std::string> error;    // why listing or deleting failed
  WallTime db_now{};
  WallTime cutoff{};
  std::vector<PruneCandidate> candidates;
  std::vector<std::string> deleted;
};

// Returns the --older-than window. Errors: kInvalidArgument naming the flag.
Result<milliseconds> ParseOlderThan(const std::string& text) {
  Result<HumanDuration> parsed = ParseDurationString(text);
  if (!parsed.ok()) {
    return InvalidArgumentError(
        fmt::format("invalid --older-than '{}': {}", text, parsed.status().message()));
  }
  const milliseconds window = ToChronoMilliseconds(*parsed);
  if (window < kMinOlderThan) {
    return InvalidArgumentError(fmt::format(
        "invalid --older-than '{}': it must be at least {}: hosts refresh their registrations "
        "every {}, so a shorter window could take a running host's tasks for gone",
        text, FormatSpan(kMinOlderThan, 2), FormatSpan(kRegistrationRefreshInterval, 2)));
  }
  return window;
}

// Returns why there is nothing to prune in `database` without opening it, or nullopt: an
// in-memory SQLite database, or a SQLite file that does not exist yet (opening would create it).
std::optional<std::string> NothingToOpen(const PluginDatabase& database) {
  if (database.client != DatabaseClient::kSqlite) {
    return std::nullopt;
  }
  if (database.database == ":memory:") {
    return "an in-memory database";
  }
  std::error_code ignored;
  if (!std::filesystem::exists(database.database, ignored)) {
    return "no database file yet";
  }
  return std::nullopt;
}

// Lists the candidates of `id` and, when `delete_them`, deletes those `scope` allows.
PluginPrune PrunePlugin(DatabaseManager& manager, const std::string& id, milliseconds older_than,
                        bool delete_them, PruneScope scope) {
  PluginPrune result;
  result.plugin = id;
  Result<PluginDatabase> where = manager.Resolve(id);
  if (!where.ok()) {
    result.error = where.status().message();
    return result;
  }
  result.database = DatabaseManager::DisplayName(*where);
  if (std::optional<std::string> why = NothingToOpen(*where)) {
    result.skipped = *why;
    return result;
  }
  Result<std::shared_ptr<TaskStore>> store = manager.OpenStore(id);
  if (!store.ok()) {
    result.error = store.status().message();
    return result;
  }
  TaskRegistrations* registrations = (*store)->registrations();
  if (registrations == nullptr) {
    result.error = "its store keeps no task registrations";
    return result;
  }
  Result<WallTime> now = (*store)->DatabaseNow();
  if (!now.ok()) {
    result.error = now.status().message();
    return result;
  }
  result.db_now = *now;
  result.cutoff = *now - older_than;
  Result<std::vector<PruneCandidate>> candidates =
      registrations->ListPruneCandidates(result.cutoff);
  if (!candidates.ok()) {
    result.error = candidates.status().message();
    return result;
  }
  result.candidates = std::move(*candidates);
  if (!delete_them) {
    return result;
  }
  std::vector<std::string> ids;
  for (const PruneCandidate& candidate : result.candidates) {
    if (candidate.registered() || scope == PruneScope::kIncludeUnregistered) {
      ids.push_back(candidate.task_id);
    }
  }
  if (ids.empty()) {
    return result;
  }
  Result<std::vector<std::string>> deleted = registrations->PruneTasks(ids, result.cutoff, scope);
  if (!deleted.ok()) {
    result.error = deleted.status().message();
    return result;
  }
  result.deleted = std::move(*deleted);
  return result;
}

std::string When(const std::optional<WallTime>& when, WallTime now, const TimeZone& zone) {
  return when ? FormatWhen(*when, now, zone) : "never";
}

// Returns the table of the candidates that `registered` selects, or "" when there are none.
std::string CandidateTable(const std::vector<PluginPrune>& plugins, bool registered,
                           const TimeZone& zone, bool colour) {
  std::vector<std::vector<Cell>> rows = {{{"PLUGIN", {}},
                                          {"TASK", {}},
                                          {"LAST REGISTERED", {}},
                                          {"LAST RUN ENDED", {}},
                                          {"HOST", {}}}};
  for (const PluginPrune& plugin : plugins) {
    for (const PruneCandidate& candidate : plugin.candidates) {
      if (candidate.registered() != registered) {
        continue;
      }
      rows.push_back({{plugin.plugin, {}},
                      {candidate.task_id, {}},
                      {When(candidate.last_seen_at, plugin.db_now, zone), {}},
                      {When(candidate.last_run_ended_at, plugin.db_now, zone), {}},
                      {candidate.host.value_or("-"), {}}});
    }
  }
  return rows.size() > 1 ? RenderTable(rows, colour) : "";
}

std::string Plural(std::size_t count, std::string_view one) {
  return fmt::format("{} {}{}", count, one, count == 1 ? "" : "s");
}

void PrintText(const std::vector<PluginPrune>& plugins, const DbPruneOptions& options,
               const TimeZone& zone, const Context& context) {
  std::size_t registered = 0;
  std::size_t unregistered = 0;
  for (const PluginPrune& plugin : plugins) {
    if (plugin.skipped) {
      context.out << plugin.plugin << ": skipped (" << *plugin.skipped << ")\n";
    }
    for (const PruneCandidate& candidate : plugin.candidates) {
      ++(candidate.registered() ? registered : unregistered);
    }
  }
  if (registered + unregistered == 0) {
    context.out << "No task has gone unregistered and unused for " << options.older_than << ".\n";
    return;
  }
  if (registered > 0) {
    context.out << "Tasks no stagehand host has registered for " << options.older_than << ":\n"
                << CandidateTable(plugins, true, zone, context.colour);
  }
  if (unregistered > 0) {
    context.out << (registered > 0 ? "\n" : "")
                << "Tasks no stagehand host has ever registered (Backstage workers' tasks), unused "
                   "for "
                << options.older_than << ":\n"
                << CandidateTable(plugins, false, zone, context.colour);
  }
  const std::size_t eligible = registered + (options.include_backstage_only ? unregistered : 0);
  context.out << '\n';
  if (!options.yes) {
    context.out << "Dry run: nothing was deleted. Run again with --yes to delete "
                << Plural(eligible, "task")
                << (eligible == 1 ? " (its row, run history and registration)"
                                  : " (their rows, run history and registrations)");
    if (unregistered > 0 && !options.include_backstage_only) {
      context.out << "; add --include-backstage-only to delete the " << Plural(unregistered, "task")
                  << " no stagehand host has ever registered as well";
    }
    context.out << ".\n";
    return;
  }
  for (const PluginPrune& plugin : plugins) {
    if (plugin.candidates.empty() || plugin.error) {
      continue;
    }
    context.out << plugin.plugin << ": deleted " << Plural(plugin.deleted.size(), "task");
    if (!plugin.deleted.empty()) {
      context.out << ": " << fmt::format("{}", fmt::join(plugin.deleted, ", "));
    }
    context.out << '\n';
  }
  if (unregistered > 0 && !options.include_backstage_only) {
    context.out << "Kept " << Plural(unregistered, "task")
                << " no stagehand host has ever registered (--include-backstage-only deletes "
                << (unregistered == 1 ? "it" : "them") << ").\n";
  }
}

nlohmann::json OptionalTime(const std::optional<WallTime>& when) {
  return when ? nlohmann::json(FormatIsoInstantUtc(*when)) : nlohmann::json(nullptr);
}

void PrintJson(const std::vector<PluginPrune>& plugins, const DbPruneOptions& options,
               const Context& context) {
  nlohmann::json out = {{"dryRun", !options.yes},
                        {"olderThan", options.older_than},
                        {"includeBackstageOnly", options.include_backstage_only},
                        {"plugins", nlohmann::json::array()}};
  for (const PluginPrune& plugin : plugins) {
    nlohmann::json entry = {{"plugin", plugin.plugin},
                            {"database", plugin.database},
                            {"tasks", nlohmann::json::array()}};
    if (plugin.skipped) {
      entry["skipped"] = *plugin.skipped;
    }
    if (plugin.error) {
      entry["error"] = *plugin.error;
    }
    if (!plugin.skipped && !plugin.error) {
      entry["cutoff"] = FormatIsoInstantUtc(plugin.cutoff);
    }
    for (const PruneCandidate& candidate : plugin.candidates) {
      const bool deleted = std::find(plugin.deleted.begin(), plugin.deleted.end(),
                                     candidate.task_id) != plugin.deleted.end();
      entry["tasks"].push_back(
          {{"task", candidate.task_id},
           {"registered", candidate.registered()},
           {"host", candidate.host ? nlohmann::json(*candidate.host) : nlohmann::json(nullptr)},
           {"lastRegisteredAt", OptionalTime(candidate.last_seen_at)},
           {"lastRunEndedAt", OptionalTime(candidate.last_run_ended_at)},
           {"nextRunStartAt", OptionalTime(candidate.next_run_start_at)},
           {"deleted", deleted}});
    }
    out["plugins"].push_back(std::move(entry));
  }
  context.out << out.dump(2) << '\n';
}

int RunDbPrune(const DbPruneOptions& options, const Context& context) {
  Result<milliseconds> older_than = ParseOlderThan(options.older_than);
  if (!older_than.ok()) {
    return UsageError(context, older_than.status().message());
  }
  Result<TimeZone> zone = ResolveZone(std::nullopt, context);
  if (!zone.ok()) {
    return UsageError(context, zone.status().message());
  }
  DbPlugins selected = SelectDbPlugins(options.config_files, options.plugins, "prune", context);
  if (selected.exit_code != kExitOk) {
    return selected.exit_code;
  }
  DatabaseManager manager(std::move(selected.check.backend.database), context.clock);
  const PruneScope scope =
      options.include_backstage_only ? PruneScope::kIncludeUnregistered : PruneScope::kRegistered;
  std::vector<PluginPrune> plugins;
  bool failed = false;
  for (const std::string& id : selected.ids) {
    PluginPrune& plugin =
        plugins.emplace_back(PrunePlugin(manager, id, *older_than, options.yes, scope));
    if (plugin.error) {
      context.err << "stagehand: " << id << ": " << (options.yes ? "prune" : "listing")
                  << " failed: " << *plugin.error << '\n';
      failed = true;
    }
  }
  if (options.json) {
    PrintJson(plugins, options, context);
  } else {
    PrintText(plugins, options, *zone, context);
  }
  context.out.flush();
  context.err.flush();
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

void AddDbPruneCommand(CLI::App& db, Action& action) {
  auto options = std::make_shared<DbPruneOptions>();
  CLI::App* prune = db.add_subcommand(
      "prune",
      "List the tasks that no host has registered or run for --older-than (a dry run), or with "
      "--yes delete them: their rows in backstage_backend_tasks__tasks, their run history and "
      "their registrations");
  prune
      ->add_option("-c,--config", options->config_files,
                   "App-config YAML file; repeat to merge several, later files winning")
      ->required()
      ->allow_extra_args(false);
  prune
      ->add_option("-p,--plugin", options->plugins,
                   "Prune only this plugin id, one the config names (repeatable)")
      ->allow_extra_args(false);
  prune->add_option("--older-than", options->older_than,
                    "How long a task must have gone unregistered and unused, as in the config: "
                    "7d, 12h, PT12H, '2 weeks' (default 30d, at least 2h)");
  prune->add_flag("-y,--yes", options->yes, "Delete the tasks listed (default: a dry run)");
  prune->add_flag("--include-backstage-only", options->include_backstage_only,
                  "Delete also the tasks no stagehand host has ever registered (Backstage "
                  "workers' tasks), judged by their last run and next run alone");
  prune->add_flag("--json", options->json,
                  R"(Print JSON: {"dryRun","olderThan","plugins":[{"plugin","tasks":[...]}]})");
  prune->footer(
      "A task is listed when nothing shows a host used it for --older-than: no stagehand host "
      "registered it or refreshed its registration (running hosts do every hour), and it was not "
      "claimed, did not end a run and is not due in that time; a task claimed now is never "
      "listed. Tasks no stagehand host has ever registered are listed apart, and deleted only with "
      "--include-backstage-only. With --yes, each plugin's tasks are deleted in one transaction, "
      "checked again as they are (a task used since the listing is kept), and the deleted ids "
      "are printed. Times are relative and absolute in the process zone (TZ).\n"
      "Exit codes: 0 listed or deleted, 1 a plugin's database failed, 2 bad usage (e.g. "
      "--older-than), 78 invalid config or unknown --plugin.\n"
      "Example:\n"
      "  stagehand db prune --config app-config.yaml --older-than 7d\n"
      "  Tasks no stagehand host has registered for 7d:\n"
      "  PLUGIN  TASK        LAST REGISTERED                LAST RUN ENDED                 HOST\n"
      "  jobs    old-report  40d ago (2026-01-20 09:00:00)  40d ago (2026-01-20 08:59:58)  web-1\n"
      "\n"
      "  Dry run: nothing was deleted. Run again with --yes to delete 1 task (its row, run history "
      "and registration).");
  prune->callback([options, &action] {
    action = [options](const Context& context) { return RunDbPrune(*options, context); };
  });
}

}  // namespace stagehand::cli
