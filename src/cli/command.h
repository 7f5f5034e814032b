// The pieces every verb of the `stagehand` command line shares: the context a verb runs against
// and the hook through which each verb's file registers itself with the parser. Each verb lives in
// its own <verb>_command.cc and is added to the application in cli.cc.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "stagehand/time/clock.h"
#include "stagehand/time/time_zone.h"

namespace CLI {
class App;
}  // namespace CLI

namespace stagehand::cli {

// What a verb runs against. Run() uses the process streams' stand-ins it was given, the system
// clock and the process time zone; tests substitute a manual clock and a fixed zone. The
// referenced objects must outlive the call. Not thread-safe; one per command line.
struct Context {
  std::ostream& out;
  std::ostream& err;
  const Clock& clock;
  // The zone used when a verb is given no --tz; nullptr means TimeZone::ProcessDefault().
  const TimeZone* default_zone = nullptr;
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

// Writes "stagehand: <message>" to context.err and returns kExitUsage.
int UsageError(const Context& context, std::string_view message);

// Writes "stagehand: <message>" to context.err and returns kExitFailure.
int Failure(const Context& context, std::string_view message);

}  // namespace stagehand::cli
