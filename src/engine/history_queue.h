// The run history writes that no claim or release carries: local runs' starts and ends, and the
// starts of global runs recorded once they have run kShortRun. Any thread queues; the dispatcher
// writes them in batches (starts first, so a run that started and ended between two flushes is
// recorded, then closed). While the database does not answer the records stay queued, bounded by
// kMaxQueued (the oldest are dropped and counted). Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "stagehand/base/logger.h"
#include "stagehand/base/mutex.h"
#include "stagehand/store/run_history.h"

namespace stagehand::engine_internal {

class HistoryQueue {
 public:
  // `history` null: nothing is ever queued.
  HistoryQueue(RunHistory* history, std::shared_ptr<Logger> logger);

  // Whether records are kept: there is a history, and its tables exist.
  bool enabled() const { return history_ != nullptr && !missing_; }

  // Queues what is given; returns whether anything was queued (the caller then wakes the
  // dispatcher).
  bool Queue(std::optional<RunStart> start, std::optional<RunEnd> end);
  // Whether records wait to be written.
  bool HasQueued() const;

  // Dispatcher: writes the queued records, then prunes expired history when `prune`. Returns false
  // when the database did not answer: the records stay queued, to be written once it does.
  bool Flush(bool prune);

  // Shutdown, after the last Flush: logs and forgets what is left; returns how many records.
  int DropQueued();
  // Records dropped past kMaxQueued so far.
  int dropped() const { return dropped_.load(); }

  static constexpr std::size_t kMaxQueued = 10000;

 private:
  // Whether a failed write is kept to be sent again (the database did not answer).
  bool KeepAfter(const Status& status, std::size_t count, const char* what, bool& unanswered);
  void Requeue(std::vector<RunStart> starts, std::vector<RunEnd> ends);

  RunHistory* const history_;
  const std::shared_ptr<Logger> logger_;
  const bool debug_logs_;
  // The database has no history tables (found by Flush): nothing more is queued.
  std::atomic<bool> missing_{false};
  std::atomic<int> dropped_{0};
  mutable Mutex mu_;
  std::vector<RunStart> starts_ STAGEHAND_GUARDED_BY(mu_);
  std::vector<RunEnd> ends_ STAGEHAND_GUARDED_BY(mu_);
};

}  // namespace stagehand::engine_internal
