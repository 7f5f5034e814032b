// The release round trips of an engine's global runs (TaskEngine): the finished runs' releases,
// sent together in one ReleaseMany; the releases written again after a server change, in case the
// new server lacks them; and the claims whose answer was lost, given back. It drives the engine's
// ReleaseQueue, and asks the planner what follows each run (PlanGlobalRunEnd). What each answer
// means is the Planner's (JudgeRelease, OnFailedWrite); the engine hears of the outcomes through
// ReleaseEngine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine_reporter.h"
#include "engine/planner.h"
#include "engine/planner_access.h"
#include "engine/release_queue.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand::engine_internal {

// The engine's side of its releases. The Releaser calls it on its own thread, holding no lock.
class ReleaseEngine : public PlannerAccess {
 public:
  // The runs of `ended` were released: the planner finishes them, and their ends are reported.
  virtual void RunsReleased(std::span<PendingRelease> ended) = 0;
  // The runs of `ended` have ended, whenever their releases get through: reports the ends not
  // reported yet.
  virtual void RunsEnded(std::span<PendingRelease> ended) = 0;
};

// Who the releaser is: its store, clock and reports, and this host as the run history names it.
struct ReleaserContext {
  TaskStore* store = nullptr;  // null without a store: then no release is ever queued
  Clock* clock = nullptr;
  const EngineReporter* reporter = nullptr;
  std::chrono::milliseconds replay_window{0};
  bool record_history = false;  // releases carry their run's history
  std::string host;
  std::int64_t pid = 0;
};

// Returns the trace id the run history keeps: only a sampled trace's, whose spans a collector has.
std::optional<std::string> HistoryTraceId(const TraceContext& trace);
// Returns the history's account of where run `run` came from, on `host` (process `pid`).
RunOrigin OriginOf(const PlannedRun& run, const std::string& host, std::int64_t pid);

// Thread-compatible: the dispatcher calls it (or Shutdown once the dispatcher has stopped), except
// Push, ReportAtRisk, GiveBackLater and HasWork, which any thread may call.
class Releaser {
 public:
  Releaser(ReleaseEngine& engine, ReleaserContext context);

  // Decides what follows the global run `ended` (Planner::PlanGlobalRunEnd: a retry, skipped
  // slots, a slot given back at shutdown), after reading the attempt its predecessor recorded in
  // the row when a retry depends on it; `started`: whether its function was called. Runs on the
  // run's thread, and again on the dispatcher's when the row could not be read
  // (ended.end_undecided); returns false then.
  bool PlanGlobalRunEnd(PendingRelease& ended, bool started);
  // Queues the release of a finished run (any thread); the dispatcher sends it.
  void Push(PendingRelease release) { queue_.Push(std::move(release)); }
  // Queues the give-back of a claim whose answer was lost (GiveBackDoubtfulClaims sends it).
  void GiveBackLater(ReleaseRequest give_back) { queue_.AddDoubtfulClaim(std::move(give_back)); }
  // Whether writes wait to be sent again (replays, give-backs) and, with `pending`, releases.
  bool HasWork(bool pending) const { return queue_.HasWork(pending); }

  // One dispatcher step's releases: after a server change (`replay`) every release delivered
  // within the replay window is sent again; then the replays, the give-backs and the queued
  // releases go out. Returns whether nothing is left to send.
  bool Release(bool replay);
  // While the database backs off: the runs queued meanwhile are reported ended, and stay queued.
  // Returns whether nothing is left to send.
  bool ReportWhileBackingOff();

  // Releases every queued run in one ReleaseMany. A batch the database did not answer stays
  // queued, in order, to be sent again once the backoff allows. Returns whether nothing is left.
  bool ReleasePending();
  // Sends every release delivered within the replay window again; one the new server lacked is
  // written there (OnWriteReplayed), one it lacked whose row another host has changed since is a
  // run at risk (OnRunAtRisk). Kept for the next step when the database does not answer; dropped,
  // with their runs at risk, when it refuses them.
  void ReplayReleases();
  // Releases the rows that claims without an answer took (ticket-guarded: a claim that was not
  // committed changes nothing), due again at once, so that the slot, trigger or retry they were
  // claimed for runs; kept for the next step when the database does not answer.
  void GiveBackDoubtfulClaims();
  // Logs and reports that run `run_id` of `task_id` is at risk (see OnRunAtRisk), once per run
  // (its renewal and its release may both find its claim gone). Any thread.
  void ReportAtRisk(const std::string& task_id, const std::string& run_id,
                    std::optional<WallTime> slot, const std::string& why);
  // Shutdown, once the dispatcher has stopped: sends the queued releases, and with
  // `flush_history` the queued history records, again after the backoff for up to `patience`
  // (the claims lapse then anyway); then logs the releases still queued as undelivered and drops
  // them. Returns how many there were.
  int DeliverBeforeExit(const std::function<bool()>& flush_history,
                        std::chrono::milliseconds patience);

 private:
  // Sends `batch`; returns it when the database did not answer (to be queued again), else
  // finishes its runs and returns nothing.
  std::vector<PendingRelease> ReleaseBatch(std::vector<PendingRelease> batch);
  // The ReleaseRequest of a finished run (retried from its second attempt).
  ReleaseRequest RequestOf(const PendingRelease& ended) const;
  // Reports what the new server made of one replayed batch.
  void ApplyReplayedReleases(const std::vector<ReleaseRequest>& batch,
                             const std::vector<ReleaseResult>& replayed);
  void DatabaseFailed();
  int DropPending();

  ReleaseEngine& engine_;
  ReleaserContext context_;
  Clock& clock_;
  const EngineReporter& reporter_;
  Logger& logger_;
  ReleaseQueue queue_;
};

}  // namespace stagehand::engine_internal
