// The writes that end global runs, between a run's end and the database's answer: the finished
// runs waiting for their release, the releases delivered within the replay window (sent again
// after a server change, in case the new server lacks them), the claims whose answer was lost
// (given back once the database answers), and the runs already reported at risk. Any thread may
// call it; the dispatcher takes the work and sends it (TaskEngine). Thread-safe; no I/O.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "engine/planner.h"
#include "stagehand/base/mutex.h"
#include "stagehand/engine/observer.h"
#include "stagehand/store/task_store.h"

namespace stagehand::engine_internal {

// A finished global run waiting for its release.
struct PendingRelease {
  TaskPtr task;
  RunPtr run;
  RunInfo info;
  std::chrono::nanoseconds duration{0};
  std::optional<std::string> error;
  RunFinish finish;
  // The release's next start is now + this: a retry, or a duration slot after a skipped one.
  std::optional<std::chrono::milliseconds> next_in;
  // The row after the release, when the store reported it: the task then waits for that next
  // start without polling.
  std::optional<std::int64_t> row_version;
  std::optional<WallTime> row_next;
  MonoTime row_wake_at = kMonoInfinity;
  // Attempts so far; from the second on the release is sent as retried (an earlier answer may
  // have been lost after it was written).
  int attempts = 0;
  // What follows the run (Planner::PlanGlobalRunEnd) waits for the row, which could not be read:
  // it is decided again before the release is sent. `started`: whether the function was called.
  bool end_undecided = false;
  bool started = true;
  // Whether this host still held the claim as far as it knew when the function returned.
  bool held = true;
  // Whether the run's end was reported (TaskEngine::ReportGlobalRunEnds).
  bool reported = false;
};

class ReleaseQueue {
 public:
  // `replay_window`: how long a delivered release is kept to be sent again (EngineOptions).
  explicit ReleaseQueue(std::chrono::milliseconds replay_window) : replay_window_(replay_window) {}

  // Finished runs waiting for their release, oldest first.
  void Push(PendingRelease release);
  std::vector<PendingRelease> TakePending();
  // Puts back runs whose release the database did not take: before those queued meanwhile.
  void ReturnPending(std::vector<PendingRelease> releases);

  // Keeps `requests` (delivered at `now`) for the replay window, as retried and with their output
  // cut to kReplayOutputBytes, and forgets what is older or beyond kMaxDelivered.
  void RememberDelivered(std::vector<ReleaseRequest> requests, MonoTime now);
  // After a server change: every release delivered within the window is to be sent again.
  void ReplayDelivered();
  // The releases to send again, in the order they were first made; those the database did not
  // answer are put back in front, in order.
  std::vector<ReleaseRequest> TakeReplays();
  void ReturnReplays(std::vector<ReleaseRequest> replays);

  // A claim whose answer never came (the database may have committed it): its row is to be given
  // back, due again at once. At most kMaxDoubtfulClaimsPerTask per task: the first ones of an
  // outage (later ones fail to connect).
  void AddDoubtfulClaim(ReleaseRequest give_back);
  std::vector<ReleaseRequest> TakeDoubtfulClaims();
  void ReturnDoubtfulClaims(std::vector<ReleaseRequest> claims);

  // Whether releases wait to be sent again (replays, doubtful claims) and, with `pending`, also
  // finished runs.
  bool HasWork(bool pending) const;

  // Whether run `run_id` is reported at risk now: true the first time (its renewal and its release
  // may both find its claim gone); the last kMaxReportedAtRisk runs are remembered.
  bool FirstReportAtRisk(const std::string& run_id);

  // Splits `requests` into batches that name each task once (ReleaseMany's contract), in order.
  static std::vector<std::vector<ReleaseRequest>> BatchesNamingEachTaskOnce(
      std::vector<ReleaseRequest> requests);

  // The requests of batches[from..], in order: the ones a failed step did not send.
  static std::vector<ReleaseRequest> Unsent(std::vector<std::vector<ReleaseRequest>> batches,
                                            std::size_t from);

  static constexpr std::size_t kMaxDelivered = 4096;
  static constexpr std::size_t kReplayOutputBytes = 1024;
  static constexpr std::ptrdiff_t kMaxDoubtfulClaimsPerTask = 4;
  static constexpr std::size_t kMaxReportedAtRisk = 256;

 private:
  struct DeliveredRelease {
    ReleaseRequest request;
    MonoTime delivered_at{};
  };

  const std::chrono::milliseconds replay_window_;
  mutable Mutex mu_;
  std::vector<PendingRelease> pending_ STAGEHAND_GUARDED_BY(mu_);
  std::deque<DeliveredRelease> delivered_ STAGEHAND_GUARDED_BY(mu_);
  std::vector<ReleaseRequest> replays_ STAGEHAND_GUARDED_BY(mu_);
  std::vector<ReleaseRequest> doubtful_claims_ STAGEHAND_GUARDED_BY(mu_);
  std::deque<std::string> reported_at_risk_ STAGEHAND_GUARDED_BY(mu_);
};

}  // namespace stagehand::engine_internal
