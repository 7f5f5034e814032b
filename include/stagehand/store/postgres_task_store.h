// The distributed TaskStore on PostgreSQL (libpq): one database per plugin
// (`backstage_plugin_<pluginId>`, created when missing) or one schema per plugin, a small pool of
// connections with prepared statements, LISTEN/NOTIFY for cross-host wake-ups, and reconnection
// after the server restarts.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "stagehand/store/task_store.h"

namespace stagehand {

struct PostgresStoreOptions {
  // libpq connection string or URL for the server, e.g. "postgresql://u:p@127.0.0.1:5432/postgres".
  // Its database is used to create the plugin database when that is missing.
  std::string connection;
  // The plugin's database, e.g. "backstage_plugin_catalog". Empty: use the connection's own
  // database (with `schema` for schema division).
  std::string database;
  // For pluginDivisionMode "schema": the plugin's schema, created when missing. Empty otherwise.
  std::string schema;
  // Connections kept by the pool (one more is used for LISTEN).
  int pool_size = 4;
  std::chrono::milliseconds connect_timeout{5000};
  // Bound on any one statement; a statement past it fails kUnavailable.
  std::chrono::milliseconds statement_timeout{10000};
  // Client-side bound on waiting for any one statement's answer (see TaskStore::SetCallTimeout,
  // which replaces it); zero means none.
  std::chrono::milliseconds call_timeout{0};
};

// Opens the pool for `plugin_id`, creating the plugin database or schema when missing. Does not
// migrate. Errors: kUnavailable naming the plugin and the database (never the password).
Result<std::unique_ptr<TaskStore>> OpenPostgresTaskStore(const std::string& plugin_id,
                                                         const PostgresStoreOptions& options,
                                                         const Clock& clock);

}  // namespace stagehand
