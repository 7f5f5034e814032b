// The embedded default TaskStore: one SQLite database file per plugin, in WAL mode, with the same
// schema and knex bookkeeping as Backstage's better-sqlite3 client. Several processes may share one
// file; they coordinate through SQLite's locking (no notifications: they poll).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "stagehand/store/task_store.h"

namespace stagehand {

struct SqliteStoreOptions {
  // The database file, or ":memory:" for a private in-memory database.
  std::string path;
  // How long a statement waits for another process's write lock before failing kUnavailable.
  std::chrono::milliseconds busy_timeout{5000};
};

// Returns the file Backstage uses for a plugin's database in `directory`:
// "<directory>/<pluginId>.sqlite".
std::string SqlitePluginDatabasePath(const std::string& directory, const std::string& plugin_id);

// Opens (creating if needed) the database at options.path for `plugin_id`. Does not migrate.
// `clock` is the host wall clock used where Backstage uses the application clock (cron times).
// Errors: kUnavailable naming the plugin and the file.
Result<std::unique_ptr<TaskStore>> OpenSqliteTaskStore(const std::string& plugin_id,
                                                       const SqliteStoreOptions& options,
                                                       const Clock& clock);

}  // namespace stagehand
