// `stagehand pause PLUGIN TASK [--until T] [--reason R] [--cancel]` and `stagehand resume PLUGIN
// TASK`: pause a global task on every host that shares its table (Backstage workers included), and
// resume it.

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "cli/client_verb.h"
#include "cli/command.h"
#include "stagehand/base/host_name.h"
#include "stagehand/base/json_string.h"
#include "stagehand/time/duration.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::cli {
namespace {

struct PauseOptions {
  TaskActionOptions task;
  std::optional<std::string> until;
  std::string reason;
  bool cancel = false;
};

// Returns the instant `text` names: an ISO-8601 instant with its offset, or a duration from now
// ("2h", "30 minutes", "PT1H"). Errors: kInvalidArgument naming --until.
Result<WallTime> ParseUntil(const std::string& text, const Context& context) {
  if (Result<WallTime> instant = ParseIsoInstant(text); instant.ok()) return *instant;
  Result<HumanDuration> duration = ParseDurationString(text);
  if (!duration.ok()) duration = ParseIsoDuration(text);
  if (!duration.ok()) {
    return InvalidArgumentError(
        "--until must be an ISO-8601 instant with its offset "
        "(2026-12-24T08:00:00Z) or a duration from now (2h, 30 minutes), "
        "got '" +
        text + "'");
  }
  return context.clock.Now() + ToChronoMilliseconds(*duration);
}

// Who pauses: $USER@host, or the host alone.
std::string PausedBy(const Context& context) {
  const std::string host = LocalHostName();
  const std::optional<std::string> user = LookupEnvironment(context, "USER");
  return user && !user->empty() ? *user + "@" + host : host;
}

}  // namespace

void AddPauseCommands(CLI::App& app, Action& action) {
  auto pause_options = std::make_shared<PauseOptions>();
  CLI::App* pause = app.add_subcommand(
      "pause",
      "Pause a global task on every host that shares its table, Backstage workers included, until "
      "resumed or --until (POST /api/<plugin>/.stagehand/v1/tasks/<task>/pause); a run in progress "
      "goes on and the pause takes effect when it ends, unless --cancel");
  AddTaskActionArguments(*pause, pause_options->task);
  pause->add_option("--until", pause_options->until,
                    "Resume by itself then: an ISO-8601 instant with its offset, or a duration "
                    "from now (2h, 30 minutes)");
  pause->add_option("--reason", pause_options->reason, "Why, shown in 'stagehand tasks'");
  pause->add_flag("--cancel", pause_options->cancel,
                  "Also cancel the run in progress, as 'stagehand cancel' does");
  pause->footer(std::string(kClientHelpFooter) +
                "\nWho paused it is recorded as the token's subject followed by ($USER@<host>), or "
                "$USER@<host> alone when the daemon has no authentication. Triggering a paused "
                "task answers 409.\n"
                "Example:\n"
                "  stagehand pause jobs backup --until 2h --reason 'storage migration'\n"
                "  Paused jobs/backup");
  pause->callback([pause_options, &action] {
    action = [pause_options](const Context& context) {
      std::string body = "{\"by\":";
      AppendJsonString(body, PausedBy(context));
      body += ",\"reason\":";
      AppendJsonString(body, pause_options->reason);
      if (pause_options->until) {
        Result<WallTime> until = ParseUntil(*pause_options->until, context);
        if (!until.ok()) return UsageError(context, until.status().message());
        body += ",\"until\":";
        AppendJsonString(body, FormatIsoInstantUtc(*until));
      }
      if (pause_options->cancel) body += ",\"cancel\":true";
      body += '}';
      return RunTaskAction("pause", "Paused", pause_options->task, context, kStagehandTasksApi,
                           body);
    };
  });

  auto resume_options = std::make_shared<TaskActionOptions>();
  CLI::App* resume = app.add_subcommand(
      "resume",
      "Resume a paused task (POST /api/<plugin>/.stagehand/v1/tasks/<task>/resume); a slot it "
      "missed while paused runs at once; 409 when it is not paused");
  AddTaskActionArguments(*resume, *resume_options);
  resume->footer(std::string(kClientHelpFooter) +
                 "\nExample:\n"
                 "  stagehand resume jobs backup\n"
                 "  Resumed jobs/backup");
  resume->callback([resume_options, &action] {
    action = [resume_options](const Context& context) {
      return RunTaskAction("resume", "Resumed", *resume_options, context, kStagehandTasksApi);
    };
  });
}

}  // namespace stagehand::cli
