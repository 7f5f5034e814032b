// `stagehand trigger PLUGIN TASK [--wait]`: asks a running daemon to run a task as soon as
// possible; with --wait, follows the run it started and exits with its outcome.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "cli/client_verb.h"
#include "cli/command.h"
#include "cli/run_client.h"
#include "cli/task_table.h"
#include "stagehand/backend/backend.h"
#include "stagehand/cli/cli.h"
#include "stagehand/service/scheduler.h"
#include "stagehand/time/duration.h"

namespace stagehand::cli {
namespace {

// How many of the newest runs are searched for the one a trigger started.
constexpr int kRunsSearched = 20;
// Every how many polls the task listing is read to see whether the task ran without a run
// appearing in the history.
constexpr int kListingEvery = 4;

struct TriggerOptions {
  TaskActionOptions task;
  bool wait = false;
  std::optional<std::string> timeout;
};

// The task's lastRunEndedAt in its plugin's listing (as text; "" when it has none).
Fetched<std::string> LastRunEnded(const RestClient& client, const std::string& plugin_id,
                                  const std::string& task_id) {
  Fetched<std::string> fetched;
  Fetched<std::string> body =
      FetchBody(client, "/api/" + EncodePathSegment(plugin_id) + "/.backstage/scheduler/v1/tasks",
                "cannot list the tasks of plugin '" + plugin_id + "'", plugin_id);
  if (!body.value) {
    fetched.failure = std::move(body.failure);
    return fetched;
  }
  Result<std::vector<TaskRow>> rows = ParseTaskListing(plugin_id, *body.value);
  if (!rows.ok()) {
    fetched.failure = {kExitFailure, rows.status().message()};
    return fetched;
  }
  fetched.value = "";
  for (const TaskRow& row : *rows) {
    if (row.task_id == task_id && row.last_run_ended_at) {
      fetched.value = FormatIsoInstantUtc(*row.last_run_ended_at);
    }
  }
  return fetched;
}

// Returns the oldest manual run of `page` listed before `noted_run_id` (newest first), i.e. the
// first manual run to start after it; all of the page's runs count when the noted run is not in
// it.
std::optional<RunRecord> FirstManualRunAfter(const RunPage& page,
                                             const std::optional<std::string>& noted_run_id) {
  std::optional<RunRecord> found;
  for (const RunRecord& run : page.runs) {
    if (noted_run_id && run.run_id == *noted_run_id) {
      break;
    }
    if (run.trigger == "manual") {
      found = run;
    }
  }
  return found;
}

// Waits for the run the trigger started to appear in the history, until `deadline`. Fails when
// the task ran meanwhile (its lastRunEndedAt moved, twice in a row) without such a run: a host
// that records no history ran it.
Fetched<RunRecord> WaitForTriggeredRun(const RestClient& client, const Context& context,
                                       const TriggerOptions& options,
                                       const std::optional<std::string>& noted_run_id,
                                       const std::string& ended_before, MonoTime deadline) {
  const std::string& plugin_id = options.task.plugin_id;
  const std::string& task_id = options.task.task_id;
  Fetched<RunRecord> fetched;
  int ran_without_history = 0;
  for (int poll = 1;; ++poll) {
    Fetched<RunPage> page = FetchRunPage(client, plugin_id, task_id, kRunsSearched);
    if (!page.value) {
      fetched.failure = std::move(page.failure);
      return fetched;
    }
    if (std::optional<RunRecord> run = FirstManualRunAfter(*page.value, noted_run_id)) {
      fetched.value = std::move(*run);
      return fetched;
    }
    if (poll % kListingEvery == 0) {
      Fetched<std::string> ended = LastRunEnded(client, plugin_id, task_id);
      if (!ended.value) {
        fetched.failure = std::move(ended.failure);
        return fetched;
      }
      ran_without_history = *ended.value != ended_before ? ran_without_history + 1 : 0;
      if (ran_without_history == 2) {
        fetched.failure = {
            kExitFailure,
            fmt::format("{}/{} ran, but no run of it appeared in the daemon's history: a host "
                        "that records no history ran it (a Backstage worker, or "
                        "stagehand.history.enabled: false)",
                        plugin_id, task_id)};
        return fetched;
      }
    }
    const MonoTime now = context.clock.MonoNow();
    if (now >= deadline) {
      fetched.failure = {kExitStillRunning,
                         fmt::format("no run of {}/{} has started yet", plugin_id, task_id)};
      return fetched;
    }
    const auto pause = std::min<std::chrono::nanoseconds>(kRunPollInterval, deadline - now);
    if (!context.clock.SleepFor(pause, context.stop)) {
      fetched.failure = {kExitFailure, "interrupted while waiting for the run to start"};
      return fetched;
    }
  }
}

int TriggerAndWait(const TriggerOptions& options, const Context& context) {
  const std::string& plugin_id = options.task.plugin_id;
  const std::string& task_id = options.task.task_id;
  if (std::optional<int> rejected = RejectInvalidIds(options.task, context)) return *rejected;
  MonoTime deadline = kMonoInfinity;
  std::string waited_for;
  if (options.timeout) {
    Result<HumanDuration> timeout = ParseDurationString(*options.timeout);
    if (!timeout.ok()) {
      return UsageError(
          context, "invalid --timeout '" + *options.timeout + "': " + timeout.status().message());
    }
    const std::chrono::milliseconds span = ToChronoMilliseconds(*timeout);
    if (span.count() <= 0) {
      return UsageError(context, "invalid --timeout '" + *options.timeout +
                                     "': it must be longer than zero, e.g. 30s or 10m");
    }
    deadline = context.clock.MonoNow() + span;
    waited_for = FormatShortDuration(span);
  }
  ClientOrFailure made = MakeClient(options.task.client, context);
  if (!made.client) {
    return Report(context, made.failure);
  }
  const RestClient& client = *made.client;

  Fetched<RunPage> newest = FetchRunPage(client, plugin_id, task_id, 1);
  if (!newest.value) {
    return Report(context, newest.failure);
  }
  std::optional<std::string> noted_run_id;
  if (!newest.value->runs.empty()) {
    noted_run_id = newest.value->runs.front().run_id;
  }
  Fetched<std::string> ended_before = LastRunEnded(client, plugin_id, task_id);
  if (!ended_before.value) {
    return Report(context, ended_before.failure);
  }
  if (std::optional<ClientFailure> failure =
          PostTaskAction(client, "trigger", plugin_id, task_id)) {
    return Report(context, *failure);
  }
  context.err << "Triggered " << plugin_id << '/' << task_id << "; waiting for its run\n";
  context.err.flush();

  const auto gave_up = [&](const ClientFailure& failure) {
    if (failure.exit_code != kExitStillRunning) {
      return Report(context, failure);
    }
    return Report(context, {kExitStillRunning,
                            "gave up waiting after " + waited_for + ": " + failure.message});
  };
  Fetched<RunRecord> run =
      WaitForTriggeredRun(client, context, options, noted_run_id, *ended_before.value, deadline);
  if (!run.value) {
    return gave_up(run.failure);
  }
  Fetched<RunDetail> first = FetchRun(client, plugin_id, run.value->run_id);
  if (!first.value) {
    return Report(context, first.failure);
  }
  Fetched<RunDetail> ended = FollowRun(client, context, plugin_id, *first.value, deadline);
  if (!ended.value) {
    if (ended.failure.exit_code == kExitStillRunning) {
      ended.failure.message += fmt::format(" ('stagehand logs {} {} {} --follow' follows it)",
                                           plugin_id, task_id, run.value->run_id);
    }
    return gave_up(ended.failure);
  }
  const RunRecord& result = ended.value->run;
  context.err << DescribeRunEnd(result) << '\n';
  context.err.flush();
  return ExitCodeForOutcome(result.outcome);
}

}  // namespace

void AddTriggerCommand(CLI::App& app, Action& action) {
  auto options = std::make_shared<TriggerOptions>();
  CLI::App* trigger = app.add_subcommand(
      "trigger",
      "Run a task of a running daemon as soon as possible (POST "
      "/api/<plugin>/.backstage/scheduler/v1/tasks/<task>/trigger); fails with 409 while it "
      "runs. With --wait, prints the run's output and exits with its outcome");
  AddTaskActionArguments(*trigger, options->task);
  CLI::Option* wait = trigger->add_flag(
      "-w,--wait", options->wait,
      "Wait for the run the trigger starts: print its output as it comes (stdout), then one line "
      "on how it ended (stderr), and exit with its outcome (see the exit codes below)");
  trigger
      ->add_option("--timeout", options->timeout,
                   "With --wait, give up after this long (e.g. 30s, 10m, 1h; default: wait until "
                   "the run ends); the run goes on")
      ->needs(wait);
  trigger->footer(
      std::string(kClientHelpFooter) +
      "\nWith --wait, the exit code is the run's outcome: 0 succeeded, 10 failed, 11 timed out, "
      "12 cancelled (also by a daemon's shutdown), 13 lost (its host died) or fenced (its host "
      "lost the claim), 14 --timeout passed first (the run goes on). It needs the daemon's run "
      "history (stagehand.history).\n"
      "Example:\n"
      "  STAGEHAND_TOKEN=secret stagehand trigger jobs report\n"
      "  Triggered jobs/report\n"
      "  stagehand trigger jobs backup --wait --timeout 10m; echo \"exit $?\"\n"
      "  Triggered jobs/backup; waiting for its run\n"
      "  backing up /srv/data\n"
      "  backup done\n"
      "  Run 6c1f0e2a-... of jobs/backup succeeded in 2.01s on web-1 (exit 0)\n"
      "  exit 0");
  trigger->callback([options, &action] {
    action = [options](const Context& context) {
      if (options->wait) {
        return TriggerAndWait(*options, context);
      }
      return RunTaskAction("trigger", "Triggered", options->task, context);
    };
  });
}

}  // namespace stagehand::cli
