// `stagehand trigger PLUGIN TASK`: asks a running daemon to run a task as soon as possible.

#include <CLI/CLI.hpp>
#include <memory>

#include "cli/client_verb.h"
#include "cli/command.h"

namespace stagehand::cli {

void AddTriggerCommand(CLI::App& app, Action& action) {
  auto options = std::make_shared<TaskActionOptions>();
  CLI::App* trigger = app.add_subcommand(
      "trigger",
      "Run a task of a running daemon as soon as possible (POST "
      "/api/<plugin>/.backstage/scheduler/v1/tasks/<task>/trigger); fails with 409 while it runs");
  AddTaskActionArguments(*trigger, *options);
  trigger->footer(std::string(kClientHelpFooter) +
                  "\nExample:\n"
                  "  STAGEHAND_TOKEN=secret stagehand trigger jobs report\n"
                  "  Triggered jobs/report");
  trigger->callback([options, &action] {
    action = [options](const Context& context) {
      return RunTaskAction("trigger", "Triggered", *options, context);
    };
  });
}

}  // namespace stagehand::cli
