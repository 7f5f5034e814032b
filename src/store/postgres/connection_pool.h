// Pools of PostgreSQL sessions for the task stores. A pool lends sessions to one database (and
// schema); sessions are opened on demand up to the pool's maximum, checked before each use, dropped
// when broken so that the next use reconnects (the way a store recovers after a server restart),
// and closed once idle for the pool's idle timeout, down to its minimum. The pools of one process
// form a PgSessionGroup, which caps their sessions in total: a pool that needs a session when the
// cap is reached closes another pool's longest-idle session, or waits for one to be returned.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <thread>
#include <vector>

#include "stagehand/base/mutex.h"
#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"
#include "store/postgres/pg_connection.h"

namespace stagehand::store_internal {

class ConnectionPool;

// The sizing of one pool, in knex's terms (`pool.min`, `pool.max`, `pool.idleTimeoutMillis`).
// Plain value type.
struct PoolOptions {
  int min = 0;  // sessions kept open however long they are idle
  int max = 4;  // sessions open at once, idle or lent
  // How long a session may stay idle before it is closed (monotonic); zero closes it when it is
  // returned, unless the pool is at its minimum.
  std::chrono::milliseconds idle_timeout{10000};
};

// What the pools of one process share: the cap on their sessions and the closing of idle sessions
// on time. A pool belongs to one group for its whole life; the group must outlive its pools (pools
// hold it by shared_ptr). Thread-safe.
class PgSessionGroup {
 public:
  // `max_sessions` caps the sessions of all pools together; zero means no cap. `clock` gives the
  // monotonic time idle deadlines are measured in; it must outlive the group.
  PgSessionGroup(const Clock& clock, int max_sessions);
  ~PgSessionGroup();
  PgSessionGroup(const PgSessionGroup&) = delete;
  PgSessionGroup& operator=(const PgSessionGroup&) = delete;

  // Starts the thread that closes idle sessions when their deadline passes, waiting on `clock`
  // (the same clock as the constructor's, or one that reads the same time). Without it, idle
  // sessions are closed only when some pool of the group lends or takes back a session.
  void StartCloser(Clock& clock);

  // Closes every idle session whose idle deadline has passed (MonoNow() at or past it), keeping
  // each pool's minimum. Returns the earliest deadline still ahead, or kMonoInfinity.
  MonoTime CloseExpired();

  // Returns the sessions open across the pools (idle, lent, or being opened).
  int open_sessions() const;
  int max_sessions() const { return max_sessions_; }

 private:
  friend class ConnectionPool;

  // Collects the expired idle sessions into `closing` (to be closed without the lock) and returns
  // the next deadline. Not analysed: the pools' members are guarded by their group_->mu_, which
  // the analysis cannot tell is this mu_.
  MonoTime CollectExpiredLocked(MonoTime now, std::vector<std::unique_ptr<PgConnection>>& closing)
      STAGEHAND_REQUIRES(mu_) STAGEHAND_NO_THREAD_SAFETY_ANALYSIS;
  // Takes the longest-idle session of any pool but `except` off its pool, moving its place under
  // the cap to the caller. Returns nullptr when no pool has an idle session. Not analysed, as
  // CollectExpiredLocked.
  std::unique_ptr<PgConnection> EvictLocked(const ConnectionPool* except)
      STAGEHAND_REQUIRES(mu_) STAGEHAND_NO_THREAD_SAFETY_ANALYSIS;
  void RunCloser(std::stop_token stop, Clock& clock);

  const Clock& clock_;
  const int max_sessions_;
  mutable Mutex mu_;
  // Signalled whenever a session is returned, closed or its place freed, and when the closer must
  // look at its deadline again.
  std::condition_variable_any changed_;
  int open_ STAGEHAND_GUARDED_BY(mu_) = 0;
  std::vector<ConnectionPool*> pools_ STAGEHAND_GUARDED_BY(mu_);
  bool closer_started_ STAGEHAND_GUARDED_BY(mu_) = false;
  // What the closer waits for.
  MonoTime closer_deadline_ STAGEHAND_GUARDED_BY(mu_) = kMonoInfinity;
  bool closer_recheck_ STAGEHAND_GUARDED_BY(mu_) = false;
  std::jthread closer_;  // last: stopped before the members above go
};

// What a pool knows of its database's reachability. Plain value type.
struct PoolHealth {
  // False from a failed connection attempt, or a session that broke, until a session is opened or
  // a statement is answered again.
  bool reachable = true;
  MonoTime unreachable_since{};  // monotonic; when `reachable` is false
  std::string reason;            // the last failure, when `reachable` is false
  std::int64_t reconnects = 0;   // sessions opened after a failure
  std::int64_t server_changes = 0;
  // When a session was last opened, or returned after its statement was answered (monotonic).
  MonoTime answered_at{};
};

// Owns up to `options.max` sessions to one database (`params.search_path` is only the schema of
// the first session); lends each to one caller at a time. Thread-safe.
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

  ConnectionPool(PgConnectParams params, PoolOptions options,
                 std::shared_ptr<PgSessionGroup> group);
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // Adds an already open session (the one opened to validate the database). It counts against
  // the group's cap even when that is reached.
  void Adopt(std::unique_ptr<PgConnection> connection);

  // Borrows a healthy session with its search_path set to `schema` (empty: the server's default;
  // an idle session already there is preferred), opening one if none is idle and neither the pool
  // nor the group is full (closing another pool's idle session to make room under the group's
  // cap); waits for a return otherwise. Stores of one database in different schemas share a pool
  // this way. Errors: kUnavailable with libpq's reason when a new session cannot be opened.
  Result<Lease> Acquire(const std::string& schema);

  // Runs `prepare` once on every idle session (with its search_path set to `schema`), and opens
  // sessions (when the group has room) up to max(min, 2), at most max, so that the engine's first
  // poll and a caller's first statement (a trigger right after registration) each find one ready.
  // Sessions lent out meanwhile are left alone. Errors: the first failure to open a session
  // (kUnavailable) or of `prepare`.
  Status WarmUp(const std::string& schema, const std::function<Status(PgConnection&)>& prepare);

  const PgConnectParams& params() const { return params_; }

  // Returns the sessions of this pool: idle, lent or being opened.
  int open_sessions() const;
  // Returns the idle sessions of this pool.
  int idle_sessions() const;

  // Sets PgConnectParams::call_timeout for every session lent from now on (and for the TCP
  // settings of sessions opened from now on).
  void SetCallTimeout(std::chrono::milliseconds timeout);

  // Returns what the pool knows of its database's reachability.
  PoolHealth Health() const;

  // Calls `observer` (on the thread that opened the session, with no lock of the pool held) each
  // time a new session reaches a server with another history of writes than the sessions before
  // it (PgServerIdentity::SameHistoryAs): a failover to a standby, or another cluster behind the
  // same address. The idle sessions of the old server are closed first. Returns a handle for
  // RemoveServerChangeObserver, which waits for a call in progress.
  int AddServerChangeObserver(std::function<void()> observer);
  void RemoveServerChangeObserver(int handle);

  // Cuts the connection of every session lent out now (shutdown(2) of its socket), so that a
  // statement in flight on a server that stopped answering fails at once, as unavailable, rather
  // than at its call timeout; idle sessions are checked before they are lent again. For a caller
  // that knows the server is gone (its LISTEN session went silent). `reason` is what the pool's
  // health says.
  void SeverLent(const std::string& reason);

  // Lets the next Acquire that needs a session connect at once, whatever the backoff after earlier
  // failures says: for a caller that knows the server is back (the LISTEN session reconnected).
  void RetryNow();

 private:
  friend class PgSessionGroup;

  struct Idle {
    std::unique_ptr<PgConnection> connection;
    std::uint64_t generation;
    MonoTime since;  // when it was returned
  };

  void Return(std::unique_ptr<PgConnection> connection, std::uint64_t generation);
  // Returns a lease of `connection`, counted as lent.
  Lease LendLocked(std::unique_ptr<PgConnection> connection, std::uint64_t generation)
      STAGEHAND_REQUIRES(group_->mu_);
  // Cuts the connections of the lent sessions that `keep` rejects.
  void SeverLentLocked(const std::function<bool(const PgConnection&)>& keep)
      STAGEHAND_REQUIRES(group_->mu_);
  // Opens a session in `schema` with the current call timeout, trying the host that answered last
  // first; a failure puts off the next attempt (ConnectBackoff), and the session's server is
  // checked against the pool's (server change observers). Fails at once, without connecting,
  // until the next attempt is due.
  Result<std::unique_ptr<PgConnection>> Open(const std::string& schema);
  // Records a connection that failed or broke (`reason`), at monotonic `now`.
  void NoteFailureLocked(MonoTime now, const std::string& reason) STAGEHAND_REQUIRES(group_->mu_);
  // Forgets a place under both caps (a session closed or never opened).
  void ReleasePlaceLocked() STAGEHAND_REQUIRES(group_->mu_);

  const PgConnectParams params_;
  const PoolOptions options_;
  const std::shared_ptr<PgSessionGroup> group_;
  std::atomic<long long> call_timeout_ms_;
  // Oldest first; lent from the back.
  std::vector<Idle> idle_ STAGEHAND_GUARDED_BY(group_->mu_);
  std::vector<PgConnection*> lent_ STAGEHAND_GUARDED_BY(group_->mu_);  // sessions lent out now
  int open_ STAGEHAND_GUARDED_BY(group_->mu_) = 0;  // sessions idle, lent or being opened
  // Bumped whenever a session is found broken: idle sessions older than it are closed rather than
  // tried, so that after a server restart at most one operation per session in flight fails.
  std::uint64_t generation_ STAGEHAND_GUARDED_BY(group_->mu_) = 0;
  // The server the pool's sessions reach, and where the last one went (tried first next time).
  PgServerIdentity server_ STAGEHAND_GUARDED_BY(group_->mu_);
  bool server_known_ STAGEHAND_GUARDED_BY(group_->mu_) = false;
  // Connection attempts after failures wait: from 100 ms, doubling to 2 s, with jitter.
  int connect_failures_ STAGEHAND_GUARDED_BY(group_->mu_) = 0;
  MonoTime next_connect_at_ STAGEHAND_GUARDED_BY(group_->mu_){};
  std::uint64_t jitter_state_ STAGEHAND_GUARDED_BY(group_->mu_);
  PoolHealth health_ STAGEHAND_GUARDED_BY(group_->mu_);
  // Server change observers. observers_mu_ is held while they are called; never with group mu_.
  Mutex observers_mu_;
  std::vector<std::pair<int, std::function<void()>>> observers_ STAGEHAND_GUARDED_BY(observers_mu_);
  int next_observer_ STAGEHAND_GUARDED_BY(observers_mu_) = 0;
};

}  // namespace stagehand::store_internal
