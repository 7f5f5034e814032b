// `stagehand reload`: asks a running daemon to re-read its config files and apply its tasks'
// changes (POST /.stagehand/v1/reload), then prints what changed, or every problem that stopped
// the reload.

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/client_verb.h"
#include "cli/command.h"
#include "stagehand/cli/cli.h"

namespace stagehand::cli {
namespace {

constexpr std::string_view kReloadPath = "/.stagehand/v1/reload";

// "jobs/a, jobs/b" for the ids under `key` of every plugin of the answer.
std::string QualifiedIds(const nlohmann::json& answer, const char* key) {
  std::string ids;
  for (const nlohmann::json& plugin : answer.value("plugins", nlohmann::json::array())) {
    for (const nlohmann::json& id : plugin.value(key, nlohmann::json::array())) {
      if (!id.is_string()) continue;
      ids += (ids.empty() ? "" : ", ") + plugin.value("id", std::string()) + "/" +
             id.get<std::string>();
    }
  }
  return ids;
}

// Prints the summary of a successful reload: one line per kind of change that happened.
void PrintSummary(const nlohmann::json& answer, const Context& context) {
  context.out << "Reloaded: " << answer.value("added", 0) << " added, "
              << answer.value("removed", 0) << " removed, " << answer.value("changed", 0)
              << " changed, " << answer.value("unchanged", 0) << " unchanged\n";
  for (const char* key : {"added", "removed", "changed"}) {
    if (std::string ids = QualifiedIds(answer, key); !ids.empty()) {
      context.out << "  " << key << ": " << ids << '\n';
    }
  }
  context.out.flush();
}

int RunReload(const ClientOptions& options, const Context& context) {
  ClientOrFailure made = MakeClient(options, context);
  if (!made.client) return Report(context, made.failure);
  Result<RestReply> reply = made.client->Post(kReloadPath, "{}");
  if (!reply.ok()) return Report(context, DescribeUnreachable(reply.status()));
  const nlohmann::json answer = nlohmann::json::parse(reply->body, nullptr, false);
  if (reply->status >= 200 && reply->status <= 299) {
    if (!answer.is_object()) {
      return Report(context, {kExitFailure, "the daemon's answer to the reload is not JSON"});
    }
    PrintSummary(answer, context);
    return kExitOk;
  }
  if (answer.is_object() && answer.contains("problems") && answer["problems"].is_array()) {
    context.err << "stagehand: the reload changed nothing; the daemon's new config has "
                << answer["problems"].size() << " problem(s):\n";
    for (const nlohmann::json& problem : answer["problems"]) {
      context.err << "stagehand: " << (problem.is_string() ? problem.get<std::string>() : "?")
                  << '\n';
    }
    context.err.flush();
    return ExitCodeForHttpStatus(reply->status);
  }
  return Report(context, DescribeHttpFailure(*reply, "cannot reload",
                                             "the daemon at " + made.client->url().ToString() +
                                                 " does not offer reloads (is it an older "
                                                 "stagehand?)",
                                             made.client->url(), made.client->has_token()));
}

}  // namespace

void AddReloadCommand(CLI::App& app, Action& action) {
  auto options = std::make_shared<ClientOptions>();
  CLI::App* reload = app.add_subcommand(
      "reload",
      "Make a running daemon re-read its config files and apply its tasks' changes without a "
      "restart (POST /.stagehand/v1/reload, as SIGHUP does); prints what was added, removed and "
      "changed, or every problem when the new config is refused");
  AddClientOptions(*reload, *options);
  reload->footer(
      std::string(kClientHelpFooter) +
      "\nThe daemon re-reads the --config files it was started with (this command's --config only "
      "tells where the daemon listens). Tasks added start being scheduled, removed ones stop "
      "recurring (a run in progress ends normally), changed ones take their new schedule, "
      "timeout and command from their next run. If the new config is invalid, adds or removes a "
      "plugin, changes a task's scope or changes any setting outside "
      "stagehand.plugins.<pluginId>.tasks (those need a restart), nothing changes: the exit code "
      "is 1 and every problem is printed.\n"
      "Example:\n"
      "  stagehand reload\n"
      "  Reloaded: 1 added, 0 removed, 1 changed, 4 unchanged\n"
      "    added: jobs/cleanup\n"
      "    changed: jobs/report");
  reload->callback([options, &action] {
    action = [options](const Context& context) { return RunReload(*options, context); };
  });
}

}  // namespace stagehand::cli
