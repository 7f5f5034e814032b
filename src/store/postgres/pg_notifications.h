// LISTEN/NOTIFY for the PostgreSQL task store: a dedicated session and thread that turn
// notifications on the plugin's channel ("<kind>:<task id>"; "releases:" followed by
// "<byte length>:<task id>" for each of several released tasks; "claims:" followed by
// "<byte length>:<task id><byte length>:<ticket>" for each of several claimed ones) into
// StoreEvents.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

// A live subscription. The constructor subscribes synchronously when it can, so events written
// after it returns are delivered; if the server is unreachable it keeps retrying in the background
// and delivers kResync once subscribed. After a lost session it reconnects and delivers kResync.
// The destructor stops the thread promptly; the handler is never called after it returns.
class PgNotifications final : public Notifications {
 public:
  PgNotifications(PgConnectParams params, std::string channel,
                  std::function<void(const StoreEvent&)> handler);
  ~PgNotifications() override;
  PgNotifications(const PgNotifications&) = delete;
  PgNotifications& operator=(const PgNotifications&) = delete;

 private:
  // Opens a session and subscribes. Returns nullptr on failure.
  std::unique_ptr<PgConnection> Subscribe();
  void Run(std::stop_token stop, std::unique_ptr<PgConnection> connection);
  // Delivers every pending notification. Returns false if the session broke.
  bool Drain(PgConnection& connection);
  // Waits until `timeout_ms` passes or a stop is requested. Returns false when stopping.
  bool Pause(const std::stop_token& stop, int timeout_ms);

  const PgConnectParams params_;
  const std::string channel_;
  const std::function<void(const StoreEvent&)> handler_;
  int wake_read_ = -1;
  int wake_write_ = -1;
  std::jthread thread_;  // last: joined before the members above are destroyed
};

}  // namespace stagehand::store_internal
