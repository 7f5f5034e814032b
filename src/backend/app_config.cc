#include "stagehand/backend/app_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "stagehand/backend/schedule_config.h"
#include "stagehand/config/config_problems.h"
#include "stagehand/dashboard/dashboard.h"
#include "stagehand/time/duration.h"

namespace stagehand {
namespace {

// The blocks under `stagehand`: `server`, `scheduler`, `metrics`, `history` and `dashboard` are
// read here, `plugins` by the daemon, `database` by ReadDatabaseConfig, `tracing` by
// ReadTracingConfig.
constexpr std::array<std::string_view, 8> kStagehandKeys = {
    "plugins", "server", "scheduler", "metrics", "database", "history", "tracing", "dashboard"};
constexpr std::array<std::string_view, 3> kDashboardKeys = {"enabled", "path", "traceUrl"};
constexpr std::array<std::string_view, 1> kMetricsKeys = {"perTaskSeries"};
constexpr std::array<std::string_view, 4> kHistoryKeys = {"enabled", "maxRunsPerTask", "maxAge",
                                                          "maxOutputBytes"};
constexpr int kMaxRunsPerTask = 100000;
constexpr std::array<std::string_view, 4> kStagehandDatabaseKeys = {
    "maxConnections", "readinessGrace", "pooler", "notifyConnection"};
constexpr std::array<std::string_view, 6> kServerKeys = {
    "maxRequestBodySize", "requestTimeout", "headersTimeout",
    "keepAliveTimeout",   "maxConnections", "maxConnectionsPerClient"};
constexpr std::array<std::string_view, 7> kSchedulerKeys = {
    "lease",          "pollInterval",    "maxPollInterval",        "shutdownGrace",
    "maxConcurrency", "maxRunningTasks", "idempotencyKeyRetention"};

// A block of Backstage's `backend` config (@backstage/backend-defaults' schema): the keys
// stagehand reads and the ones it ignores.
struct BackendBlock {
  std::string_view key;
  std::vector<std::string_view> used;
  std::vector<std::string_view> ignored;
};

// `knexConfig` (base or per plugin): only its `pool` is read.
const BackendBlock& KnexBlock() {
  static const BackendBlock kBlock = {
      "knexConfig",
      {"pool"},
      {"debug", "acquireConnectionTimeout", "asyncStackTraces", "log", "searchPath",
       "useNullAsDefault", "migrations", "seeds", "postProcessResponse", "wrapIdentifier", "client",
       "connection", "version"}};
  return kBlock;
}

// `knexConfig.pool` (tarn's settings): the statement pool's sizing.
const BackendBlock& KnexPoolBlock() {
  static const BackendBlock kBlock = {
      "knexConfig.pool",
      {"min", "max", "idleTimeoutMillis"},
      {"acquireTimeoutMillis", "createTimeoutMillis", "destroyTimeoutMillis", "reapIntervalMillis",
       "createRetryIntervalMillis", "propagateCreateError", "afterCreate", "log"}};
  return kBlock;
}

const std::vector<BackendBlock>& BackendBlocks() {
  static const std::vector<BackendBlock> kBlocks = {
      {"backend",
       {"listen", "database", "auth"},
       {"baseUrl",  "lifecycle", "trustProxy", "https",     "server",   "auditor",
        "actions",  "cache",     "cors",       "csp",       "referrer", "health",
        "metrics",  "tracing",   "logger",     "rateLimit", "reading",  "workingDirectory",
        "packages", "startup"}},
      {"backend.listen", {"host", "port"}, {}},
      {"backend.auth",
       {"dangerouslyDisableDefaultAuthPolicy", "externalAccess"},
       {"keys", "pluginKeyStore"}},
      {"backend.database",
       {"client", "connection", "prefix", "pluginDivisionMode", "skipMigrations", "plugin",
        "knexConfig"},
       {"ensureExists", "ensureSchemaExists", "role"}},
      {"backend.database.knexConfig", KnexBlock().used, KnexBlock().ignored},
      {"backend.database.knexConfig.pool", KnexPoolBlock().used, KnexPoolBlock().ignored},
  };
  return kBlocks;
}

// Each `backend.database.plugin.<pluginId>` block.
const BackendBlock& PluginDatabaseBlock() {
  static const BackendBlock kBlock = {"backend.database.plugin",
                                      {"client", "connection", "skipMigrations", "knexConfig"},
                                      {"ensureExists", "ensureSchemaExists", "role"}};
  return kBlock;
}

constexpr int kMaxMaxConcurrency = 10000;
constexpr std::size_t kMaxConnections = 1000000;
constexpr std::size_t kMinStaticTokenLength = 8;
constexpr double kMaxByteSize = 9007199254740992.0;  // 2^53, exact in a double

// Names a value in messages: "'file'" or "'file' at line N".
std::string Location(const std::string& context, int line) {
  if (line <= 0) {
    return fmt::format("'{}'", context);
  }
  return fmt::format("'{}' at line {}", context, line);
}

std::string InvalidValue(const Config& config, std::string_view key, std::string_view why) {
  const ConfigNode* node = config.Node(key);
  return fmt::format("Invalid config value for key '{}' in {}: {}", config.FullKey(key),
                     Location(config.Context(key), node != nullptr ? node->line : 0), why);
}

bool HasSpace(std::string_view text) {
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
      return true;
    }
  }
  return false;
}

bool IsDigits(std::string_view text) {
  if (text.empty()) {
    return false;
  }
  for (char c : text) {
    if (c < '0' || c > '9') {
      return false;
    }
  }
  return true;
}

// Returns the port in `text` (decimal digits, 0-65535), or nullopt.
std::optional<std::uint16_t> ParsePort(std::string_view text) {
  if (!IsDigits(text) || text.size() > 5) {
    return std::nullopt;
  }
  const unsigned long value = std::strtoul(std::string(text).c_str(), nullptr, 10);
  if (value > 65535) {
    return std::nullopt;
  }
  return static_cast<std::uint16_t>(value);
}

// Returns the port a number denotes, or nullopt when it is not an integer in 0-65535.
std::optional<std::uint16_t> PortFromNumber(double number) {
  if (!(number >= 0 && number <= 65535) || std::floor(number) != number) {
    return std::nullopt;
  }
  return static_cast<std::uint16_t>(number);
}

// Backstage's empty host means every interface.
std::string HostOrAny(const std::string& host) { return host.empty() ? "0.0.0.0" : host; }

void ReadListen(const Config& backend, BackendConfig& out, ConfigProblems& problems) {
  const ConfigNode* listen = backend.Node("listen");
  if (listen == nullptr || std::holds_alternative<ConfigNode::Null>(listen->value)) {
    return;
  }
  if (const auto* text = std::get_if<std::string>(&listen->value)) {
    // As Backstage's readHttpServerOptions: "<port>" or "<host>:<port>" (":7007" is every
    // interface).
    const std::size_t colon = text->find(':');
    std::optional<std::uint16_t> port;
    if (colon == std::string::npos) {
      port = ParsePort(*text);
      if (port) {
        out.listen_host = "0.0.0.0";
      }
    } else if (text->find(':', colon + 1) == std::string::npos) {
      port = ParsePort(std::string_view(*text).substr(colon + 1));
      if (port) {
        out.listen_host = HostOrAny(text->substr(0, colon));
      }
    }
    if (!port) {
      problems.Add(InvalidValue(
          backend, "listen",
          fmt::format("Unable to parse listen address {}, expected <port> or <host>:<port>",
                      *text)));
      return;
    }
    out.listen_port = *port;
    return;
  }
  if (const auto* number = std::get_if<double>(&listen->value)) {
    if (std::optional<std::uint16_t> port = PortFromNumber(*number)) {
      out.listen_host = "0.0.0.0";
      out.listen_port = *port;
    } else {
      problems.Add(InvalidValue(backend, "listen", "not a port number (0-65535)"));
    }
    return;
  }
  Result<Config> block = backend.GetConfig("listen");
  if (!block.ok()) {
    problems.Add(block.status());
    return;
  }
  const ConfigNode* host = block->Node("host");
  if (host != nullptr && !std::holds_alternative<ConfigNode::Null>(host->value)) {
    if (const auto* text = std::get_if<std::string>(&host->value)) {
      out.listen_host = HostOrAny(*text);
    } else {
      problems.Add(block->GetString("host").status());
    }
  }
  Result<std::optional<double>> port = block->GetOptionalNumber("port");
  if (!port.ok()) {
    problems.Add(port.status());
  } else if (*port) {
    if (std::optional<std::uint16_t> value = PortFromNumber(**port)) {
      out.listen_port = *value;
    } else {
      problems.Add(InvalidValue(*block, "port", "not a port number (0-65535)"));
    }
  }
}

// Reads a duration at `key` of `config` in any form ReadDurationFromConfig accepts. Returns nullopt
// when the key is missing or on error (then a problem is added).
std::optional<std::chrono::milliseconds> ReadDuration(const Config& config, std::string_view key,
                                                      ConfigProblems& problems) {
  const ConfigNode* node = config.Node(key);
  if (node == nullptr) {
    if (Result<std::optional<Config>> walk = config.GetOptionalConfig(key); !walk.ok()) {
      problems.Add(walk.status());
    }
    return std::nullopt;
  }
  if (!CheckDurationKeys(config, key, problems)) {
    return std::nullopt;
  }
  Result<HumanDuration> duration = ReadDurationFromConfig(config, key);
  if (!duration.ok()) {
    problems.Add(InvalidValue(config, key, duration.status().message()));
    return std::nullopt;
  }
  return ToChronoMilliseconds(*duration);
}

// Reads a duration and checks it is at least `minimum`.
void ReadBoundedDuration(const Config& config, std::string_view key,
                         std::chrono::milliseconds minimum, std::string_view minimum_text,
                         std::chrono::milliseconds& out, ConfigProblems& problems) {
  std::optional<std::chrono::milliseconds> value = ReadDuration(config, key, problems);
  if (!value) {
    return;
  }
  if (*value < minimum) {
    problems.Add(InvalidValue(
        config, key, fmt::format("must be at least {}, got {} ms", minimum_text, value->count())));
    return;
  }
  out = *value;
}

// Reads an integer and checks it is within [minimum, maximum].
template <typename Integer>
void ReadBoundedInteger(const Config& config, std::string_view key, Integer minimum,
                        Integer maximum, Integer& out, ConfigProblems& problems) {
  Result<std::optional<double>> number = config.GetOptionalNumber(key);
  if (!number.ok()) {
    problems.Add(number.status());
    return;
  }
  if (!*number) {
    return;
  }
  const double value = **number;
  if (!(value >= static_cast<double>(minimum) && value <= static_cast<double>(maximum)) ||
      std::floor(value) != value) {
    problems.Add(InvalidValue(config, key,
                              fmt::format("expected an integer from {} to {}", minimum, maximum)));
    return;
  }
  out = static_cast<Integer>(value);
}

// Parses a size like "512kb", "1mb" or "100" (bytes), as the `bytes` package Express uses does:
// units b, kb, mb, gb, tb (powers of 1024), case-insensitive, with an optional fraction.
std::optional<double> ParseByteSize(std::string_view text) {
  while (!text.empty() && text.front() == ' ') {
    text.remove_prefix(1);
  }
  while (!text.empty() && text.back() == ' ') {
    text.remove_suffix(1);
  }
  std::size_t digits = 0;
  while (digits < text.size() &&
         ((text[digits] >= '0' && text[digits] <= '9') || text[digits] == '.')) {
    ++digits;
  }
  const std::string number(text.substr(0, digits));
  if (number.empty() || number.front() == '.' || number.back() == '.' ||
      number.find('.') != number.rfind('.')) {
    return std::nullopt;
  }
  std::string_view unit = text.substr(digits);
  while (!unit.empty() && unit.front() == ' ') {
    unit.remove_prefix(1);
  }
  std::string lower(unit);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  double scale = 0;
  if (lower.empty() || lower == "b") {
    scale = 1;
  } else if (lower == "kb") {
    scale = 1024.0;
  } else if (lower == "mb") {
    scale = 1024.0 * 1024;
  } else if (lower == "gb") {
    scale = 1024.0 * 1024 * 1024;
  } else if (lower == "tb") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return std::nullopt;
  }
  return std::floor(std::strtod(number.c_str(), nullptr) * scale);
}

// Reads `key` of `block`, when present, as a positive byte count: a number, or a size such as
// "512kb".
void ReadByteSize(const Config& block, std::string_view key, std::size_t& out,
                  ConfigProblems& problems) {
  const ConfigNode* size = block.Node(std::string(key));
  if (size == nullptr) return;
  std::optional<double> bytes;
  if (const auto* number = std::get_if<double>(&size->value)) {
    bytes = std::floor(*number) == *number ? std::optional<double>(*number) : std::nullopt;
  } else if (const auto* text = std::get_if<std::string>(&size->value)) {
    bytes = ParseByteSize(*text);
  }
  if (!bytes || *bytes < 1 || *bytes > kMaxByteSize) {
    problems.Add(InvalidValue(block, key,
                              "expected a positive number of bytes or a size such as "
                              "'512kb' or '1mb' (units b, kb, mb, gb, tb)"));
  } else {
    out = static_cast<std::size_t>(*bytes);
  }
}

void ReadServer(const Config& root, BackendConfig& out, ConfigProblems& problems) {
  Result<std::optional<Config>> server = root.GetOptionalConfig("stagehand.server");
  if (!server.ok()) {
    problems.Add(server.status());
    return;
  }
  if (!*server) {
    return;
  }
  const Config& block = **server;
  AddUnknownKeys(block, kServerKeys, problems);
  ReadByteSize(block, "maxRequestBodySize", out.max_request_body_bytes, problems);
  ReadBoundedDuration(block, "requestTimeout", std::chrono::milliseconds(1), "1 millisecond",
                      out.request_timeout, problems);
  ReadBoundedDuration(block, "headersTimeout", std::chrono::milliseconds(1), "1 millisecond",
                      out.headers_timeout, problems);
  ReadBoundedDuration(block, "keepAliveTimeout", std::chrono::milliseconds(1), "1 millisecond",
                      out.keep_alive_timeout, problems);
  ReadBoundedInteger(block, "maxConnections", std::size_t{1}, kMaxConnections, out.max_connections,
                     problems);
  ReadBoundedInteger(block, "maxConnectionsPerClient", std::size_t{1}, kMaxConnections,
                     out.max_connections_per_client, problems);
}

void ReadMetrics(const Config& root, BackendConfig& out, ConfigProblems& problems) {
  Result<std::optional<Config>> metrics = root.GetOptionalConfig("stagehand.metrics");
  if (!metrics.ok()) {
    problems.Add(metrics.status());
    return;
  }
  if (!*metrics) {
    return;
  }
  AddUnknownKeys(**metrics, kMetricsKeys, problems);
  Result<std::optional<bool>> per_task = (*metrics)->GetOptionalBoolean("perTaskSeries");
  if (!per_task.ok()) {
    problems.Add(per_task.status());
  } else if (*per_task) {
    out.metrics_per_task_series = **per_task;
  }
}

void ReadHistory(const Config& root, BackendConfig& out, ConfigProblems& problems) {
  Result<std::optional<Config>> history = root.GetOptionalConfig("stagehand.history");
  if (!history.ok()) {
    problems.Add(history.status());
    return;
  }
  if (!*history) {
    return;
  }
  const Config& block = **history;
  AddUnknownKeys(block, kHistoryKeys, problems);
  Result<std::optional<bool>> enabled = block.GetOptionalBoolean("enabled");
  if (!enabled.ok()) {
    problems.Add(enabled.status());
  } else if (*enabled) {
    out.history_enabled = **enabled;
  }
  ReadBoundedInteger(block, "maxRunsPerTask", 1, kMaxRunsPerTask, out.history.max_runs_per_task,
                     problems);
  std::chrono::milliseconds max_age = out.history.max_age;
  ReadBoundedDuration(block, "maxAge", std::chrono::hours(1), "1 hour", max_age, problems);
  out.history.max_age = std::chrono::ceil<std::chrono::hours>(max_age);
  ReadByteSize(block, "maxOutputBytes", out.history.max_output_bytes, problems);
}

void ReadDashboard(const Config& root, BackendConfig& out, ConfigProblems& problems) {
  Result<std::optional<Config>> dashboard = root.GetOptionalConfig("stagehand.dashboard");
  if (!dashboard.ok()) {
    problems.Add(dashboard.status());
    return;
  }
  if (!*dashboard) {
    return;
  }
  const Config& block = **dashboard;
  AddUnknownKeys(block, kDashboardKeys, problems);
  Result<std::optional<bool>> enabled = block.GetOptionalBoolean("enabled");
  if (!enabled.ok()) {
    problems.Add(enabled.status());
  } else if (*enabled) {
    out.dashboard_enabled = **enabled;
  }
  Result<std::optional<std::string>> path = block.GetOptionalString("path");
  if (!path.ok()) {
    problems.Add(path.status());
  } else if (*path) {
    Result<std::string> normalized = NormalizeDashboardPath(**path);
    if (normalized.ok()) {
      out.dashboard_path = *std::move(normalized);
    } else {
      problems.Add(InvalidValue(block, "path", normalized.status().message()));
    }
  }
  Result<std::optional<std::string>> trace_url = block.GetOptionalString("traceUrl");
  if (!trace_url.ok()) {
    problems.Add(trace_url.status());
  } else if (*trace_url) {
    if (Status checked = CheckDashboardTraceUrl(**trace_url); checked.ok()) {
      out.dashboard_trace_url = **trace_url;
    } else {
      problems.Add(InvalidValue(block, "traceUrl", checked.message()));
    }
  }
}

void ReadStaticAccess(const Config& entry, std::set<std::string>& tokens, AuthConfig& out,
                      ConfigProblems& problems) {
  Result<std::string> token = entry.GetString("options.token");
  Result<std::string> subject = entry.GetString("options.subject");
  bool valid = true;
  // Backstage's StaticTokenHandler checks, with its messages; the token itself is never quoted.
  if (!token.ok()) {
    problems.Add(token.status());
    valid = false;
  } else if (HasSpace(*token)) {
    problems.Add(InvalidValue(entry, "options.token",
                              "Illegal token, must be a set of non-space characters"));
    valid = false;
  } else if (token->size() < kMinStaticTokenLength) {
    problems.Add(InvalidValue(entry, "options.token",
                              fmt::format("Illegal token, must be at least {} characters length",
                                          kMinStaticTokenLength)));
    valid = false;
  } else if (!tokens.insert(*token).second) {
    problems.Add(InvalidValue(entry, "options.token",
                              "Static externalAccess token was declared more than once"));
    valid = false;
  }
  if (!subject.ok()) {
    problems.Add(subject.status());
    valid = false;
  } else if (HasSpace(*subject)) {
    problems.Add(InvalidValue(entry, "options.subject",
                              "Illegal subject, must be a set of non-space characters"));
    valid = false;
  }
  if (entry.Has("accessRestrictions")) {
    // Ignoring restrictions would grant more access than the config asks for.
    problems.Add(InvalidValue(entry, "accessRestrictions", "accessRestrictions are not supported"));
    valid = false;
  }
  if (valid) {
    out.static_tokens.push_back({*token, *subject});
  }
}

void ReadAuth(const Config& root, AuthConfig& out, ConfigProblems& problems) {
  Result<std::optional<Config>> auth = root.GetOptionalConfig("backend.auth");
  if (!auth.ok()) {
    problems.Add(auth.status());
    return;
  }
  if (!*auth) {
    return;
  }
  const Config& block = **auth;
  Result<std::optional<bool>> disabled =
      block.GetOptionalBoolean("dangerouslyDisableDefaultAuthPolicy");
  if (!disabled.ok()) {
    problems.Add(disabled.status());
  } else {
    out.default_policy_disabled = disabled->value_or(false);
  }
  if (!block.Has("externalAccess")) {
    return;
  }
  Result<std::vector<Config>> entries = block.GetConfigArray("externalAccess");
  if (!entries.ok()) {
    problems.Add(entries.status());
    return;
  }
  std::set<std::string> tokens;
  for (const Config& entry : *entries) {
    Result<std::string> type = entry.GetString("type");
    if (!type.ok()) {
      problems.Add(type.status());
      continue;
    }
    if (*type != "static") {
      problems.Add(InvalidValue(
          entry, "type",
          fmt::format("unsupported access method '{}'; only type static is supported", *type)));
      continue;
    }
    ReadStaticAccess(entry, tokens, out, problems);
  }
}

void ReadScheduler(const Config& root, BackendConfig& config, ConfigProblems& problems) {
  EngineOptions& out = config.engine;
  Result<std::optional<Config>> scheduler = root.GetOptionalConfig("stagehand.scheduler");
  if (!scheduler.ok()) {
    problems.Add(scheduler.status());
    return;
  }
  if (!*scheduler) {
    return;
  }
  const Config& block = **scheduler;
  AddUnknownKeys(block, kSchedulerKeys, problems);
  ReadBoundedDuration(block, "lease", std::chrono::seconds(1), "1 second", out.lease, problems);
  ReadBoundedDuration(block, "pollInterval", std::chrono::milliseconds(1), "1 millisecond",
                      out.poll_interval, problems);
  ReadBoundedDuration(block, "maxPollInterval", std::chrono::milliseconds(1), "1 millisecond",
                      out.max_poll_interval, problems);
  ReadBoundedDuration(block, "shutdownGrace", std::chrono::milliseconds(0), "0 milliseconds",
                      out.shutdown_grace, problems);
  ReadBoundedInteger(block, "maxConcurrency", 1, kMaxMaxConcurrency, out.max_concurrency, problems);
  ReadBoundedInteger(block, "maxRunningTasks", 1, kMaxMaxConcurrency, config.max_running_tasks,
                     problems);
  ReadBoundedDuration(block, "idempotencyKeyRetention", std::chrono::seconds(1), "1 second",
                      config.idempotency_key_retention, problems);
}

// Adds a problem for each unknown key directly under `stagehand`, when it is an object.
void CheckStagehandKeys(const Config& root, ConfigProblems& problems) {
  const ConfigNode* node = root.Node("stagehand");
  if (node == nullptr || !std::holds_alternative<ConfigNode::Object>(node->value)) {
    return;
  }
  if (Result<Config> block = root.GetConfig("stagehand"); block.ok()) {
    AddUnknownKeys(*block, kStagehandKeys, problems);
  }
}

// Adds a warning for each key of the object at `key` of `root` that `block` does not use.
void WarnUnusedKeys(const Config& root, std::string_view key, const BackendBlock& block,
                    std::vector<std::string>& warnings) {
  const ConfigNode* node = root.Node(key);
  if (node == nullptr || !std::holds_alternative<ConfigNode::Object>(node->value)) {
    return;
  }
  Result<Config> object = root.GetConfig(key);
  if (!object.ok()) {
    return;
  }
  std::vector<std::string_view> known = block.used;
  known.insert(known.end(), block.ignored.begin(), block.ignored.end());
  for (const std::string& name : object->Keys()) {
    if (std::find(block.used.begin(), block.used.end(), name) != block.used.end()) {
      continue;
    }
    const bool ignored =
        std::find(block.ignored.begin(), block.ignored.end(), name) != block.ignored.end();
    warnings.push_back(fmt::format("Ignoring config key '{}' in '{}': {}", object->FullKey(name),
                                   object->Context(name),
                                   ignored ? "a Backstage setting that stagehand does not use"
                                           : UnknownKeyMessage(name, known)));
  }
}

}  // namespace

std::vector<std::string> BackendConfigWarnings(const Config& root) {
  std::vector<std::string> warnings;
  for (const BackendBlock& block : BackendBlocks()) {
    WarnUnusedKeys(root, block.key, block, warnings);
  }
  const BackendBlock& plugin = PluginDatabaseBlock();
  if (Result<std::optional<Config>> plugins = root.GetOptionalConfig(plugin.key);
      plugins.ok() && plugins->has_value()) {
    for (const std::string& id : (*plugins)->Keys()) {
      if (!id.empty() && id.find('.') == std::string::npos) {
        WarnUnusedKeys(**plugins, id, plugin, warnings);
        WarnUnusedKeys(**plugins, id + ".knexConfig", KnexBlock(), warnings);
        WarnUnusedKeys(**plugins, id + ".knexConfig.pool", KnexPoolBlock(), warnings);
      }
    }
  }
  return warnings;
}

EnvironmentLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());  // NOLINT(concurrency-mt-unsafe)
    if (value == nullptr) {
      return std::nullopt;
    }
    return std::string(value);
  };
}

Result<std::string> SubstituteEnvironment(const std::string& value, const std::string& full_key,
                                          const std::string& context,
                                          const EnvironmentLookup& environment, int line) {
  std::string result;
  ConfigProblems problems;
  std::size_t i = 0;
  while (i < value.size()) {
    if (value.compare(i, 3, "$${") == 0) {
      result += "${";
      i += 3;
      continue;
    }
    if (value.compare(i, 2, "${") != 0) {
      result += value[i++];
      continue;
    }
    const std::size_t close = value.find('}', i + 2);
    if (close == std::string::npos) {
      problems.Add(fmt::format("Unterminated '${{' in config value for key '{}' in {}", full_key,
                               Location(context, line)));
      break;
    }
    std::string name = value.substr(i + 2, close - i - 2);
    while (!name.empty() && name.front() == ' ') {
      name.erase(0, 1);
    }
    while (!name.empty() && name.back() == ' ') {
      name.pop_back();
    }
    if (std::optional<std::string> replacement = environment(name)) {
      result += *replacement;
    } else {
      problems.Add(
          fmt::format("Environment variable '{}' is not set; it is used by config key '{}' in {}",
                      name, full_key, Location(context, line)));
    }
    i = close + 1;
  }
  if (!problems.empty()) {
    return problems.ToStatus();
  }
  return result;
}

Result<Config> LoadAppConfig(const std::vector<std::string>& paths,
                             const EnvironmentLookup& environment) {
  ConfigProblems problems;
  std::vector<Config> layers;
  const Config::StringTransform substitute =
      [&environment](const std::string& value, const std::string& full_key,
                     const ConfigNode& node) -> Result<std::string> {
    return SubstituteEnvironment(value, full_key, node.source ? *node.source : "unknown",
                                 environment, node.line);
  };
  for (const std::string& path : paths) {
    Result<Config> file = Config::FromYamlFile(path);
    if (!file.ok()) {
      problems.Add(file.status());
      continue;
    }
    Result<Config> substituted = file->TransformStrings(substitute);
    if (!substituted.ok()) {
      problems.Add(substituted.status());
      continue;
    }
    layers.push_back(*std::move(substituted));
  }
  if (!problems.empty()) {
    return problems.ToStatus();
  }
  return Config::Merge(layers);
}

Result<BackendConfig> ReadBackendConfig(const Config& root) {
  ConfigProblems problems;
  BackendConfig config;

  Result<std::optional<Config>> backend = root.GetOptionalConfig("backend");
  if (!backend.ok()) {
    problems.Add(backend.status());
  } else if (*backend) {
    ReadListen(**backend, config, problems);
  }
  ReadServer(root, config, problems);
  ReadMetrics(root, config, problems);
  ReadHistory(root, config, problems);
  ReadDashboard(root, config, problems);
  if (Result<std::optional<Config>> database = root.GetOptionalConfig("stagehand.database");
      database.ok() && *database) {
    AddUnknownKeys(**database, kStagehandDatabaseKeys, problems);  // values: ReadDatabaseConfig
    ReadBoundedDuration(**database, "readinessGrace", std::chrono::milliseconds(0), "0",
                        config.readiness_grace, problems);
  }
  ReadAuth(root, config.auth, problems);
  if (backend.ok()) {
    Result<DatabaseConfig> database = ReadDatabaseConfig(root);
    if (!database.ok()) {
      problems.Add(database.status());
    } else {
      config.database = *std::move(database);
    }
  }
  ReadScheduler(root, config, problems);
  CheckStagehandKeys(root, problems);

  if (!problems.empty()) {
    return problems.ToStatus();
  }
  return config;
}

}  // namespace stagehand
