// The REST taskState of a global task, read from its row: what the scheduler's task listing shows
// (Backstage's TaskWorker.taskStates()). Kept beside its user, the listing, so that the store
// carries rows only and the REST shape is decided above it.
#pragma once

#include "stagehand/model/task_state.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {

// Returns the REST taskState of `row`: running iff current_run_started_at is set; times written
// by FormatRestTime in `zone` (the scheduler's zone); an empty last_run_error_json counts as
// absent. Thread-safe.
TaskState ToTaskState(const TaskRow& row, const TimeZone& zone);

}  // namespace stagehand
