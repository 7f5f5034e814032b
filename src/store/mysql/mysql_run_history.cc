#include "store/mysql/mysql_store.h"

namespace stagehand::store_internal {

Status MySqlTaskStore::RecordStarts(std::span<const RunStart> starts) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateStarts(starts));
  if (starts.empty()) return Status::Ok();
  std::vector<store_internal::MyRunStart> rows;
  rows.reserve(starts.size());
  for (const RunStart& start : starts) {
    rows.push_back({&start.run_id, &start.task_id, &start.origin, start.started_at});
  }
  return InTransaction<bool>("recording runs' starts",
                             [&](Transaction& tx) -> Result<bool> {
                               STAGEHAND_RETURN_IF_ERROR(RequireHistory(tx.session));
                               STAGEHAND_RETURN_IF_ERROR(Runs(tx.session).RecordStarts(rows));
                               return true;
                             })
      .status();
}

Result<std::size_t> MySqlTaskStore::RecordEnds(std::span<const RunEnd> ends) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateEnds(ends));
  if (ends.empty()) return std::size_t{0};
  std::vector<store_internal::MyRunEnd> rows;
  rows.reserve(ends.size());
  for (const RunEnd& end : ends) rows.push_back({&end.run_id, &end.finish, end.ended_at});
  return InTransaction<std::size_t>("recording runs' ends",
                                    [&](Transaction& tx) -> Result<std::size_t> {
                                      STAGEHAND_RETURN_IF_ERROR(RequireHistory(tx.session));
                                      return CloseAndTrim(tx.session, rows);
                                    });
}

Result<RunPage> MySqlTaskStore::ListRuns(const std::string& task_id, int limit,
                                         const std::optional<std::string>& before) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePageSize(limit));
  return OnSession<RunPage>([&](MyConnection& session) -> Result<RunPage> {
    STAGEHAND_RETURN_IF_ERROR(RequireHistory(session));
    return Runs(session).List(task_id, limit, before);
  });
}

Result<TaskRun> MySqlTaskStore::GetRun(const std::string& run_id) {
  return OnSession<TaskRun>([&](MyConnection& session) -> Result<TaskRun> {
    STAGEHAND_RETURN_IF_ERROR(RequireHistory(session));
    return Runs(session).Get(run_id);
  });
}

Result<std::size_t> MySqlTaskStore::MarkLost(std::span<const std::string> run_ids,
                                             const std::string& error_json) {
  if (run_ids.empty()) return std::size_t{0};
  return InTransaction<std::size_t>(
      "marking runs lost", [&](Transaction& tx) -> Result<std::size_t> {
        STAGEHAND_RETURN_IF_ERROR(RequireHistory(tx.session));
        return Runs(tx.session).MarkLost(run_ids, error_json, std::nullopt);
      });
}

Result<bool> MySqlTaskStore::TablesExist() {
  return OnSession<bool>([&](MyConnection& session) { return HistoryPresent(session); });
}

Result<std::size_t> MySqlTaskStore::PruneExpired(std::size_t max_rows) {
  const std::chrono::hours max_age = limits_.Get().max_age;
  return OnSession<std::size_t>([&](MyConnection& session) -> Result<std::size_t> {
    STAGEHAND_RETURN_IF_ERROR(RequireHistory(session));
    return Runs(session).Prune(max_age, max_rows);
  });
}

Result<bool> MySqlTaskStore::HistoryPresent(MyConnection& session) {
  return TablePresent(session, history_table_, "stagehand_task_runs", /*again_if_absent=*/false);
}

Status MySqlTaskStore::RequireHistory(MyConnection& session) {
  return RequireTable(HistoryPresent(session), "stagehand_task_runs");
}

Status MySqlTaskStore::RecordReleasedRuns(MyConnection& session,
                                          std::span<const store_internal::MyRunStart> starts,
                                          std::span<const store_internal::MyRunEnd> ends) {
  if (starts.empty()) return Status::Ok();
  STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryPresent(session));
  if (!history) return Status::Ok();
  STAGEHAND_RETURN_IF_ERROR(Runs(session).RecordStarts(starts));
  return CloseAndTrim(session, ends).status();
}

Result<std::size_t> MySqlTaskStore::CloseAndTrim(MyConnection& session,
                                                 std::span<const store_internal::MyRunEnd> ends) {
  const RunHistoryLimits limits = limits_.Get();
  MyRunTable runs = Runs(session);
  STAGEHAND_ASSIGN_OR_RETURN(auto closed, runs.CloseRuns(ends, limits.max_output_bytes));
  std::vector<std::string> run_ids;
  std::vector<std::string> tasks;
  for (auto& [run_id, task_id] : closed) {
    run_ids.push_back(run_id);
    tasks.push_back(task_id);
  }
  STAGEHAND_RETURN_IF_ERROR(runs.Trim(std::move(tasks), limits.max_runs_per_task, run_ids));
  return run_ids.size();
}

}  // namespace stagehand::store_internal
