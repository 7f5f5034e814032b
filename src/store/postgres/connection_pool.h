// A small pool of PostgreSQL sessions to one database, for the task store. Sessions are opened on
// demand up to the pool size, checked before each use, and dropped when broken so that the next
// use reconnects (the way the store recovers after a server restart).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "stagehand/base/status.h"
#include "store/postgres/pg_connection.h"

namespace stagehand::store_internal {

// Owns up to `size` sessions; lends each to one caller at a time. Thread-safe.
class ConnectionPool {
 public:
  // A borrowed session, returned to the pool on destruction (or dropped if it broke).
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    ~Lease();

    PgConnection& operator*() { return *connection_; }
    PgConnection* operator->() { return connection_.get(); }

   private:
    friend class ConnectionPool;
    Lease(ConnectionPool* pool, std::unique_ptr<PgConnection> connection, std::uint64_t generation)
        : pool_(pool), connection_(std::move(connection)), generation_(generation) {}

    ConnectionPool* pool_;
    std::unique_ptr<PgConnection> connection_;
    std::uint64_t generation_;
  };

  ConnectionPool(PgConnectParams params, int size);
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // Adds an already open session (the one opened to validate the database).
  void Adopt(std::unique_ptr<PgConnection> connection);

  // Borrows a healthy session, opening one if none is idle and the pool is not full; waits for a
  // return otherwise. Errors: kUnavailable with libpq's reason when a new session cannot be opened.
  Result<Lease> Acquire();

  // Opens sessions until the pool is full and runs `prepare` once on every session it holds (new
  // ones and idle ones), so that later callers find them ready. Sessions lent out meanwhile are
  // left alone. Errors: the first failure to open a session (kUnavailable) or of `prepare`.
  Status WarmUp(const std::function<Status(PgConnection&)>& prepare);

  const PgConnectParams& params() const { return params_; }

  // Sets PgConnectParams::call_timeout for every session lent from now on (and for the TCP
  // settings of sessions opened from now on).
  void SetCallTimeout(std::chrono::milliseconds timeout);

 private:
  struct Idle {
    std::unique_ptr<PgConnection> connection;
    std::uint64_t generation;
  };

  void Return(std::unique_ptr<PgConnection> connection, std::uint64_t generation);
  // Opens a session with the current call timeout.
  Result<std::unique_ptr<PgConnection>> Open() const;

  const PgConnectParams params_;
  const int size_;
  std::atomic<long long> call_timeout_ms_;
  std::mutex mu_;
  std::condition_variable returned_;
  std::vector<Idle> idle_;  // guarded by mu_
  int open_ = 0;            // sessions idle, lent or being opened; guarded by mu_
  // Bumped whenever a session is found broken: idle sessions older than it are closed rather than
  // tried, so that after a server restart at most one operation per session in flight fails.
  std::uint64_t generation_ = 0;  // guarded by mu_
};

}  // namespace stagehand::store_internal
