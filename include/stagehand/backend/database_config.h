// The `backend.database` part of an app-config, read the way Backstage's DatabaseManager reads it:
// the client, the base connection, the database prefix, the plugin division mode, skipMigrations
// and the per-plugin overrides under `backend.database.plugin.<pluginId>`. `${VAR}` references are
// replaced when the config is loaded (LoadAppConfig in app_config.h), not here.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/config/config.h"

namespace stagehand {

enum class DatabaseClient {
  kSqlite,    // `better-sqlite3` or `sqlite3`
  kPostgres,  // `pg`
  kMySql,     // `mysql2` or `mysql` (MySQL and MariaDB)
};

enum class PluginDivisionMode {
  kDatabase,  // one database per plugin, named prefix + pluginId (the default)
  kSchema,    // one schema per plugin, named pluginId, in the connection's database (pg only)
};

// A connection normalised to named fields, so that a plugin's connection can be merged over the
// base one. SQLite uses `filename` and `directory`; PostgreSQL uses libpq's keywords (`host`,
// `port`, `user`, `password`, `dbname`, `sslmode`, ...), whether the config gave a connection
// string, a URL or an object ({host, port, user, password, database, ssl}); MySQL uses `host`,
// `port`, `user`, `password`, `dbname`, `socket` and `ssl` ("true" or "false"), from a
// `mysql://user:password@host:port/database` URL or an object ({host, port, user, password,
// database, socketPath, ssl}).
using DatabaseConnection = std::map<std::string, std::string>;

// Backstage's `knexConfig.pool` (knex/tarn pool settings) for the PostgreSQL statement
// connections: `min`, `max` and `idleTimeoutMillis`. Unset fields inherit (plugin from base, base
// from the defaults in PluginDatabase). A value type.
struct DatabasePoolConfig {
  std::optional<int> min;
  std::optional<int> max;
  std::optional<std::chrono::milliseconds> idle_timeout;
};

// One `backend.database.plugin.<pluginId>` block. Unset fields inherit from the base.
struct PluginDatabaseOverride {
  std::optional<DatabaseClient> client;
  std::optional<std::string> client_name;  // as written, e.g. "pg"
  DatabaseConnection connection;           // empty when the block has no `connection`
  std::optional<bool> skip_migrations;
  DatabasePoolConfig pool;  // `knexConfig.pool`
};

// The whole `backend.database` block. A value type; thread-compatible.
struct DatabaseConfig {
  DatabaseClient client = DatabaseClient::kSqlite;
  std::string client_name = "better-sqlite3";
  DatabaseConnection connection;
  std::string prefix = "backstage_plugin_";
  PluginDivisionMode division_mode = PluginDivisionMode::kDatabase;
  bool skip_migrations = false;
  std::map<std::string, PluginDatabaseOverride> plugins;  // by plugin id
  DatabasePoolConfig pool;                                // `knexConfig.pool`
  // `stagehand.database.maxConnections`: PostgreSQL statement connections open at once across
  // all plugins of the process (LISTEN connections aside); 0 means no cap.
  int max_statement_connections = 10;
  // `stagehand.database.pooler: transaction`: PostgreSQL statements go through a pooler in
  // transaction mode (see PostgresStoreOptions::transaction_pooler). `none` and `session` (the
  // default and a pooler that keeps each client's server session) need nothing special.
  bool transaction_pooler = false;
  // `stagehand.database.notifyConnection`: the libpq connection string of the LISTEN sessions
  // (straight to the server behind a transaction pooler). Empty: the connection's. May hold a
  // password: never print it.
  std::string notify_connection;
  std::string context;  // the file `backend.database` came from, for messages
};

// Where one plugin's tables live once the overrides are applied (Backstage's per-plugin
// connection rules). A value type; thread-compatible.
struct PluginDatabase {
  DatabaseClient client = DatabaseClient::kSqlite;
  // SQLite: the database file ("<directory>/<pluginId>.sqlite", or the plugin's own filename) or
  // ":memory:". PostgreSQL and MySQL: the plugin's database name.
  std::string database;
  // PostgreSQL, schema mode: the plugin's schema. Empty otherwise.
  std::string schema;
  // PostgreSQL: the libpq connection string of the server (in database mode its `dbname` is the
  // maintenance database `postgres`, from which the plugin database is created). May hold a
  // password: never print it.
  std::string server_connection;
  // PostgreSQL: DatabaseConfig's pooler and notify connection, for every plugin.
  bool transaction_pooler = false;
  std::string notify_connection;
  // MySQL: the server's fields (`host`, `port`, `user`, `password`, `socket`, `ssl`; see
  // DatabaseConnection). May hold a password: never print it.
  DatabaseConnection mysql_server;
  bool skip_migrations = false;
  // PostgreSQL and MySQL: the statement pool (knex's pool.min, pool.max, pool.idleTimeoutMillis;
  // plugin settings over base ones over these defaults; MySQL uses pool.max only).
  int pool_min = 0;
  int pool_max = 4;
  std::chrono::milliseconds idle_timeout{10000};
};

// Reads `backend.database` from `root`, and `stagehand.database`. Errors: kInvalidArgument listing
// every problem found, one per line, each naming the full key and the file it came from.
Result<DatabaseConfig> ReadDatabaseConfig(const Config& root);

// Applies `config`'s rules for `plugin_id`: a plugin connection is merged over the base one when
// the plugin keeps the base client and replaces it otherwise; the base `database` is used only in
// schema mode; SQLite's base connection may name only ":memory:" or a directory.
// Errors: kInvalidArgument naming the plugin and the key at fault.
Result<PluginDatabase> ResolvePluginDatabase(const DatabaseConfig& config,
                                             const std::string& plugin_id);

// Parses a mysql2 connection URL, mysql://[user[:password]@]host[:port][/database][?ssl=...]
// (percent escapes decoded), into `connection`'s MySQL fields. Query parameters other than `ssl`
// are ignored, as knex passes them to mysql2 options stagehand has no use for. Returns false,
// leaving `connection` partly filled, when `text` is not such a URL.
bool ParseMySqlUrl(std::string_view text, DatabaseConnection& connection);

// Returns the libpq connection string for the PostgreSQL `connection` fields (values quoted).
std::string PostgresConnectionString(const DatabaseConnection& connection);

}  // namespace stagehand
