// `stagehand logs PLUGIN TASK [RUN] [--follow]`: prints the output of a task's newest run, or of a
// given one, from the daemon's run history; with --follow, keeps printing a running run's output
// until it ends.

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "cli/client_verb.h"
#include "cli/command.h"
#include "cli/run_client.h"
#include "stagehand/backend/backend.h"
#include "stagehand/cli/cli.h"
#include "stagehand/service/scheduler.h"

namespace stagehand::cli {
namespace {

struct LogsOptions {
  TaskActionOptions task;
  std::optional<std::string> run_id;
  bool follow = false;
};

int RunLogs(const LogsOptions& options, const Context& context) {
  const std::string& plugin_id = options.task.plugin_id;
  const std::string& task_id = options.task.task_id;
  if (std::optional<int> rejected = RejectInvalidIds(options.task, context)) return *rejected;
  if (options.run_id && options.run_id->empty()) {
    return UsageError(context, "RUN is empty; give a run id from 'stagehand runs'");
  }
  ClientOrFailure made = MakeClient(options.task.client, context);
  if (!made.client) {
    return Report(context, made.failure);
  }
  const RestClient& client = *made.client;
  const std::string name = plugin_id + "/" + task_id;

  std::string run_id;
  if (options.run_id) {
    run_id = *options.run_id;
  } else {
    Fetched<RunPage> page = FetchRunPage(client, plugin_id, task_id, 1);
    if (!page.value) {
      return Report(context, page.failure);
    }
    if (page.value->runs.empty()) {
      return Report(context, {kExitNotFound, name + " has no runs in the daemon's history yet"});
    }
    run_id = page.value->runs.front().run_id;
  }
  Fetched<RunDetail> detail = FetchRun(client, plugin_id, run_id);
  if (!detail.value) {
    return Report(context, detail.failure);
  }
  if (detail.value->run.task_id != task_id) {
    return Report(context, {kExitNotFound, "run " + run_id + " is a run of " + plugin_id + "/" +
                                               detail.value->run.task_id + ", not of " + name});
  }
  const bool was_running = !HasEnded(detail.value->run.outcome);
  if (options.follow) {
    Fetched<RunDetail> ended = FollowRun(client, context, plugin_id, *detail.value, kMonoInfinity);
    if (!ended.value) {
      return Report(context, ended.failure);
    }
    if (was_running) {
      context.err << DescribeRunEnd(ended.value->run) << '\n';
    }
    return kExitOk;
  }
  if (was_running && !detail.value->live) {
    context.err << "Run " << run_id << " is still running on "
                << (detail.value->run.host.empty() ? "another host" : detail.value->run.host)
                << ", not on the daemon at " << client.url().ToString()
                << "; its output is known when it ends (--follow waits for it).\n";
    return kExitOk;
  }
  OutputFollower follower;
  PrintOutput(context, follower.Next(*detail.value));
  return kExitOk;
}

}  // namespace

void AddLogsCommand(CLI::App& app, Action& action) {
  auto options = std::make_shared<LogsOptions>();
  CLI::App* logs = app.add_subcommand(
      "logs",
      "Print what a task's newest run (or run RUN) printed, stdout and stderr interleaved, from "
      "the daemon's run history (GET /api/<plugin>/.stagehand/v1/runs/<run>)");
  AddTaskActionArguments(*logs, options->task);
  logs->add_option("run", options->run_id,
                   "Run id, as 'stagehand runs' lists it (default: the task's newest run)");
  logs->add_flag("-f,--follow", options->follow,
                 "While the run is going, keep printing its new output (checked every 0.5 s) "
                 "until it ends");
  logs->footer(
      std::string(kClientHelpFooter) +
      "\nThe history keeps the last 64 KiB of each run's output (stagehand.history."
      "maxOutputBytes); an HTTP task's output is the start of the response body. A run going on "
      "another host than the daemon asked is shown when it ends. Output is printed as the run "
      "wrote it, on stdout; notes go to stderr.\n"
      "Example:\n"
      "  stagehand logs jobs backup\n"
      "  backing up /srv/data\n"
      "  backup done\n"
      "  stagehand logs jobs backup 5f0c8a3e-6d1e-4b7a-9c35-0e2f4a6b8d10\n"
      "  stagehand logs jobs backup --follow");
  logs->callback([options, &action] {
    action = [options](const Context& context) { return RunLogs(*options, context); };
  });
}

}  // namespace stagehand::cli
