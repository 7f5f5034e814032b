// LISTEN/NOTIFY for the PostgreSQL task stores: shared sessions and one thread that turn
// notifications on the plugin's channel ("<kind>:<task id>"; "releases:" followed by
// "<byte length>:<task id>" for each of several released tasks; "claims:" followed by
// "<byte length>:<task id><byte length>:<ticket>" for each of several claimed ones) into
// StoreEvents.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "stagehand/base/mutex.h"
#include "stagehand/store/task_store.h"
#include "store/postgres/pg_connection.h"

namespace stagehand::store_internal {

// Returns the channel for a plugin table: "stagehand_tasks" in its own database, or
// "stagehand_tasks_<schema>" for schema division; names longer than PostgreSQL's 63-byte limit
// end in a hash of the schema instead.
std::string NotificationChannel(const std::string& schema);

// Parses a payload "<kind>:<task id>", "releases:…" or "claims:…" (see above), appending its
// events to `events`. Returns false (appending nothing) for anything else.
bool ParseNotification(std::string_view payload, std::vector<StoreEvent>& events);

// The LISTEN side of every PostgreSQL store of a process: one session per database (PostgreSQL's
// notifications are per database), shared by every store on that database whatever its schema,
// and one thread that waits on all of them and hands each notification to the subscribers of its
// channel. With `pluginDivisionMode: schema` that is one session for all plugins; with `database`,
// one per plugin database. Thread-safe. Held by shared_ptr: subscriptions keep it alive.
class PgNotificationHub final : public std::enable_shared_from_this<PgNotificationHub> {
 public:
  static std::shared_ptr<PgNotificationHub> Create();
  ~PgNotificationHub();
  PgNotificationHub(const PgNotificationHub&) = delete;
  PgNotificationHub& operator=(const PgNotificationHub&) = delete;

  // Subscribes `handler` to `channel` on the database `params` names (its search_path and call
  // timeout do not matter). Subscribes synchronously when it can, so events written after it
  // returns are delivered; if the server is unreachable the hub keeps retrying and delivers
  // kResync once subscribed. After a lost session it reconnects and delivers kResync to every
  // subscriber of that database. The handler runs on the hub's thread, one event at a time, and
  // is never called after the returned object is destroyed. `on_session_lost`, when given, runs
  // the same way each time the session is found broken or silent (a ping unanswered within
  // kPingTimeout): the server is gone or cut off, and the caller's own sessions to it likely are.
  std::unique_ptr<Notifications> Subscribe(const PgConnectParams& params, std::string channel,
                                           std::function<void(const StoreEvent&)> handler,
                                           std::function<void()> on_session_lost = {});

  // Returns the LISTEN sessions open now.
  int sessions() const;

  // Whether the LISTEN session of the database `params` names is up, or since when (monotonic,
  // backdated to the server's last answer) and why it is down; nullopt when nobody listens there.
  struct ListenHealth {
    bool up = true;
    MonoTime down_since{};
    MonoTime noticed_at{};  // when it was found down (down_since is backdated)
    std::string reason;
  };
  std::optional<ListenHealth> Health(const PgConnectParams& params) const;

 private:
  struct Subscriber;
  struct Listener;
  class Subscription;

  PgNotificationHub();
  void Unsubscribe(const std::shared_ptr<Listener>& listener, const std::string& channel,
                   const std::shared_ptr<Subscriber>& subscriber);
  // Opens `listener`'s session and LISTENs on every channel it has subscribers for. Requires the
  // listener's session mutex. Returns false on failure (the session stays closed).
  bool Connect(Listener& listener);
  // Marks `listener`'s session as down at `now` (real monotonic time). Requires its session mutex.
  static void MarkDown(Listener& listener, MonoTime now, std::string reason);
  // Collects the answer to the session's ping, and sends the next when it is due. Returns why the
  // session is to be dropped, or "". Requires the listener's session mutex.
  static std::string Ping(Listener& listener, MonoTime now);
  void Run(std::stop_token stop);
  void Wake();

  mutable Mutex mu_;
  // By database (connection string and database name); entries without subscribers are removed.
  std::map<std::string, std::shared_ptr<Listener>> listeners_ STAGEHAND_GUARDED_BY(mu_);
  std::uint64_t jitter_ = 0x9e3779b97f4a7c15ULL;  // hub thread only
  int wake_read_ = -1;
  int wake_write_ = -1;
  std::jthread thread_;  // started with the first subscription; last: joined first
};

}  // namespace stagehand::store_internal
