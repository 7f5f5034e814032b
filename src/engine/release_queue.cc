#include "engine/release_queue.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <set>
#include <utility>

namespace stagehand::engine_internal {

namespace {

template <typename T>
void PrependTo(std::vector<T>& queue, std::vector<T> front) {
  queue.insert(queue.begin(), std::make_move_iterator(front.begin()),
               std::make_move_iterator(front.end()));
}

}  // namespace

void ReleaseQueue::Push(PendingRelease release) {
  MutexLock lock(mu_);
  pending_.push_back(std::move(release));
}

std::vector<PendingRelease> ReleaseQueue::TakePending() {
  MutexLock lock(mu_);
  return std::exchange(pending_, {});
}

void ReleaseQueue::ReturnPending(std::vector<PendingRelease> releases) {
  MutexLock lock(mu_);
  PrependTo(pending_, std::move(releases));
}

void ReleaseQueue::RememberDelivered(std::vector<ReleaseRequest> requests, MonoTime now) {
  MutexLock lock(mu_);
  for (ReleaseRequest& request : requests) {
    request.retried = true;
    if (request.history && request.history->finish.output_tail.size() > kReplayOutputBytes) {
      std::string& tail = request.history->finish.output_tail;
      tail.erase(0, tail.size() - kReplayOutputBytes);
    }
    delivered_.push_back(DeliveredRelease{std::move(request), now});
  }
  while (!delivered_.empty() && (delivered_.size() > kMaxDelivered ||
                                 now - delivered_.front().delivered_at > replay_window_)) {
    delivered_.pop_front();
  }
}

void ReleaseQueue::ReplayDelivered() {
  MutexLock lock(mu_);
  for (DeliveredRelease& delivered : delivered_) replays_.push_back(std::move(delivered.request));
  delivered_.clear();
}

std::vector<ReleaseRequest> ReleaseQueue::TakeReplays() {
  MutexLock lock(mu_);
  return std::exchange(replays_, {});
}

void ReleaseQueue::ReturnReplays(std::vector<ReleaseRequest> replays) {
  MutexLock lock(mu_);
  PrependTo(replays_, std::move(replays));
}

void ReleaseQueue::AddDoubtfulClaim(ReleaseRequest give_back) {
  MutexLock lock(mu_);
  const auto same = [&](const ReleaseRequest& r) { return r.id == give_back.id; };
  if (std::count_if(doubtful_claims_.begin(), doubtful_claims_.end(), same) >=
      kMaxDoubtfulClaimsPerTask) {
    return;
  }
  doubtful_claims_.push_back(std::move(give_back));
}

std::vector<ReleaseRequest> ReleaseQueue::TakeDoubtfulClaims() {
  MutexLock lock(mu_);
  return std::exchange(doubtful_claims_, {});
}

void ReleaseQueue::ReturnDoubtfulClaims(std::vector<ReleaseRequest> claims) {
  MutexLock lock(mu_);
  doubtful_claims_.insert(doubtful_claims_.end(), std::make_move_iterator(claims.begin()),
                          std::make_move_iterator(claims.end()));
}

bool ReleaseQueue::HasWork(bool pending) const {
  MutexLock lock(mu_);
  return (pending && !pending_.empty()) || !replays_.empty() || !doubtful_claims_.empty();
}

bool ReleaseQueue::FirstReportAtRisk(const std::string& run_id) {
  MutexLock lock(mu_);
  if (std::find(reported_at_risk_.begin(), reported_at_risk_.end(), run_id) !=
      reported_at_risk_.end()) {
    return false;
  }
  if (reported_at_risk_.size() >= kMaxReportedAtRisk) reported_at_risk_.pop_front();
  reported_at_risk_.push_back(run_id);
  return true;
}

std::vector<std::vector<ReleaseRequest>> ReleaseQueue::BatchesNamingEachTaskOnce(
    std::vector<ReleaseRequest> requests) {
  std::vector<std::vector<ReleaseRequest>> batches;
  std::set<std::string, std::less<>> ids;
  for (ReleaseRequest& request : requests) {
    if (batches.empty() || !ids.insert(request.id).second) {
      batches.emplace_back();
      ids = {request.id};
    }
    batches.back().push_back(std::move(request));
  }
  return batches;
}

std::vector<ReleaseRequest> ReleaseQueue::Unsent(std::vector<std::vector<ReleaseRequest>> batches,
                                                 std::size_t from) {
  std::vector<ReleaseRequest> unsent;
  for (std::size_t i = from; i < batches.size(); ++i) {
    unsent.insert(unsent.end(), std::make_move_iterator(batches[i].begin()),
                  std::make_move_iterator(batches[i].end()));
  }
  return unsent;
}

}  // namespace stagehand::engine_internal
