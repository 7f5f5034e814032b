#include "stagehand/base/check.h"
#include "stagehand/store/task_store.h"

namespace stagehand {

Status TaskStore::Trigger(const std::string& id, const TraceContext& /*caller*/) {
  return Trigger(id);
}

Result<std::optional<RunError>> TaskStore::LastRunError(const std::string& id) {
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<TaskRow> rows, States());
  for (TaskRow& row : rows) {
    if (row.id == id && row.last_run_error_json) {
      return std::optional(RunError::Decode(std::move(*row.last_run_error_json)));
    }
  }
  return std::optional<RunError>();
}

Result<std::vector<UpsertResult>> TaskStore::UpsertMany(std::span<const TaskUpsert> tasks) {
  std::vector<UpsertResult> results;
  results.reserve(tasks.size());
  for (const TaskUpsert& task : tasks) {
    STAGEHAND_ASSIGN_OR_RETURN(UpsertResult upserted, Upsert(task.id, task.schedule));
    results.push_back(upserted);
  }
  return results;
}

Result<std::vector<ClaimResult>> TaskStore::ClaimMany(std::span<const ClaimRequest> claims,
                                                      std::chrono::milliseconds lease) {
  std::vector<ClaimResult> results;
  results.reserve(claims.size());
  for (const ClaimRequest& claim : claims) {
    STAGEHAND_ASSIGN_OR_RETURN(ClaimResult claimed,
                               Claim(claim.id, claim.ticket, claim.timeout, lease));
    results.push_back(claimed);
  }
  return results;
}

Result<bool> TaskStore::Reclaim(const std::string& /*id*/, const std::string& /*ticket*/,
                                std::int64_t /*claimed_version*/,
                                std::chrono::milliseconds /*timeout*/,
                                std::chrono::milliseconds /*lease*/) {
  return false;
}

Result<std::vector<ReleaseResult>> TaskStore::ReleaseMany(
    std::span<const ReleaseRequest> releases) {
  std::vector<ReleaseResult> results;
  results.reserve(releases.size());
  for (const ReleaseRequest& release : releases) {
    STAGEHAND_ASSIGN_OR_RETURN(
        bool released, Release(release.id, release.ticket, release.schedule, release.error_json));
    STAGEHAND_ASSIGN_OR_RETURN(WallTime now, DatabaseNow());
    ReleaseResult& result = results.emplace_back();
    result.released = released;
    result.db_now = now;
  }
  return results;
}

Result<PollResult> TaskStore::PollChanged(
    std::span<const std::string> ids, std::span<const std::optional<std::int64_t>> known_versions,
    bool sweep_expired) {
  STAGEHAND_CHECK(ids.size() == known_versions.size());
  STAGEHAND_ASSIGN_OR_RETURN(PollResult polled, Poll(ids, sweep_expired));
  std::vector<PollEntry> kept;
  for (std::size_t i = 0; i < polled.entries.size(); ++i) {
    PollEntry& entry = polled.entries[i];
    const bool quiet = entry.readiness == Readiness::kNotReady && !entry.running &&
                       known_versions[i] == entry.version;
    if (!quiet) kept.push_back(std::move(entry));
  }
  polled.entries = std::move(kept);
  return polled;
}

}  // namespace stagehand
