// The distributed TaskStore on PostgreSQL (libpq): one database per plugin
// (`backstage_plugin_<pluginId>`, created when missing) or one schema per plugin, a small pool of
// connections with prepared statements that closes the ones left idle, LISTEN/NOTIFY for
// cross-host wake-ups, and reconnection after the server restarts. The stores of one process
// share a PostgresConnections: a cap on their statement connections and one LISTEN connection per
// database.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand {

// What the PostgreSQL stores of one process share: a cap on their statement connections (a store
// that needs one when the cap is reached closes the longest-idle connection of another store, or
// waits for one to be returned), a thread that closes connections idle past their store's idle
// timeout, and the LISTEN connections, one per database (so one for all plugins in
// `pluginDivisionMode: schema`, one per plugin database in `database` mode) served by one thread.
// Thread-safe. Held by shared_ptr: each store keeps it alive.
class PostgresConnections {
 public:
  struct Options {
    // Statement connections open at once across the stores; zero means no cap. Must be at least
    // 1 to be useful; a store's first connection is counted even past it.
    int max_statement_connections = 10;
  };

  // Creates the shared state. Its threads wait on `clock`, which must outlive every store using
  // it; the thread closing idle connections is started at once, the LISTEN thread with the first
  // subscription.
  static std::shared_ptr<PostgresConnections> Create(Clock& clock, Options options);
  // Same, without the thread closing idle connections: they are closed only when some store of
  // the process lends or takes back a connection (for short-lived commands such as
  // `stagehand db migrate`).
  static std::shared_ptr<PostgresConnections> CreateWithoutCloser(const Clock& clock,
                                                                  Options options);

  virtual ~PostgresConnections() = default;

  // Returns the statement connections open now across the stores (idle or in use).
  virtual int StatementConnections() const = 0;
  // Returns the LISTEN connections open now.
  virtual int ListenConnections() const = 0;
  // Closes every idle statement connection whose idle timeout has passed (monotonic time, at or
  // past the deadline), keeping each store's minimum; the closer thread does this on time, this
  // is for tests that drive a manual clock. Returns the earliest deadline still ahead, or
  // kMonoInfinity.
  virtual MonoTime CloseExpired() = 0;
};

struct PostgresStoreOptions {
  // libpq connection string or URL for the server, e.g. "postgresql://u:p@127.0.0.1:5432/postgres".
  // Its database is used to create the plugin database when that is missing.
  std::string connection;
  // The plugin's database, e.g. "backstage_plugin_catalog". Empty: use the connection's own
  // database (with `schema` for schema division).
  std::string database;
  // For pluginDivisionMode "schema": the plugin's schema, created when missing. Empty otherwise.
  std::string schema;
  // Statement connections open at once (knex's `pool.max`); LISTEN uses a connection shared with
  // the other stores on the same database.
  int pool_size = 4;
  // Statement connections kept open however long they are idle (knex's `pool.min`).
  int pool_min = 0;
  // How long a statement connection may stay idle before it is closed, down to `pool_min`
  // (knex's `pool.idleTimeoutMillis`; monotonic).
  std::chrono::milliseconds idle_timeout{10000};
  // What the store shares with the other stores of the process. Null: a set of its own, with no
  // cap beyond `pool_size` and no closer thread (idle connections are closed as the store is
  // used).
  std::shared_ptr<PostgresConnections> connections;
  std::chrono::milliseconds connect_timeout{5000};
  // Bound on any one statement; a statement past it fails kUnavailable.
  std::chrono::milliseconds statement_timeout{10000};
  // Client-side bound on waiting for any one statement's answer (see TaskStore::SetCallTimeout,
  // which replaces it); zero means none.
  std::chrono::milliseconds call_timeout{0};
  // Statements go through a pooler in transaction mode (PgBouncer's pool_mode=transaction): none
  // is prepared by name and no session setting is relied on. `schema` must be empty.
  bool transaction_pooler = false;
  // A libpq connection string or URL for the LISTEN session, straight to the server when
  // statements go through a pooler; its database is overridden by `database` as `connection`'s
  // is. Empty: `connection`, except behind a transaction pooler, where the store then has no
  // notifications and the engine relies on its poll.
  std::string notify_connection;
};

// Parses a libpq connection string or URL into the keywords it sets (keyword -> value), the way
// libpq itself would read it; callable from any thread. Errors: kInvalidArgument with libpq's
// reason, which may quote the text (and so a password): callers must not repeat it to users.
Result<std::map<std::string, std::string>> ParsePostgresConninfo(const std::string& conninfo);

// Opens the pool for `plugin_id`, creating the plugin database or schema when missing. Does not
// migrate. Errors: kUnavailable naming the plugin and the database (never the password).
Result<std::unique_ptr<TaskStore>> OpenPostgresTaskStore(const std::string& plugin_id,
                                                         const PostgresStoreOptions& options,
                                                         const Clock& clock);

}  // namespace stagehand
