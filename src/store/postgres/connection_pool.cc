#include "store/postgres/connection_pool.h"

#include <utility>

namespace stagehand::store_internal {

ConnectionPool::Lease::Lease(Lease&& other) noexcept
    : pool_(other.pool_),
      connection_(std::move(other.connection_)),
      generation_(other.generation_) {}

ConnectionPool::Lease::~Lease() {
  if (connection_) pool_->Return(std::move(connection_), generation_);
}

ConnectionPool::ConnectionPool(PgConnectParams params, int size)
    : params_(std::move(params)),
      size_(size < 1 ? 1 : size),
      call_timeout_ms_(params_.call_timeout.count()) {}

void ConnectionPool::SetCallTimeout(std::chrono::milliseconds timeout) {
  call_timeout_ms_ = timeout.count();
}

Result<std::unique_ptr<PgConnection>> ConnectionPool::Open() const {
  PgConnectParams params = params_;
  params.call_timeout = std::chrono::milliseconds(call_timeout_ms_.load());
  return PgConnection::Open(params);
}

ConnectionPool::~ConnectionPool() {
  std::lock_guard lock(mu_);
  STAGEHAND_CHECK(open_ == static_cast<int>(idle_.size()));  // no lease outlives the pool
}

void ConnectionPool::Adopt(std::unique_ptr<PgConnection> connection) {
  std::lock_guard lock(mu_);
  ++open_;
  idle_.push_back(Idle{std::move(connection), generation_});
  returned_.notify_one();
}

Result<ConnectionPool::Lease> ConnectionPool::Acquire() {
  std::unique_lock lock(mu_);
  while (true) {
    while (!idle_.empty()) {
      Idle idle = std::move(idle_.back());
      idle_.pop_back();
      if (idle.generation < generation_) {
        --open_;
        continue;
      }
      lock.unlock();
      if (idle.connection->Healthy()) {
        idle.connection->set_call_timeout(std::chrono::milliseconds(call_timeout_ms_.load()));
        return Lease(this, std::move(idle.connection), idle.generation);
      }
      idle.connection.reset();
      lock.lock();
      --open_;
      ++generation_;
    }
    if (open_ < size_) {
      ++open_;
      const std::uint64_t generation = generation_;
      lock.unlock();
      Result<std::unique_ptr<PgConnection>> opened = Open();
      if (opened.ok()) return Lease(this, std::move(*opened), generation);
      lock.lock();
      --open_;
      returned_.notify_one();
      return opened.status();
    }
    returned_.wait(lock);
  }
}

Status ConnectionPool::WarmUp(const std::function<Status(PgConnection&)>& prepare) {
  std::vector<Idle> idle;
  {
    std::lock_guard lock(mu_);
    idle.swap(idle_);  // still counted in open_: they are lent to this call
  }
  Status first_error;
  for (Idle& session : idle) {
    if (Status prepared = prepare(*session.connection); !prepared.ok() && first_error.ok()) {
      first_error = prepared;
    }
    Return(std::move(session.connection), session.generation);
  }
  STAGEHAND_RETURN_IF_ERROR(first_error);
  while (true) {
    std::uint64_t generation = 0;
    {
      std::lock_guard lock(mu_);
      if (open_ >= size_) return Status::Ok();
      ++open_;
      generation = generation_;
    }
    Result<std::unique_ptr<PgConnection>> opened = Open();
    if (!opened.ok()) {
      std::lock_guard lock(mu_);
      --open_;
      returned_.notify_one();
      return opened.status();
    }
    const Status prepared = prepare(**opened);
    Return(std::move(*opened), generation);
    STAGEHAND_RETURN_IF_ERROR(prepared);
  }
}

void ConnectionPool::Return(std::unique_ptr<PgConnection> connection, std::uint64_t generation) {
  const bool usable = PQstatus(connection->raw()) == CONNECTION_OK &&
                      PQtransactionStatus(connection->raw()) == PQTRANS_IDLE;
  if (!usable) connection.reset();  // closes it outside the lock
  std::lock_guard lock(mu_);
  if (usable) {
    idle_.push_back(Idle{std::move(connection), generation});
  } else {
    --open_;
    ++generation_;
  }
  returned_.notify_one();
}

}  // namespace stagehand::store_internal
