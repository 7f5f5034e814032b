// Shared by every TaskStore: how next_run_start_at is computed for registration and release
// (Backstage §4.3 and §4.5), as a small plan each dialect turns into SQL with bound parameters,
// and the estimate of the database's clock used for cron next-times.
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stagehand/base/mutex.h"
#include "stagehand/base/status.h"
#include "stagehand/store/task_store.h"

namespace stagehand::store_internal {

// One way to compute next_run_start_at inside a statement.
struct NextRunPlan {
  enum class Kind {
    kNull,                  // NULL (manual tasks)
    kNow,                   // the database's now()
    kNowPlus,               // now() + `seconds`
    kInstant,               // the fixed instant `instant` (cron times)
    kScheduledPlusCadence,  // greatest(next_run_start_at + `seconds`, now()) (duration release)
  };
  Kind kind = Kind::kNull;
  double seconds = 0;  // kNowPlus, kScheduledPlusCadence; casual conversion, may be fractional
  WallTime instant{};  // kInstant

  friend bool operator==(const NextRunPlan&, const NextRunPlan&) = default;
};

// The start of a newly inserted row: now + initial delay if one is set (any cadence, even manual);
// else cron: the next fire time after `db_now`; manual: NULL; duration: now. Every scheduled
// time here and below is shifted by the schedule's jitter_offset (a cron fire time: the next
// fire after db_now - offset, plus offset), except a release's greatest(scheduled + cadence,
// now), whose scheduled time already carries it. (Backstage writes the
// fire time - 1 s, which let a run start before its slot and the slot run again after it; a row so
// written is started at its slot by the engine.)
// Errors: kInvalidArgument if the cadence or a duration does not parse.
Result<NextRunPlan> PlanInsertStart(const TaskSchedule& schedule, WallTime db_now);

// The candidate next start for an existing row on re-registration (kept only if earlier than the
// row's own): cron: the next fire time after `db_now`; manual: NULL; duration: now + cadence.
Result<NextRunPlan> PlanReregisterStart(const TaskSchedule& schedule, WallTime db_now);

// The next start written when a run ends or is cancelled: cron: next fire after `db_now`;
// manual: NULL; duration: greatest(scheduled + cadence, now).
Result<NextRunPlan> PlanReleaseNext(const TaskSchedule& schedule, WallTime db_now);

// The next start written when the engine skips the missed slot `slot` (a catch-up window, ADR
// 0014): cron: the next (jittered) fire after `db_now`; manual: NULL; duration: the first point
// of the grid slot + k * cadence after `db_now`, so the task keeps its phase. Always an instant.
Result<NextRunPlan> PlanSkipNext(const TaskSchedule& schedule, WallTime slot, WallTime db_now);

// The next start written by `release`: now + its next_in when set, else PlanReleaseNext.
Result<NextRunPlan> PlanRelease(const ReleaseRequest& release, WallTime db_now);

// A validated registration of a batch, with both of its plans.
struct PlannedUpsert {
  NextRunPlan insert;      // PlanInsertStart
  NextRunPlan reregister;  // PlanReregisterStart
  std::string settings_json;
};

// Validates and plans every registration of a batch (tasks with equal settings and zone are planned
// once). Errors: kInvalidArgument naming the task, when its settings are invalid or its id appears
// twice in the batch.
Result<std::vector<PlannedUpsert>> PlanUpserts(std::span<const TaskUpsert> tasks, WallTime db_now);

// Returns the casual length of an ISO duration in seconds (0 for an empty string).
// Errors: kInvalidArgument naming the text.
Result<double> IsoDurationSeconds(const std::string& iso);

// Tracks the offset between the database's clock and this host's wall clock, so cron next-times
// follow the database's clock even on a host whose clock is skewed. Thread-safe.
class DatabaseClock {
 public:
  explicit DatabaseClock(const Clock& clock) : clock_(clock) {}

  // Records that a statement sent at local wall time `sent` and answered at `received` saw the
  // database clock at `db_now`.
  void Observe(WallTime sent, WallTime received, WallTime db_now);
  // Returns the estimated database time now (the host clock until the first observation).
  WallTime Now() const;
  // Returns the host's wall clock.
  WallTime LocalNow() const { return clock_.Now(); }

 private:
  const Clock& clock_;
  mutable Mutex mu_;
  std::optional<std::chrono::microseconds> offset_ STAGEHAND_GUARDED_BY(mu_);
};

}  // namespace stagehand::store_internal
