// Loading an app-config the way Backstage's config loader does: the YAML files given with
// `--config` are read in order, `${VAR}` in every string value is replaced from the environment
// (`$${` stands for a literal `${`), and the files are merged, later files winning key by key.
// Then the `backend` block (and stagehand's own `stagehand.server` / `stagehand.scheduler`
// blocks) are read into one BackendConfig.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "stagehand/backend/database_config.h"
#include "stagehand/base/status.h"
#include "stagehand/config/config.h"
#include "stagehand/engine/engine_options.h"
#include "stagehand/http/auth.h"
#include "stagehand/store/run_history.h"

namespace stagehand {

// Looks up an environment variable; nullopt when it is unset.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string&)>;

// Returns the process environment as an EnvironmentLookup.
EnvironmentLookup ProcessEnvironment();

// Replaces each `${NAME}` in `value` with the variable's value (spaces around NAME are ignored);
// `$${` stands for a literal `${`. `full_key`, `context` (the file) and `line` (0 if unknown) only
// name the value in messages. Errors: kInvalidArgument naming the variable, the key, the file and
// the line, one line per unset variable, or an unclosed `${`.
Result<std::string> SubstituteEnvironment(const std::string& value, const std::string& full_key,
                                          const std::string& context,
                                          const EnvironmentLookup& environment, int line = 0);

// Reads, substitutes and merges `paths` in order. With no paths the result is an empty config.
// Errors: kInvalidArgument listing every problem found, one per line, each naming the file (and
// line) and the full key: unreadable or malformed files, unset variables, unclosed `${`.
Result<Config> LoadAppConfig(const std::vector<std::string>& paths,
                             const EnvironmentLookup& environment);

// `backend.auth`.
struct AuthConfig {
  // `externalAccess` entries of `type: static`, checked as Backstage's StaticTokenHandler does:
  // tokens of 8 or more non-space characters, declared once; subjects without spaces. Other types
  // and `accessRestrictions` are errors (ignoring restrictions would grant more access).
  std::vector<StaticAccessToken> static_tokens;
  // `dangerouslyDisableDefaultAuthPolicy`: plugin routes are open to anyone.
  bool default_policy_disabled = false;
};

// Everything the backend host reads from the merged config. A value type; thread-compatible.
struct BackendConfig {
  // `backend.listen.host` (all interfaces by default, as Backstage) and `backend.listen.port`
  // (7007 by default; `backend.listen` may also be a "host:port" string or a bare port).
  std::string listen_host = "0.0.0.0";
  std::uint16_t listen_port = 7007;
  // `stagehand.server.maxRequestBodySize` (bytes; or a string like "1mb") and
  // `stagehand.server.requestTimeout` (a duration).
  std::size_t max_request_body_bytes = std::size_t{1024} * 1024;
  std::chrono::milliseconds request_timeout{10000};
  // `stagehand.server.{headersTimeout, keepAliveTimeout}` (durations, at least 1 ms) and
  // `stagehand.server.{maxConnections, maxConnectionsPerClient}` (integers, 1 to 1,000,000): see
  // HttpServerOptions.
  std::chrono::milliseconds headers_timeout{10000};
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::size_t max_connections = 4096;
  std::size_t max_connections_per_client = 256;
  // `stagehand.database.readinessGrace` (a duration): how long a plugin's database may go
  // unanswered before the readiness endpoint answers 503; it answers 200 again once the database
  // answers and the claims of the host's runs are confirmed there.
  std::chrono::milliseconds readiness_grace{2000};
  // `stagehand.metrics.perTaskSeries` (boolean): see SchedulerMetricsOptions.
  bool metrics_per_task_series = true;
  // `stagehand.history.enabled` (boolean): whether runs are recorded in the run history.
  bool history_enabled = true;
  // `stagehand.history.{maxRunsPerTask (1..100000), maxAge (a duration, at least 1 hour),
  // maxOutputBytes (bytes, or a size such as "64kb")}`: see RunHistoryLimits.
  RunHistoryLimits history;
  // `stagehand.dashboard.enabled` (boolean) and `stagehand.dashboard.path` (the page's path,
  // normalised to end in "/"; see dashboard.h): the web dashboard, served unless disabled.
  bool dashboard_enabled = true;
  std::string dashboard_path = "/";
  // `stagehand.dashboard.traceUrl`: a URL template with "{traceId}" that the page links a run's
  // trace id to (DashboardOptions::trace_url); empty without one.
  std::string dashboard_trace_url;
  AuthConfig auth;
  DatabaseConfig database;
  // `stagehand.scheduler.{lease, pollInterval, maxConcurrency, shutdownGrace}`; durations in any
  // form ReadDurationFromConfig accepts. Bounds: lease >= 1 s, pollInterval >= 1 ms,
  // maxConcurrency an integer in 1..10000, shutdownGrace >= 0.
  EngineOptions engine;
  // `stagehand.scheduler.maxRunningTasks` (integer, 1..10000): most task runs at once in the
  // process, across every plugin (each plugin also keeps to its own maxConcurrency); it also
  // bounds the threads that run task functions.
  int max_running_tasks = 256;
  // `stagehand.scheduler.idempotencyKeyRetention` (a duration, at least 1 second): how long the
  // answer to a REST request sent with an Idempotency-Key header is kept in the plugin's database
  // (PluginSchedulerOptions::idempotency_key_retention).
  std::chrono::milliseconds idempotency_key_retention{std::chrono::hours(24)};
};

// Reads the backend's keys from the merged `root`; `backend.database` is required (as in
// Backstage). The `stagehand` block is read strictly: an unknown key directly under it, or under
// `stagehand.server` or `stagehand.scheduler` (down to their duration objects), is a problem that
// names the key most likely meant (see AddUnknownKeys). Errors: kInvalidArgument listing every
// problem, one per line, each naming the full key and the file it came from (and the line, for
// values checked here).
Result<BackendConfig> ReadBackendConfig(const Config& root);

// Returns one line for each key under `backend` (`listen`, `auth`, `database` and its per-plugin
// blocks) that stagehand ignores, naming the full key and the file: "Ignoring config key
// 'backend.cors' in 'app.yaml': a Backstage setting that stagehand does not use", or for a key
// Backstage does not define either, "Ignoring config key 'backend.databse' in 'app.yaml': unknown
// key 'databse'; did you mean 'database'?". Keys under `backend` belong to Backstage's schema, so
// these are warnings, not problems; `backend` values of the wrong type are ReadBackendConfig's.
std::vector<std::string> BackendConfigWarnings(const Config& root);

}  // namespace stagehand
