#include "stagehand/backend/backend.h"

#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "backend/observer_fan_out.h"
#include "stagehand/backend/database_manager.h"
#include "stagehand/backend/run_spans.h"
#include "stagehand/backend/scheduler_metrics.h"
#include "stagehand/base/host_name.h"
#include "stagehand/base/mutex.h"
#include "stagehand/config/config_problems.h"
#include "stagehand/dashboard/dashboard.h"
#include "stagehand/http/auth.h"
#include "stagehand/http/error_response.h"
#include "stagehand/http/event_stream.h"
#include "stagehand/http/http_server.h"
#include "stagehand/http/otlp_http_exporter.h"
#include "stagehand/http/run_history_router.h"
#include "stagehand/http/scheduler_router.h"
#include "stagehand/service/plugin_scheduler.h"

namespace stagehand {
namespace {

constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr std::string_view kPluginListPath = "/.stagehand/v1/plugins";
constexpr std::string_view kEventsPath = "/.stagehand/v1/events";
constexpr std::string_view kReloadPath = "/.stagehand/v1/reload";
constexpr std::string_view kMetricsPath = "/metrics";

bool IsRootPath(const HttpRequest& request) { return request.path == "/" || request.path.empty(); }

bool IsGet(const HttpRequest& request) {
  return request.method == "GET" || request.method == "HEAD";
}

// Startup and shutdown hooks of the root or of one plugin.
class HookList final : public Lifecycle {
 public:
  void AddStartupHook(std::function<Status()> hook) override {
    MutexLock lock(mu_);
    startup_.push_back(std::move(hook));
  }

  void AddShutdownHook(std::function<void()> hook) override {
    MutexLock lock(mu_);
    shutdown_.push_back(std::move(hook));
  }

  // Runs the startup hooks in order, stopping at the first failure.
  Status RunStartup() {
    std::vector<std::function<Status()>> hooks;
    {
      MutexLock lock(mu_);
      hooks = startup_;
    }
    for (std::size_t i = 0; i < hooks.size(); ++i) {
      if (Status status = hooks[i](); !status.ok()) {
        return status.WithPrefix(fmt::format("startup hook {}: ", i + 1));
      }
    }
    return Status::Ok();
  }

  // Runs each shutdown hook once, newest first.
  void RunShutdown() {
    std::vector<std::function<void()>> hooks;
    {
      MutexLock lock(mu_);
      hooks.swap(shutdown_);
    }
    std::reverse(hooks.begin(), hooks.end());
    for (auto& hook : hooks) {
      hook();
    }
  }

 private:
  Mutex mu_;
  std::vector<std::function<Status()>> startup_ STAGEHAND_GUARDED_BY(mu_);
  std::vector<std::function<void()>> shutdown_ STAGEHAND_GUARDED_BY(mu_);
};

// A plugin's handlers, replaced as a whole on each Use so requests read them without a lock held
// while the handlers run.
class HandlerList final : public PluginRouter {
 public:
  void Use(HttpHandler handler) override {
    MutexLock lock(mu_);
    auto next = std::make_shared<std::vector<HttpHandler>>(*handlers_);
    next->push_back(std::move(handler));
    handlers_ = std::move(next);
  }

  std::optional<HttpResponse> Handle(const HttpRequest& request) const {
    std::shared_ptr<const std::vector<HttpHandler>> handlers;
    {
      MutexLock lock(mu_);
      handlers = handlers_;
    }
    for (const HttpHandler& handler : *handlers) {
      if (std::optional<HttpResponse> response = handler(request)) {
        return response;
      }
    }
    return std::nullopt;
  }

 private:
  mutable Mutex mu_;
  std::shared_ptr<const std::vector<HttpHandler>> handlers_ STAGEHAND_GUARDED_BY(mu_) =
      std::make_shared<const std::vector<HttpHandler>>();
};

// One registered plugin and, once started, its services.
struct PluginEntry {
  BackendPlugin plugin;
  std::shared_ptr<Logger> logger;
  std::shared_ptr<TaskStore> store;
  // The real scheduler, unless BackendOptions::scheduler_for_plugin gave one.
  std::unique_ptr<PluginScheduler> scheduler;
  SchedulerService* scheduler_service = nullptr;  // the one the plugin uses
  std::unique_ptr<SchedulerRestRouter> rest;
  std::unique_ptr<RunHistoryRouter> runs;
  HandlerList router;
  HookList lifecycle;
  PluginServices services;
  bool initialized = false;
};

std::string JoinIds(const std::vector<std::unique_ptr<PluginEntry>>& plugins) {
  std::string out;
  for (const auto& entry : plugins) {
    if (!out.empty()) {
      out += ", ";
    }
    out += "'" + entry->plugin.id + "'";
  }
  return out;
}

// SIGHUP (without a reload handler) and SIGQUIT stop the host as SIGTERM does: their default
// actions would end the process at once, leaving running commands orphaned and their rows claimed
// until the lease lapses.
constexpr int kShutdownSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};

sigset_t ShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  for (const int signal : kShutdownSignals) {
    sigaddset(&signals, signal);
  }
  return signals;
}

}  // namespace

struct Backend::Impl {
  enum class State { kCreated, kStarting, kStarted, kStopping, kStopped };

  Status StartPlugin(PluginEntry& entry);
  // The real scheduler of a plugin, on the shared scheduler threads.
  std::unique_ptr<PluginScheduler> MakeScheduler(const std::string& plugin_id,
                                                 std::shared_ptr<TaskStore> store,
                                                 std::shared_ptr<Logger> plugin_logger);
  Status DoStart();
  void Teardown();
  HttpHandler Protect(HttpHandler handler) const;
  Result<ReloadReport> Reload();
  HttpResponse ReloadResponse(const HttpRequest& request);
  void RecordReload(bool ok);

  BackendOptions options;
  BackendConfig config;
  Clock* clock = nullptr;
  std::shared_ptr<Logger> logger;
  MetricsRegistry metrics;
  DatabaseMetrics database_metrics{metrics};
  HookList root_lifecycle;
  std::unique_ptr<DatabaseManager> databases;
  std::shared_ptr<SchedulerObserver> observer;
  std::shared_ptr<SchedulerEventStream> events;
  // Drive every plugin's scheduler: the thread count does not grow with the plugins.
  std::shared_ptr<SchedulerThreads> scheduler_threads;
  std::unique_ptr<HttpServer> server;  // created by Create, never replaced
  TracingConfig tracing;
  std::unique_ptr<OtlpHttpExporter> span_exporter;  // with tracing on; created by Create
  std::shared_ptr<BatchSpanProcessor> spans;        // with tracing on; from DoStart to Teardown

  mutable Mutex mu;
  std::condition_variable cv;
  State state STAGEHAND_GUARDED_BY(mu) = State::kCreated;
  // Guarded by mu until Start; fixed after (read without mu then, so not annotated).
  std::vector<std::unique_ptr<PluginEntry>> plugins;
  // The thread running Start or Stop: a hook on it that calls Stop must not wait for itself.
  std::optional<std::thread::id> busy_thread STAGEHAND_GUARDED_BY(mu);
  std::optional<pthread_t> signal_waiter STAGEHAND_GUARDED_BY(mu);

  ReloadHandler reload;  // set before Start, then fixed
  // Held for a whole reload, so that two never interleave; never taken with mu held.
  Mutex reload_mu;
};

Backend::Backend() : impl_(std::make_unique<Impl>()) {}

Backend::~Backend() { Stop(); }

Result<std::unique_ptr<Backend>> Backend::Create(BackendOptions options) {
  STAGEHAND_ASSIGN_OR_RETURN(BackendConfig config, ReadBackendConfig(options.config));
  STAGEHAND_ASSIGN_OR_RETURN(
      TracingConfig tracing,
      ReadTracingConfig(options.config,
                        options.environment ? options.environment : ProcessEnvironment()));
  std::unique_ptr<OtlpHttpExporter> span_exporter;
  if (tracing.enabled) {
    OtlpHttpOptions exporter_options;
    exporter_options.endpoint = tracing.endpoint;
    exporter_options.headers = tracing.headers;
    exporter_options.timeout = tracing.timeout;
    exporter_options.clock = options.clock;
    exporter_options.resource = tracing.resource;
    exporter_options.scope_name = std::string(kSchedulerTracerName);
    STAGEHAND_ASSIGN_OR_RETURN(span_exporter,
                               OtlpHttpExporter::Create(std::move(exporter_options)));
  }
  std::unique_ptr<Backend> backend(new Backend());
  Impl& impl = *backend->impl_;
  impl.config = std::move(config);
  impl.tracing = std::move(tracing);
  impl.span_exporter = std::move(span_exporter);
  if (impl.tracing.enabled) impl.config.engine.trace_runs = impl.tracing.sampler;
  impl.clock = options.clock != nullptr ? options.clock : &SystemClock::Instance();
  impl.logger = options.logger ? options.logger : NullLogger();
  impl.options = std::move(options);
  impl.databases = std::make_unique<DatabaseManager>(impl.config.database, *impl.clock);
  HttpServerOptions server_options;
  server_options.host = impl.config.listen_host;
  server_options.port = impl.options.port_override.value_or(impl.config.listen_port);
  server_options.max_request_body_bytes = impl.config.max_request_body_bytes;
  server_options.body_timeout = impl.config.request_timeout;
  server_options.write_timeout = impl.config.request_timeout;
  server_options.head_timeout = impl.config.headers_timeout;
  server_options.keep_alive_timeout = impl.config.keep_alive_timeout;
  server_options.max_connections = impl.config.max_connections;
  server_options.max_connections_per_client = impl.config.max_connections_per_client;
  server_options.logger = impl.logger;
  server_options.quiet_routes = {std::string(kMetricsPath)};
  server_options.clock = impl.clock;
  server_options.on_request = MakeHttpRequestMetrics(impl.metrics);
  impl.server = std::make_unique<HttpServer>(std::move(server_options));
  return backend;
}

Status ValidatePluginId(std::string_view id) {
  const bool valid = !id.empty() && id.front() >= 'a' && id.front() <= 'z' &&
                     std::all_of(id.begin(), id.end(), [](char c) {
                       return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
                     });
  if (!valid) {
    return InvalidArgumentError(fmt::format(
        "'{}' is not a valid plugin id; use lowercase letters, digits and dashes, starting with a "
        "letter (e.g. 'jobs', 'nightly-reports')",
        id));
  }
  if (id.size() > kMaxPluginIdLength) {
    return InvalidArgumentError(fmt::format(
        "plugin id '{}' is {} characters long; the limit is {}, so that its PostgreSQL database "
        "name 'backstage_plugin_<id>' fits PostgreSQL's 63 bytes",
        id, id.size(), kMaxPluginIdLength));
  }
  return Status::Ok();
}

Status Backend::AddPlugin(BackendPlugin plugin) {
  STAGEHAND_RETURN_IF_ERROR(ValidatePluginId(plugin.id));
  if (!plugin.init) {
    return InvalidArgumentError(fmt::format("plugin '{}' has no init", plugin.id));
  }
  MutexLock lock(impl_->mu);
  if (impl_->state != Impl::State::kCreated) {
    return FailedPreconditionError(
        fmt::format("cannot add plugin '{}': the backend has already started", plugin.id));
  }
  for (const auto& entry : impl_->plugins) {
    if (entry->plugin.id == plugin.id) {
      return InvalidArgumentError(fmt::format("plugin '{}' is already registered", plugin.id));
    }
  }
  auto entry = std::make_unique<PluginEntry>();
  entry->plugin = std::move(plugin);
  impl_->plugins.push_back(std::move(entry));
  return Status::Ok();
}

Status Backend::SetReloadHandler(ReloadHandler handler) {
  MutexLock lock(impl_->mu);
  if (impl_->state != Impl::State::kCreated) {
    return FailedPreconditionError(
        "cannot set the reload handler: the backend has already started");
  }
  impl_->reload = std::move(handler);
  return Status::Ok();
}

void Backend::Impl::RecordReload(bool ok) {
  metrics
      .Gauge("stagehand_config_last_reload_successful",
             "Whether the last configuration reload attempt was successful.", {})
      .Set({}, ok ? 1 : 0);
  if (!ok) return;
  const auto seconds = std::chrono::duration<double>(clock->Now().time_since_epoch()).count();
  metrics
      .Gauge("stagehand_config_last_reload_success_timestamp_seconds",
             "Timestamp of the last successful configuration reload.", {})
      .Set({}, seconds);
}

Result<ReloadReport> Backend::Reload() { return impl_->Reload(); }

Result<ReloadReport> Backend::Impl::Reload() {
  {
    MutexLock lock(mu);
    if (!reload || state != State::kStarted) {
      return FailedPreconditionError(reload ? "the backend is not running"
                                            : "this backend cannot reload its config");
    }
  }
  MutexLock reloading(reload_mu);
  logger->Info("Reloading the config");
  Result<ReloadReport> report = reload();
  RecordReload(report.ok());
  if (!report.ok()) {
    ConfigProblems problems;
    problems.Add(report.status());
    logger->Error("Config reload failed, nothing changed: " +
                  std::to_string(problems.lines().size()) + " problem(s)");
    for (const std::string& problem : problems.lines()) {
      logger->Error("Config reload problem: " + problem);
    }
    return report;
  }
  logger->Info("Config reloaded: " + DescribeReload(*report));
  return report;
}

HttpResponse Backend::Impl::ReloadResponse(const HttpRequest& request) {
  Result<ReloadReport> report = Reload();
  HttpResponse response;
  if (report.ok()) {
    response.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
    response.body = ReloadReportJson(*report);
    return response;
  }
  response = ErrorResponse(report.status(), request, *logger);
  if (report.status().code() == StatusCode::kInvalidArgument) {
    nlohmann::json body = nlohmann::json::parse(response.body, nullptr, false);
    if (body.is_object()) {
      ConfigProblems problems;
      problems.Add(report.status());
      body["problems"] = problems.lines();
      response.body = body.dump();
    }
  }
  return response;
}

Lifecycle& Backend::root_lifecycle() { return impl_->root_lifecycle; }

MetricsRegistry& Backend::metrics() { return impl_->metrics; }

const BackendConfig& Backend::config() const { return impl_->config; }

Status Backend::Impl::StartPlugin(PluginEntry& entry) {
  const std::string& id = entry.plugin.id;
  entry.logger = ChildLogger(logger, {{"plugin", id}});

  Result<PluginDatabase> database = databases->Resolve(id);
  if (!database.ok()) {
    return database.status().WithPrefix(fmt::format("plugin '{}': ", id));
  }
  const std::string database_name = DatabaseManager::DisplayName(*database);
  const auto describe = [&](const Status& status) {
    // DatabaseManager names the plugin and its database already; add them when it did not.
    if (status.message().find(id) != std::string::npos &&
        status.message().find(database_name) != std::string::npos) {
      return status;
    }
    return status.WithPrefix(fmt::format("plugin '{}', database '{}': ", id, database_name));
  };
  Result<MigrationOutcome> migrated = databases->MigrateIfNeeded(id);
  if (!migrated.ok()) {
    return describe(migrated.status());
  }
  Result<std::shared_ptr<TaskStore>> store = databases->OpenStore(id);
  if (!store.ok()) {
    return describe(store.status());
  }
  entry.store = std::move(*store);
  entry.logger->Debug(*migrated == MigrationOutcome::kMigrated ? "Database migrated"
                                                               : "Database migrations skipped",
                      {{"database", database_name}});

  if (RunHistory* history = entry.store->history()) history->SetLimits(config.history);
  if (options.scheduler_for_plugin) entry.scheduler_service = options.scheduler_for_plugin(id);
  if (entry.scheduler_service == nullptr) {
    entry.scheduler = MakeScheduler(id, entry.store, entry.logger);
    entry.scheduler_service = entry.scheduler.get();
  }
  entry.rest = std::make_unique<SchedulerRestRouter>(id, *entry.scheduler_service, entry.logger);
  entry.runs = std::make_unique<RunHistoryRouter>(id, *entry.scheduler_service, entry.logger);

  entry.services.plugin_id = id;
  entry.services.config = &options.config;
  entry.services.logger = entry.logger;
  entry.services.database = entry.store;
  entry.services.scheduler = entry.scheduler_service;
  entry.services.router = &entry.router;
  entry.services.lifecycle = &entry.lifecycle;
  entry.services.metrics = &metrics;

  Status initialized = entry.plugin.init(entry.services);
  entry.initialized = true;
  if (!initialized.ok()) {
    return initialized.WithPrefix(fmt::format("plugin '{}' init: ", id));
  }
  return Status::Ok();
}

std::unique_ptr<PluginScheduler> Backend::Impl::MakeScheduler(
    const std::string& plugin_id, std::shared_ptr<TaskStore> store,
    std::shared_ptr<Logger> plugin_logger) {
  PluginSchedulerOptions scheduler_options;
  scheduler_options.plugin_id = plugin_id;
  scheduler_options.store = std::move(store);
  scheduler_options.clock = clock;
  scheduler_options.logger = std::move(plugin_logger);
  scheduler_options.observer = observer;
  scheduler_options.engine = config.engine;
  scheduler_options.engine.record_history = config.history_enabled;
  scheduler_options.engine.span_sink = spans;
  scheduler_options.idempotency_key_retention = config.idempotency_key_retention;
  if (!scheduler_threads) {
    scheduler_threads = std::make_shared<SchedulerThreads>(*clock, 4, config.max_running_tasks);
  }
  scheduler_options.threads = scheduler_threads;
  return std::make_unique<PluginScheduler>(std::move(scheduler_options));
}

HttpHandler Backend::Impl::Protect(HttpHandler handler) const {
  if (config.auth.default_policy_disabled) {
    return handler;
  }
  return RequireBearerToken(std::move(handler), config.auth.static_tokens, logger);
}

Status Backend::Impl::DoStart() {
  if (config.auth.default_policy_disabled) {
    logger->Warn(
        "AUTHENTICATION IS DISABLED: backend.auth.dangerouslyDisableDefaultAuthPolicy is set, so "
        "every plugin route is open to anyone who can reach the server. For local development "
        "only.");
  } else if (config.auth.static_tokens.empty()) {
    logger->Warn(
        "No backend.auth.externalAccess tokens are configured: every request to a plugin route "
        "will be refused with 401");
  }
  SchedulerMetricsOptions metrics_options;
  metrics_options.per_task_series = config.metrics_per_task_series;
  EventStreamOptions events_options;
  events_options.clock = clock;
  events = std::make_shared<SchedulerEventStream>(std::move(events_options));
  events->Start();
  std::vector<std::shared_ptr<SchedulerObserver>> observers{
      MakeSchedulerMetricsObserver(metrics, *clock, metrics_options), events};
  if (span_exporter) {
    CounterFamily& counted = metrics.Counter(
        "stagehand_trace_spans_total",
        "Run spans by what became of them: exported, dropped (the export queue was full) or "
        "failed (the collector refused them or could not be reached)",
        {"result"});
    BatchSpanOptions batch = tracing.batch;
    batch.on_counted = [&counted](std::string_view result, std::uint64_t n) {
      counted.Add({std::string(result)}, static_cast<double>(n));
    };
    spans = std::make_shared<BatchSpanProcessor>(
        *clock,
        [exporter = span_exporter.get()](const std::vector<SpanData>& batch_of_spans) {
          return exporter->Export(batch_of_spans);
        },
        std::move(batch));
    observers.push_back(
        std::make_shared<RunSpanObserver>(*spans, *clock, LocalHostName(), ::getpid()));
    logger->Info("Tracing runs", {{"endpoint", tracing.endpoint}});
  }
  observer = std::make_shared<backend_internal::ObserverFanOut>(std::move(observers));

  logger->Info("Plugin initialization started", {{"plugins", JoinIds(plugins)}});
  for (const auto& entry : plugins) {
    STAGEHAND_RETURN_IF_ERROR(StartPlugin(*entry));
    logger->Info("Plugin initialized", {{"plugin", entry->plugin.id}});
  }

  for (const auto& entry : plugins) {
    PluginEntry* plugin = entry.get();
    const std::string mount = "/api/" + plugin->plugin.id;
    HttpHandler handler =
        Protect([plugin](const HttpRequest& request) -> std::optional<HttpResponse> {
          if (std::optional<HttpResponse> response = plugin->rest->Handle(request)) {
            return response;
          }
          if (std::optional<HttpResponse> response = plugin->runs->Handle(request)) {
            return response;
          }
          return plugin->router.Handle(request);
        });
    if (spans) {
      handler = TraceRequests(std::move(handler), mount, plugin->plugin.id, *spans, *clock,
                              tracing.sampler);
    }
    server->Mount(mount, std::move(handler));
  }
  server->Mount(
      std::string(kMetricsPath), [this](const HttpRequest& request) -> std::optional<HttpResponse> {
        if (!IsGet(request) || !IsRootPath(request)) {
          return std::nullopt;
        }
        for (const auto& entry : plugins) {
          if (entry->scheduler != nullptr) {
            database_metrics.Update(entry->plugin.id, entry->scheduler->Database());
          }
        }
        HttpResponse response;
        response.headers.emplace_back("Content-Type", std::string(kPrometheusContentType));
        response.body = metrics.RenderPrometheusText();
        return response;
      });
  nlohmann::json list = nlohmann::json::array();
  for (const auto& entry : plugins) {
    list.push_back({{"id", entry->plugin.id}});
  }
  std::string plugin_list = nlohmann::json{{"plugins", std::move(list)}}.dump();
  server->Mount(std::string(kPluginListPath),
                Protect([plugin_list](const HttpRequest& request) -> std::optional<HttpResponse> {
                  if (!IsGet(request) || !IsRootPath(request)) {
                    return std::nullopt;
                  }
                  HttpResponse response;
                  response.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
                  response.body = plugin_list;
                  return response;
                }));

  server->Mount(std::string(kEventsPath), Protect(events->AsHandler()));
  if (reload) {
    server->Mount(std::string(kReloadPath),
                  Protect([this](const HttpRequest& request) -> std::optional<HttpResponse> {
                    if (request.method != "POST" || !IsRootPath(request)) return std::nullopt;
                    return ReloadResponse(request);
                  }));
    RecordReload(true);
  }
  if (config.dashboard_enabled) {
    DashboardOptions dashboard;
    dashboard.path = config.dashboard_path;
    dashboard.token_auth = !config.auth.default_policy_disabled;
    dashboard.trace_url = config.dashboard_trace_url;
    // Last, at the root: it answers only what no other mount claims.
    server->Mount("", MakeDashboardHandler(dashboard));
  }

  // Ready only while every plugin's database answers (after the grace) and, after an outage,
  // once the claims of the host's runs are confirmed there.
  server->SetReadinessCheck([this]() -> std::optional<std::string> {
    for (const auto& entry : plugins) {
      if (entry->scheduler == nullptr) continue;
      if (std::optional<std::string> reason =
              entry->scheduler->DatabaseUnreadyReason(config.readiness_grace)) {
        return reason;
      }
    }
    return std::nullopt;
  });
  STAGEHAND_RETURN_IF_ERROR(server->Start());
  logger->Info(fmt::format("Listening on {}:{}", config.listen_host, server->port()));
  if (config.dashboard_enabled) {
    logger->Info("Dashboard", {{"path", config.dashboard_path}});
  }

  if (Status started = root_lifecycle.RunStartup(); !started.ok()) {
    return started.WithPrefix("root lifecycle ");
  }
  for (const auto& entry : plugins) {
    if (Status started = entry->lifecycle.RunStartup(); !started.ok()) {
      return started.WithPrefix(fmt::format("plugin '{}' ", entry->plugin.id));
    }
  }
  logger->Info("Plugin initialization complete", {{"plugins", JoinIds(plugins)}});
  server->SetReady(true);
  return Status::Ok();
}

void Backend::Impl::Teardown() {
  server->SetReady(false);
  logger->Info("Running shutdown hooks");
  for (std::size_t i = plugins.size(); i-- > 0;) {
    if (plugins[i]->initialized) {
      plugins[i]->lifecycle.RunShutdown();
    }
  }
  root_lifecycle.RunShutdown();

  logger->Info("Stopping schedulers");
  {
    // Each scheduler waits up to its grace period for running tasks; waiting for all of them at
    // once bounds the whole step by one grace period.
    std::vector<std::jthread> stopping;
    for (const auto& entry : plugins) {
      if (entry->scheduler) {
        stopping.emplace_back([scheduler = entry->scheduler.get()] { scheduler->Shutdown(); });
      }
    }
  }

  if (spans) {
    // The runs are over: their spans go out now, within the exporter's timeout.
    spans->Shutdown();
  }
  if (events) {
    events->Stop();
  }
  logger->Info("Closing the HTTP server");
  server->Stop();
  logger->Info("Backend stopped");
}

Status Backend::Start() {
  {
    MutexLock lock(impl_->mu);
    if (impl_->state != Impl::State::kCreated) {
      return FailedPreconditionError("the backend has already been started");
    }
    impl_->state = Impl::State::kStarting;
    impl_->busy_thread = std::this_thread::get_id();
  }
  Status started = impl_->DoStart();
  if (!started.ok()) {
    impl_->logger->Error("Backend failed to start", {{"error", started.ToString()}});
    impl_->Teardown();
  }
  {
    MutexLock lock(impl_->mu);
    impl_->state = started.ok() ? Impl::State::kStarted : Impl::State::kStopped;
    impl_->busy_thread.reset();
  }
  impl_->cv.notify_all();
  return started;
}

void Backend::Stop() {
  {
    MutexLock lock(impl_->mu);
    if (impl_->busy_thread == std::this_thread::get_id()) {
      return;
    }
    impl_->cv.wait(lock.unique_lock(), [this]() STAGEHAND_REQUIRES(impl_->mu) {
      return impl_->state != Impl::State::kStarting && impl_->state != Impl::State::kStopping;
    });
    if (impl_->state == Impl::State::kCreated) {
      impl_->state = Impl::State::kStopped;
    }
    if (impl_->state == Impl::State::kStopped) {
      return;
    }
    impl_->state = Impl::State::kStopping;
    impl_->busy_thread = std::this_thread::get_id();
    if (impl_->signal_waiter) {
      // Thread-directed and blocked in the waiter, so its sigwait takes it: nothing is killed.
      pthread_kill(*impl_->signal_waiter, SIGTERM);  // NOLINT(bugprone-bad-signal-to-kill-thread)
    }
  }
  impl_->logger->Info("Backend shutting down");
  impl_->Teardown();
  {
    MutexLock lock(impl_->mu);
    impl_->state = Impl::State::kStopped;
    impl_->busy_thread.reset();
  }
  impl_->cv.notify_all();
}

int Backend::UndeliveredWrites() const {
  int undelivered = 0;
  for (const auto& entry : impl_->plugins) {
    if (entry->scheduler) undelivered += entry->scheduler->UndeliveredWrites();
  }
  return undelivered;
}

Status Backend::RunUntilShutdownSignal() {
  const sigset_t signals = ShutdownSignals();
  sigset_t previous;
  pthread_sigmask(SIG_BLOCK, &signals, &previous);
  bool wait = false;
  {
    MutexLock lock(impl_->mu);
    if (impl_->state == Impl::State::kStarted) {
      impl_->signal_waiter = pthread_self();
      wait = true;
    }
  }
  if (wait) {
    impl_->logger->Debug(impl_->reload ? "Waiting for SIGTERM, SIGINT or SIGQUIT (SIGHUP reloads)"
                                       : "Waiting for SIGTERM, SIGINT, SIGHUP or SIGQUIT");
    int signal = 0;
    while (true) {
      while (sigwait(&signals, &signal) != 0) {
      }
      if (signal != SIGHUP || !impl_->reload) break;
      {
        MutexLock lock(impl_->mu);
        if (impl_->state != Impl::State::kStarted) break;
      }
      impl_->logger->Info("Received SIGHUP, reloading the config");
      (void)impl_->Reload();
    }
    bool woken_by_stop = false;
    {
      MutexLock lock(impl_->mu);
      impl_->signal_waiter.reset();
      woken_by_stop = impl_->state != Impl::State::kStarted;
    }
    if (!woken_by_stop) {
      const char* name = sigabbrev_np(signal);
      impl_->logger->Info(
          fmt::format("Received SIG{}, shutting down", name != nullptr ? name : "?"));
    }
  }
  Stop();
  // A wake-up from Stop may have raced with a real signal; leave no signal pending on this thread.
  const timespec no_wait{};
  while (sigtimedwait(&signals, nullptr, &no_wait) > 0) {
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return Status::Ok();
}

std::uint16_t Backend::port() const { return impl_->server->port(); }

SchedulerService* Backend::scheduler(const std::string& plugin_id) {
  MutexLock lock(impl_->mu);
  if (impl_->state == Impl::State::kCreated || impl_->state == Impl::State::kStarting) {
    return nullptr;
  }
  for (const auto& entry : impl_->plugins) {
    if (entry->plugin.id == plugin_id) {
      return entry->scheduler_service;
    }
  }
  return nullptr;
}

void BlockShutdownSignals() {
  const sigset_t signals = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

}  // namespace stagehand
