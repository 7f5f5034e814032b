// The TaskStore on MySQL and MariaDB (MariaDB Connector/C): one database per plugin
// (`backstage_plugin_<pluginId>`, created when missing), with Backstage's table, columns and knex
// bookkeeping as Backstage's mysql2 client creates them, and a small pool of sessions. Each
// operation locks the rows it changes (SELECT ... FOR UPDATE, in id order), applies the same row
// rules as the other stores and writes the rows back in one transaction; times are whole seconds,
// as Backstage's `datetime` columns hold them (docs/adr/0019-mysql-change-log-and-woken-waits.md).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand {

struct MySqlStoreOptions {
  std::string host = "127.0.0.1";  // ignored when `socket_path` is set
  int port = 3306;
  std::string socket_path;  // a Unix socket instead of TCP
  std::string user;
  std::string password;  // never printed
  // The plugin's database, e.g. "backstage_plugin_catalog", created when missing.
  std::string database;
  // Sessions open at once for statements (knex's `pool.max`).
  int pool_size = 4;
  std::chrono::milliseconds connect_timeout{5000};
  // Client-side bound on waiting for one statement's answer, in whole seconds (see
  // TaskStore::SetCallTimeout, which replaces it); zero means none.
  std::chrono::milliseconds call_timeout{0};
  // How long a statement waits for a row another session has locked (innodb_lock_wait_timeout,
  // whole seconds, at least 1) before the operation fails kUnavailable.
  std::chrono::seconds lock_wait_timeout{10};
  bool tls_required = false;
};

// Opens the store for `plugin_id`, creating its database when missing (one session, at once).
// Does not migrate. `clock` is the host's wall clock, against which the database's clock is
// estimated for cron next times. Errors: kUnavailable naming the plugin and the server (never the
// password).
Result<std::unique_ptr<TaskStore>> OpenMySqlTaskStore(const std::string& plugin_id,
                                                      const MySqlStoreOptions& options,
                                                      const Clock& clock);

}  // namespace stagehand
