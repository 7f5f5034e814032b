// A program that embeds stagehand: a backend host with one plugin, `reservations`, whose tasks
// are scheduled by stagehand and whose scheduler is served over REST.
//
//   STAGEHAND_TOKEN=a-long-secret ./embed_example --config app-config.yaml
//   url=http://127.0.0.1:7007/api/reservations/.backstage/scheduler/v1/tasks
//   curl -H "Authorization: Bearer a-long-secret" "$url"
//
// Options: --config FILE (repeatable, later files win key by key; default app-config.yaml) and
// --port N (replaces backend.listen.port; 0 picks a free port). Once serving, it prints
// "listening on port N" on stdout. SIGTERM, SIGINT, SIGHUP or SIGQUIT stops it; it then exits
// with 0.

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reservations.h"
#include "stagehand/backend/app_config.h"
#include "stagehand/backend/backend.h"
#include "stagehand/base/stream_logger.h"
#include "stagehand/time/clock.h"

namespace {

struct Options {
  std::vector<std::string> config_files;
  std::optional<std::uint16_t> port;
};

std::optional<Options> ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--config") {
      options.config_files.push_back(value);
    } else if (flag == "--port") {
      unsigned port = 0;
      const char* end = value.data() + value.size();
      if (std::from_chars(value.data(), end, port).ptr != end || value.empty() || port > 65535) {
        return std::nullopt;
      }
      options.port = static_cast<std::uint16_t>(port);
    } else {
      return std::nullopt;
    }
  }
  if (argc % 2 == 0) {
    return std::nullopt;
  }
  if (options.config_files.empty()) {
    options.config_files.push_back("app-config.yaml");
  }
  return options;
}

int Fail(const std::string& what, const stagehand::Status& status) {
  std::fprintf(stderr, "embed_example: %s: %s\n", what.c_str(), status.message().c_str());
  return EXIT_FAILURE;
}

}  // namespace

int main(int argc, char** argv) {
  // First thing, before any thread exists: SIGTERM, SIGINT, SIGHUP and SIGQUIT are then delivered
  // only to RunUntilShutdownSignal below.
  stagehand::BlockShutdownSignals();

  const std::optional<Options> options = ParseOptions(argc, argv);
  if (!options) {
    std::fprintf(stderr, "usage: embed_example [--config FILE]... [--port N]\n");
    return 2;
  }

  // The app-config, as Backstage loads it: files merged in order, ${VARS} from the environment.
  stagehand::Result<stagehand::Config> config =
      stagehand::LoadAppConfig(options->config_files, stagehand::ProcessEnvironment());
  if (!config.ok()) {
    return Fail("config", config.status());
  }

  std::shared_ptr<stagehand::Logger> logger =
      stagehand::MakeStreamLogger(stderr, stagehand::LogFormat::kText, stagehand::LogLevel::kInfo);

  // The plugin's state outlives the backend, which is destroyed first (declared later).
  reservations::Reservations state(stagehand::SystemClock::Instance(), logger);

  stagehand::BackendOptions backend_options;
  backend_options.config = *config;
  backend_options.logger = logger;
  backend_options.port_override = options->port;
  stagehand::Result<std::unique_ptr<stagehand::Backend>> backend =
      stagehand::Backend::Create(std::move(backend_options));
  if (!backend.ok()) {
    return Fail("config", backend.status());
  }

  if (stagehand::Status added = (*backend)->AddPlugin(reservations::MakeReservationsPlugin(state));
      !added.ok()) {
    return Fail("plugin", added);
  }
  // Opens each plugin's database, runs the plugin inits (which schedule the tasks), then serves.
  if (stagehand::Status started = (*backend)->Start(); !started.ok()) {
    return Fail("start", started);
  }
  std::printf("listening on port %u\n", static_cast<unsigned>((*backend)->port()));
  std::fflush(stdout);

  // Waits for SIGTERM, SIGINT, SIGHUP or SIGQUIT, then stops (SIGHUP stops it because this example
  // sets no reload handler): running tasks see their stop token fire and get the scheduler's
  // shutdown grace to finish (then their kill token).
  if (stagehand::Status stopped = (*backend)->RunUntilShutdownSignal(); !stopped.ok()) {
    return Fail("shutdown", stopped);
  }
  return EXIT_SUCCESS;
}
