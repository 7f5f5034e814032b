// The planner's run ends and timer steps: releases, retries, local runs, timeouts and fences
// (planner.h).
#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "engine/planner.h"
#include "engine/planner_internal.h"
#include "stagehand/base/uuid.h"
#include "stagehand/model/run_error.h"
#include "stagehand/time/duration.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::engine_internal {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using Phase = PlannedTask::Phase;

// ---------------------------------------------------------------------------------------------
// Run ends.

Planner::StartVerdict Planner::StartRun(const PlannedTask& task, PlannedRun& run, MonoTime now) {
  StartVerdict verdict = StartVerdict::kStart;
  if (!run.ticket.empty() && (!run.ours || now >= run.fence_at)) {
    verdict = StartVerdict::kClaimAtRisk;
    if (run.reason == StopReason::kNone) run.reason = StopReason::kLeaseLost;
  } else if (run.reason == StopReason::kShutdown) {
    verdict = StartVerdict::kShuttingDown;
  }
  if (!run.timeout_signalled) run.timeout_at = now + task.def.timeout;
  return verdict;
}

bool Planner::RetryNeedsRecordedAttempt(const PlannedTask& task, const PlannedRun& run,
                                        bool failed) const {
  return failed && RetryAfter(task.def.retry, run.reason, 1, 0).has_value();
}

Planner::GlobalRunEnd Planner::PlanGlobalRunEnd(PlannedTask& task, const PlannedRun& run,
                                                bool started, std::optional<std::string> error,
                                                int recorded_attempt, WallTime wall_now) {
  GlobalRunEnd end;
  end.error = std::move(error);
  if (!started && run.reason == StopReason::kShutdown) {
    // The slot it was claimed for is still to run: due at once, for another host to take.
    end.next_in = milliseconds::zero();
    return end;
  }
  if (RetryNeedsRecordedAttempt(task, run, end.error.has_value())) {
    const int attempt = recorded_attempt + 1;
    if (const std::optional<milliseconds> delay =
            RetryAfter(task.def.retry, run.reason, attempt, std::hash<std::string>{}(run.run_id))) {
      end.next_in = delay;
      end.error = RunError::Retried(std::move(*end.error), attempt).Encode();
      end.retried_attempt = attempt;
      task.retry_attempt = attempt + 1;
      return end;
    }
  }
  // A duration task whose run outlasted its next slot by more than its catch-up window skips the
  // slots it missed: the release waits for the first point of the slot grid after now (ADR 0014).
  const TaskSettingsV2& settings = run.schedule.settings;
  if (!task.def.catchup_window || !run.slot || !settings.cadence.is_duration()) return end;
  const milliseconds step = settings.cadence.period();
  if (step <= milliseconds::zero()) return end;
  const WallTime next_slot = *run.slot + step;
  if (!SlotMissed(task.def.catchup_window, wall_now - next_slot)) return end;
  const WallTime next = FirstSlotAfter(*run.slot, step, wall_now);
  end.next_in = std::chrono::ceil<milliseconds>(next - wall_now);
  end.skipped = GlobalRunEnd::Skipped{next_slot, wall_now - next_slot, next};
  return end;
}

bool Planner::GlobalRunReturned(PlannedRun& run) {
  return std::exchange(run.ours, false);  // no more renewals: the release ends the claim
}

void Planner::ReleasesSent(const std::vector<TaskPtr>& tasks) {
  if (!options_.store_notifies) return;
  for (const TaskPtr& task : tasks) ++task->release_echoes;
}

void Planner::ReleaseEchoCleared(PlannedTask& task) {
  if (options_.store_notifies) task.release_echoes = 0;
}

MonoTime Planner::ApplyRelease(PlannedTask& task, const PlannedRun& run, nanoseconds duration,
                               const ReleaseResult& result, MonoTime mono_ref) {
  task.short_runs = duration < kShortRun;
  if (!result.released) {
    ReleaseEchoCleared(task);  // nothing (known) was written
    return kMonoInfinity;
  }
  if (!result.version || !result.next_run_start_at) return kMonoInfinity;
  return ReleasedRowWake(task, run, *result.next_run_start_at, result.db_now, mono_ref);
}

MonoTime Planner::ReleasedRowWake(const PlannedTask& task, const PlannedRun& run, WallTime next,
                                  WallTime db_now, MonoTime mono_ref) const {
  const Cadence& own = task.def.schedule.settings.cadence;
  const bool own_cadence = run.schedule.settings.cadence == own;
  return MonoFromDb(SlotStart(own_cadence ? own.cron() : nullptr, task.def.schedule.zone, next,
                              task.def.schedule.jitter_offset),
                    db_now, mono_ref);
}

bool Planner::FinishGlobalRun(PlannedTask& task, const RunPtr& run,
                              std::optional<std::int64_t> row_version,
                              std::optional<WallTime> row_next, MonoTime row_wake_at) {
  RunEnded();
  if (task.run == run) task.run.reset();
  if (task.phase != Phase::kRunning) return false;
  const bool finished = task.recurrence_stopped;
  task.phase = finished ? Phase::kFinished : Phase::kWaiting;
  if (task.successor) AdoptSuccessor(task);
  task.retry_due = task.retry_attempt > 1 ? row_next : std::nullopt;
  if (!task.retry_due) task.retry_attempt = 0;
  if (row_version) {
    task.known_version = row_version;
    task.known_next = row_next;
    task.wake_at = row_wake_at;
  } else {
    task.known_version.reset();
    task.poll_requested = true;
  }
  return finished;
}

Planner::LocalRunEnd Planner::FinishLocalRun(PlannedTask& task, const RunPtr& run,
                                             const std::optional<std::string>& error, MonoTime now,
                                             WallTime wall_now) {
  RunEnded();
  task.run.reset();
  const bool finished = task.recurrence_stopped;
  const std::optional<milliseconds> next_in =
      error ? RetryAfter(task.def.retry, run->reason, run->attempt,
                         std::hash<std::string>{}(run->run_id))
            : std::nullopt;
  TaskState state;
  state.last_run_ended_at = FormatRestTime(wall_now, kRestUtc);
  state.last_run_error = error;
  if (finished) {
    task.phase = Phase::kFinished;
  } else {
    if (task.successor) AdoptSuccessor(task);
    task.phase = Phase::kWaiting;
    task.wake_at = LocalNextWake(task, run->started, now, wall_now);
    task.retry_attempt = 0;
    if (next_in) {
      task.wake_at = now + *next_in;
      task.retry_attempt = run->attempt + 1;
    }
    if (task.wake_at != kMonoInfinity) {
      state.starts_at =
          FormatRestTime(wall_now + (std::max(task.wake_at, now) - now), &options_.default_zone);
    }
  }
  task.local->state = std::move(state);
  return LocalRunEnd{finished, finished ? std::nullopt : next_in};
}

// ---------------------------------------------------------------------------------------------
// Timer: local runs, timeouts and fences.

MonoTime Planner::LocalNextWake(const PlannedTask& task, MonoTime run_started, MonoTime now,
                                WallTime wall_now) const {
  const milliseconds offset = task.def.schedule.jitter_offset;
  const Cadence& cadence = task.def.schedule.settings.cadence;
  if (cadence.is_duration()) {
    const MonoTime slot = run_started + cadence.period();
    // With a catch-up window a missed slot is kept, for the timer to run or skip it.
    if (task.def.catchup_window && slot < now) return slot;
    return std::max(now + offset, slot);
  }
  if (const CronExpression* cron = cadence.cron()) {
    Result<WallTime> next = cron->NextAfter(wall_now - offset, task.def.schedule.zone);
    if (!next.ok()) return kMonoInfinity;
    return now + (*next + offset - wall_now);
  }
  return kMonoInfinity;
}

std::optional<Planner::TimerActions::Skipped> Planner::SkipLocalSlot(const TaskPtr& task,
                                                                     MonoTime now,
                                                                     WallTime wall_now) {
  const nanoseconds late = now - task->wake_at;
  if (task->manual_pending || !SlotMissed(task->def.catchup_window, late)) return std::nullopt;
  const WallTime slot = wall_now - std::chrono::duration_cast<WallTime::duration>(late);
  const Cadence& cadence = task->def.schedule.settings.cadence;
  if (cadence.is_duration() && cadence.period().count() > 0) {
    // The first point of the slot's grid after now: the task keeps its phase.
    const nanoseconds step = cadence.period();
    task->wake_at += (late / step + 1) * step;
  } else {
    task->wake_at = LocalNextWake(*task, now, now, wall_now);
  }
  return TimerActions::Skipped{task, slot, late, wall_now + (task->wake_at - now)};
}

MonoTime Planner::TimerStep(MonoTime now, WallTime wall_now, TimerActions* actions,
                            bool* kick_dispatcher) {
  MonoTime next = kMonoInfinity;
  for (const auto& [id, task_ptr] : tasks_) {
    PlannedTask& task = *task_ptr;
    const bool local = !task.global();
    if (task.phase == Phase::kInitialWait) {
      if (task.wake_at <= now) {
        task.phase = Phase::kWaiting;
        if (local) {
          const bool manual = task.def.schedule.settings.cadence.is_manual();
          task.wake_at = manual ? kMonoInfinity : now + task.def.schedule.jitter_offset;
        } else {
          task.poll_requested = true;
          *kick_dispatcher = true;
        }
      } else {
        next = std::min(next, task.wake_at);
      }
    }
    if (local && task.phase == Phase::kWaiting && !shutting_down_) {
      if (task.wake_at <= now) {
        if (std::optional<TimerActions::Skipped> skipped = SkipLocalSlot(task_ptr, now, wall_now)) {
          actions->skipped.push_back(*std::move(skipped));
        }
      }
      if (task.wake_at > now) {
        next = std::min(next, task.wake_at);
      } else if (TakeSlot()) {
        auto run = std::make_shared<PlannedRun>();
        run->schedule = task.def.schedule;
        run->started = now;
        run->timeout_at = now + task.def.timeout;
        run->lag = now - task.wake_at;
        run->trigger = task.manual_pending ? RunTrigger::kManual : RunTrigger::kSchedule;
        if (!task.manual_pending) run->slot = wall_now - run->lag;
        if (!task.manual_pending && task.retry_attempt > 1) {
          run->trigger = RunTrigger::kRetry;
          run->attempt = task.retry_attempt;
          run->slot.reset();
        }
        if (run->trigger == RunTrigger::kManual) {
          run->caller = TriggerCaller(task, now);
          task.trigger_caller = TraceContext{};
        }
        task.manual_pending = false;
        task.retry_attempt = 0;
        if (options_.report_runs)
          run->report = std::make_shared<RunReport>(options_.max_output_bytes);
        task.run = run;
        task.phase = Phase::kRunning;
        TaskState state;
        state.status = TaskState::Status::kRunning;
        state.started_at = FormatRestTime(wall_now, kRestUtc);
        state.times_out_at = FormatRestTime(wall_now + task.def.timeout, kRestUtc);
        state.last_run_ended_at = task.local->state.last_run_ended_at;
        state.last_run_error = task.local->state.last_run_error;
        task.local->state = std::move(state);
        run->trace = NewRunTrace(options_.engine.trace_runs, run->caller);
        run->run_id = NewUuidV4();
        actions->to_start.push_back({task_ptr, std::move(run)});
      }
    }
    if (!task.run) continue;
    PlannedRun& run = *task.run;
    if (!run.timeout_signalled) {
      if (run.timeout_at <= now) {
        run.timeout_signalled = true;
        run.overdue_at = now + options_.engine.lease;
        next = std::min(next, run.overdue_at);
        MarkStopping(run, StopReason::kTimeout);
        actions->to_stop.push_back(task.run);
      } else {
        next = std::min(next, run.timeout_at);
      }
    } else if (run.overdue_at <= now) {
      run.overdue_at = kMonoInfinity;
      actions->overdue.push_back({task_ptr, task.run});
    } else {
      next = std::min(next, run.overdue_at);
    }
    if (!local && run.ours) {
      // Renewals kept failing: ask the run to stop, and kill it before the claim lapses. Its
      // lease is still renewed if the database comes back in between.
      if (run.fence_at <= now && !run.fenced) {
        run.fenced = true;
        MarkStopping(run, StopReason::kLeaseLost);
        actions->to_stop.push_back(task.run);
        actions->fenced.push_back({task_ptr, task.run});
      }
      if (run.kill_at <= now) {
        run.ours = false;
        actions->to_kill.push_back(task.run);
      } else {
        next = std::min(next, run.fenced ? run.kill_at : run.fence_at);
      }
    }
  }
  return next;
}

}  // namespace stagehand::engine_internal
