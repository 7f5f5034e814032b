// A pool of MySQL sessions for one plugin database: sessions are opened on demand up to the pool's
// size with the store's session settings applied, lent one at a time, and dropped when the server
// lost them or closed them while idle (KILL, wait_timeout, a restart), so that the next use
// reconnects instead of failing (how a store recovers after a server restart).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <string>
#include <vector>

#include "stagehand/base/mutex.h"
#include "stagehand/base/status.h"
#include "store/mysql/my_connection.h"

namespace stagehand::store_internal {

// Thread-safe: any thread may borrow; a lent session is used by its borrower's thread only.
class MyPool {
 public:
  // `setup` runs on each new session before it is lent (SET statements). `size` is at least 1.
  MyPool(MyConnectParams params, int size, std::vector<std::string> setup);
  ~MyPool();
  MyPool(const MyPool&) = delete;
  MyPool& operator=(const MyPool&) = delete;

  // A lent session, returned to the pool on destruction unless Discard()ed.
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    MyConnection& operator*() const { return *connection_; }
    MyConnection* operator->() const { return connection_.get(); }
    // Closes the session instead of returning it (the server lost it, or a transaction's end is
    // unknown).
    void Discard() { connection_.reset(); }

   private:
    friend class MyPool;
    Lease(MyPool* pool, std::unique_ptr<MyConnection> connection, int generation)
        : pool_(pool), connection_(std::move(connection)), generation_(generation) {}
    MyPool* pool_;
    std::unique_ptr<MyConnection> connection_;
    int generation_;
  };

  // Lends an idle session that the server has not closed, opens one while fewer than `size` are
  // open, or waits for one to be returned. Errors: kUnavailable when a new session cannot be
  // opened or set up.
  Result<Lease> Borrow();

  // Bounds the wait for each statement's answer on sessions opened from now on (zero: none), and
  // closes the idle sessions so that the bound applies at once.
  void SetCallTimeout(std::chrono::milliseconds timeout);

 private:
  // Takes back a session lent in `generation` (closed when null or of an older generation).
  void Return(std::unique_ptr<MyConnection> connection, int generation);

  const int size_;
  const std::vector<std::string> setup_;
  Mutex mu_;
  std::condition_variable returned_;
  MyConnectParams params_ STAGEHAND_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<MyConnection>> idle_ STAGEHAND_GUARDED_BY(mu_);
  int open_ STAGEHAND_GUARDED_BY(mu_) = 0;  // lent, idle or being opened
  // Bumped by SetCallTimeout: older sessions are closed when returned.
  int generation_ STAGEHAND_GUARDED_BY(mu_) = 0;
};

}  // namespace stagehand::store_internal
