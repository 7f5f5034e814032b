// How stagehand hosts on MySQL and MariaDB learn of each other's changes without notifications
// (ADR 0019): each change is a row of the plugin database's change log, and a host that waits for
// changes blocks on a named lock that another session of its own holds (`GET_LOCK(name, n)`), on a
// session of its own recorded in the waiters table, until a writer ends that statement with
// `KILL QUERY`. Also stagehand's own migrations on MySQL, which
// create both tables (bookkeeping in `stagehand_migrations`, never in knex's tables).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stagehand/base/status.h"
#include "store/mysql/my_connection.h"
#include "store/mysql/my_migrations.h"

namespace stagehand::store_internal {

// Brings stagehand's own tables in `connection`'s database to the latest version: creates
// `stagehand_migrations` if missing and applies the migrations it does not list, waiting for
// other stagehand migrators on a named lock. Never reads or writes knex's tables. Errors:
// kFailedPrecondition when `stagehand_migrations` lists migrations this version does not know;
// otherwise what `error_of` maps the failed statement to.
Status MigrateMySqlStagehand(MyConnection& connection, std::string_view where,
                             const MyErrorOf& error_of);

// One row of the change log: what a stagehand host changed (kind: upsert, trigger, cancel,
// release, claim, sweep, delete), the task, the run's ticket where one applies, and the caller's
// trace context of a trigger (traceparent, a newline, tracestate; empty when none).
struct ChangeRecord {
  std::int64_t seq = 0;  // assigned by the log
  std::string kind;
  std::string task_id;
  std::string ticket;
  std::string caller;

  friend bool operator==(const ChangeRecord&, const ChangeRecord&) = default;
};

// Appends `records` to the log, inside the caller's transaction. Returns the first new sequence
// number (a waiter that has seen it has seen them all: they commit together). Errors: what
// `error_of` maps the failed statement to.
Result<std::int64_t> AppendChanges(MyConnection& connection, std::span<const ChangeRecord> records,
                                   const MyErrorOf& error_of);

// Deletes the changes older than a minute (a host that was away longer resynchronises instead).
// Errors: what `error_of` maps the failed statement to.
Status PruneChanges(MyConnection& connection, const MyErrorOf& error_of);

// Whether the change log exists in `connection`'s database (it does once stagehand migrated it).
Result<bool> ChangeLogExists(MyConnection& connection, const MyErrorOf& error_of);

// Returns whether `host` may name a waiter: 1 to 255 letters, digits and . _ : @ -.
bool IsWaiterName(std::string_view host);

// Returns the newest change's sequence number (0 when the log is empty).
Result<std::int64_t> LatestChange(MyConnection& connection);

// One host's waits on one plugin database, on a session of its own. Thread-compatible: one thread
// at a time (the host's waiting thread).
class ChangeWaiter {
 public:
  // `session` is dedicated to waiting: a writer's KILL QUERY may land on any of its statements.
  // `holder` (on the same database) holds the named lock the waits block on, from the first wait
  // on. `host` names this waiter uniquely among the database's waiters (host name, pid, a nonce;
  // IsWaiterName).
  ChangeWaiter(std::unique_ptr<MyConnection> session, std::unique_ptr<MyConnection> holder,
               std::string host);
  ~ChangeWaiter();
  ChangeWaiter(const ChangeWaiter&) = delete;
  ChangeWaiter& operator=(const ChangeWaiter&) = delete;

  // Records this waiter as having seen every change up to `seen`, then waits until a writer wakes
  // it or `longest` (at least a second, counted in whole seconds) passes, unless a change newer
  // than `seen` is already in the log. Returns the newest change's sequence number once it wakes
  // (which may still be `seen` after a timeout or a spurious wake). Errors: kInvalidArgument for a
  // bad waiter name; kUnavailable when the session fails other than by being woken, or the
  // holder's session is gone or cannot take the lock (the caller opens a new waiter).
  Result<std::int64_t> Wait(std::int64_t seen, std::chrono::seconds longest);

  // The changes after `seen`, oldest first, at most `limit` of them. `gap` is set when the log no
  // longer holds every change after `seen` (pruned while this host was away), so that the caller
  // resynchronises. Errors: kUnavailable.
  struct Changes {
    std::vector<ChangeRecord> records;
    bool gap = false;
  };
  Result<Changes> ChangesAfter(std::int64_t seen, int limit);

  // The server's id of this waiter's session, for Interrupt (read on the first call).
  Result<std::int64_t> SessionId();

  // Removes this waiter's record (also done by the destructor, as far as the session allows).
  Status Leave();

 private:
  // Runs `sql` again when a writer's KILL QUERY ended it (up to three times in all).
  MyResult ExecuteThroughWakes(std::string_view sql, const MyParams& params = {});

  std::unique_ptr<MyConnection> session_;
  std::unique_ptr<MyConnection> holder_;
  bool holding_ = false;  // whether holder_ took the lock
  const std::string host_;
  std::int64_t session_id_ = 0;  // 0: not read yet
};

// Ends whatever statement the session `session_id` runs (a waiter's wait, when its owner stops
// it), through `connection`. Errors: kUnavailable (a session that is gone is not an error).
Status Interrupt(MyConnection& connection, std::int64_t session_id);

// Ends the waits of the database's waiters that have not seen change `change` yet, except
// `self`'s, with KILL QUERY on their sessions; a waiter whose session is gone has its record
// deleted, and one that this account may not wake (another database account, without
// CONNECTION ADMIN) is reported through `refused` once per waiter and left to its timeout.
// Remembers whom it woke for which sequence, so that a waiter is not woken twice before it waits
// again. Thread-compatible: one thread at a time (a host's writer).
class WaiterWaker {
 public:
  explicit WaiterWaker(std::string self) : self_(std::move(self)) {}

  // Wakes, through `connection`, the waiters that have not seen `change`. Returns how many it
  // woke. Errors: what reading the waiters fails with (kUnavailable).
  Result<int> Wake(MyConnection& connection, std::int64_t change,
                   const std::function<void(const std::string& host)>& refused);

 private:
  const std::string self_;
  // Per waiter (host): the sequence it had seen when last woken by this waker.
  std::map<std::string, std::int64_t> woken_at_;
  std::set<std::string> refused_;  // the waiters this account may not wake, reported once
};

}  // namespace stagehand::store_internal
