// Opens each plugin's task store from the `backend.database` config, as Backstage's
// DatabaseManager hands each plugin its own database: SQLite files named `<pluginId>.sqlite`, or
// PostgreSQL databases `<prefix><pluginId>` (schemas `<pluginId>` in schema mode), and runs their
// migrations unless skipMigrations says not to.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "stagehand/backend/database_config.h"
#include "stagehand/base/mutex.h"
#include "stagehand/base/status.h"
#include "stagehand/store/postgres_task_store.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand {

// What MigrateIfNeeded did.
enum class MigrationOutcome {
  kMigrated,  // Migrate() ran: the schema is now current
  kSkipped,   // skipMigrations is set for the plugin
};

// Hands out one task store per plugin, opened on first use and shared afterwards (a failed open is
// retried on the next call). The PostgreSQL stores share one PostgresConnections: the cap
// `max_statement_connections`, one LISTEN connection per database, and a thread that closes
// statement connections idle past their `idleTimeoutMillis`. Thread-safe. `clock` must outlive
// the manager and its stores.
class DatabaseManager {
 public:
  // Idle statement connections are closed on time by a thread waiting on `clock`.
  DatabaseManager(DatabaseConfig config, Clock& clock);
  // Without a clock to wait on, idle statement connections are closed only as the stores are used
  // (for short-lived commands).
  DatabaseManager(DatabaseConfig config, const Clock& clock);

  const DatabaseConfig& config() const { return config_; }

  // Returns where `plugin_id`'s tables live. Errors: as ResolvePluginDatabase.
  Result<PluginDatabase> Resolve(const std::string& plugin_id) const;

  // Returns a human-readable name of the plugin's database: the SQLite file, or the PostgreSQL
  // database (with "schema <id>" in schema mode). Never contains a password.
  static std::string DisplayName(const PluginDatabase& database);

  // Returns the plugin's store, opening it (and creating a PostgreSQL database or schema that is
  // missing) on first use. Does not migrate. Errors: kInvalidArgument from the config;
  // kUnavailable naming the plugin and its database.
  Result<std::shared_ptr<TaskStore>> OpenStore(const std::string& plugin_id);

  // Opens the plugin's store and migrates it unless skipMigrations is set for it (per plugin, else
  // globally); a skipped plugin's database is not opened. Errors: as OpenStore and
  // TaskStore::Migrate, naming the plugin and its database.
  Result<MigrationOutcome> MigrateIfNeeded(const std::string& plugin_id);

 private:
  // Returns what the PostgreSQL stores share, created on first use.
  std::shared_ptr<PostgresConnections> PostgresShared();

  DatabaseConfig config_;
  const Clock& clock_;
  Clock* waitable_clock_ = nullptr;
  Mutex mutex_;
  std::map<std::string, std::shared_ptr<TaskStore>> stores_ STAGEHAND_GUARDED_BY(mutex_);
  std::shared_ptr<PostgresConnections> postgres_ STAGEHAND_GUARDED_BY(mutex_);
};

}  // namespace stagehand
