// MemoryTaskStore's RunHistory: the runs of the in-memory table.
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

void MemoryTaskStore::SetLimits(const RunHistoryLimits& limits) { limits_->Set(limits); }

RunHistoryLimits MemoryTaskStore::limits() const { return limits_->Get(); }

Status MemoryTaskStore::RecordStarts(std::span<const RunStart> starts) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateStarts(starts));
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  table_->WithRowsAndRuns([&](std::map<std::string, TaskRow>&, RunMap& runs) {
    for (const RunStart& start : starts) {
      StartRun(runs, start.run_id, start.task_id, start.origin,
               start.started_at ? store_internal::ToMillis(*start.started_at) : now);
    }
  });
  return Status::Ok();
}

Result<std::size_t> MemoryTaskStore::RecordEnds(std::span<const RunEnd> ends) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateEnds(ends));
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  const RunHistoryLimits limits = limits_->Get();
  return table_->WithRowsAndRuns([&](std::map<std::string, TaskRow>&, RunMap& runs) {
    std::vector<std::string> closed;
    std::vector<std::string> tasks;
    for (const RunEnd& end : ends) {
      const WallTime at = end.ended_at ? store_internal::ToMillis(*end.ended_at) : now;
      if (std::optional<std::string> task =
              CloseRun(runs, end.run_id, end.finish, at, limits.max_output_bytes)) {
        closed.push_back(end.run_id);
        tasks.push_back(std::move(*task));
      }
    }
    std::sort(tasks.begin(), tasks.end());
    tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
    for (const std::string& task : tasks) TrimTask(runs, task, limits.max_runs_per_task, closed);
    return closed.size();
  });
}

Result<RunPage> MemoryTaskStore::ListRuns(const std::string& task_id, int limit,
                                          const std::optional<std::string>& before) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePageSize(limit));
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  return table_->WithRowsAndRuns(
      [&](std::map<std::string, TaskRow>&, RunMap& runs) -> Result<RunPage> {
        std::optional<TaskRun> after;
        if (before) {
          if (std::optional<store_internal::RunCursor> cursor =
                  store_internal::DecodeRunCursor(*before)) {
            after.emplace();
            after->started_at = cursor->started_at;
            after->run_id = cursor->run_id;
          } else if (auto it = runs.find(*before); it != runs.end()) {
            after = it->second.run;
          } else {
            return InvalidArgumentError(
                fmt::format("before: '{}' is neither a page cursor nor a run id", *before));
          }
        }
        std::vector<const TaskRun*> of_task;
        for (const auto& [id, stored] : runs) {
          const TaskRun& run = stored.run;
          if (run.task_id == task_id && (!after || Newer(*after, run))) of_task.push_back(&run);
        }
        std::sort(of_task.begin(), of_task.end(),
                  [](const TaskRun* a, const TaskRun* b) { return Newer(*a, *b); });
        RunPage page;
        const std::size_t count = std::min(of_task.size(), static_cast<std::size_t>(limit));
        for (std::size_t i = 0; i < count; ++i) {
          TaskRun& run = page.runs.emplace_back(*of_task[i]);
          run.finish.output_tail.clear();
        }
        if (of_task.size() > count) {
          page.next_cursor =
              store_internal::EncodeRunCursor(page.runs.back().started_at, page.runs.back().run_id);
        }
        return page;
      });
}

Result<TaskRun> MemoryTaskStore::GetRun(const std::string& run_id) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  return table_->WithRowsAndRuns(
      [&](std::map<std::string, TaskRow>&, RunMap& runs) -> Result<TaskRun> {
        auto it = runs.find(run_id);
        if (it == runs.end()) return NotFoundError(fmt::format("Run {} does not exist", run_id));
        return it->second.run;
      });
}

Result<std::size_t> MemoryTaskStore::MarkLost(std::span<const std::string> run_ids,
                                              const std::string& error_json) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime now = DatabaseTime();
  return table_->WithRowsAndRuns([&](std::map<std::string, TaskRow>&, RunMap& runs) {
    std::size_t closed = 0;
    for (const std::string& run_id : run_ids) closed += LoseRun(runs, run_id, now, error_json);
    return closed;
  });
}

Result<std::size_t> MemoryTaskStore::PruneExpired(std::size_t max_rows) {
  STAGEHAND_RETURN_IF_ERROR(BeginStatement());
  const WallTime cutoff = DatabaseTime() - limits_->Get().max_age;
  return table_->WithRowsAndRuns([&](std::map<std::string, TaskRow>&, RunMap& runs) {
    std::vector<RunMap::iterator> expired;
    for (auto it = runs.begin(); it != runs.end(); ++it) {
      if (it->second.run.started_at < cutoff) expired.push_back(it);
    }
    std::sort(expired.begin(), expired.end(), [](RunMap::iterator a, RunMap::iterator b) {
      return a->second.run.started_at < b->second.run.started_at;
    });
    const std::size_t removed = std::min(expired.size(), max_rows);
    for (std::size_t i = 0; i < removed; ++i) runs.erase(expired[i]);
    return removed;
  });
}

}  // namespace stagehand::testing
