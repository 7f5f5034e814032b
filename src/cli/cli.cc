#include "stagehand/cli/cli.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"

#ifndef STAGEHAND_VERSION
#define STAGEHAND_VERSION "unknown"
#endif

namespace stagehand::cli {
namespace {

constexpr std::string_view kDescription =
    "stagehand: a distributed task scheduler compatible with Backstage's scheduler service.";

// Returns "stagehand cron next" for the `next` subcommand of `cron`.
std::string CommandPath(const CLI::App& command) {
  std::string path = command.get_name();
  for (const CLI::App* parent = command.get_parent(); parent != nullptr;
       parent = parent->get_parent()) {
    path.insert(0, parent->get_name() + " ");
  }
  return path;
}

// Returns the message for a failed parse. CLI11 says only "A subcommand is required" both when the
// word typed is not a known command and when none was typed; name the word or the choices instead.
std::string ParseErrorMessage(const CLI::App& app, const CLI::ParseError& error) {
  const CLI::App* deepest = &app;
  while (!deepest->get_subcommands().empty()) {
    deepest = deepest->get_subcommands().front();
  }
  if (dynamic_cast<const CLI::RequiredError*>(&error) == nullptr ||
      deepest->get_require_subcommand_min() == 0) {
    return error.what();
  }
  std::vector<std::string> unparsed = deepest->remaining();
  if (!unparsed.empty()) {
    return "unknown command '" + unparsed.front() + "' for '" + CommandPath(*deepest) + "'";
  }
  std::string choices;
  for (const CLI::App* command : deepest->get_subcommands([](const CLI::App*) { return true; })) {
    choices += (choices.empty() ? "" : ", ") + command->get_name();
  }
  return "'" + CommandPath(*deepest) + "' needs a command: " + choices;
}

}  // namespace

int UsageError(const Context& context, std::string_view message) {
  context.err << "stagehand: " << message << '\n';
  return kExitUsage;
}

Result<TimeZone> ResolveZone(const std::optional<std::string>& tz, const Context& context) {
  if (tz) {
    Result<TimeZone> located = TimeZone::Locate(*tz);
    if (!located.ok()) {
      return InvalidArgumentError("invalid --tz: " + located.status().message());
    }
    return located;
  }
  if (context.default_zone != nullptr) {
    return *context.default_zone;
  }
  return TimeZone::ProcessDefault();
}

int Failure(const Context& context, std::string_view message) {
  context.err << "stagehand: " << message << '\n';
  return kExitFailure;
}

std::optional<std::string> LookupEnvironment(const Context& context, const std::string& name) {
  if (context.environment) {
    return context.environment(name);
  }
  // Read once per verb on the main thread, before any thread of ours exists.
  const char* value = std::getenv(name.c_str());  // NOLINT(concurrency-mt-unsafe)
  return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

int RunWithContext(const std::vector<std::string>& args, const Context& context) {
  CLI::App app{std::string(kDescription), "stagehand"};
  app.set_version_flag("--version", "stagehand " STAGEHAND_VERSION);
  app.require_subcommand(1);
  app.footer("Run 'stagehand <command> --help' for a command's flags and an example.");

  Action action;
  AddCronCommand(app, action);
  AddDbCommand(app, action);
  AddServeCommand(app, action);
  AddReloadCommand(app, action);
  AddTasksCommand(app, action);
  AddTriggerCommand(app, action);
  AddCancelCommand(app, action);
  AddPauseCommands(app, action);
  AddConfigCommand(app, action);
  AddRunsCommand(app, action);
  AddLogsCommand(app, action);
  AddCompletionCommand(app, action);

  // CLI11 takes the arguments in reverse order, without the program name.
  std::vector<std::string> reversed;
  reversed.reserve(args.size());
  for (std::size_t i = args.size(); i > 1; --i) {
    reversed.push_back(args[i - 1]);
  }
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, context.out, context.err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, context.out, context.err);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e, context.out, context.err);
  } catch (const CLI::ParseError& e) {
    context.err << "stagehand: " << ParseErrorMessage(app, e)
                << "\nRun with --help for more information.\n";
    return kExitUsage;
  }
  if (!action) {
    return UsageError(context, "no command given; run 'stagehand --help'");
  }
  return action(context);
}

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return RunWithContext(args, Context{out, err, SystemClock::Instance()});
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  Context context{std::cout, std::cerr, SystemClock::Instance()};
  context.terminal = isatty(STDOUT_FILENO) == 1;
  context.colour =
      context.terminal && std::getenv("NO_COLOR") == nullptr;  // NOLINT(concurrency-mt-unsafe)
  return RunWithContext(args, context);
}

}  // namespace stagehand::cli
