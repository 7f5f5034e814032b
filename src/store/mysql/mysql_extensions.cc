#include "store/mysql/mysql_store.h"

namespace stagehand::store_internal {

Result<KeyedOutcome> MySqlTaskStore::ApplyOnce(const KeyedRequest& request,
                                               const std::function<Result<KeptAnswer>()>& apply) {
  STAGEHAND_CHECK(pinned_.store != this);
  constexpr std::string_view kWhat = "keeping an idempotency key";
  return InTransaction<KeyedOutcome>(kWhat, [&](Transaction& tx) -> Result<KeyedOutcome> {
    STAGEHAND_RETURN_IF_ERROR(Run(tx.session, kRemoveExpiredKeys, {}, kWhat).status());
    MyParams key;
    key.Add(request.key);
    STAGEHAND_ASSIGN_OR_RETURN(MyResult earlier, Run(tx.session, kLockKey, key, kWhat));
    if (earlier.rows() > 0) {
      if (earlier.Get(0, 0) != request.fingerprint) {
        return ConflictError(
            fmt::format("the idempotency key {} was first sent with another request", request.key));
      }
      return KeyedOutcome{
          KeptAnswer{static_cast<int>(earlier.GetInt(0, 1)), std::string(earlier.Get(0, 2))},
          /*replayed=*/true};
    }
    MyParams placeholder;
    placeholder.Add(request.key)
        .Add(request.fingerprint)
        .Add(static_cast<std::int64_t>(request.retention.count()) * 1000);
    STAGEHAND_RETURN_IF_ERROR(Run(tx.session, kInsertKey, placeholder, kWhat).status());
    STAGEHAND_ASSIGN_OR_RETURN(KeptAnswer answer, ([&] {
                                 pinned_ = Pinned{this, &tx};
                                 const Unpin unpin;
                                 return apply();
                               }()));
    MyParams answered;
    answered.Add(answer.status).Add(answer.body).Add(request.key);
    STAGEHAND_RETURN_IF_ERROR(Run(tx.session, kAnswerKey, answered, kWhat).status());
    return KeyedOutcome{std::move(answer), /*replayed=*/false};
  });
}

Result<std::size_t> MySqlTaskStore::RefreshRegistrations(std::span<const std::string> task_ids,
                                                         const std::string& host) {
  if (task_ids.empty()) return std::size_t{0};
  return InTransaction<std::size_t>(
      "refreshing task registrations", [&](Transaction& tx) -> Result<std::size_t> {
        STAGEHAND_ASSIGN_OR_RETURN(bool present,
                                   RegistrationsPresent(tx.session, /*again_if_absent=*/true));
        if (!present) return std::size_t{0};
        MyParams params;
        for (const std::string& id : task_ids) params.Add(id);
        STAGEHAND_ASSIGN_OR_RETURN(
            MyResult existing,
            Run(tx.session,
                fmt::format("SELECT t.id FROM backstage_backend_tasks__tasks AS t WHERE {}",
                            IdsCondition(task_ids.size())),
                params, "refreshing task registrations"));
        std::vector<std::pair<std::string, std::string>> registrations;
        for (int row = 0; row < existing.rows(); ++row) {
          registrations.emplace_back(std::string(existing.Get(row, 0)), host);
        }
        STAGEHAND_RETURN_IF_ERROR(WriteRegistrations(tx.session, registrations));
        return registrations.size();
      });
}

Result<std::vector<PruneCandidate>> MySqlTaskStore::ListPruneCandidates(WallTime cutoff) {
  return OnSession<std::vector<PruneCandidate>>(
      [&](MyConnection& session) -> Result<std::vector<PruneCandidate>> {
        STAGEHAND_RETURN_IF_ERROR(RequireRegistrations(session));
        STAGEHAND_ASSIGN_OR_RETURN(std::vector<PruneRow> rows, PruneRows(session, std::nullopt));
        std::vector<PruneCandidate> candidates;
        for (PruneRow& row : rows) {
          if (!store_internal::IsPruneCandidate(row.task, row.last_seen_at, cutoff, row.now)) {
            continue;
          }
          candidates.push_back(PruneCandidate{std::move(row.task.id), std::move(row.host),
                                              row.last_seen_at, row.task.last_run_ended_at,
                                              row.task.next_run_start_at});
        }
        return candidates;
      });
}

Result<std::vector<std::string>> MySqlTaskStore::PruneTasks(std::span<const std::string> task_ids,
                                                            WallTime cutoff, PruneScope scope) {
  return InTransaction<std::vector<std::string>>(
      "pruning tasks", [&](Transaction& tx) -> Result<std::vector<std::string>> {
        STAGEHAND_RETURN_IF_ERROR(RequireRegistrations(tx.session));
        if (task_ids.empty()) return std::vector<std::string>();
        STAGEHAND_ASSIGN_OR_RETURN(std::vector<PruneRow> rows, PruneRows(tx.session, task_ids));
        STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryPresent(tx.session));
        std::vector<std::string> deleted;
        for (const PruneRow& row : rows) {
          if (!row.host && scope != PruneScope::kIncludeUnregistered) continue;
          if (!store_internal::IsPruneCandidate(row.task, row.last_seen_at, cutoff, row.now)) {
            continue;
          }
          const MyParams id = MyParams().Add(row.task.id);
          STAGEHAND_RETURN_IF_ERROR(Run(tx.session, kDelete, id, "pruning a task").status());
          STAGEHAND_RETURN_IF_ERROR(
              Run(tx.session, kDeleteRegistration, id, "pruning a task").status());
          if (history) STAGEHAND_RETURN_IF_ERROR(Runs(tx.session).DeleteTask(row.task.id));
          tx.Announce(StoreEvent::Kind::kDelete, row.task.id);
          deleted.push_back(row.task.id);
        }
        return deleted;
      });
}

Result<bool> MySqlTaskStore::RegistrationsPresent(MyConnection& session, bool again_if_absent) {
  return TablePresent(session, registrations_table_, "stagehand_task_registrations",
                      again_if_absent);
}

Status MySqlTaskStore::RequireRegistrations(MyConnection& session) {
  return RequireTable(RegistrationsPresent(session, /*again_if_absent=*/true),
                      "stagehand_task_registrations");
}

Status MySqlTaskStore::WriteRegistrations(
    MyConnection& session, std::span<const std::pair<std::string, std::string>> registrations) {
  if (registrations.empty()) return Status::Ok();
  std::string sql =
      "INSERT INTO stagehand_task_registrations (task_id, host, last_seen_at) VALUES ";
  MyParams params;
  for (std::size_t i = 0; i < registrations.size(); ++i) {
    sql += i == 0 ? "(?, ?, UTC_TIMESTAMP(3))" : ", (?, ?, UTC_TIMESTAMP(3))";
    params.Add(registrations[i].first).Add(registrations[i].second);
  }
  sql += " ON DUPLICATE KEY UPDATE host = VALUES(host), last_seen_at = VALUES(last_seen_at)";
  return Run(session, sql, params, "recording task registrations").status();
}

Status MySqlTaskStore::RecordRegistrations(MyConnection& session,
                                           std::span<const TaskUpsert> tasks) {
  std::vector<std::pair<std::string, std::string>> registrations;
  for (const TaskUpsert& task : tasks) {
    if (task.registered_by) registrations.emplace_back(task.id, *task.registered_by);
  }
  if (registrations.empty()) return Status::Ok();
  STAGEHAND_ASSIGN_OR_RETURN(bool present,
                             RegistrationsPresent(session, /*again_if_absent=*/false));
  if (!present) return Status::Ok();
  return WriteRegistrations(session, registrations);
}

Result<std::vector<MySqlTaskStore::PruneRow>> MySqlTaskStore::PruneRows(
    MyConnection& session, std::optional<std::span<const std::string>> ids) {
  MyParams params;
  if (ids) {
    for (const std::string& id : *ids) params.Add(id);
  }
  STAGEHAND_ASSIGN_OR_RETURN(
      MyResult result,
      Run(session,
          PruneRowsSql(ids ? IdsCondition(ids->size()) : "TRUE", ids ? Lock::kWait : Lock::kNone),
          params, "reading tasks to prune"));
  std::vector<PruneRow> rows;
  for (int i = 0; i < result.rows(); ++i) {
    PruneRow& row = rows.emplace_back();
    row.now = FromMicros(result.GetInt(i, 0));
    row.task = RowAt(result, i, 1);
    row.host = result.GetOptional(i, 1 + kRowColumnCount);
    if (!result.IsNull(i, 2 + kRowColumnCount)) {
      row.last_seen_at = FromMicros(result.GetInt(i, 2 + kRowColumnCount));
    }
  }
  std::sort(rows.begin(), rows.end(),
            [](const PruneRow& a, const PruneRow& b) { return a.task.id < b.task.id; });
  return rows;
}

Status MySqlTaskStore::Pause(const std::string& id, const PauseRequest& request,
                             std::chrono::milliseconds hold) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePauseTexts(request));
  return ChangeRow<bool>("pausing a task", id, StoreEvent(StoreEvent::Kind::kUpsert, id),
                         [&](TaskRow* row, WallTime now) -> Result<bool> {
                           if (row == nullptr) return Missing(id);
                           STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePause(request, now));
                           store_internal::PauseRow(*row, request, hold, now);
                           return true;
                         })
      .status();
}

Status MySqlTaskStore::Resume(const std::string& id) {
  return ChangeRow<bool>("resuming a task", id, StoreEvent(StoreEvent::Kind::kRelease, id),
                         [&](TaskRow* row, WallTime) -> Result<bool> {
                           if (row == nullptr) return Missing(id);
                           STAGEHAND_RETURN_IF_ERROR(store_internal::ResumeRow(*row));
                           return true;
                         })
      .status();
}

}  // namespace stagehand::store_internal
