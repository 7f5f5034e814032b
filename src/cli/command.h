// The pieces every verb of the `stagehand` command line shares: the context a verb runs against
// and the hook through which each verb's file registers itself with the parser. Each verb lives in
// its own <verb>_command.cc and is added to the application in cli.cc.
#pragma once

#include <functional>
#include <iosfwd>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"
#include "stagehand/time/time_zone.h"

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11's namespace
class App;
}  // namespace CLI

namespace stagehand::cli {

// What a verb runs against. Run() uses the process streams' stand-ins it was given, the system
// clock and the process time zone; tests substitute a manual clock and a fixed zone. The
// referenced objects must outlive the call. Not thread-safe; one per command line.
struct Context {
  Context(std::ostream& out_stream, std::ostream& err_stream, Clock& wall_clock,
          const TimeZone* zone = nullptr)
      : out(out_stream), err(err_stream), clock(wall_clock), default_zone(zone) {}

  std::ostream& out;
  std::ostream& err;
  // Reads the time and paces the polling of --follow, --wait and --watch.
  Clock& clock;
  // The zone used when a verb is given no --tz; nullptr means TimeZone::ProcessDefault().
  const TimeZone* default_zone = nullptr;
  // Whether `out` may carry ANSI colours. Main sets it when stdout is a terminal and NO_COLOR is
  // unset; Run and tests leave it off.
  bool colour = false;
  // Whether `out` is a terminal, which `tasks --watch` clears before each redraw. Set by Main.
  bool terminal = false;
  // Ends the waits of --follow, --wait and --watch when requested (Ctrl-C ends the process
  // instead); for tests.
  std::stop_token stop;
  // Looks up environment variables such as STAGEHAND_TOKEN; null means the process environment.
  std::function<std::optional<std::string>(const std::string&)> environment;
};

// Runs the command line `args` (args[0] is the program name) against `context`. Returns the exit
// code: kExitOk, kExitFailure, or kExitUsage for bad flags, arguments or input.
int RunWithContext(const std::vector<std::string>& args, const Context& context);

// The work of the verb a command line selected, run once parsing has succeeded. Returns the exit
// code.
using Action = std::function<int(const Context&)>;

// Adds the `cron` verb (`stagehand cron next ...`) to `app`. When a command line selects one of its
// subcommands, parsing stores that subcommand's work in `action`, which must outlive the parse.
void AddCronCommand(CLI::App& app, Action& action);

// Adds the `db` verb (`stagehand db migrate ...`) to `app`, as AddCronCommand does.
void AddDbCommand(CLI::App& app, Action& action);

// Adds the `serve` verb (`stagehand serve --config ...`) to `app`, as AddCronCommand does.
void AddServeCommand(CLI::App& app, Action& action);

// Adds the `reload` verb (`stagehand reload`) to `app`, as AddCronCommand does.
void AddReloadCommand(CLI::App& app, Action& action);

// Adds the `tasks` verb (`stagehand tasks [--plugin ID] [--json]`) to `app`, as AddCronCommand
// does.
void AddTasksCommand(CLI::App& app, Action& action);

// Adds the `trigger` verb (`stagehand trigger PLUGIN TASK`) to `app`, as AddCronCommand does.
void AddTriggerCommand(CLI::App& app, Action& action);

// Adds the `cancel` verb (`stagehand cancel PLUGIN TASK`) to `app`, as AddCronCommand does.
void AddCancelCommand(CLI::App& app, Action& action);
// Adds the `pause` and `resume` verbs (`stagehand pause PLUGIN TASK [--until T] [--reason R]`,
// `stagehand resume PLUGIN TASK`) to `app`, as AddCronCommand does.
void AddPauseCommands(CLI::App& app, Action& action);

// Adds the `config` verb (`stagehand config check --config FILE...`) to `app`, as AddCronCommand
// does.
void AddConfigCommand(CLI::App& app, Action& action);

// Adds the `runs` verb (`stagehand runs PLUGIN TASK`) to `app`, as AddCronCommand does.
void AddRunsCommand(CLI::App& app, Action& action);

// Adds the `logs` verb (`stagehand logs PLUGIN TASK [RUN] [--follow]`) to `app`, as AddCronCommand
// does.
void AddLogsCommand(CLI::App& app, Action& action);

// Adds the `completion` verb (`stagehand completion bash|zsh|fish`) to `app`, as AddCronCommand
// does. Its script covers every command and option of `app` at the time the action runs.
void AddCompletionCommand(CLI::App& app, Action& action);

// Returns the value of the environment variable `name` through context.environment (or the
// process environment); nullopt when it is unset.
std::optional<std::string> LookupEnvironment(const Context& context, const std::string& name);

// Writes "stagehand: <message>" to context.err and returns kExitUsage.
int UsageError(const Context& context, std::string_view message);

// Returns the zone a verb shows times in: `tz` when given, else the context's default, else the
// process zone. Errors: kInvalidArgument "invalid --tz: ..." for an unknown zone.
Result<TimeZone> ResolveZone(const std::optional<std::string>& tz, const Context& context);

// Writes "stagehand: <message>" to context.err and returns kExitFailure.
int Failure(const Context& context, std::string_view message);

}  // namespace stagehand::cli
