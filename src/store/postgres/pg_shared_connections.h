// The one implementation of PostgresConnections: a PgSessionGroup for the statement pools and a
// PgNotificationHub for LISTEN, handed to each PostgresTaskStore of the process.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "stagehand/base/mutex.h"
#include "stagehand/store/postgres_task_store.h"
#include "store/postgres/connection_pool.h"
#include "store/postgres/pg_notifications.h"

namespace stagehand::store_internal {

// Thread-safe.
class PgSharedConnections final : public PostgresConnections {
 public:
  PgSharedConnections(const Clock& clock, int max_statement_connections)
      : group_(std::make_shared<PgSessionGroup>(clock, max_statement_connections)),
        hub_(PgNotificationHub::Create()) {}

  int StatementConnections() const override { return group_->open_sessions(); }
  int ListenConnections() const override { return hub_->sessions(); }
  MonoTime CloseExpired() override { return group_->CloseExpired(); }

  // Returns the statement pool for the database `params` names, shared by every store on that
  // database whatever its schema; created with `options` by the first store that asks.
  std::shared_ptr<ConnectionPool> PoolFor(const PgConnectParams& params,
                                          const PoolOptions& options);

  PgSessionGroup& group() const { return *group_; }
  PgNotificationHub& hub() const { return *hub_; }

 private:
  const std::shared_ptr<PgSessionGroup> group_;
  const std::shared_ptr<PgNotificationHub> hub_;
  Mutex mu_;
  // By database (connection string and database name); entries expire with their last store.
  std::map<std::string, std::weak_ptr<ConnectionPool>> pools_ STAGEHAND_GUARDED_BY(mu_);
};

}  // namespace stagehand::store_internal
