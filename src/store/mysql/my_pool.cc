#include "store/mysql/my_pool.h"

#include <algorithm>
#include <utility>

namespace stagehand::store_internal {

MyPool::MyPool(MyConnectParams params, int size, std::vector<std::string> setup)
    : size_(std::max(size, 1)), setup_(std::move(setup)), params_(std::move(params)) {}

MyPool::~MyPool() = default;

MyPool::Lease::Lease(Lease&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      connection_(std::move(other.connection_)),
      generation_(other.generation_) {}

MyPool::Lease::~Lease() {
  if (pool_ != nullptr) pool_->Return(std::move(connection_), generation_);
}

Result<MyPool::Lease> MyPool::Borrow() {
  MyConnectParams params;
  int generation = 0;
  {
    MutexLock lock(mu_);
    for (;;) {
      returned_.wait(lock.unique_lock(),
                     [&]() STAGEHAND_REQUIRES(mu_) { return !idle_.empty() || open_ < size_; });
      if (idle_.empty()) break;
      std::unique_ptr<MyConnection> connection = std::move(idle_.back());
      idle_.pop_back();
      generation = generation_;
      lock.Unlock();
      if (connection->Healthy()) return Lease(this, std::move(connection), generation);
      connection.reset();
      lock.Lock();
      --open_;
    }
    ++open_;
    params = params_;
    generation = generation_;
  }
  Result<std::unique_ptr<MyConnection>> opened = MyConnection::Open(params);
  if (opened.ok()) {
    for (const std::string& statement : setup_) {
      MyResult set = (*opened)->Execute(statement);
      if (!set.ok()) {
        opened =
            UnavailableError("cannot set up a MySQL session (" + statement + "): " + set.error());
        break;
      }
    }
  }
  if (!opened.ok()) {
    Return(nullptr, generation);
    return opened.status();
  }
  return Lease(this, std::move(*opened), generation);
}

void MyPool::SetCallTimeout(std::chrono::milliseconds timeout) {
  std::vector<std::unique_ptr<MyConnection>> closing;
  {
    MutexLock lock(mu_);
    params_.call_timeout = timeout;
    ++generation_;
    open_ -= static_cast<int>(idle_.size());
    closing = std::move(idle_);
    idle_.clear();
  }
  returned_.notify_all();
}

void MyPool::Return(std::unique_ptr<MyConnection> connection, int generation) {
  std::unique_ptr<MyConnection> closing;
  {
    MutexLock lock(mu_);
    if (connection != nullptr && generation == generation_ && !connection->lost()) {
      idle_.push_back(std::move(connection));
    } else {
      closing = std::move(connection);
      --open_;
    }
  }
  returned_.notify_one();
}

}  // namespace stagehand::store_internal
