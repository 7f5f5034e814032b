// A host's subscription to one plugin database's change log (ADR 0019): a thread that waits on a
// session of its own (ChangeWaiter), is woken by the writers, reads the new changes and hands them
// over in order; when its session fails it reconnects and asks for a resynchronisation, since
// changes may have been missed meanwhile. What the MySQL store's Listen returns.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "stagehand/base/mutex.h"
#include "stagehand/store/task_store.h"
#include "store/mysql/my_connection.h"
#include "store/mysql/my_wakeups.h"

namespace stagehand::store_internal {

// Thread-safe to destroy from any thread but the handlers'; the handlers run on the listener's
// thread, one at a time, and must not block.
class MyChangeListener final : public Notifications {
 public:
  // Starts the thread. `name` names the waiter (IsWaiterName); `seen` is the newest change the
  // caller knows of (LatestChange when it subscribed: every later change is delivered), or
  // nullopt when it could not be read (then the first connection asks for a resynchronisation).
  // `on_change` gets each change, `on_resync` is called when changes may have been missed (a
  // reconnect, or a log pruned past what this host had seen).
  MyChangeListener(MyConnectParams params, std::string name, std::optional<std::int64_t> seen,
                   std::function<void(const ChangeRecord&)> on_change,
                   std::function<void()> on_resync);
  // Stops the thread: ends its wait at once (KILL QUERY from a session of its own) and joins it.
  ~MyChangeListener() override;
  MyChangeListener(const MyChangeListener&) = delete;
  MyChangeListener& operator=(const MyChangeListener&) = delete;

  // How long one wait lasts when nothing wakes it (whole seconds); each costs four statements.
  static constexpr std::chrono::seconds kWait{10};

 private:
  void Run();
  // Opens the waiting session, or nullptr when the server cannot be reached. Sets `latest` to the
  // newest change then.
  std::unique_ptr<ChangeWaiter> Connect(std::int64_t& latest);
  // Waits on the stop flag for `pause`. Returns whether the listener is stopping.
  bool PauseOrStop(std::chrono::milliseconds pause);

  const MyConnectParams params_;
  const std::string name_;
  const std::function<void(const ChangeRecord&)> on_change_;
  const std::function<void()> on_resync_;
  const std::optional<std::int64_t> first_seen_;
  Mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ STAGEHAND_GUARDED_BY(mu_) = false;
  // The waiter's session id, 0 when none.
  std::int64_t waiting_session_ STAGEHAND_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

// Returns a waiter name for this process: its host name (with the characters a name may not hold
// replaced by '-'), its pid and a random nonce.
std::string ProcessWaiterName();

}  // namespace stagehand::store_internal
