#include "store/postgres/connection_pool.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <algorithm>
#include <iterator>
#include <utility>

namespace stagehand::store_internal {

PgSessionGroup::PgSessionGroup(const Clock& clock, int max_sessions)
    : clock_(clock), max_sessions_(std::max(max_sessions, 0)) {}

PgSessionGroup::~PgSessionGroup() {
  if (closer_.joinable()) {
    closer_.request_stop();
    closer_.join();
  }
  MutexLock lock(mu_);
  STAGEHAND_CHECK(pools_.empty());  // pools hold the group by shared_ptr
}

void PgSessionGroup::StartCloser(Clock& clock) {
  {
    MutexLock lock(mu_);
    if (closer_started_) return;
    closer_started_ = true;
  }
  closer_ = std::jthread([this, &clock](std::stop_token stop) { RunCloser(stop, clock); });
}

int PgSessionGroup::open_sessions() const {
  MutexLock lock(mu_);
  return open_;
}

MonoTime PgSessionGroup::CloseExpired() {
  std::vector<std::unique_ptr<PgConnection>> closing;  // closed after the lock is released
  MutexLock lock(mu_);
  return CollectExpiredLocked(clock_.MonoNow(), closing);
}

MonoTime PgSessionGroup::CollectExpiredLocked(MonoTime now,
                                              std::vector<std::unique_ptr<PgConnection>>& closing) {
  MonoTime next = kMonoInfinity;
  for (ConnectionPool* pool : pools_) {
    while (!pool->idle_.empty() && pool->open_ > pool->options_.min) {
      ConnectionPool::Idle& oldest = pool->idle_.front();
      const MonoTime deadline = oldest.since + pool->options_.idle_timeout;
      if (deadline > now) {
        next = std::min(next, deadline);
        break;
      }
      closing.push_back(std::move(oldest.connection));
      pool->idle_.erase(pool->idle_.begin());
      pool->ReleasePlaceLocked();
    }
  }
  return next;
}

std::unique_ptr<PgConnection> PgSessionGroup::EvictLocked(const ConnectionPool* except) {
  ConnectionPool* victim = nullptr;
  for (ConnectionPool* pool : pools_) {
    if (pool == except || pool->idle_.empty()) continue;
    if (victim == nullptr || pool->idle_.front().since < victim->idle_.front().since) {
      victim = pool;
    }
  }
  if (victim == nullptr) return nullptr;
  std::unique_ptr<PgConnection> evicted = std::move(victim->idle_.front().connection);
  victim->idle_.erase(victim->idle_.begin());
  --victim->open_;  // its place under the group's cap passes to the caller
  return evicted;
}

void PgSessionGroup::RunCloser(std::stop_token stop, Clock& clock) {
  MutexLock lock(mu_);
  while (!stop.stop_requested()) {
    std::vector<std::unique_ptr<PgConnection>> closing;
    closer_deadline_ = CollectExpiredLocked(clock_.MonoNow(), closing);
    closer_recheck_ = false;
    if (!closing.empty()) {
      lock.Unlock();
      closing.clear();  // PQfinish outside the lock
      lock.Lock();
      continue;
    }
    clock.WaitUntil(lock.unique_lock(), changed_, closer_deadline_, stop,
                    [this]() STAGEHAND_REQUIRES(mu_) { return closer_recheck_; });
  }
}

ConnectionPool::Lease::Lease(Lease&& other) noexcept
    : pool_(other.pool_),
      connection_(std::move(other.connection_)),
      generation_(other.generation_) {}

ConnectionPool::Lease::~Lease() {
  if (connection_) pool_->Return(std::move(connection_), generation_);
}

ConnectionPool::ConnectionPool(PgConnectParams params, PoolOptions options,
                               std::shared_ptr<PgSessionGroup> group)
    : params_(std::move(params)),
      options_{std::max(options.min, 0), std::max(options.max, 1),
               std::max(options.idle_timeout, std::chrono::milliseconds(0))},
      group_(std::move(group)),
      call_timeout_ms_(params_.call_timeout.count()),
      jitter_state_(reinterpret_cast<std::uintptr_t>(this) | 1) {
  STAGEHAND_CHECK(group_ != nullptr);
  MutexLock lock(group_->mu_);
  group_->pools_.push_back(this);
}

ConnectionPool::~ConnectionPool() {
  std::vector<Idle> closing;
  MutexLock lock(group_->mu_);
  STAGEHAND_CHECK(open_ == static_cast<int>(idle_.size()));  // no lease outlives the pool
  closing.swap(idle_);
  for (size_t i = 0; i < closing.size(); ++i) ReleasePlaceLocked();
  std::erase(group_->pools_, this);
}

void ConnectionPool::SetCallTimeout(std::chrono::milliseconds timeout) {
  call_timeout_ms_ = timeout.count();
}

namespace {

constexpr std::chrono::milliseconds kFirstConnectRetry{100};
constexpr std::chrono::milliseconds kLongestConnectRetry{800};

}  // namespace

void ConnectionPool::NoteFailureLocked(MonoTime now, const std::string& reason) {
  if (health_.reachable) {
    health_.reachable = false;
    health_.unreachable_since = now;
  }
  health_.reason = reason;
}

Result<std::unique_ptr<PgConnection>> ConnectionPool::Open(const std::string& schema) {
  PgConnectParams params = params_;
  params.search_path = schema;
  params.call_timeout = std::chrono::milliseconds(call_timeout_ms_.load());
  {
    MutexLock lock(group_->mu_);
    const MonoTime now = group_->clock_.MonoNow();
    if (connect_failures_ > 0 && now < next_connect_at_) {
      return UnavailableError(fmt::format(
          "{} (the next connection attempt is in {} ms)", health_.reason,
          std::chrono::ceil<std::chrono::milliseconds>(next_connect_at_ - now).count()));
    }
    params.preferred_host = server_.host;
    params.preferred_port = server_.port;
  }
  Result<std::unique_ptr<PgConnection>> opened = PgConnection::Open(params);
  bool changed = false;
  {
    MutexLock lock(group_->mu_);
    const MonoTime now = group_->clock_.MonoNow();
    if (!opened.ok()) {
      NoteFailureLocked(now, opened.status().message());
      // From 100 ms, doubling up to the longest wait (no longer than a call may take), each wait
      // drawn from its upper half so that hosts that lost the server together do not retry in step.
      const auto longest = std::clamp(std::chrono::milliseconds(call_timeout_ms_.load()),
                                      kFirstConnectRetry, kLongestConnectRetry);
      const auto wait = std::min<std::chrono::milliseconds>(
          longest, kFirstConnectRetry * (1LL << std::min(connect_failures_, 10)));
      jitter_state_ ^= jitter_state_ << 13;
      jitter_state_ ^= jitter_state_ >> 7;
      jitter_state_ ^= jitter_state_ << 17;
      const auto half = wait / 2;
      next_connect_at_ =
          now + half +
          std::chrono::milliseconds(static_cast<long long>(
              jitter_state_ % static_cast<std::uint64_t>(std::max<long long>(half.count(), 1))));
      ++connect_failures_;
      return opened.status();
    }
    if (!health_.reachable || connect_failures_ > 0) ++health_.reconnects;
    health_.reachable = true;
    health_.answered_at = now;
    connect_failures_ = 0;
    const PgServerIdentity& server = (*opened)->server();
    if (server_known_ && !server.SameHistoryAs(server_)) {
      changed = true;
      ++health_.server_changes;
      ++generation_;  // the idle sessions of the old server are closed rather than lent
      // A statement in flight on the old server would otherwise wait out its call timeout.
      SeverLentLocked(
          [&](const PgConnection& lent) { return lent.server().SameHistoryAs(server); });
    }
    server_ = server;
    server_known_ = true;
  }
  if (changed) {
    MutexLock lock(observers_mu_);
    for (const auto& [handle, observer] : observers_) observer();
  }
  return opened;
}

PoolHealth ConnectionPool::Health() const {
  MutexLock lock(group_->mu_);
  return health_;
}

void ConnectionPool::RetryNow() {
  MutexLock lock(group_->mu_);
  next_connect_at_ = MonoTime{};
}

int ConnectionPool::AddServerChangeObserver(std::function<void()> observer) {
  MutexLock lock(observers_mu_);
  observers_.emplace_back(next_observer_, std::move(observer));
  return next_observer_++;
}

void ConnectionPool::RemoveServerChangeObserver(int handle) {
  MutexLock lock(observers_mu_);
  std::erase_if(observers_, [&](const auto& entry) { return entry.first == handle; });
}

int ConnectionPool::open_sessions() const {
  MutexLock lock(group_->mu_);
  return open_;
}

int ConnectionPool::idle_sessions() const {
  MutexLock lock(group_->mu_);
  return static_cast<int>(idle_.size());
}

void ConnectionPool::ReleasePlaceLocked() {
  --open_;
  --group_->open_;
  group_->changed_.notify_all();
}

void ConnectionPool::Adopt(std::unique_ptr<PgConnection> connection) {
  MutexLock lock(group_->mu_);
  if (!server_known_) {
    server_ = connection->server();
    server_known_ = true;
  }
  ++open_;
  ++group_->open_;
  const MonoTime now = group_->clock_.MonoNow();
  idle_.push_back(Idle{std::move(connection), generation_, now});
  if (now + options_.idle_timeout < group_->closer_deadline_) group_->closer_recheck_ = true;
  group_->changed_.notify_all();
}

Result<ConnectionPool::Lease> ConnectionPool::Acquire(const std::string& schema) {
  MutexLock lock(group_->mu_);
  while (true) {
    while (!idle_.empty()) {
      // The most recently returned session in `schema`, else the most recently returned one.
      auto chosen = std::prev(idle_.end());
      for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
        if (it->connection->search_path() == schema) {
          chosen = std::prev(it.base());
          break;
        }
      }
      Idle idle = std::move(*chosen);
      idle_.erase(chosen);
      if (idle.generation < generation_) {
        ReleasePlaceLocked();
        lock.Unlock();
        idle.connection.reset();
        lock.Lock();
        continue;
      }
      lock.Unlock();
      if (idle.connection->Healthy() && idle.connection->UseSearchPath(schema)) {
        idle.connection->set_call_timeout(std::chrono::milliseconds(call_timeout_ms_.load()));
        lock.Lock();
        return LendLocked(std::move(idle.connection), idle.generation);
      }
      idle.connection.reset();
      lock.Lock();
      ReleasePlaceLocked();
      ++generation_;
    }
    if (open_ < options_.max) {
      std::unique_ptr<PgConnection> evicted;
      bool room = group_->max_sessions_ == 0 || group_->open_ < group_->max_sessions_;
      if (!room) {
        evicted = group_->EvictLocked(this);
        room = evicted != nullptr;
      }
      if (room) {
        ++open_;
        if (!evicted) ++group_->open_;
        const std::uint64_t generation = generation_;
        lock.Unlock();
        evicted.reset();
        Result<std::unique_ptr<PgConnection>> opened = Open(schema);
        lock.Lock();
        if (opened.ok()) return LendLocked(std::move(*opened), std::max(generation, generation_));
        ReleasePlaceLocked();
        return opened.status();
      }
    }
    group_->changed_.wait(lock.unique_lock());
  }
}

Status ConnectionPool::WarmUp(const std::string& schema,
                              const std::function<Status(PgConnection&)>& prepare) {
  std::vector<Idle> idle;
  {
    MutexLock lock(group_->mu_);
    idle.swap(idle_);  // still counted in open_: they are lent to this call
  }
  Status first_error;
  for (Idle& session : idle) {
    Status prepared = session.connection->UseSearchPath(schema)
                          ? prepare(*session.connection)
                          : UnavailableError("cannot set the session's search_path");
    if (!prepared.ok() && first_error.ok()) first_error = prepared;
    Return(std::move(session.connection), session.generation);
  }
  STAGEHAND_RETURN_IF_ERROR(first_error);
  const int target = std::min(std::max(options_.min, 2), options_.max);
  while (true) {
    std::uint64_t generation = 0;
    {
      MutexLock lock(group_->mu_);
      if (open_ >= target) return Status::Ok();
      if (group_->max_sessions_ != 0 && group_->open_ >= group_->max_sessions_) {
        return Status::Ok();
      }
      ++open_;
      ++group_->open_;
      generation = generation_;
    }
    Result<std::unique_ptr<PgConnection>> opened = Open(schema);
    if (!opened.ok()) {
      MutexLock lock(group_->mu_);
      ReleasePlaceLocked();
      return opened.status();
    }
    const Status prepared = prepare(**opened);
    Return(std::move(*opened), generation);
    STAGEHAND_RETURN_IF_ERROR(prepared);
  }
}

ConnectionPool::Lease ConnectionPool::LendLocked(std::unique_ptr<PgConnection> connection,
                                                 std::uint64_t generation) {
  lent_.push_back(connection.get());
  return Lease(this, std::move(connection), generation);
}

void ConnectionPool::SeverLentLocked(const std::function<bool(const PgConnection&)>& keep) {
  for (PgConnection* connection : lent_) {
    if (!keep(*connection)) ::shutdown(PQsocket(connection->raw()), SHUT_RDWR);
  }
}

void ConnectionPool::SeverLent(const std::string& reason) {
  MutexLock lock(group_->mu_);
  SeverLentLocked([](const PgConnection&) { return false; });
  ++generation_;  // idle sessions are closed rather than lent
  NoteFailureLocked(group_->clock_.MonoNow(), reason);
}

void ConnectionPool::Return(std::unique_ptr<PgConnection> connection, std::uint64_t generation) {
  {
    MutexLock lock(group_->mu_);
    std::erase(lent_, connection.get());
  }
  const bool usable = PQstatus(connection->raw()) == CONNECTION_OK &&
                      PQtransactionStatus(connection->raw()) == PQTRANS_IDLE;
  if (!usable) connection.reset();                     // closes it outside the lock
  std::vector<std::unique_ptr<PgConnection>> closing;  // closed after the lock is released
  MutexLock lock(group_->mu_);
  const MonoTime now = group_->clock_.MonoNow();
  // Adopted sessions may put the group past its cap: those over it are closed when returned.
  const bool over_cap = group_->max_sessions_ != 0 && group_->open_ > group_->max_sessions_;
  if (usable && over_cap) {
    closing.push_back(std::move(connection));
    ReleasePlaceLocked();
  } else if (usable) {
    idle_.push_back(Idle{std::move(connection), generation, now});
    if (now + options_.idle_timeout < group_->closer_deadline_) group_->closer_recheck_ = true;
  } else {
    ReleasePlaceLocked();
    ++generation_;
  }
  if (usable) {
    health_.reachable = true;
    health_.answered_at = now;
  } else {
    NoteFailureLocked(now, "a session to the database broke");
  }
  if (!group_->closer_started_) group_->CollectExpiredLocked(now, closing);
  group_->changed_.notify_all();
}

}  // namespace stagehand::store_internal
