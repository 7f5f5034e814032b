// `stagehand serve`: runs the backend host with the tasks the app-config defines under
// `stagehand.plugins`, reloading them on SIGHUP, until SIGTERM, SIGINT or SIGQUIT (each a clean
// shutdown).

#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cli/command.h"
#include "stagehand/backend/app_config.h"
#include "stagehand/backend/backend.h"
#include "stagehand/base/file.h"
#include "stagehand/base/stream_logger.h"
#include "stagehand/base/text.h"
#include "stagehand/cli/cli.h"
#include "stagehand/config/config_problems.h"
#include "stagehand/daemon/daemon_reload.h"
#include "stagehand/daemon/daemon_tasks.h"
#include "stagehand/executors/command_task.h"

namespace stagehand::cli {
namespace {

struct ServeOptions {
  std::vector<std::string> config_files;
  std::string log_format = "text";
  std::string log_level = "info";
  std::optional<std::uint16_t> port;
  std::string ready_file;
};

// Writes each problem as its own "stagehand: " line and returns kExitConfig.
int ReportConfigProblems(const Context& context, const ConfigProblems& problems) {
  for (const std::string& problem : problems.lines()) {
    context.err << "stagehand: " << problem << '\n';
  }
  context.err.flush();
  return kExitConfig;
}

// Writes the ready file: one JSON object on one line, {"host":..,"pid":..,"port":..}, by rename
// (WriteFileAtomically), so a reader never sees it half written. Errors: kUnavailable naming the
// file and the reason.
Status WriteReadyFile(const std::string& path, const std::string& host, std::uint16_t port) {
  const nlohmann::json ready = {{"host", host}, {"port", port}, {"pid", ::getpid()}};
  const Status written = WriteFileAtomically(path, ready.dump() + "\n");
  if (!written.ok()) {
    return UnavailableError("cannot write the ready file " + path + ": " + written.message());
  }
  return Status::Ok();
}

int RunServe(const ServeOptions& options, const Context& context) {
  // Before any thread exists, so that every thread inherits the mask and the signals reach
  // RunUntilShutdownSignal.
  BlockShutdownSignals();
  const Status subreaper = BecomeChildSubreaper();
  const Status hidden = HideProcessFromCommands();

  Result<LogFormat> format = ParseLogFormat(options.log_format);
  if (!format.ok()) {
    return UsageError(context, "--log-format: " + format.status().message());
  }
  Result<LogLevel> level = ParseLogLevel(options.log_level);
  if (!level.ok()) {
    return UsageError(context, "--log-level: " + level.status().message());
  }
  std::shared_ptr<Logger> logger = MakeStreamLogger(stderr, *format, *level);
  if (!hidden.ok()) {
    logger->Warn("Cannot hide the daemon's environment from its commands",
                 {{"error", hidden.message()}});
  }
  if (!subreaper.ok()) {
    logger->Warn(
        "Cannot become the child subreaper; if a command's supervisor process is killed from "
        "outside, what it left is not reaped here",
        {{"error", subreaper.message()}});
  }

  Result<Config> root = LoadAppConfig(options.config_files, ProcessEnvironment());
  ConfigProblems problems;
  if (!root.ok()) {
    problems.Add(root.status());
    return ReportConfigProblems(context, problems);
  }
  Result<BackendConfig> backend_config = ReadBackendConfig(*root);
  if (!backend_config.ok()) {
    problems.Add(backend_config.status());
  }
  Result<std::vector<DaemonPlugin>> plugins = ReadDaemonPlugins(*root);
  if (!plugins.ok()) {
    problems.Add(plugins.status());
  }
  if (Result<TracingConfig> tracing = ReadTracingConfig(*root, ProcessEnvironment());
      !tracing.ok()) {
    problems.Add(tracing.status());
  }
  for (const std::string& warning : BackendConfigWarnings(*root)) logger->Warn(warning);
  if (!problems.empty()) {
    return ReportConfigProblems(context, problems);
  }

  BackendOptions backend_options;
  // The backend never reads the task definitions (ReadDaemonPlugins did): without them the config
  // it keeps for the daemon's lifetime stays small whatever the number of tasks.
  backend_options.config = WithoutDaemonTasks(*root);
  *root = Config::Empty();
  DaemonReloader reloader(options.config_files, backend_options.config, SystemClock::Instance());
  backend_options.logger = logger;
  backend_options.port_override = options.port;
  Result<std::unique_ptr<Backend>> backend = Backend::Create(std::move(backend_options));
  if (!backend.ok()) {
    problems.Add(backend.status());
    return ReportConfigProblems(context, problems);
  }
  std::size_t task_count = 0;
  for (DaemonPlugin& plugin : *plugins) {
    task_count += plugin.tasks.size();
    if (Status added = (*backend)->AddPlugin(reloader.Adopt(std::move(plugin))); !added.ok()) {
      problems.Add(added);
    }
  }
  STAGEHAND_CHECK((*backend)->SetReloadHandler([&reloader] { return reloader.Reload(); }).ok());
  if (!problems.empty()) {
    return ReportConfigProblems(context, problems);
  }

  if (!options.ready_file.empty()) {
    // A file left by an earlier run must not announce this one before it listens; the file goes
    // away again as shutdown begins (readiness turns 503 at the same moment).
    const std::filesystem::path ready_file = options.ready_file;
    std::error_code ignored;
    std::filesystem::remove(ready_file, ignored);
    (*backend)->root_lifecycle().AddShutdownHook([ready_file] {
      std::error_code ignored_too;
      std::filesystem::remove(ready_file, ignored_too);
    });
  }
  Status started = (*backend)->Start();
  if (started.ok() && !options.ready_file.empty()) {
    started = WriteReadyFile(options.ready_file, backend_config->listen_host, (*backend)->port());
    if (!started.ok()) {
      (*backend)->Stop();
    }
  }
  if (!started.ok()) {
    context.err << "stagehand: cannot start: " << OneLine(started.message()) << '\n';
    context.err.flush();
    return kExitUnavailable;
  }
  // Loading the config peaks at several times what stays in use (the YAML trees, ~5 KB per task);
  // give the freed heap back to the system instead of keeping it for the daemon's lifetime.
  ::malloc_trim(0);
  logger->Info("stagehand serve is ready", {{"host", backend_config->listen_host},
                                            {"port", std::to_string((*backend)->port())},
                                            {"plugins", std::to_string(plugins->size())},
                                            {"tasks", std::to_string(task_count)}});
  if (Status stopped = (*backend)->RunUntilShutdownSignal(); !stopped.ok()) {
    logger->Error("Shutdown failed", {{"error", stopped.message()}});
    return kExitFailure;
  }
  if (const int undelivered = (*backend)->UndeliveredWrites(); undelivered > 0) {
    logger->Error(
        "stagehand serve stopped with writes its database never took (listed above): "
        "their runs are recorded as lost once their claims lapse",
        {{"writes", std::to_string(undelivered)}});
    return kExitUndelivered;
  }
  logger->Info("stagehand serve stopped");
  return kExitOk;
}

}  // namespace

void AddServeCommand(CLI::App& app, Action& action) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* serve = app.add_subcommand(
      "serve",
      "Run the scheduler service: the tasks under stagehand.plugins.<pluginId>.tasks, the "
      "scheduler REST API under /api/<pluginId>, health endpoints and /metrics; reloads its tasks "
      "on SIGHUP; stops cleanly on SIGTERM, SIGINT or SIGQUIT");
  serve
      ->add_option("-c,--config", options->config_files,
                   "App-config YAML file; repeat to merge several, later files winning")
      ->required()
      ->allow_extra_args(false);
  serve->add_option("--log-format", options->log_format, "Log lines on stderr: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->default_val("text");
  serve
      ->add_option("--log-level", options->log_level,
                   "Lowest level logged: debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->default_val("info");
  serve->add_option("--port", options->port,
                    "Listen on this port instead of backend.listen.port (0 picks a free one; "
                    "the ready log line and the ready file name it)");
  serve
      ->add_option("--ready-file", options->ready_file,
                   "Once the server listens and every plugin has started, write "
                   "{\"host\":..,\"pid\":..,\"port\":..} on one line to PATH (by rename, so "
                   "it is whole when it exists); removed again when shutdown begins. With port 0, "
                   "read the bound port from it")
      ->option_text("PATH");
  serve->footer(
      "Signals: SIGTERM, SIGINT and SIGQUIT each stop the daemon cleanly (running commands "
      "signalled, their tasks released). SIGHUP re-reads every --config file and applies the "
      "tasks' changes without a restart (runs in progress go on); an invalid config, or one that "
      "changes a setting outside stagehand.plugins.<pluginId>.tasks, changes nothing and every "
      "problem is logged (see also 'stagehand reload').\n"
      "Exit codes: 0 stopped by a signal, 1 failed while running, 2 bad usage, 69 could not "
      "start (database, listen port or ready file), 75 stopped with writes the database never "
      "took (each logged), 78 invalid config (every problem on its own line).\n"
      "Example:\n"
      "  STAGEHAND_TOKEN=secret stagehand serve --config examples/app-config.yaml \\\n"
      "      --config examples/app-config.auth.yaml --log-format json\n"
      "  curl -H 'Authorization: Bearer secret' \\\n"
      "      http://127.0.0.1:7007/api/jobs/.backstage/scheduler/v1/tasks");
  serve->callback([options, &action] {
    action = [options](const Context& context) { return RunServe(*options, context); };
  });
}

}  // namespace stagehand::cli
