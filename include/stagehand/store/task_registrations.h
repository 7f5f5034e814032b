// Which stagehand host registered each of a plugin's tasks, and when a host last said it still
// runs it: stagehand's own table beside the tasks table (stagehand_task_registrations; Backstage's
// table has no such column and is left as it is). A registration writes it in its own round trip
// (TaskUpsert::registered_by), and each host's engine refreshes the registrations of its tasks
// about once per kRegistrationRefreshInterval, so that a daemon that has run for months without
// restarting is not taken for gone. `stagehand db prune` reads it to find, and removes, the tasks
// that no host runs any more. See docs/adr/0012-pruning-tasks-no-host-registers.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"

namespace stagehand {

// How often an engine refreshes the registrations of its tasks. A task whose registration is older
// than a few of these intervals has no stagehand host that still runs it.
inline constexpr std::chrono::hours kRegistrationRefreshInterval{1};

// A task that the prune rule (TaskRegistrations) finds unused since a cutoff. Times are the
// database's clock. A value type.
struct PruneCandidate {
  std::string task_id;
  // The stagehand host that registered or refreshed the task last, and when; both nullopt for a
  // task no stagehand host has registered since the table exists (a Backstage worker's task).
  std::optional<std::string> host;
  std::optional<WallTime> last_seen_at;
  std::optional<WallTime> last_run_ended_at;
  std::optional<WallTime> next_run_start_at;

  bool registered() const { return host.has_value(); }

  friend bool operator==(const PruneCandidate&, const PruneCandidate&) = default;
};

// Which candidates PruneTasks may delete.
enum class PruneScope {
  kRegistered,           // only tasks a stagehand host registered
  kIncludeUnregistered,  // also tasks no stagehand host has registered (Backstage workers' tasks)
};

// A plugin's task registrations, owned by its TaskStore (TaskStore::registrations()) and living as
// long as it; same database, same connections.
//
// The prune rule: a task is a candidate for `cutoff` when nothing shows that a host has used it
// since. Its row holds no live claim (no ticket, or one whose expiry has passed by the database's
// now), and none of its registration's last_seen_at, current_run_started_at, last_run_ended_at and
// next_run_start_at is at or after the cutoff (a task due at or after the cutoff is still on
// somebody's schedule). A task without a registration is judged by its row alone.
//
// Every operation is one database round trip (one transaction on SQLite) unless its comment says
// otherwise. Thread-safe: any thread may call any method.
class TaskRegistrations {
 public:
  virtual ~TaskRegistrations() = default;

  // Records that `host` still runs the tasks `task_ids` (a heartbeat): their registrations name
  // `host`, seen at the database's now. Ids without a row in the tasks table are skipped, so a
  // refresh never brings back the registration of a task that was pruned. Returns how many were
  // recorded: 0 when the database has no registrations table (migrated by an older stagehand),
  // which a call that finds it absent looks for again (one more round trip). Errors: kUnavailable.
  virtual Result<std::size_t> RefreshRegistrations(std::span<const std::string> task_ids,
                                                   const std::string& host) = 0;

  // Returns every task that the prune rule finds unused since `cutoff`, ordered by id (bytewise),
  // registered or not. Changes nothing. Errors: kFailedPrecondition (the registrations table is
  // missing: run the migrations); kUnavailable.
  virtual Result<std::vector<PruneCandidate>> ListPruneCandidates(WallTime cutoff) = 0;

  // Deletes, in one transaction, those of `task_ids` that are still candidates for `cutoff` when it
  // runs (and registered, unless `scope` includes unregistered tasks): their rows in the tasks
  // table (announced as deletions where the store notifies, as Delete does), their runs in the
  // history and their registrations. A task claimed or seen since the listing is kept. Returns the
  // deleted ids, ordered by id. Errors: kFailedPrecondition (the registrations table is missing);
  // kUnavailable (then nothing was deleted).
  virtual Result<std::vector<std::string>> PruneTasks(std::span<const std::string> task_ids,
                                                      WallTime cutoff, PruneScope scope) = 0;
};

}  // namespace stagehand
