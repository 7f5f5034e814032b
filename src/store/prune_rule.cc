#include "store/prune_rule.h"

namespace stagehand::store_internal {

bool IsPruneCandidate(const TaskRow& row, const std::optional<WallTime>& last_seen_at,
                      WallTime cutoff, WallTime now) {
  if (row.current_run_ticket &&
      (!row.current_run_expires_at || !(*row.current_run_expires_at < now))) {
    return false;
  }
  const auto before_cutoff = [cutoff](const std::optional<WallTime>& t) {
    return !t || *t < cutoff;
  };
  return before_cutoff(last_seen_at) && before_cutoff(row.current_run_started_at) &&
         before_cutoff(row.last_run_ended_at) && before_cutoff(row.next_run_start_at);
}

}  // namespace stagehand::store_internal
