// The backend host: a small C++ counterpart of Backstage's backend system. Plugins register with an
// id and an init callback; at start each plugin receives its plugin-scoped services (config,
// logger, its own database, its scheduler, an HTTP router mounted at /api/<pluginId>, a lifecycle
// and the metrics registry). The host owns the root services: config, logger, root lifecycle,
// metrics and the HTTP server with the health endpoints, GET /metrics, GET /.stagehand/v1/plugins,
// the live event stream GET /.stagehand/v1/events (every plugin's scheduler events) and, when a
// reload handler is set, POST /.stagehand/v1/reload (see reload.h); and, unless
// `stagehand.dashboard.enabled` is false, the web dashboard at `stagehand.dashboard.path` ("/" by
// default; dashboard.h).
//
// With tracing on (tracing_config.h), every sampled run becomes a span (run_spans.h) exported over
// OTLP/HTTP in batches on a thread of its own; GET /metrics counts them in
// stagehand_trace_spans_total{result="exported"|"dropped"|"failed"}.
//
// Start order: read the config → for each plugin in registration order: open and migrate its
// database, create its scheduler, call its init → mount the plugin routers (scheduler REST API
// first, then the run history routes, then the plugin's own handlers, behind the auth policy) →
// start the HTTP server → run the startup hooks (root, then plugins) → readiness 200.
// Stop order: readiness 503 → plugin shutdown hooks (reverse order), then root ones → every
// scheduler's shutdown (stop claiming, signal running tasks, wait up to the grace period, release
// tickets, join threads) → the event streams end → the HTTP server closes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "stagehand/backend/app_config.h"
#include "stagehand/backend/reload.h"
#include "stagehand/backend/tracing_config.h"
#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"
#include "stagehand/config/config.h"
#include "stagehand/http/http_message.h"
#include "stagehand/metrics/metrics_registry.h"
#include "stagehand/service/scheduler.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand {

// Startup and shutdown hooks, like Backstage's lifecycle services. Thread-safe; hooks run on the
// thread that calls Backend::Start or Backend::Stop.
class Lifecycle {
 public:
  virtual ~Lifecycle() = default;
  // A failing startup hook fails Backend::Start with its status (and the later hooks do not run).
  virtual void AddStartupHook(std::function<Status()> hook) = 0;
  // Shutdown hooks run once, in reverse order of registration.
  virtual void AddShutdownHook(std::function<void()> hook) = 0;
};

// A plugin's HTTP router, mounted at /api/<pluginId> behind the auth policy. Handlers see paths
// relative to the mount and are tried in order after the scheduler's REST API; the first that
// answers wins. Thread-safe; add handlers during init.
class PluginRouter {
 public:
  virtual ~PluginRouter() = default;
  virtual void Use(HttpHandler handler) = 0;
};

// The plugin-scoped services handed to a plugin's init. Valid until the backend is destroyed.
struct PluginServices {
  std::string plugin_id;
  // The whole merged app-config (Backstage's root config service).
  const Config* config = nullptr;
  // The root logger with `plugin=<pluginId>` added.
  std::shared_ptr<Logger> logger;
  // The plugin's own task table, migrated unless skipMigrations says not to.
  std::shared_ptr<TaskStore> database;
  SchedulerService* scheduler = nullptr;
  PluginRouter* router = nullptr;
  Lifecycle* lifecycle = nullptr;
  MetricsRegistry* metrics = nullptr;
};

// A plugin, as Backstage's createBackendPlugin describes one. `init` runs once during Start, on the
// starting thread; an error fails Start naming the plugin.
struct BackendPlugin {
  std::string id;
  std::function<Status(PluginServices&)> init;
};

struct BackendOptions {
  // The merged app-config (see LoadAppConfig).
  Config config = Config::Empty();
  // The root logger. Dropped when null.
  std::shared_ptr<Logger> logger;
  // Time for the schedulers and the HTTP server. The system clock when null; must outlive the
  // backend.
  Clock* clock = nullptr;
  // Replaces `backend.listen.port` when set (0 picks a free port; tests use it).
  std::optional<std::uint16_t> port_override;
  // When set and it returns a scheduler for a plugin, that plugin gets it instead of the real one
  // (its services, its REST API and Backend::scheduler); the test backend hands out mocks this
  // way. Called once per plugin during Start, on the starting thread. The scheduler must outlive
  // the backend, which does not shut it down.
  std::function<SchedulerService*(std::string_view plugin_id)> scheduler_for_plugin;
  // Where the OTEL_* variables of the tracing settings are read (ReadTracingConfig); the
  // process's environment when null.
  EnvironmentLookup environment;
};

// Thread-safe: AddPlugin before Start; Stop and port from any thread. Destroying it runs Stop.
class Backend {
 public:
  // Reads the backend config. Errors: kInvalidArgument listing every problem (file and key).
  static Result<std::unique_ptr<Backend>> Create(BackendOptions options);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // Registers a plugin. Errors: kInvalidArgument for an invalid id (Backstage's plugin id rules:
  // lowercase letters, digits and dashes, starting with a letter) or one already registered;
  // kFailedPrecondition after Start.
  Status AddPlugin(BackendPlugin plugin);

  Lifecycle& root_lifecycle();
  MetricsRegistry& metrics();
  const BackendConfig& config() const;

  // Sets what a reload does (SIGHUP, POST /.stagehand/v1/reload). Without one, SIGHUP stops the
  // backend as SIGTERM does and the route answers 404. Errors: kFailedPrecondition after Start.
  Status SetReloadHandler(ReloadHandler handler);

  // Runs the reload handler, one reload at a time (a second caller waits for the first), logs
  // what changed or every problem, and sets the metrics stagehand_config_last_reload_successful
  // (1 or 0) and, on success, stagehand_config_last_reload_success_timestamp_seconds (wall time;
  // both are also set when the backend starts). Errors: the handler's; kFailedPrecondition when
  // there is no handler or the backend is not started.
  Result<ReloadReport> Reload();

  // Starts everything in the order written above. Errors: the first failure, naming the plugin
  // and its database, the init, the hook or the listen address (kUnavailable when the port cannot
  // be bound); whatever had started is stopped again.
  Status Start();

  // Stops everything in the order written above. Idempotent; waits for running tasks up to the
  // scheduler's shutdown grace.
  void Stop();

  // Blocks until SIGTERM, SIGINT or SIGQUIT arrives (see BlockShutdownSignals), then runs Stop:
  // each of them is a clean shutdown (running tasks signalled, their rows released). SIGHUP runs
  // Reload on this thread and waits on when a reload handler is set; without one it is a clean
  // shutdown too. Returns OK after a clean stop.
  Status RunUntilShutdownSignal();

  // After Stop: how many writes (run releases, history records) the schedulers could not deliver
  // to their databases before they stopped (each was logged).
  int UndeliveredWrites() const;

  // The bound HTTP port after Start, else 0.
  std::uint16_t port() const;

  // The scheduler of a started plugin, or null. For tests and embedders.
  SchedulerService* scheduler(const std::string& plugin_id);

 private:
  Backend();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The longest plugin id: the PostgreSQL database named after it with the default prefix,
// `backstage_plugin_<id>`, must fit PostgreSQL's 63-byte identifiers (longer names are silently
// truncated, so two plugins could share a database).
inline constexpr std::size_t kMaxPluginIdLength = 63 - std::string_view("backstage_plugin_").size();

// Returns OK when `id` is a valid plugin id: Backstage's rule, a lowercase letter, then lowercase
// letters, digits and dashes (e.g. `jobs`, `my-jobs-2`), and at most kMaxPluginIdLength (46)
// characters. Errors: kInvalidArgument "'<id>' is not a valid plugin id; ..." or "plugin id
// '<id>' is <n> characters long; the limit is 46 ...".
Status ValidatePluginId(std::string_view id);

// Blocks SIGTERM, SIGINT, SIGHUP and SIGQUIT in the calling thread, so that every thread created
// afterwards inherits the mask and RunUntilShutdownSignal can take them with sigwait (none of them
// can then end the process before its commands are stopped). Call first thing in main, before any
// thread exists. Child processes started by command tasks get a clean mask and default actions.
void BlockShutdownSignals();

}  // namespace stagehand
