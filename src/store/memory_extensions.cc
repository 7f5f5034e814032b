// MemoryTaskStore's extension state: task registrations (pruning) and idempotency keys.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "stagehand/base/check.h"
#include "stagehand/model/task_state.h"
#include "stagehand/store/memory_task_store.h"
#include "store/memory_task_table.h"
#include "store/next_run.h"
#include "store/prune_rule.h"
#include "store/row_rules.h"
#include "store/run_history_support.h"
#include "store/task_pause.h"

namespace stagehand::testing {

Result<std::size_t> MemoryTaskStore::RefreshRegistrations(std::span<const std::string> task_ids,
                                                          const std::string& host) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  return table_->WithEverything(
      [&](std::map<std::string, TaskRow>& rows, RunMap&, RegistrationMap& registrations) {
        std::size_t recorded = 0;
        for (const std::string& id : task_ids) {
          if (!rows.contains(id)) continue;
          registrations[id] = Registration{host, now};
          ++recorded;
        }
        return recorded;
      });
}

Result<std::vector<PruneCandidate>> MemoryTaskStore::ListPruneCandidates(WallTime cutoff) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  return table_->WithEverything(
      [&](std::map<std::string, TaskRow>& rows, RunMap&, RegistrationMap& registrations) {
        std::vector<PruneCandidate> candidates;
        for (const auto& [id, row] : rows) {
          const auto registration = registrations.find(id);
          const bool registered = registration != registrations.end();
          const std::optional<WallTime> last_seen =
              registered ? std::optional(registration->second.last_seen_at) : std::nullopt;
          if (!store_internal::IsPruneCandidate(row, last_seen, cutoff, now)) continue;
          candidates.push_back(PruneCandidate{
              id, registered ? std::optional(registration->second.host) : std::nullopt, last_seen,
              row.last_run_ended_at, row.next_run_start_at});
        }
        return candidates;
      });
}

Result<std::vector<std::string>> MemoryTaskStore::PruneTasks(std::span<const std::string> task_ids,
                                                             WallTime cutoff, PruneScope scope) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  std::vector<std::string> deleted = table_->WithEverything(
      [&](std::map<std::string, TaskRow>& rows, RunMap& runs, RegistrationMap& registrations) {
        std::vector<std::string> ids;
        for (const std::string& id : task_ids) {
          const auto row = rows.find(id);
          if (row == rows.end()) continue;
          const auto registration = registrations.find(id);
          const bool registered = registration != registrations.end();
          if (!registered && scope != PruneScope::kIncludeUnregistered) continue;
          const std::optional<WallTime> last_seen =
              registered ? std::optional(registration->second.last_seen_at) : std::nullopt;
          if (!store_internal::IsPruneCandidate(row->second, last_seen, cutoff, now)) continue;
          rows.erase(row);
          if (registered) registrations.erase(registration);
          std::erase_if(runs, [&](const auto& entry) { return entry.second.run.task_id == id; });
          ids.push_back(id);
        }
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        return ids;
      });
  table_->Publish(EventsFor(StoreEvent::Kind::kDelete, deleted));
  return deleted;
}

Result<KeyedOutcome> MemoryTaskStore::ApplyOnce(const KeyedRequest& request,
                                                const std::function<Result<KeptAnswer>()>& apply) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  return table_->WithKeys([&](KeyMap& keys) -> Result<KeyedOutcome> {
    const WallTime now = DatabaseTime();
    std::erase_if(keys, [&](const auto& entry) { return entry.second.expires_at <= now; });
    if (const auto found = keys.find(request.key); found != keys.end()) {
      if (found->second.fingerprint != request.fingerprint) {
        return ConflictError(
            fmt::format("the idempotency key {} was first sent with another request", request.key));
      }
      return KeyedOutcome{found->second.answer, /*replayed=*/true};
    }
    STAGEHAND_ASSIGN_OR_RETURN(KeptAnswer answer, apply());
    STAGEHAND_RETURN_IF_ERROR(BeginStatement());
    keys[request.key] = KeptKey{request.fingerprint, answer, now + request.retention};
    return KeyedOutcome{std::move(answer), /*replayed=*/false};
  });
}

}  // namespace stagehand::testing
