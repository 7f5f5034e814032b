// The registration round trips of an engine's global tasks (TaskEngine): the upserts of a
// registration or a redefinition, every task again after a server change, and the registrations'
// heartbeat. It decides nothing: the planner says when each is due.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_reporter.h"
#include "engine/planner.h"
#include "engine/planner_access.h"
#include "stagehand/base/status.h"
#include "stagehand/store/task_registrations.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand::engine_internal {

// Thread-compatible for Reregister and RefreshRegistrations (the dispatcher's); Upsert may be
// called from any thread.
class Registrar {
 public:
  // `store` may be null (no global task); `registrations` may be null (not kept). `host` is this
  // host as the registrations name it.
  Registrar(PlannerAccess& engine, TaskStore* store, TaskRegistrations* registrations, Clock& clock,
            const EngineReporter& reporter, std::string host);

  // The rows of tasks after their upsert, by the tasks' index (unset for local tasks).
  struct Rows {
    std::vector<std::optional<WallTime>> next;
    std::vector<std::optional<std::int64_t>> version;
    WallTime db_now{};  // the database's clock when the statement ran
  };
  // Upserts the rows of the global tasks among `tasks` (whose definitions no other thread
  // changes meanwhile) in one UpsertMany, which records the registrations in the same round
  // trip. Errors: the store's, prefixed "Failed to persist task(s), ".
  Result<Rows> Upsert(const std::vector<TaskPtr>& tasks);
  // After a server change: registers every global task of `tasks` again, in case the new server
  // lacks the last registrations; on failure the planner retries it after the backoff.
  void Reregister(const std::vector<TaskPtr>& tasks);
  // Whether the store keeps registrations (RefreshRegistrations has something to refresh).
  bool keeps_registrations() const { return registrations_ != nullptr; }
  // Records that this host still runs the global tasks `ids` (the heartbeat, about once an hour).
  void RefreshRegistrations(const std::vector<std::string>& ids);

 private:
  PlannerAccess& engine_;
  TaskStore* store_;
  TaskRegistrations* registrations_;
  Clock& clock_;
  const EngineReporter& reporter_;
  const std::string host_;
};

}  // namespace stagehand::engine_internal
