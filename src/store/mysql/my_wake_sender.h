// The MySQL store's writers hand their wakes (ADR 0019) to a thread of their own, so that no
// writer waits for one: a KILL QUERY can hold its caller for as long as the server takes to end
// its target's statement (two seconds for a SLEEP, which waits no longer; ADR 0019), and a
// trigger, claim or release must not wait on another host's session.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <thread>

#include "stagehand/base/mutex.h"
#include "store/mysql/my_connection.h"
#include "store/mysql/my_wakeups.h"

namespace stagehand::store_internal {

// Wakes, on its own session and thread, the waiters of one database that have not seen the newest
// change it was told of (WaiterWaker, this host's waiters included). Wakes asked for while one is
// under way merge into the next one. A wake that fails is dropped (the waiters' timeouts and the
// hosts' polls cover it) and the session opened again for the next. Thread-safe.
class WakeSender {
 public:
  explicit WakeSender(MyConnectParams params);
  // Waits for the wake under way, if any, and stops the thread.
  ~WakeSender();
  WakeSender(const WakeSender&) = delete;
  WakeSender& operator=(const WakeSender&) = delete;

  // Asks for the waiters that have not seen `change` to be woken. Never blocks on the database.
  void Send(std::int64_t change);

  // Returns once every change asked for before this call has been sent (or dropped). For tests.
  void Flush();

 private:
  void Run();

  const MyConnectParams params_;
  Mutex mu_;
  std::condition_variable cv_;
  std::int64_t asked_ STAGEHAND_GUARDED_BY(mu_) = 0;  // the newest change asked for
  std::int64_t sent_ STAGEHAND_GUARDED_BY(mu_) = 0;   // the newest change whose wake has ended
  bool stopping_ STAGEHAND_GUARDED_BY(mu_) = false;
  std::thread thread_ STAGEHAND_GUARDED_BY(mu_);  // started by the first Send
};

}  // namespace stagehand::store_internal
