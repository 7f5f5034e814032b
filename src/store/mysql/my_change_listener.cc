#include "store/mysql/my_change_listener.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <utility>

namespace stagehand::store_internal {

namespace {

// Changes read per statement; more wait for the next round, which comes at once.
constexpr int kReadLimit = 500;
constexpr std::chrono::milliseconds kReconnectPause{1000};

// The waiting session's statements last up to a wait: a shorter bound on their answers would end
// every wait, and none would leave a dead server unnoticed.
MyConnectParams WithWaitTimeout(MyConnectParams params) {
  params.call_timeout = MyChangeListener::kWait + std::chrono::seconds(5);
  return params;
}

}  // namespace

std::string ProcessWaiterName() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string name(host);
  for (char& c : name) {
    if (!IsWaiterName(std::string_view(&c, 1))) c = '-';
  }
  if (name.empty()) name = "host";
  name.resize(std::min<std::size_t>(name.size(), 200));
  std::random_device random;
  return fmt::format("{}:{}:{:08x}", name, static_cast<long>(getpid()), random());
}

MyChangeListener::MyChangeListener(MyConnectParams params, std::string name,
                                   std::optional<std::int64_t> seen,
                                   std::function<void(const ChangeRecord&)> on_change,
                                   std::function<void()> on_resync)
    : params_(WithWaitTimeout(std::move(params))),
      name_(std::move(name)),
      on_change_(std::move(on_change)),
      on_resync_(std::move(on_resync)),
      first_seen_(seen),
      thread_([this] { Run(); }) {}

MyChangeListener::~MyChangeListener() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  // The waiter may be about to start its wait when the first interrupt lands: interrupt until
  // the thread has seen the flag.
  std::unique_ptr<MyConnection> stopper;
  while (true) {
    std::int64_t session = 0;
    {
      MutexLock lock(mu_);
      if (waiting_session_ == 0) break;
      session = waiting_session_;
    }
    if (stopper == nullptr) {
      Result<std::unique_ptr<MyConnection>> opened = MyConnection::Open(params_);
      if (!opened.ok()) break;  // the server is gone: the wait fails by itself
      stopper = std::move(*opened);
    }
    (void)Interrupt(*stopper, session);
    MutexLock lock(mu_);
    stop_cv_.wait_for(lock.unique_lock(), std::chrono::milliseconds(50),
                      [&]() STAGEHAND_REQUIRES(mu_) { return waiting_session_ == 0; });
  }
  thread_.join();
}

bool MyChangeListener::PauseOrStop(std::chrono::milliseconds pause) {
  MutexLock lock(mu_);
  return stop_cv_.wait_for(lock.unique_lock(), pause,
                           [&]() STAGEHAND_REQUIRES(mu_) { return stopping_; });
}

std::unique_ptr<ChangeWaiter> MyChangeListener::Connect(std::int64_t& latest) {
  Result<std::unique_ptr<MyConnection>> session = MyConnection::Open(params_);
  if (!session.ok()) return nullptr;
  Result<std::int64_t> newest = LatestChange(**session);
  if (!newest.ok()) return nullptr;
  latest = *newest;
  Result<std::unique_ptr<MyConnection>> holder = MyConnection::Open(params_);
  if (!holder.ok()) return nullptr;
  auto waiter = std::make_unique<ChangeWaiter>(std::move(*session), std::move(*holder), name_);
  Result<std::int64_t> id = waiter->SessionId();
  if (!id.ok()) return nullptr;
  MutexLock lock(mu_);
  if (stopping_) return nullptr;
  waiting_session_ = *id;
  return waiter;
}

void MyChangeListener::Run() {
  std::unique_ptr<ChangeWaiter> waiter;
  std::int64_t seen = first_seen_.value_or(0);
  // Whether `seen` is what the subscriber knows: the first connection then starts from it.
  bool seen_is_known = first_seen_.has_value();
  const auto drop = [&] {
    {
      MutexLock lock(mu_);
      waiting_session_ = 0;
    }
    stop_cv_.notify_all();
    waiter.reset();
  };
  while (true) {
    {
      MutexLock lock(mu_);
      if (stopping_) break;
    }
    if (waiter == nullptr) {
      std::int64_t latest = 0;
      waiter = Connect(latest);
      if (waiter == nullptr) {
        if (PauseOrStop(kReconnectPause)) break;
        continue;
      }
      if (!seen_is_known) {
        // Changes made while this host had no waiting session were not seen.
        seen = latest;
        on_resync_();
      }
      seen_is_known = false;  // from now on, a new connection follows a failure
    }
    Result<std::int64_t> latest = waiter->Wait(seen, kWait);
    if (latest.ok() && *latest > seen) {
      Result<ChangeWaiter::Changes> changes = waiter->ChangesAfter(seen, kReadLimit);
      if (changes.ok()) {
        if (changes->gap) on_resync_();
        for (const ChangeRecord& change : changes->records) {
          on_change_(change);
          seen = change.seq;
        }
        continue;
      }
    } else if (latest.ok()) {
      continue;
    }
    drop();  // the reconnect asks for a resynchronisation
    if (PauseOrStop(kReconnectPause)) break;
  }
  drop();
}

}  // namespace stagehand::store_internal
