// `stagehand tasks`: lists the tasks of a running daemon, every plugin's or one plugin's, as a
// table or as the REST API's JSON.

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/client_verb.h"
#include "cli/command.h"
#include "cli/task_table.h"
#include "stagehand/backend/backend.h"
#include "stagehand/cli/cli.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::cli {
namespace {

constexpr std::string_view kPluginListPath = "/.stagehand/v1/plugins";

struct TasksOptions {
  ClientOptions client;
  std::optional<std::string> plugin_id;
  bool json = false;
  std::optional<std::string> tz;
};

// A plugin's listing as fetched: its id and the REST body.
struct PluginListing {
  std::string plugin_id;
  std::string body;
};

// Returns the plugin ids the daemon serves, in its order, or the failure.
std::optional<std::vector<std::string>> DiscoverPlugins(const RestClient& client,
                                                        ClientFailure& failure) {
  Result<RestReply> reply = client.Get(kPluginListPath);
  if (!reply.ok()) {
    failure = DescribeUnreachable(reply.status());
    return std::nullopt;
  }
  if (reply->status < 200 || reply->status > 299) {
    failure = DescribeHttpFailure(
        *reply, "cannot list the plugins",
        "no " + std::string(kPluginListPath) + " at " + client.url().ToString() + "; pass --plugin",
        client.url(), client.has_token());
    return std::nullopt;
  }
  nlohmann::json json = nlohmann::json::parse(reply->body, nullptr, false);
  std::vector<std::string> ids;
  if (json.is_object() && json.contains("plugins") && json["plugins"].is_array()) {
    for (const nlohmann::json& plugin : json["plugins"]) {
      if (plugin.is_object() && plugin.contains("id") && plugin["id"].is_string()) {
        ids.push_back(plugin["id"].get<std::string>());
      }
    }
    return ids;
  }
  failure = {kExitFailure, "cannot list the plugins: " + client.url().ToString() +
                               std::string(kPluginListPath) +
                               " did not answer {\"plugins\":[...]}"};
  return std::nullopt;
}

int RunTasks(const TasksOptions& options, const Context& context) {
  if (options.plugin_id) {
    if (Status valid = ValidatePluginId(*options.plugin_id); !valid.ok()) {
      return UsageError(context, valid.message());
    }
  }
  Result<TimeZone> zone = ResolveZone(options.tz, context);
  if (!zone.ok()) {
    return UsageError(context, zone.status().message());
  }

  ClientOrFailure made = MakeClient(options.client, context);
  if (!made.client) {
    return Report(context, made.failure);
  }
  const RestClient& client = *made.client;

  std::vector<std::string> plugin_ids;
  if (options.plugin_id) {
    plugin_ids.push_back(*options.plugin_id);
  } else {
    ClientFailure failure;
    std::optional<std::vector<std::string>> discovered = DiscoverPlugins(client, failure);
    if (!discovered) {
      return Report(context, failure);
    }
    plugin_ids = std::move(*discovered);
  }

  std::vector<PluginListing> listings;
  for (const std::string& id : plugin_ids) {
    Result<RestReply> reply =
        client.Get("/api/" + EncodePathSegment(id) + "/.backstage/scheduler/v1/tasks");
    if (!reply.ok()) {
      return Report(context, DescribeUnreachable(reply.status()));
    }
    if (reply->status < 200 || reply->status > 299) {
      return Report(context,
                    DescribeHttpFailure(*reply, "cannot list the tasks of plugin '" + id + "'",
                                        "no plugin '" + id + "' at " + client.url().ToString(),
                                        client.url(), client.has_token()));
    }
    listings.push_back({id, std::move(reply->body)});
  }

  if (options.json) {
    if (options.plugin_id) {
      std::string body = listings.front().body;
      while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) {
        body.pop_back();
      }
      context.out << body << '\n';
    } else {
      nlohmann::ordered_json all = nlohmann::ordered_json::object();
      for (const PluginListing& listing : listings) {
        nlohmann::ordered_json parsed =
            nlohmann::ordered_json::parse(listing.body, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded()) {
          return Report(context, {kExitFailure, "the task listing of plugin '" + listing.plugin_id +
                                                    "' is not JSON"});
        }
        all[listing.plugin_id] = std::move(parsed);
      }
      context.out << all.dump() << '\n';
    }
    context.out.flush();
    return kExitOk;
  }

  std::vector<TaskRow> rows;
  for (const PluginListing& listing : listings) {
    Result<std::vector<TaskRow>> parsed = ParseTaskListing(listing.plugin_id, listing.body);
    if (!parsed.ok()) {
      return Report(context, {kExitFailure, parsed.status().message()});
    }
    rows.insert(rows.end(), parsed->begin(), parsed->end());
  }
  if (rows.empty()) {
    context.out << (plugin_ids.empty() ? "No plugins.\n" : "No tasks.\n");
  } else {
    context.out << RenderTaskTable(rows, context.clock.Now(), *zone, context.colour);
  }
  context.out.flush();
  return kExitOk;
}

}  // namespace

void AddTasksCommand(CLI::App& app, Action& action) {
  auto options = std::make_shared<TasksOptions>();
  CLI::App* tasks = app.add_subcommand(
      "tasks",
      "List the tasks of a running daemon: every plugin's (found through GET "
      "/.stagehand/v1/plugins) or one plugin's, with cadence, state, next run, last run and "
      "last error");
  tasks->add_option("-p,--plugin", options->plugin_id, "Only this plugin's tasks");
  tasks->add_flag("--json", options->json,
                  "Print the REST JSON instead of the table: with --plugin the listing "
                  "{\"tasks\":[...]} as the daemon sent it, else an object of every plugin's "
                  "listing keyed by plugin id, {\"<pluginId>\":{\"tasks\":[...]},...}");
  tasks->add_option("--tz", options->tz,
                    "IANA time zone for the times shown, e.g. Europe/Berlin (default: the process "
                    "zone, from TZ)");
  AddClientOptions(*tasks, options->client);
  tasks->footer(
      std::string(kClientHelpFooter) +
      "\nTimes are relative and absolute in the zone: 'in 4s (12:00:05)', '2m58s ago "
      "(11:57:02)'; the date is added when it is not today. For a running task NEXT RUN says when "
      "the run started. Colours only when stdout is a terminal and NO_COLOR is unset.\n"
      "Example:\n"
      "  stagehand tasks --config examples/app-config.yaml --token secret\n"
      "  PLUGIN  TASK     SCOPE   CADENCE         STATE    NEXT RUN                         LAST "
      "RUN ENDED         LAST ERROR\n"
      "  jobs    hello    global  */10 * * * * *  idle     in 4s (12:00:05)                 6s ago "
      "(11:59:55)      -\n"
      "  jobs    report   global  manual          running  started 3s ago (11:59:58)        -      "
      "                -\n"
      "  jobs    nightly  global  every 1d        idle     in 11h59m (2026-03-08 00:00:00)  11h59m "
      "ago (00:00:09)  Command exited with code 1\n"
      "  stagehand tasks --plugin jobs --json");
  tasks->callback([options, &action] {
    action = [options](const Context& context) { return RunTasks(*options, context); };
  });
}

}  // namespace stagehand::cli
