// `stagehand runs PLUGIN TASK`: lists a task's runs from the daemon's run history, newest first,
// as a table or as the REST API's JSON.

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "cli/client_verb.h"
#include "cli/command.h"
#include "cli/run_client.h"
#include "cli/text_table.h"
#include "stagehand/backend/backend.h"
#include "stagehand/cli/cli.h"
#include "stagehand/service/scheduler.h"
#include "stagehand/store/run_history.h"

namespace stagehand::cli {
namespace {

constexpr int kDefaultLimit = 20;

struct RunsOptions {
  TaskActionOptions task;
  int limit = kDefaultLimit;
  std::optional<std::string> before;
  bool json = false;
  std::optional<std::string> tz;
};

int RunRuns(const RunsOptions& options, const Context& context) {
  const std::string& plugin_id = options.task.plugin_id;
  const std::string& task_id = options.task.task_id;
  if (std::optional<int> rejected = RejectInvalidIds(options.task, context)) return *rejected;
  Result<TimeZone> zone = ResolveZone(options.tz, context);
  if (!zone.ok()) {
    return UsageError(context, zone.status().message());
  }
  ClientOrFailure made = MakeClient(options.task.client, context);
  if (!made.client) {
    return Report(context, made.failure);
  }
  const std::string name = plugin_id + "/" + task_id;
  if (options.json) {
    Fetched<std::string> body =
        FetchBody(*made.client, TaskRunsPath(plugin_id, task_id, options.limit, options.before),
                  "cannot list the runs of " + name, plugin_id);
    if (!body.value) {
      return Report(context, body.failure);
    }
    std::string& text = *body.value;
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
      text.pop_back();
    }
    context.out << text << '\n';
    context.out.flush();
    return kExitOk;
  }
  Fetched<RunPage> page =
      FetchRunPage(*made.client, plugin_id, task_id, options.limit, options.before);
  if (!page.value) {
    return Report(context, page.failure);
  }
  if (page.value->runs.empty()) {
    context.out << (options.before ? "No older runs of " : "No runs of ") << name << ".\n";
  } else {
    context.out << RenderRunTable(page.value->runs, context.clock.Now(), *zone, context.colour);
  }
  context.out.flush();
  if (page.value->next_cursor) {
    context.err << "Older runs: stagehand runs " << plugin_id << ' ' << ShellQuote(task_id)
                << " --before " << ShellQuote(*page.value->next_cursor) << '\n';
  }
  return kExitOk;
}

}  // namespace

void AddRunsCommand(CLI::App& app, Action& action) {
  auto options = std::make_shared<RunsOptions>();
  CLI::App* runs = app.add_subcommand(
      "runs",
      "List a task's runs from the daemon's run history, newest first: when each started, on "
      "which host, what started it, how it ended, how long it took and how late it started (GET "
      "/api/<plugin>/.stagehand/v1/tasks/<task>/runs)");
  AddTaskActionArguments(*runs, options->task);
  runs->add_option("-n,--limit", options->limit, "How many runs to list, 1 to 1000")
      ->default_val(kDefaultLimit)
      ->check(CLI::Range(1, kMaxRunPageSize));
  runs->add_option("--before", options->before,
                   "Cursor from the end of a previous listing: list the runs older than it");
  runs->add_flag("--json", options->json,
                 R"(Print the REST JSON instead of the table: {"runs":[...],"nextCursor":...})");
  runs->add_option("--tz", options->tz,
                   "IANA time zone for the times shown, e.g. Europe/Berlin (default: the process "
                   "zone, from TZ)");
  runs->footer(
      std::string(kClientHelpFooter) +
      "\nColumns: STARTED (relative, and absolute in --tz), HOST (the stagehand host that ran "
      "it), TRIGGER (schedule, manual, retry, catch_up), OUTCOME (running, succeeded, failed, "
      "timed_out, cancelled, lost: its host vanished, fenced: its host lost the claim), DURATION, "
      "LAG (how late after its due time it started; - for manual runs), EXIT (exit code, killing "
      "signal or HTTP status), RUN ID (for 'stagehand logs') and ERROR. Runs of Backstage "
      "workers sharing the task table are not recorded. When there are more, the command to list "
      "them is printed on stderr.\n"
      "Example:\n"
      "  stagehand runs jobs backup --limit 2 --tz Europe/Berlin\n"
      "  STARTED            HOST   TRIGGER   OUTCOME    DURATION  LAG   EXIT  RUN ID              "
      "                  ERROR\n"
      "  1m ago (09:02:45)  web-1  manual    failed     2.01s     -     1     "
      "6c1f0e2a-9b3d-4e57-8a41-0f2d6c7b9e10  command '/bin/sh' exited with code 1; stderr:; no…\n"
      "  9h ago (00:00:00)  web-2  schedule  succeeded  2.004s    12ms  0     "
      "0b9d77c4-3e8a-4c1f-9d62-5a7e1b4c8f03  -\n"
      "  Older runs: stagehand runs jobs backup --before MjAyNi0xMi0wMVQwMDowMDowMC4wMTJa");
  runs->callback([options, &action] {
    action = [options](const Context& context) { return RunRuns(*options, context); };
  });
}

}  // namespace stagehand::cli
