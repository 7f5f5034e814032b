// `stagehand cancel PLUGIN TASK`: asks a running daemon to stop the current run of a task.

#include <CLI/CLI.hpp>
#include <memory>

#include "cli/client_verb.h"
#include "cli/command.h"

namespace stagehand::cli {

void AddCancelCommand(CLI::App& app, Action& action) {
  auto options = std::make_shared<TaskActionOptions>();
  CLI::App* cancel = app.add_subcommand(
      "cancel",
      "Stop the current run of a task of a running daemon (POST "
      "/api/<plugin>/.backstage/scheduler/v1/tasks/<task>/cancel); fails with 409 when it is "
      "not running");
  AddTaskActionArguments(*cancel, *options);
  cancel->footer(std::string(kClientHelpFooter) +
                 "\nExample:\n"
                 "  stagehand cancel jobs report --url http://127.0.0.1:7007 --token secret\n"
                 "  Cancelled jobs/report");
  cancel->callback([options, &action] {
    action = [options](const Context& context) {
      return RunTaskAction("cancel", "Cancelled", *options, context);
    };
  });
}

}  // namespace stagehand::cli
