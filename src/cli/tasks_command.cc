// `stagehand tasks`: lists the tasks of a running daemon, every plugin's or one plugin's, as a
// table or as the REST API's JSON.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "cli/client_verb.h"
#include "cli/command.h"
#include "cli/run_client.h"
#include "cli/task_table.h"
#include "stagehand/backend/backend.h"
#include "stagehand/cli/cli.h"
#include "stagehand/time/duration.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::cli {
namespace {

constexpr std::string_view kPluginListPath = "/.stagehand/v1/plugins";

// How many history requests `tasks` sends at a time.
constexpr std::size_t kHistoryRequests = 8;
// How often `tasks --watch` redraws.
constexpr std::chrono::seconds kWatchInterval{2};

struct TasksOptions {
  ClientOptions client;
  std::optional<std::string> plugin_id;
  bool json = false;
  bool watch = false;
  std::optional<std::string> tz;
};

// A plugin's listing as fetched: its id and the REST body.
struct PluginListing {
  std::string plugin_id;
  std::string body;
};

// Returns the plugin ids the daemon serves, in its order.
Fetched<std::vector<std::string>> DiscoverPlugins(const RestClient& client) {
  Fetched<std::vector<std::string>> fetched;
  Result<RestReply> reply = client.Get(kPluginListPath);
  if (!reply.ok()) {
    fetched.failure = DescribeUnreachable(reply.status());
    return fetched;
  }
  if (reply->status < 200 || reply->status > 299) {
    fetched.failure = DescribeHttpFailure(
        *reply, "cannot list the plugins",
        "no " + std::string(kPluginListPath) + " at " + client.url().ToString() + "; pass --plugin",
        client.url(), client.has_token());
    return fetched;
  }
  nlohmann::json json = nlohmann::json::parse(reply->body, nullptr, false);
  if (json.is_object() && json.contains("plugins") && json["plugins"].is_array()) {
    std::vector<std::string> ids;
    for (const nlohmann::json& plugin : json["plugins"]) {
      if (plugin.is_object() && plugin.contains("id") && plugin["id"].is_string()) {
        ids.push_back(plugin["id"].get<std::string>());
      }
    }
    fetched.value = std::move(ids);
    return fetched;
  }
  fetched.failure = {kExitFailure, "cannot list the plugins: " + client.url().ToString() +
                                       std::string(kPluginListPath) +
                                       " did not answer {\"plugins\":[...]}"};
  return fetched;
}

// Fills in each row's last outcome and duration from the newest ended run among the task's two
// newest (one request per task, at most kHistoryRequests at a time). A task whose history cannot
// be read (none kept, an older daemon) keeps "-".
void AddLastRuns(const RestClient& client, std::vector<TaskRow>& rows) {
  std::atomic<std::size_t> next{0};
  auto work = [&client, &rows, &next] {
    for (std::size_t i = next++; i < rows.size(); i = next++) {
      TaskRow& row = rows[i];
      Fetched<RunPage> page = FetchRunPage(client, row.plugin_id, row.task_id, 2);
      if (!page.value) {
        continue;
      }
      for (const RunRecord& run : page.value->runs) {
        if (HasEnded(run.outcome)) {
          row.last_outcome = run.outcome;
          row.last_duration = run.duration;
          break;
        }
      }
    }
  };
  std::vector<std::jthread> workers;
  const std::size_t count = std::min(rows.size(), kHistoryRequests);
  workers.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    workers.emplace_back(work);
  }
}

// Returns what `tasks` prints, as text (the table, or "No tasks."), or the failure.
Fetched<std::string> TasksText(const TasksOptions& options, const RestClient& client,
                               const TimeZone& zone, const Context& context) {
  Fetched<std::string> text;
  std::vector<std::string> plugin_ids;
  if (options.plugin_id) {
    plugin_ids.push_back(*options.plugin_id);
  } else {
    Fetched<std::vector<std::string>> discovered = DiscoverPlugins(client);
    if (!discovered.value) {
      text.failure = std::move(discovered.failure);
      return text;
    }
    plugin_ids = std::move(*discovered.value);
  }

  std::vector<PluginListing> listings;
  for (const std::string& id : plugin_ids) {
    const std::string action = "cannot list the tasks of plugin '" + id + "'";
    const std::string plugin_path = "/api/" + EncodePathSegment(id);
    Fetched<std::string> body;
    // The table shows a cron cadence with its zone, which only stagehand's listing has; --json
    // prints Backstage's listing, and a daemon without stagehand's listing gets Backstage's.
    if (!options.json) {
      body = FetchBody(client, plugin_path + "/.stagehand/v1/tasks", action, id);
    }
    if (options.json || (!body.value && body.failure.exit_code == kExitNotFound)) {
      body = FetchBody(client, plugin_path + "/.backstage/scheduler/v1/tasks", action, id);
    }
    if (!body.value) {
      text.failure = std::move(body.failure);
      return text;
    }
    listings.push_back({id, std::move(*body.value)});
  }

  if (options.json) {
    if (options.plugin_id) {
      std::string body = listings.front().body;
      while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) {
        body.pop_back();
      }
      text.value = body + '\n';
      return text;
    }
    nlohmann::ordered_json all = nlohmann::ordered_json::object();
    for (const PluginListing& listing : listings) {
      nlohmann::ordered_json parsed =
          nlohmann::ordered_json::parse(listing.body, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) {
        text.failure = {kExitFailure,
                        "the task listing of plugin '" + listing.plugin_id + "' is not JSON"};
        return text;
      }
      all[listing.plugin_id] = std::move(parsed);
    }
    text.value = all.dump() + '\n';
    return text;
  }

  std::vector<TaskRow> rows;
  for (const PluginListing& listing : listings) {
    Result<std::vector<TaskRow>> parsed = ParseTaskListing(listing.plugin_id, listing.body);
    if (!parsed.ok()) {
      text.failure = {kExitFailure, parsed.status().message()};
      return text;
    }
    rows.insert(rows.end(), parsed->begin(), parsed->end());
  }
  if (rows.empty()) {
    text.value = plugin_ids.empty() ? "No plugins.\n" : "No tasks.\n";
    return text;
  }
  AddLastRuns(client, rows);
  text.value = RenderTaskTable(rows, context.clock.Now(), zone, context.colour);
  return text;
}

// Redraws the table every kWatchInterval until context.stop is requested (or Ctrl-C ends the
// process). A failed refresh shows its error in place of the table and the next one tries again.
int WatchTasks(const TasksOptions& options, const RestClient& client, const TimeZone& zone,
               const Context& context) {
  // Clears the screen and moves the cursor home, as clear(1) does.
  constexpr std::string_view kClearScreen = "\033[H\033[2J";
  const std::string every = FormatShortDuration(kWatchInterval);
  for (bool first = true;; first = false) {
    Fetched<std::string> text = TasksText(options, client, zone, context);
    const WallTime now = context.clock.Now();
    std::string frame;
    if (context.terminal) {
      frame += kClearScreen;
    } else if (!first) {
      frame += '\n';
    }
    frame += "Every " + every + ": stagehand tasks  " + FormatLocalTime(now, now, zone) +
             "  (Ctrl-C to stop)\n\n";
    frame += text.value ? *text.value : "stagehand: " + text.failure.message + '\n';
    context.out << frame;
    context.out.flush();
    if (!context.clock.SleepFor(kWatchInterval, context.stop)) {
      return kExitOk;
    }
  }
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
  if (options.watch) {
    return WatchTasks(options, *made.client, *zone, context);
  }
  Fetched<std::string> text = TasksText(options, *made.client, *zone, context);
  if (!text.value) {
    return Report(context, text.failure);
  }
  context.out << *text.value;
  context.out.flush();
  return kExitOk;
}

}  // namespace

void AddTasksCommand(CLI::App& app, Action& action) {
  auto options = std::make_shared<TasksOptions>();
  CLI::App* tasks = app.add_subcommand(
      "tasks",
      "List the tasks of a running daemon: every plugin's (found through GET "
      "/.stagehand/v1/plugins) or one plugin's, with cadence (a cron one with its zone), state, "
      "next run, last run, its outcome and duration, and last error");
  tasks->add_option("-p,--plugin", options->plugin_id, "Only this plugin's tasks");
  CLI::Option* json = tasks->add_flag(
      "--json", options->json,
      "Print the REST JSON instead of the table: with --plugin the listing {\"tasks\":[...]} as "
      "the daemon sent it, else an object of every plugin's listing keyed by plugin id, "
      "{\"<pluginId>\":{\"tasks\":[...]},...}");
  tasks
      ->add_flag("-w,--watch", options->watch,
                 "Redraw the table every 2 seconds until Ctrl-C; a failed refresh shows its error "
                 "and the next one tries again")
      ->excludes(json);
  tasks->add_option("--tz", options->tz,
                    "IANA time zone for the times shown, e.g. Europe/Berlin (default: the process "
                    "zone, from TZ)");
  AddClientOptions(*tasks, options->client);
  tasks->footer(
      std::string(kClientHelpFooter) +
      "\nTimes are relative and absolute in the zone: 'in 4s (12:00:05)', '2m58s ago "
      "(11:57:02)'; the date is added when it is not today. For a running task NEXT RUN says when "
      "the run started. OUTCOME and DURATION are those of the newest ended run in the daemon's "
      "run history (one request per task, 8 at a time; '-' without a history); LAST RUN ENDED "
      "and LAST ERROR come from the task table, as Backstage shows them. A cron CADENCE runs in "
      "the task's timeZone, else in the daemon's zone. Colours only when stdout is a terminal "
      "and NO_COLOR is unset.\n"
      "Example:\n"
      "  stagehand tasks --config examples/app-config.yaml --token secret\n"
      "  PLUGIN  TASK     SCOPE   CADENCE         STATE    NEXT RUN                         LAST "
      "RUN "
      "ENDED         OUTCOME    DURATION  LAST ERROR\n"
      "  jobs    hello    global  */10 * * * * *  idle     in 4s (12:00:05)                 6s ago "
      "(11:59:55)      succeeded  4ms       -\n"
      "  jobs    report   global  manual          running  started 3s ago (11:59:58)        -      "
      "                -          -         -\n"
      "  jobs    nightly  global  every 1d        idle     in 11h59m (2026-03-08 00:00:00)  11h59m "
      "ago (00:00:09)  failed     1.204s    command '/usr/local/bin/nightly' exited with code 1\n"
      "  stagehand tasks --plugin jobs --json\n"
      "  stagehand tasks --watch");
  tasks->callback([options, &action] {
    action = [options](const Context& context) { return RunTasks(*options, context); };
  });
}

}  // namespace stagehand::cli
