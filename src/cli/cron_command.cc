// `stagehand cron next`: previews the fire times of a cron expression.

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "cli/command.h"
#include "stagehand/cli/cli.h"
#include "stagehand/time/cron.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::cli {
namespace {

struct CronNextOptions {
  std::string expression;
  int count = 5;
  std::optional<std::string> from;
  std::optional<std::string> tz;
};

int RunCronNext(const CronNextOptions& options, const Context& context) {
  if (options.count < 1) {
    return UsageError(context, "--count must be at least 1");
  }
  Result<CronExpression> cron = CronExpression::Parse(options.expression);
  if (!cron.ok()) {
    return UsageError(context, "invalid cron expression '" + options.expression +
                                   "': " + cron.status().message());
  }

  Result<TimeZone> zone = ResolveZone(options.tz, context);
  if (!zone.ok()) {
    return UsageError(context, zone.status().message());
  }

  WallTime instant = context.clock.Now();
  if (options.from) {
    Result<WallTime> parsed = ParseIsoInstant(*options.from);
    if (!parsed.ok()) {
      return UsageError(context, "invalid --from: " + parsed.status().message());
    }
    instant = *parsed;
  }

  for (int i = 0; i < options.count; ++i) {
    Result<WallTime> next = cron->NextAfter(instant, *zone);
    if (!next.ok()) {
      return Failure(context, next.status().message());
    }
    instant = *next;
    context.out << FormatIsoInstant(instant, *zone) << '\n';
  }
  context.out.flush();
  return kExitOk;
}

}  // namespace

void AddCronCommand(CLI::App& app, Action& action) {
  CLI::App* cron = app.add_subcommand("cron", "Work with cron expressions");
  cron->require_subcommand(1);
  cron->footer("Example:\n  stagehand cron next '*/15 9-17 * * mon-fri' --count 3");

  auto options = std::make_shared<CronNextOptions>();
  CLI::App* next = cron->add_subcommand(
      "next",
      "Print the next fire times of a cron expression, one per line (ISO-8601 with the "
      "zone's UTC offset)");
  next->add_option("expression", options->expression,
                   "5 fields (minute hour day-of-month month day-of-week), 6 with seconds "
                   "first, or a preset such as @daily")
      ->required();
  next->add_option("-n,--count", options->count, "How many fire times to print")->default_val(5);
  next->add_option("--from", options->from,
                   "Start strictly after this ISO-8601 instant, e.g. 2026-03-07T12:00:00Z "
                   "(default: now)");
  next->add_option("--tz", options->tz,
                   "IANA time zone to evaluate in, e.g. Europe/Berlin (default: the process "
                   "zone, from TZ)");
  next->footer(
      "Example:\n"
      "  stagehand cron next '30 2 * * *' --tz America/New_York --from 2026-03-07T12:00:00Z "
      "--count 3\n"
      "  2026-03-08T03:00:00.000-04:00  (02:30 does not exist that day: fires at the jump)\n"
      "  2026-03-09T02:30:00.000-04:00\n"
      "  2026-03-10T02:30:00.000-04:00");
  next->callback([options, &action] {
    action = [options](const Context& context) { return RunCronNext(*options, context); };
  });
}

}  // namespace stagehand::cli
