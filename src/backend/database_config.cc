#include "stagehand/backend/database_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "stagehand/config/config_problems.h"
#include "stagehand/store/postgres_task_store.h"
#include "stagehand/store/sqlite_task_store.h"

namespace stagehand {
namespace {

constexpr std::string_view kRootKey = "backend.database";
constexpr char kMemory[] = ":memory:";
constexpr std::size_t kMaxPostgresIdentifierBytes = 63;
constexpr std::size_t kMaxMySqlDatabaseNameChars = 64;

std::optional<std::string> ReadString(const Config& config, std::string_view key,
                                      ConfigProblems& problems) {
  Result<std::optional<std::string>> value = config.GetOptionalString(key);
  if (!value.ok()) {
    problems.Add(value.status());
    return std::nullopt;
  }
  return *value;
}

std::optional<bool> ReadBoolean(const Config& config, std::string_view key,
                                ConfigProblems& problems) {
  Result<std::optional<bool>> value = config.GetOptionalBoolean(key);
  if (!value.ok()) {
    problems.Add(value.status());
    return std::nullopt;
  }
  return *value;
}

std::optional<DatabaseClient> ParseClient(const std::string& name) {
  if (name == "better-sqlite3" || name == "sqlite3") {
    return DatabaseClient::kSqlite;
  }
  if (name == "pg") {
    return DatabaseClient::kPostgres;
  }
  if (name == "mysql2" || name == "mysql") {
    return DatabaseClient::kMySql;
  }
  return std::nullopt;
}

std::optional<DatabaseClient> ReadClient(const Config& config, std::string_view key, bool required,
                                         ConfigProblems& problems, std::string* name) {
  if (required && !config.Has(key)) {
    problems.Add(config.GetString(key).status());
    return std::nullopt;
  }
  std::optional<std::string> value = ReadString(config, key, problems);
  if (!value) {
    return std::nullopt;
  }
  std::optional<DatabaseClient> client = ParseClient(*value);
  if (!client) {
    problems.Add(
        InvalidConfigValue(config, key,
                           fmt::format("unsupported client '{}', wanted one of better-sqlite3, "
                                       "sqlite3, pg, mysql2, mysql",
                                       *value)));
    return std::nullopt;
  }
  *name = *value;
  return client;
}

// Parses a libpq connection string or URL into its keywords.
bool ParsePostgresString(const std::string& text, DatabaseConnection& connection,
                         std::string& error) {
  Result<std::map<std::string, std::string>> keywords = ParsePostgresConninfo(text);
  if (!keywords.ok()) {
    error = keywords.status().message();
    return false;
  }
  for (auto& [keyword, value] : *keywords) connection[keyword] = std::move(value);
  return true;
}

// Whether `text` is a TCP port number, 1 to 65535.
bool IsPort(std::string_view text) {
  if (text.empty() || text.size() > 5 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  const int port = std::stoi(std::string(text));
  return port >= 1 && port <= 65535;
}

// Decodes %XX escapes. Returns false for a malformed escape.
bool PercentDecode(std::string_view text, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      return false;
    }
    out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
    i += 2;
  }
  return true;
}

// Returns the scalar at `key` of an object connection as text: strings substituted, numbers
// written without a fraction when they have none.
std::optional<std::string> ReadScalar(const Config& config, const std::string& key,
                                      ConfigProblems& problems) {
  const ConfigNode* node = config.Node(key);
  if (node != nullptr && std::holds_alternative<double>(node->value)) {
    const double number = std::get<double>(node->value);
    if (std::floor(number) == number && std::abs(number) < 1e15) {
      return fmt::format("{}", static_cast<long long>(number));
    }
    return fmt::format("{}", number);
  }
  return ReadString(config, key, problems);
}

// Reads the field `key` of a MySQL connection object into `connection` (fields mysql2 has that
// stagehand does not use are ignored).
void ReadMySqlField(const Config& object, const std::string& key, DatabaseConnection& connection,
                    ConfigProblems& problems) {
  if (key == "ssl") {
    const ConfigNode* ssl = object.Node(key);
    if (ssl != nullptr && (std::holds_alternative<ConfigNode::Object>(ssl->value) ||
                           std::holds_alternative<std::string>(ssl->value))) {
      connection["ssl"] = "true";  // an ssl profile or options object: TLS is wanted
    } else if (std::optional<bool> enabled = ReadBoolean(object, key, problems)) {
      connection["ssl"] = *enabled ? "true" : "false";
    }
    return;
  }
  std::string field;
  if (key == "host" || key == "port" || key == "user" || key == "password") {
    field = key;
  } else if (key == "database") {
    field = "dbname";
  } else if (key == "socketPath") {
    field = "socket";
  } else {
    return;
  }
  std::optional<std::string> value = ReadScalar(object, key, problems);
  if (!value) return;
  if (field == "port" && !IsPort(*value)) {
    problems.Add(InvalidConfigValue(
        object, key, fmt::format("wanted a port from 1 to 65535, got '{}'", *value)));
    return;
  }
  connection[field] = *value;
}

// Reads `connection` under `config` for `client`, normalised to named fields.
DatabaseConnection ReadConnection(const Config& config, DatabaseClient client,
                                  ConfigProblems& problems) {
  constexpr std::string_view kKey = "connection";
  DatabaseConnection connection;
  const ConfigNode* node = config.Node(kKey);
  if (node == nullptr) {
    return connection;
  }
  if (std::holds_alternative<std::string>(node->value)) {
    std::optional<std::string> text = ReadString(config, kKey, problems);
    if (!text) {
      return connection;
    }
    if (client == DatabaseClient::kSqlite) {
      connection["filename"] = *text;
      return connection;
    }
    if (client == DatabaseClient::kMySql) {
      // The URL may hold a password: never repeat it.
      if (!ParseMySqlUrl(*text, connection)) {
        problems.Add(InvalidConfigValue(
            config, kKey, "not a MySQL URL (mysql://user:password@host:port/database)"));
      }
      return connection;
    }
    std::string error;
    if (!ParsePostgresString(*text, connection, error)) {
      // libpq's message may quote the text, which may hold a password: do not repeat it.
      problems.Add(
          InvalidConfigValue(config, kKey, "not a valid PostgreSQL connection string or URL"));
    }
    return connection;
  }
  Result<Config> object = config.GetConfig(kKey);
  if (!object.ok()) {
    problems.Add(object.status());
    return connection;
  }
  for (const std::string& key : object->Keys()) {
    if (client == DatabaseClient::kSqlite) {
      if (key != "filename" && key != "directory") {
        continue;
      }
      if (std::optional<std::string> value = ReadString(*object, key, problems)) {
        connection[key] = *value;
      }
      continue;
    }
    if (client == DatabaseClient::kMySql) {
      ReadMySqlField(*object, key, connection, problems);
      continue;
    }
    if (key == "ssl") {
      const ConfigNode* ssl = object->Node(key);
      if (ssl != nullptr && std::holds_alternative<ConfigNode::Object>(ssl->value)) {
        connection["sslmode"] = "require";
      } else if (std::optional<bool> enabled = ReadBoolean(*object, key, problems)) {
        connection["sslmode"] = *enabled ? "require" : "disable";
      }
      continue;
    }
    if (key == "connectionString") {
      if (std::optional<std::string> text = ReadString(*object, key, problems)) {
        std::string error;
        if (!ParsePostgresString(*text, connection, error)) {
          problems.Add(
              InvalidConfigValue(*object, key, "not a valid PostgreSQL connection string or URL"));
        }
      }
      continue;
    }
    std::string keyword;
    if (key == "host" || key == "port" || key == "user" || key == "password") {
      keyword = key;
    } else if (key == "database") {
      keyword = "dbname";
    } else {
      continue;  // pg options that libpq has no keyword for (pool settings and the like)
    }
    if (std::optional<std::string> value = ReadScalar(*object, key, problems)) {
      connection[keyword] = *value;
    }
  }
  return connection;
}

// Reads an integer in [low, high] at `key`, or nothing when it is absent.
std::optional<int> ReadInteger(const Config& config, std::string_view key, int low, int high,
                               ConfigProblems& problems) {
  Result<std::optional<double>> value = config.GetOptionalNumber(key);
  if (!value.ok()) {
    problems.Add(value.status());
    return std::nullopt;
  }
  if (!*value) {
    return std::nullopt;
  }
  const double number = **value;
  if (std::floor(number) != number || number < low || number > high) {
    problems.Add(InvalidConfigValue(
        config, key, fmt::format("wanted an integer from {} to {}, got {}", low, high, number)));
    return std::nullopt;
  }
  return static_cast<int>(number);
}

// Reads `knexConfig.pool` under `config`: min, max, idleTimeoutMillis (other knex settings are
// not used).
DatabasePoolConfig ReadPool(const Config& config, ConfigProblems& problems) {
  constexpr int kMaxPoolSize = 10000;
  constexpr int kMaxIdleTimeoutMs = 24 * 3600 * 1000;
  DatabasePoolConfig pool;
  Result<std::optional<Config>> block = config.GetOptionalConfig("knexConfig.pool");
  if (!block.ok()) {
    problems.Add(block.status());
    return pool;
  }
  if (!*block) {
    return pool;
  }
  pool.min = ReadInteger(**block, "min", 0, kMaxPoolSize, problems);
  pool.max = ReadInteger(**block, "max", 1, kMaxPoolSize, problems);
  if (std::optional<int> idle =
          ReadInteger(**block, "idleTimeoutMillis", 0, kMaxIdleTimeoutMs, problems)) {
    pool.idle_timeout = std::chrono::milliseconds(*idle);
  }
  if (pool.min && pool.max && *pool.min > *pool.max) {
    problems.Add(InvalidConfigValue(
        **block, "min", fmt::format("min ({}) is greater than max ({})", *pool.min, *pool.max)));
  }
  return pool;
}

std::string QuoteConnectionValue(const std::string& value) {
  std::string quoted = "'";
  for (char c : value) {
    if (c == '\\' || c == '\'') {
      quoted += '\\';
    }
    quoted += c;
  }
  return quoted + "'";
}

// Reads `pooler` and `notifyConnection` from the stagehand.database block, after
// `config.division_mode`.
void ReadPooler(const Config& stagehand, DatabaseConfig& config, ConfigProblems& problems) {
  if (std::optional<std::string> pooler = ReadString(stagehand, "pooler", problems)) {
    if (*pooler == "transaction") {
      config.transaction_pooler = true;
      if (config.division_mode == PluginDivisionMode::kSchema) {
        problems.Add(InvalidConfigValue(
            stagehand, "pooler",
            "'transaction' needs backend.database.pluginDivisionMode 'database' (a session's "
            "search_path does not follow its statements through a transaction pooler)"));
      }
    } else if (*pooler != "none" && *pooler != "session") {
      problems.Add(InvalidConfigValue(
          stagehand, "pooler",
          fmt::format("unsupported pooler mode '{}', wanted one of none, session, transaction",
                      *pooler)));
    }
  }
  std::optional<std::string> notify = ReadString(stagehand, "notifyConnection", problems);
  if (!notify) return;
  DatabaseConnection fields;
  std::string error;
  if (!ParsePostgresString(*notify, fields, error)) {
    // libpq's reason names the part at fault, never the password.
    problems.Add(InvalidConfigValue(stagehand, "notifyConnection", error));
    return;
  }
  config.notify_connection = PostgresConnectionString(fields);
}

}  // namespace

bool ParseMySqlUrl(std::string_view text, DatabaseConnection& connection) {
  constexpr std::string_view kScheme = "mysql://";
  if (!text.starts_with(kScheme)) return false;
  std::string_view rest = text.substr(kScheme.size());
  std::string_view query;
  if (const std::size_t mark = rest.find('?'); mark != std::string_view::npos) {
    query = rest.substr(mark + 1);
    rest = rest.substr(0, mark);
  }
  std::string_view path;
  if (const std::size_t slash = rest.find('/'); slash != std::string_view::npos) {
    path = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  std::string decoded;
  if (const std::size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view credentials = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const std::size_t colon = credentials.find(':');
    if (!PercentDecode(credentials.substr(0, colon), decoded)) return false;
    connection["user"] = decoded;
    if (colon != std::string_view::npos) {
      if (!PercentDecode(credentials.substr(colon + 1), decoded)) return false;
      connection["password"] = decoded;
    }
  }
  if (const std::size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    const std::string_view port = rest.substr(colon + 1);
    if (!IsPort(port)) return false;
    connection["port"] = std::string(port);
    rest = rest.substr(0, colon);
  }
  if (rest.empty() || !PercentDecode(rest, decoded)) return false;
  connection["host"] = decoded;
  if (!path.empty()) {
    if (!PercentDecode(path, decoded)) return false;
    connection["dbname"] = decoded;
  }
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.starts_with("ssl=")) {
      const std::string_view value = pair.substr(4);
      connection["ssl"] = value == "false" || value == "0" ? "false" : "true";
    }
  }
  return true;
}

Result<DatabaseConfig> ReadDatabaseConfig(const Config& root) {
  STAGEHAND_ASSIGN_OR_RETURN(Config db, root.GetConfig(kRootKey));

  ConfigProblems problems;
  DatabaseConfig config;
  config.context = db.Context();

  std::optional<DatabaseClient> client =
      ReadClient(db, "client", true, problems, &config.client_name);
  if (client) {
    config.client = *client;
  }

  if (!db.Has("connection")) {
    problems.Add(db.GetString("connection").status());
  } else if (client) {
    config.connection = ReadConnection(db, *client, problems);
    if (*client == DatabaseClient::kSqlite) {
      auto filename = config.connection.find("filename");
      if (filename != config.connection.end() && filename->second != kMemory) {
        problems.Add(
            InvalidConfigValue(db, "connection",
                               "a file name is not supported for the base sqlite connection; "
                               "use ':memory:' or {directory: <dir>}, or give a filename in "
                               "backend.database.plugin.<pluginId>.connection"));
      }
    }
  }

  if (std::optional<std::string> prefix = ReadString(db, "prefix", problems)) {
    config.prefix = *prefix;
  }
  if (std::optional<std::string> mode = ReadString(db, "pluginDivisionMode", problems)) {
    if (*mode == "database") {
      config.division_mode = PluginDivisionMode::kDatabase;
    } else if (*mode == "schema") {
      config.division_mode = PluginDivisionMode::kSchema;
    } else {
      problems.Add(InvalidConfigValue(
          db, "pluginDivisionMode",
          fmt::format("unsupported mode '{}', wanted one of database, schema", *mode)));
    }
  }
  if (std::optional<bool> skip = ReadBoolean(db, "skipMigrations", problems)) {
    config.skip_migrations = *skip;
  }
  config.pool = ReadPool(db, problems);
  if (Result<std::optional<Config>> stagehand = root.GetOptionalConfig("stagehand.database");
      !stagehand.ok()) {
    problems.Add(stagehand.status());
  } else if (*stagehand) {
    constexpr int kMaxStatementConnections = 100000;
    if (std::optional<int> cap =
            ReadInteger(**stagehand, "maxConnections", 0, kMaxStatementConnections, problems)) {
      config.max_statement_connections = *cap;
    }
    ReadPooler(**stagehand, config, problems);
  }

  Result<std::optional<Config>> plugins = db.GetOptionalConfig("plugin");
  if (!plugins.ok()) {
    problems.Add(plugins.status());
  } else if (*plugins) {
    for (const std::string& id : (*plugins)->Keys()) {
      Result<Config> block = (*plugins)->GetConfig(id);
      if (!block.ok()) {
        problems.Add(block.status());
        continue;
      }
      PluginDatabaseOverride plugin;
      std::string name;
      plugin.client = ReadClient(*block, "client", false, problems, &name);
      if (plugin.client) {
        plugin.client_name = name;
      }
      const std::optional<DatabaseClient> effective = plugin.client ? plugin.client : client;
      if (effective) {
        plugin.connection = ReadConnection(*block, *effective, problems);
      }
      plugin.skip_migrations = ReadBoolean(*block, "skipMigrations", problems);
      plugin.pool = ReadPool(*block, problems);
      config.plugins.emplace(id, std::move(plugin));
    }
  }

  if (!problems.empty()) {
    return problems.ToStatus();
  }
  return config;
}

Result<PluginDatabase> ResolvePluginDatabase(const DatabaseConfig& config,
                                             const std::string& plugin_id) {
  const PluginDatabaseOverride* plugin = nullptr;
  if (auto it = config.plugins.find(plugin_id); it != config.plugins.end()) {
    plugin = &it->second;
  }

  PluginDatabase result;
  result.client = config.client;
  bool overridden = false;
  if (plugin != nullptr && plugin->client) {
    result.client = *plugin->client;
    overridden = plugin->client_name != config.client_name;
  }
  result.skip_migrations = plugin != nullptr && plugin->skip_migrations ? *plugin->skip_migrations
                                                                        : config.skip_migrations;

  DatabaseConnection connection;
  if (!overridden) {
    connection = config.connection;
    if (config.division_mode != PluginDivisionMode::kSchema) {
      connection.erase("dbname");
    }
  }
  if (plugin != nullptr) {
    for (const auto& [key, value] : plugin->connection) {
      connection[key] = value;
    }
  }

  if (result.client == DatabaseClient::kSqlite) {
    auto filename = connection.find("filename");
    if (filename != connection.end() && filename->second == kMemory) {
      result.database = kMemory;
      return result;
    }
    auto directory = connection.find("directory");
    const std::string dir = directory != connection.end() ? directory->second : ".";
    if (filename != connection.end()) {
      result.database = (std::filesystem::path(dir) / filename->second).string();
    } else {
      result.database = SqlitePluginDatabasePath(dir, plugin_id);
    }
    return result;
  }

  const DatabasePoolConfig empty_pool;
  const DatabasePoolConfig& own = plugin != nullptr ? plugin->pool : empty_pool;
  result.pool_min = own.min.value_or(config.pool.min.value_or(result.pool_min));
  result.pool_max = own.max.value_or(config.pool.max.value_or(result.pool_max));
  result.pool_min = std::min(result.pool_min, result.pool_max);
  result.idle_timeout =
      own.idle_timeout.value_or(config.pool.idle_timeout.value_or(result.idle_timeout));

  if (result.client == DatabaseClient::kMySql) {
    if (config.division_mode == PluginDivisionMode::kSchema) {
      return InvalidArgumentError(fmt::format(
          "plugin '{}': backend.database.pluginDivisionMode 'schema' is supported on PostgreSQL "
          "only (MySQL has no schemas within a database); use 'database'",
          plugin_id));
    }
    auto dbname = connection.find("dbname");
    result.database = dbname != connection.end() ? dbname->second : config.prefix + plugin_id;
    // Counted in characters: MySQL's limit is 64 of them.
    const auto characters =
        std::count_if(result.database.begin(), result.database.end(),
                      [](char c) { return (static_cast<unsigned char>(c) & 0xC0U) != 0x80U; });
    if (static_cast<std::size_t>(characters) > kMaxMySqlDatabaseNameChars) {
      return InvalidArgumentError(fmt::format(
          "plugin '{}': database name '{}' is {} characters long; MySQL's limit is {} (shorten "
          "backend.database.prefix or the plugin id)",
          plugin_id, result.database, characters, kMaxMySqlDatabaseNameChars));
    }
    connection.erase("dbname");
    result.mysql_server = std::move(connection);
    return result;
  }

  if (config.division_mode == PluginDivisionMode::kSchema) {
    auto dbname = connection.find("dbname");
    result.database = dbname != connection.end() ? dbname->second : "";
    result.schema = plugin_id;
  } else {
    auto dbname = connection.find("dbname");
    result.database = dbname != connection.end() ? dbname->second : config.prefix + plugin_id;
    // PostgreSQL truncates longer identifiers silently, so two plugins could share a database.
    if (result.database.size() > kMaxPostgresIdentifierBytes) {
      return InvalidArgumentError(fmt::format(
          "plugin '{}': database name '{}' is {} bytes long; PostgreSQL's limit is {} (shorten "
          "backend.database.prefix or the plugin id)",
          plugin_id, result.database, result.database.size(), kMaxPostgresIdentifierBytes));
    }
    connection["dbname"] = "postgres";
  }
  result.server_connection = PostgresConnectionString(connection);
  result.transaction_pooler = config.transaction_pooler;
  result.notify_connection = config.notify_connection;
  return result;
}

std::string PostgresConnectionString(const DatabaseConnection& connection) {
  std::string text;
  for (const auto& [key, value] : connection) {
    text += (text.empty() ? "" : " ") + key + "=" + QuoteConnectionValue(value);
  }
  return text;
}

}  // namespace stagehand
