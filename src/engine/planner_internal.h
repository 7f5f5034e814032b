// What the planner's files (planner.cc, planner_dispatch.cc, planner_runs.cc) share: time
// conversions and small edits of its runs and tasks. Only for those files.
#pragma once

#include <chrono>

#include "engine/planner.h"

namespace stagehand::engine_internal {

// Converts a database instant to this process's monotonic clock, given the database's clock
// `db_now` as observed at monotonic time `mono_ref`.
inline MonoTime MonoFromDb(WallTime instant, WallTime db_now, MonoTime mono_ref) {
  const auto delta = std::chrono::duration_cast<std::chrono::nanoseconds>(instant - db_now);
  constexpr auto kFar = std::chrono::hours(24 * 365 * 10);
  if (delta > kFar) return kMonoInfinity;
  if (delta < -kFar) return mono_ref - kFar;
  return mono_ref + delta;
}

// Backstage's registration writes a cron task's next start one second before its slot (§4.3), so
// that every-second crons are due at once. A run started then would end before its slot and be
// followed by the slot's own run. Returns the slot for such a time, so that a run never starts
// before the slot it is for; otherwise returns `next`. `cron` may be null (not a cron cadence).
// A jittered row (`offset`, ADR 0014) is tested on its unjittered time.
inline WallTime SlotStart(const CronExpression* cron, const TimeZone& zone, WallTime next,
                          std::chrono::milliseconds offset) {
  const WallTime unjittered = next - offset;
  if (cron == nullptr ||
      unjittered.time_since_epoch() % std::chrono::seconds(1) != std::chrono::nanoseconds(0))
    return next;
  const WallTime slot = unjittered + std::chrono::seconds(1);
  if (cron->Matches(unjittered, zone) || !cron->Matches(slot, zone)) return next;
  return slot + offset;
}

// Names why `run` is asked to stop, unless a reason was given before (the first wins).
inline void MarkStopping(PlannedRun& run, StopReason reason) {
  if (run.reason == StopReason::kNone) run.reason = reason;
}

// Gives `task` the definition of its successor. The id and the caller's stop token stay: the shell
// reads the id outside its lock, and watches the token the task was registered with.
inline void AdoptSuccessor(PlannedTask& task) {
  PlannedTask& next = *task.successor;
  task.def.schedule = std::move(next.def.schedule);
  task.def.timeout = next.def.timeout;
  task.def.initial_delay = next.def.initial_delay;
  task.def.has_initial_delay = next.def.has_initial_delay;
  task.def.fn = std::move(next.def.fn);
  task.known_settings.reset();
  task.successor.reset();
}

}  // namespace stagehand::engine_internal
