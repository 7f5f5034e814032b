// A check shared by the PostgreSQL and SQLite schema tests: after the migration that added the
// run history's trace_id column to a table that already held runs (issue 19).
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "stagehand/store/task_store.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::schema_test {

using ::stagehand::testing::IsOk;

// Expects, of `store` just migrated, that the run "old" recorded before the migration reads back
// without a trace id and that a new run keeps the one it is given.
inline void ExpectOldRunsWithoutTraceIdsAndNewRunsWithThem(TaskStore& store) {
  Result<TaskRun> old = store.history()->GetRun("old");
  ASSERT_THAT(old, IsOk());
  EXPECT_FALSE(old->origin.trace_id.has_value());
  RunOrigin traced{"host", 1, RunTrigger::kManual};
  traced.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  const std::vector<RunStart> starts = {RunStart{"new", "task", traced}};
  ASSERT_THAT(store.history()->RecordStarts(starts), IsOk());
  Result<TaskRun> recorded = store.history()->GetRun("new");
  ASSERT_THAT(recorded, IsOk());
  EXPECT_EQ(recorded->origin.trace_id, traced.trace_id);
}

}  // namespace stagehand::schema_test
