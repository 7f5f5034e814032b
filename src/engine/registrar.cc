#include "engine/registrar.h"

#include <utility>

namespace stagehand::engine_internal {

Registrar::Registrar(PlannerAccess& engine, TaskStore* store, TaskRegistrations* registrations,
                     Clock& clock, const EngineReporter& reporter, std::string host)
    : engine_(engine),
      store_(store),
      registrations_(registrations),
      clock_(clock),
      reporter_(reporter),
      host_(std::move(host)) {}

Result<Registrar::Rows> Registrar::Upsert(const std::vector<TaskPtr>& tasks) {
  Rows rows;
  rows.next.resize(tasks.size());
  rows.version.resize(tasks.size());
  std::vector<TaskUpsert> upserts;
  std::vector<std::size_t> upserted_task;  // index in `tasks` of each upsert
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (!tasks[i]->global()) continue;
    upserts.push_back(TaskUpsert{tasks[i]->def.id, tasks[i]->def.schedule, host_});
    upserted_task.push_back(i);
  }
  if (upserts.empty()) return rows;
  // UpsertMany even for one task: it records the registration in the same round trip.
  Result<std::vector<UpsertResult>> upserted = store_->UpsertMany(upserts);
  if (!upserted.ok()) {
    return upserted.status().WithPrefix(upserts.size() == 1 ? "Failed to persist task, "
                                                            : "Failed to persist tasks, ");
  }
  for (std::size_t j = 0; j < upserted->size(); ++j) {
    rows.next[upserted_task[j]] = (*upserted)[j].next_run_start_at;
    rows.version[upserted_task[j]] = (*upserted)[j].version;
    rows.db_now = (*upserted)[j].db_now;
  }
  return rows;
}

void Registrar::Reregister(const std::vector<TaskPtr>& tasks) {
  std::vector<TaskUpsert> upserts;
  engine_.WithPlanner(
      [&](Planner&) {
        upserts.reserve(tasks.size());
        for (const TaskPtr& task : tasks) {
          upserts.push_back(TaskUpsert{task->def.id, task->def.schedule, host_});
        }
      },
      PlannerAccess::Wake::kNone);
  Result<std::vector<UpsertResult>> upserted = store_->UpsertMany(upserts);
  if (!upserted.ok()) {
    engine_.WithPlanner(
        [&](Planner& planner) {
          planner.ReregistrationFailed();
          planner.DatabaseFailed(clock_.MonoNow());
        },
        PlannerAccess::Wake::kNone);
    return;
  }
  reporter_.log().Info("Registered " + std::to_string(upserts.size()) +
                       " task(s) again on the new database server");
}

void Registrar::RefreshRegistrations(const std::vector<std::string>& ids) {
  Result<std::size_t> refreshed = registrations_->RefreshRegistrations(ids, host_);
  if (!refreshed.ok()) {
    reporter_.log().Warn("Failed to refresh the registrations of " + std::to_string(ids.size()) +
                         " task(s), " + refreshed.status().message());
  } else if (reporter_.debug()) {
    reporter_.log().Debug("Refreshed the registrations of " + std::to_string(*refreshed) +
                          " task(s)");
  }
}

}  // namespace stagehand::engine_internal
