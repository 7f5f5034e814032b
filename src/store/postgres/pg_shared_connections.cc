#include "store/postgres/pg_shared_connections.h"

namespace stagehand {

namespace store_internal {

std::shared_ptr<ConnectionPool> PgSharedConnections::PoolFor(const PgConnectParams& params,
                                                             const PoolOptions& options) {
  const std::string key = params.conninfo + '\n' + params.database;
  MutexLock lock(mu_);
  std::weak_ptr<ConnectionPool>& slot = pools_[key];
  std::shared_ptr<ConnectionPool> pool = slot.lock();
  if (!pool) {
    pool = std::make_shared<ConnectionPool>(params, options, group_);
    slot = pool;
  }
  std::erase_if(pools_, [](const auto& entry) { return entry.second.expired(); });
  return pool;
}

}  // namespace store_internal

std::shared_ptr<PostgresConnections> PostgresConnections::Create(Clock& clock, Options options) {
  auto connections = std::make_shared<store_internal::PgSharedConnections>(
      clock, options.max_statement_connections);
  connections->group().StartCloser(clock);
  return connections;
}

std::shared_ptr<PostgresConnections> PostgresConnections::CreateWithoutCloser(const Clock& clock,
                                                                              Options options) {
  return std::make_shared<store_internal::PgSharedConnections>(clock,
                                                               options.max_statement_connections);
}

}  // namespace stagehand
