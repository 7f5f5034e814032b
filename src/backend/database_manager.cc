#include "stagehand/backend/database_manager.h"

#include <fmt/format.h>

#include <system_error>
#include <utility>

#include "stagehand/store/mysql_task_store.h"
#include "stagehand/store/postgres_task_store.h"
#include "stagehand/store/sqlite_task_store.h"

namespace stagehand {
namespace {

// Returns `status` with the plugin and its database named, unless the store already named them.
Status Describe(const Status& status, const std::string& plugin_id, const std::string& database) {
  if (status.message().find("'" + plugin_id + "'") != std::string::npos &&
      status.message().find(database) != std::string::npos) {
    return status;
  }
  return Status(status.code(), fmt::format("plugin '{}', database '{}': {}", plugin_id, database,
                                           status.message()));
}

// The MySQL store's options for `database` (mysql2's defaults where the config is silent).
MySqlStoreOptions MySqlOptions(const PluginDatabase& database) {
  const auto field = [&](const char* key) -> std::string {
    auto found = database.mysql_server.find(key);
    return found != database.mysql_server.end() ? found->second : "";
  };
  MySqlStoreOptions options;
  if (const std::string host = field("host"); !host.empty()) options.host = host;
  if (const std::string port = field("port"); !port.empty()) options.port = std::stoi(port);
  options.socket_path = field("socket");
  options.user = field("user");
  options.password = field("password");
  options.tls_required = field("ssl") == "true";
  options.database = database.database;
  options.pool_size = database.pool_max;
  return options;
}

}  // namespace

DatabaseManager::DatabaseManager(DatabaseConfig config, Clock& clock)
    : config_(std::move(config)), clock_(clock), waitable_clock_(&clock) {}

DatabaseManager::DatabaseManager(DatabaseConfig config, const Clock& clock)
    : config_(std::move(config)), clock_(clock) {}

std::shared_ptr<PostgresConnections> DatabaseManager::PostgresShared() {
  MutexLock lock(mutex_);
  if (!postgres_) {
    PostgresConnections::Options options;
    options.max_statement_connections = config_.max_statement_connections;
    postgres_ = waitable_clock_ != nullptr
                    ? PostgresConnections::Create(*waitable_clock_, options)
                    : PostgresConnections::CreateWithoutCloser(clock_, options);
  }
  return postgres_;
}

Result<PluginDatabase> DatabaseManager::Resolve(const std::string& plugin_id) const {
  return ResolvePluginDatabase(config_, plugin_id);
}

std::string DatabaseManager::DisplayName(const PluginDatabase& database) {
  if (database.schema.empty()) return database.database;
  const std::string name = database.database.empty() ? "(default)" : database.database;
  return fmt::format("{}, schema {}", name, database.schema);
}

Result<std::shared_ptr<TaskStore>> DatabaseManager::OpenStore(const std::string& plugin_id) {
  {
    MutexLock lock(mutex_);
    if (auto it = stores_.find(plugin_id); it != stores_.end()) return it->second;
  }
  STAGEHAND_ASSIGN_OR_RETURN(PluginDatabase database, Resolve(plugin_id));

  Result<std::unique_ptr<TaskStore>> opened = InternalError("no store opened");
  if (database.client == DatabaseClient::kSqlite) {
    // The store creates the directory of the plugin's file when it is missing, as Backstage does
    // (0700, and the file 0600, whatever the umask).
    SqliteStoreOptions options;
    options.path = database.database;
    opened = OpenSqliteTaskStore(plugin_id, options, clock_);
  } else if (database.client == DatabaseClient::kMySql) {
    opened = OpenMySqlTaskStore(plugin_id, MySqlOptions(database), clock_);
  } else {
    PostgresStoreOptions options;
    options.connection = database.server_connection;
    options.database = database.database;
    options.schema = database.schema;
    options.pool_min = database.pool_min;
    options.pool_size = database.pool_max;
    options.idle_timeout = database.idle_timeout;
    options.transaction_pooler = database.transaction_pooler;
    options.notify_connection = database.notify_connection;
    options.connections = PostgresShared();
    opened = OpenPostgresTaskStore(plugin_id, options, clock_);
  }
  if (!opened.ok()) return Describe(opened.status(), plugin_id, DisplayName(database));

  std::shared_ptr<TaskStore> store = std::move(*opened);
  MutexLock lock(mutex_);
  auto [it, inserted] = stores_.emplace(plugin_id, std::move(store));
  return it->second;
}

Result<MigrationOutcome> DatabaseManager::MigrateIfNeeded(const std::string& plugin_id) {
  STAGEHAND_ASSIGN_OR_RETURN(PluginDatabase database, Resolve(plugin_id));
  if (database.skip_migrations) return MigrationOutcome::kSkipped;
  STAGEHAND_ASSIGN_OR_RETURN(std::shared_ptr<TaskStore> store, OpenStore(plugin_id));
  if (Status migrated = store->Migrate(); !migrated.ok()) {
    return Describe(migrated, plugin_id, DisplayName(database));
  }
  return MigrationOutcome::kMigrated;
}

}  // namespace stagehand
