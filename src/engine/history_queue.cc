#include "engine/history_queue.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

namespace stagehand::engine_internal {

HistoryQueue::HistoryQueue(RunHistory* history, std::shared_ptr<Logger> logger)
    : history_(history),
      logger_(std::move(logger)),
      debug_logs_(logger_->Enabled(LogLevel::kDebug)) {}

bool HistoryQueue::Queue(std::optional<RunStart> start, std::optional<RunEnd> end) {
  if (!enabled() || (!start && !end)) return false;
  MutexLock lock(mu_);
  if (start) starts_.push_back(*std::move(start));
  if (end) ends_.push_back(*std::move(end));
  return true;
}

bool HistoryQueue::HasQueued() const {
  MutexLock lock(mu_);
  return !starts_.empty() || !ends_.empty();
}

bool HistoryQueue::KeepAfter(const Status& status, std::size_t count, const char* what,
                             bool& unanswered) {
  // A database nobody migrated to this version has no history tables: said once, not per run.
  if (status.code() == StatusCode::kFailedPrecondition) {
    if (!missing_.exchange(true)) {
      logger_->Warn("Runs are not recorded in the run history: " + status.message());
    }
    return false;
  }
  if (status.code() == StatusCode::kUnavailable) {
    if (!unanswered && debug_logs_) {
      logger_->Debug("Recording " + std::to_string(count) + " run " + what +
                     "(s) in the run history failed, " + status.message() +
                     "; recorded when the database answers");
    }
    unanswered = true;
    return true;
  }
  logger_->Warn("Failed to record " + std::to_string(count) + " run " + what +
                "(s) in the run history, " + status.message());
  return false;
}

bool HistoryQueue::Flush(bool prune) {
  if (history_ == nullptr) return true;
  std::vector<RunStart> starts;
  std::vector<RunEnd> ends;
  {
    MutexLock lock(mu_);
    starts.swap(starts_);
    ends.swap(ends_);
  }
  bool unanswered = false;
  if (!starts.empty()) {
    if (Status written = history_->RecordStarts(starts);
        written.ok() || !KeepAfter(written, starts.size(), "start", unanswered)) {
      starts.clear();
    }
  }
  if (!ends.empty() && starts.empty()) {
    if (Result<std::size_t> written = history_->RecordEnds(ends);
        written.ok() || !KeepAfter(written.status(), ends.size(), "end", unanswered)) {
      ends.clear();
    }
  }
  if (!starts.empty() || !ends.empty()) {
    Requeue(std::move(starts), std::move(ends));
    return false;
  }
  if (!prune || missing_) return true;
  // In bounded batches, so a large backlog never holds the dispatcher for long.
  constexpr std::size_t kPruneBatch = 1000;
  for (int round = 0; round < 10; ++round) {
    Result<std::size_t> pruned = history_->PruneExpired(kPruneBatch);
    if (!pruned.ok()) {
      logger_->Warn("Failed to prune the run history, " + pruned.status().message());
      return true;
    }
    if (*pruned < kPruneBatch) return true;
  }
  return true;
}

void HistoryQueue::Requeue(std::vector<RunStart> starts, std::vector<RunEnd> ends) {
  std::size_t excess = 0;
  {
    MutexLock lock(mu_);
    starts_.insert(starts_.begin(), std::make_move_iterator(starts.begin()),
                   std::make_move_iterator(starts.end()));
    ends_.insert(ends_.begin(), std::make_move_iterator(ends.begin()),
                 std::make_move_iterator(ends.end()));
    // Bounded while the database is away: the oldest records go first.
    const std::size_t queued = starts_.size() + ends_.size();
    if (queued <= kMaxQueued) return;
    excess = queued - kMaxQueued;
    const std::size_t from_starts = std::min(excess, starts_.size());
    starts_.erase(starts_.begin(), starts_.begin() + static_cast<std::ptrdiff_t>(from_starts));
    ends_.erase(ends_.begin(), ends_.begin() + static_cast<std::ptrdiff_t>(excess - from_starts));
  }
  if (dropped_.fetch_add(static_cast<int>(excess)) == 0) {
    logger_->Warn("The run history keeps at most " + std::to_string(kMaxQueued) +
                  " records while the database is unreachable; the oldest are dropped");
  }
}

int HistoryQueue::DropQueued() {
  std::size_t records = 0;
  {
    MutexLock lock(mu_);
    records = starts_.size() + ends_.size();
    starts_.clear();
    ends_.clear();
  }
  if (records > 0) {
    logger_->Error(std::to_string(records) +
                   " run history record(s) could not be written to the database before exit");
  }
  return static_cast<int>(records);
}

}  // namespace stagehand::engine_internal
