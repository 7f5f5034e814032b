// The prune rule of TaskRegistrations (task_registrations.h) as a function of a row, for the stores
// that apply it outside SQL: the memory store, and SQLite, whose timestamps may be text or integer
// epoch milliseconds and so compare reliably only once read. PostgreSQL's statement spells the same
// rule; the contract suite holds the three to it. Pure; thread-safe.
#pragma once

#include <optional>

#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand::store_internal {

// Returns whether the task of `row`, last seen registered at `last_seen_at` (nullopt: never
// registered by a stagehand host), is a prune candidate for `cutoff` at the database's `now`.
bool IsPruneCandidate(const TaskRow& row, const std::optional<WallTime>& last_seen_at,
                      WallTime cutoff, WallTime now);

}  // namespace stagehand::store_internal
