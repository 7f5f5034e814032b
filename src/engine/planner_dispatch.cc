// The planner's dispatcher steps: polls, claims, renewals and store events (planner.h).
#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "engine/planner.h"
#include "engine/planner_internal.h"
#include "stagehand/time/duration.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::engine_internal {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using Phase = PlannedTask::Phase;

// ---------------------------------------------------------------------------------------------
// Dispatcher.

bool Planner::CanClaim() {
  return !shutting_down_ && options_.has_store && slots_taken_ < options_.engine.max_concurrency &&
         slots_.Available();
}

bool Planner::TakeSlot() {
  if (slots_taken_ >= options_.engine.max_concurrency || !slots_.TryTake()) return false;
  ++slots_taken_;
  return true;
}

void Planner::ReturnSlot() {
  --slots_taken_;
  slots_.Return();
}

void Planner::RunEnded() { --slots_taken_; }

bool Planner::DispatcherHasWork(MonoTime now) {
  if (!CanClaim() || BackingOff(now)) return false;
  bool any_waiting = false;
  for (const auto& [id, task] : tasks_) {
    if (!task->global() || task->phase != Phase::kWaiting) continue;
    any_waiting = true;
    if (task->poll_requested || task->wake_at <= now || task->poll_at <= now) return true;
  }
  return any_waiting &&
         (now >= next_safety_poll_ || (now >= next_sweep_ && now >= no_sweep_before_));
}

MonoTime Planner::NextDispatcherWake() {
  MonoTime next = kMonoInfinity;
  const bool can_claim = CanClaim();
  bool any_waiting = false;
  for (const auto& [id, task] : tasks_) {
    if (!task->global()) continue;
    if (task->run && task->run->ours && !task->run->ticket.empty()) {
      next = std::min({next, task->run->renew_at, task->run->record_start_at});
    }
    if (can_claim && task->phase == Phase::kWaiting) {
      any_waiting = true;
      next = std::min({next, task->wake_at, task->poll_at});
    }
  }
  if (any_waiting) {
    next = std::min({next, next_safety_poll_, std::max(next_sweep_, no_sweep_before_),
                     next_registration_refresh_});
  }
  if (reregister_due_) next = MonoTime{};
  return db_failures_ > 0 ? std::max(next, db_retry_at_) : next;
}

MonoTime Planner::DatabaseFailed(MonoTime now) {
  // Several calls of one step fail together: the step counts once.
  if (BackingOff(now)) return db_retry_at_;
  const milliseconds longest = std::max(
      kFirstRetryBackoff, std::min(options_.engine.retry_backoff,
                                   std::chrono::ceil<milliseconds>(options_.engine.lease / 10)));
  const milliseconds wait =
      std::min<milliseconds>(longest, kFirstRetryBackoff * (1LL << std::min(db_failures_, 20)));
  const milliseconds half = std::max(wait / 2, milliseconds(1));
  if (db_failures_ == 0) db_failing_since_ = now;
  const std::uint64_t draw = std::hash<std::uint64_t>{}(
      static_cast<std::uint64_t>(options_.claim_order_salt) ^
      (static_cast<std::uint64_t>(db_failures_) * std::uint64_t{0x9e3779b97f4a7c15}));
  ++db_failures_;
  db_retry_at_ =
      now + half +
      milliseconds(static_cast<long long>(draw % static_cast<std::uint64_t>(half.count())));
  return db_retry_at_;
}

void Planner::DatabaseAnswered(MonoTime now) {
  if (db_failures_ == 0) return;
  db_failures_ = 0;
  // The database was away: each claim is confirmed again now, before this host says it is ready.
  RequireConfirmation(now);
}

bool Planner::RequireConfirmation(MonoTime now) {
  bool any = false;
  for (const auto& [id, task] : tasks_) {
    const RunPtr& run = task->run;
    if (!task->global() || !run || !run->ours || run->ticket.empty()) continue;
    run->unconfirmed = true;
    run->renew_at = std::min(run->renew_at, now);
    any = true;
  }
  return any;
}

DatabaseHealth Planner::WithFailingCalls(DatabaseHealth health) const {
  if (const std::optional<MonoTime> failing = DatabaseFailingSince()) {
    if (health.reachable || *failing < health.unreachable_since) {
      health.unreachable_since = *failing;
    }
    if (health.reachable) health.reason = "its statements fail";
    health.reachable = false;
  }
  return health;
}

Planner::DatabaseReadiness Planner::Readiness(DatabaseHealth store_health, MonoTime now,
                                              milliseconds grace) {
  using State = DatabaseReadiness::State;
  DatabaseReadiness readiness;
  readiness.health = WithFailingCalls(std::move(store_health));
  if (!readiness.health.reachable) {
    readiness.down = now - readiness.health.unreachable_since;
    if (readiness.down > grace && !unready_) {
      unready_ = true;
      confirmation_requested_ = false;
    }
    if (unready_) readiness.state = State::kUnreachable;
    return readiness;
  }
  if (unready_ && ClaimsUnconfirmed()) {
    readiness.state = State::kConfirmingClaims;
    readiness.step_dispatcher = true;
    return readiness;
  }
  if (unready_ && !std::exchange(confirmation_requested_, true) && RequireConfirmation(now)) {
    // The outage was seen by the store alone (no call of this host failed): its claims are
    // confirmed before the host says it is ready again.
    readiness.state = State::kConfirmingClaims;
    readiness.step_dispatcher = true;
    return readiness;
  }
  unready_ = false;
  return readiness;
}

bool Planner::ClaimsUnconfirmed() const {
  for (const auto& [id, task] : tasks_) {
    const RunPtr& run = task->run;
    if (task->global() && run && run->ours && !run->ticket.empty() && run->unconfirmed) {
      return true;
    }
  }
  return false;
}

std::vector<TaskPtr> Planner::TakeReregistration() {
  std::vector<TaskPtr> tasks;
  if (!reregister_due_) return tasks;
  reregister_due_ = false;
  for (const auto& [id, task] : tasks_) {
    if (task->global() && task->phase != Phase::kRegistering && task->phase != Phase::kFinished) {
      tasks.push_back(task);
    }
  }
  return tasks;
}

Planner::DispatchPlan Planner::PlanDispatch(MonoTime now) {
  DispatchPlan plan;
  for (const auto& [id, task] : tasks_) {
    const RunPtr& run = task->run;
    if (!run || !run->ours || run->ticket.empty()) continue;
    if (run->renew_at <= now) {
      run->renew_at = kMonoInfinity;
      plan.renewals.emplace_back(task, run);
    }
    if (run->record_start_at <= now) {
      run->record_start_at = kMonoInfinity;
      plan.start_records.emplace_back(task, run);
    }
  }
  if (BackingOff(now)) {
    // The due renewals and records wait for the backoff too.
    for (const auto& [task, run] : plan.renewals) run->renew_at = db_retry_at_;
    for (const auto& [task, run] : plan.start_records) run->record_start_at = db_retry_at_;
    return DispatchPlan{};
  }
  // Recorded once: a start the claim did not record, for a history write no release carries.
  std::erase_if(plan.start_records, [](const auto& entry) {
    return std::exchange(entry.second->start_recorded, true);
  });
  if (!DispatcherHasWork(now)) return plan;
  plan.poll = true;
  plan.sweep = (now >= next_sweep_ || now >= next_safety_poll_) && now >= no_sweep_before_;
  // A safety round polls everything even while the sweep waits (after a server change).
  plan.full = plan.sweep || now >= next_safety_poll_;
  // A safety or sweep round polls every waiting task. Otherwise only the tasks whose row may have
  // changed unseen are polled (an event, a trigger, a lost claim), and a due task whose row is
  // known is claimed directly: the claim requires the row's version to be the one known.
  for (const auto& [id, task] : tasks_) {
    if (!task->global() || task->phase != Phase::kWaiting) continue;
    const bool unseen = task->poll_requested || task->poll_at <= now ||
                        (task->wake_at <= now && !task->known_version);
    if (plan.full || unseen) {
      plan.poll_ids.push_back(id);
      plan.known_versions.push_back(task->known_version);
      plan.polled_tasks.push_back(task);
      task->poll_requested = false;
      task->poll_at = kMonoInfinity;
    } else if (task->wake_at <= now) {
      const std::optional<WallTime> due =
          task->known_next ? std::optional(RowStart(*task, *task->known_next)) : std::nullopt;
      Candidate& candidate = plan.candidates.emplace_back(
          Candidate{task, *task->known_version, due, task->known_settings});
      candidate.row_next = task->known_next;
      candidate.late = now - task->wake_at;
    }
  }
  plan.poll = !plan.poll_ids.empty();
  return plan;
}

void Planner::SetLeaseDeadlines(PlannedRun& run, MonoTime expires, MonoTime lease_sent) {
  // The claim or renewal was sent at lease_sent, so the database's expiry is no earlier than
  // `expires`. Renew a third of the way in; if renewals keep failing, ask the run to stop a fifth
  // of the span before the expiry and kill it a tenth before, so it is dead when the row lapses.
  const nanoseconds span = expires - lease_sent;
  run.renew_at = lease_sent + span / 3;
  run.fence_at = expires - span / 5;
  run.kill_at = expires - span / 10;
}

milliseconds Planner::RenewalHold(const PlannedTask& task, const PlannedRun& run,
                                  MonoTime sent) const {
  // The store writes min(started + hold, now + lease). Past (or near) its timeout a run that has
  // not returned yet is still stopping: its claim is held, now + lease, until its function returns.
  const milliseconds elapsed = std::chrono::ceil<milliseconds>(sent - run.started);
  return std::max(task.def.timeout, elapsed + options_.engine.lease);
}

Planner::RenewalOutcome Planner::ApplyRenewal(PlannedRun& run, const Result<LeaseStatus>& renewed,
                                              MonoTime sent, MonoTime now) {
  if (!run.ours) return RenewalOutcome::kStale;
  const milliseconds lease = options_.engine.lease;
  if (!renewed.ok()) {
    run.renew_at = DatabaseFailed(now);
    if (run.server_changed) {
      // What the new server holds for this claim is unknown: the run ends now.
      run.fence_at = std::min(run.fence_at, now);
      run.kill_at = std::min(run.kill_at, now);
    }
    return RenewalOutcome::kRetry;
  }
  DatabaseAnswered(now);
  if (*renewed == LeaseStatus::kLost) {
    if (run.server_changed) return RenewalOutcome::kReclaim;
    run.ours = false;
    run.fence_at = kMonoInfinity;
    run.kill_at = kMonoInfinity;
    MarkStopping(run, StopReason::kLeaseLost);
    return RenewalOutcome::kLost;
  }
  SetLeaseDeadlines(run, sent + lease, sent);
  run.fenced = false;
  run.unconfirmed = false;
  run.server_changed = false;
  if (*renewed == LeaseStatus::kCancelRequested && !run.cancel_requested) {
    run.cancel_requested = true;
    MarkStopping(run, StopReason::kCancel);
    return RenewalOutcome::kCancelNoticed;
  }
  return RenewalOutcome::kRenewed;
}

Planner::RenewalOutcome Planner::ApplyReclaim(PlannedRun& run, const Result<bool>& reclaimed,
                                              MonoTime sent, MonoTime now) {
  if (!run.ours) return RenewalOutcome::kStale;
  if (reclaimed.ok() && *reclaimed) {
    DatabaseAnswered(now);
    SetLeaseDeadlines(run, sent + options_.engine.lease, sent);
    run.fenced = false;
    run.unconfirmed = false;
    run.server_changed = false;
    return RenewalOutcome::kRenewed;
  }
  if (!reclaimed.ok()) DatabaseFailed(now);
  run.ours = false;
  run.fence_at = kMonoInfinity;
  run.kill_at = kMonoInfinity;
  MarkStopping(run, StopReason::kLeaseLost);
  return RenewalOutcome::kLost;
}

bool Planner::Unannounced(const PollResult& polled, const DispatchPlan& plan) {
  if (!polled.swept_ids.empty()) return true;
  std::size_t i = 0;
  for (const PollEntry& entry : polled.entries) {
    while (i < plan.poll_ids.size() && plan.poll_ids[i] != entry.id) ++i;
    if (i == plan.poll_ids.size()) return true;
    // A row whose version this host knew (so it was idle) was claimed, changed or removed since.
    const std::optional<std::int64_t>& known = plan.known_versions[i];
    if (known &&
        (entry.readiness == Readiness::kMissing || entry.readiness == Readiness::kInvalidSettings ||
         entry.running || entry.version != *known)) {
      return true;
    }
  }
  return false;
}

void Planner::PollFailed(const DispatchPlan& plan, MonoTime mono_ref) {
  const MonoTime retry_at = DatabaseFailed(mono_ref);
  safety_interval_ = options_.engine.poll_interval;
  next_safety_poll_ = std::max(next_safety_poll_, retry_at);
  for (const TaskPtr& task : plan.polled_tasks) {
    if (task->phase != Phase::kWaiting) continue;
    task->poll_at = std::min(task->poll_at, retry_at);  // still unseen: polled again then
    task->wake_at = std::max(task->wake_at, retry_at);
  }
  if (plan.sweep) next_sweep_ = retry_at;
}

Planner::PollOutcome Planner::ApplyPoll(DispatchPlan& plan, const PollResult& polled,
                                        MonoTime mono_ref) {
  const EngineOptions& engine = options_.engine;
  PollOutcome outcome;
  DatabaseAnswered(mono_ref);
  if (plan.sweep) {
    next_sweep_ =
        engine.janitor_interval.count() > 0 ? mono_ref + engine.janitor_interval : kMonoInfinity;
  }
  if (plan.full) {
    const bool quiet = options_.store_notifies && !Unannounced(polled, plan);
    safety_interval_ = quiet ? std::min(std::max(safety_interval_ * 2, engine.poll_interval),
                                        std::max(engine.max_poll_interval, engine.poll_interval))
                             : engine.poll_interval;
    next_safety_poll_ = mono_ref + safety_interval_;
  }
  // Rows left out of the result are unchanged, idle and not due. A task among them whose wake-up
  // has come (it is computed to be early, never late) waits for its row's next start again.
  for (const TaskPtr& task_ptr : plan.polled_tasks) {
    PlannedTask& task = *task_ptr;
    if (task.phase != Phase::kWaiting || task.wake_at > mono_ref) continue;
    task.wake_at =
        task.known_next
            ? std::max(MonoFromDb(RowStart(task, *task.known_next), polled.db_now, mono_ref),
                       mono_ref + milliseconds(1))
            : kMonoInfinity;
  }
  for (const PollEntry& entry : polled.entries) {
    auto it = tasks_.find(entry.id);
    if (it == tasks_.end() || it->second->phase != Phase::kWaiting) continue;
    PlannedTask& task = *it->second;
    // A row running elsewhere is reported again once idle, whatever its next start then.
    task.known_version = entry.running ? std::nullopt : std::optional(entry.version);
    task.known_next = entry.next_run_start_at;
    if (entry.settings && *entry.settings != task.def.schedule.settings) {
      task.known_settings = entry.settings;
    } else {
      task.known_settings.reset();
    }
    switch (entry.readiness) {
      case Readiness::kMissing:
        task.phase = Phase::kFinished;
        outcome.finished_missing.push_back(entry.id);
        break;
      case Readiness::kInvalidSettings:
        task.phase = Phase::kFinished;
        outcome.finished_invalid.emplace_back(entry.id, entry.settings_error);
        break;
      case Readiness::kReady: {
        const WallTime start = RowStart(task, *entry.next_run_start_at);
        if (start > polled.db_now) {
          task.wake_at = MonoFromDb(start, polled.db_now, mono_ref);  // due at its slot
          break;
        }
        task.wake_at = mono_ref;
        Candidate& candidate = plan.candidates.emplace_back(
            Candidate{it->second, entry.version, start, task.known_settings});
        candidate.row_next = entry.next_run_start_at;
        candidate.late = polled.db_now - start;
        break;
      }
      case Readiness::kNotReady:
        if (entry.running) {
          task.wake_at = kMonoInfinity;
          if (entry.current_run_expires_at) {
            next_sweep_ = std::min(
                next_sweep_, MonoFromDb(*entry.current_run_expires_at, polled.db_now, mono_ref) +
                                 milliseconds(1));
          }
        } else if (entry.next_run_start_at) {
          task.wake_at =
              MonoFromDb(RowStart(task, *entry.next_run_start_at), polled.db_now, mono_ref);
        } else {
          task.wake_at = kMonoInfinity;
        }
        break;
    }
  }
  return outcome;
}

std::vector<Planner::Skip> Planner::TakeMissedSlots(DispatchPlan& plan) {
  std::vector<Skip> skips;
  if (shutting_down_) return skips;
  std::erase_if(plan.candidates, [&](Candidate& candidate) {
    PlannedTask& task = *candidate.task;
    if (task.manual_pending || !candidate.row_next ||
        !SlotMissed(task.def.catchup_window, candidate.late)) {
      return false;
    }
    Skip& skip = skips.emplace_back(Skip{candidate.task, candidate.version, *candidate.row_next,
                                         task.def.schedule, candidate.late});
    if (candidate.settings) skip.schedule.settings = *candidate.settings;
    return true;
  });
  return skips;
}

std::optional<Planner::Candidate> Planner::ApplySkip(const Skip& skip,
                                                     const Result<SkipResult>& result,
                                                     MonoTime mono_ref) {
  PlannedTask& task = *skip.task;
  if (!result.ok() && result.status().code() == StatusCode::kUnimplemented) {
    return Candidate{skip.task, skip.version, RowStart(task, skip.slot), task.known_settings};
  }
  if (!result.ok()) {
    task.wake_at = std::max(task.wake_at, DatabaseFailed(mono_ref));
    return std::nullopt;
  }
  DatabaseAnswered(mono_ref);
  if (!result->skipped) {
    // Claimed, skipped or changed by another host first: a poll tells which.
    task.known_version.reset();
    task.poll_requested = true;
    return std::nullopt;
  }
  task.known_version = result->version;
  task.known_next = result->next_run_start_at;
  task.wake_at = result->next_run_start_at ? MonoFromDb(RowStart(task, *result->next_run_start_at),
                                                        result->db_now, mono_ref)
                                           : kMonoInfinity;
  return std::nullopt;
}

std::vector<Planner::Candidate> Planner::ReserveClaims(
    std::vector<Candidate> candidates, const std::function<std::string()>& new_ticket, MonoTime now,
    std::vector<std::string>* tickets) {
  std::vector<Candidate> reserved;
  tickets->clear();
  if (shutting_down_) return reserved;
  // Earliest due first, by ClaimOrderGrain; within a grain in an order of this host's own, so
  // that hosts sharing a table reach for different rows first (in exact due order, every host
  // would reach for the same oldest rows, and all but one would lose each claim).
  std::vector<std::size_t> order(candidates.size());
  std::vector<std::optional<WallTime>> grains(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    order[i] = i;
    candidates[i].tie =
        std::hash<std::string>{}(candidates[i].task->def.id) ^ options_.claim_order_salt;
    if (candidates[i].due) grains[i] = std::chrono::floor<ClaimOrderGrain>(*candidates[i].due);
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(grains[a], candidates[a].tie) < std::tie(grains[b], candidates[b].tie);
  });
  for (std::size_t i : order) {
    // The others stay due and known: the next round (when a slot frees) claims them.
    if (!TakeSlot()) break;
    PlannedTask& task = *candidates[i].task;
    std::string ticket = new_ticket();
    task.own_claims[task.next_own_claim++ % task.own_claims.size()] =
        std::hash<std::string>{}(ticket);
    const bool retry =
        task.retry_attempt > 1 && task.retry_due && candidates[i].due == task.retry_due;
    // A manual task's row is due only when a trigger made it so, whether or not this host has
    // heard of that trigger yet (another host's, or its notification still on its way).
    const bool manual_cadence = task.def.schedule.settings.cadence.is_manual();
    candidates[i].trigger = task.manual_pending ? RunTrigger::kManual
                            : retry             ? RunTrigger::kRetry
                            : manual_cadence    ? RunTrigger::kManual
                                                : RunTrigger::kSchedule;
    candidates[i].attempt = candidates[i].trigger == RunTrigger::kRetry ? task.retry_attempt : 1;
    candidates[i].record_start = options_.report_runs && !task.short_runs;
    // Chosen before the claim, which records the run's start with its trace id.
    candidates[i].trace = NewRunTrace(
        options_.engine.trace_runs,
        candidates[i].trigger == RunTrigger::kManual ? TriggerCaller(task, now) : TraceContext{});
    tickets->push_back(std::move(ticket));
    reserved.push_back(std::move(candidates[i]));
  }
  return reserved;
}

void Planner::ClaimFailed(const std::vector<Candidate>& reserved, MonoTime now) {
  const MonoTime retry_at = DatabaseFailed(now);
  for (const Candidate& candidate : reserved) {
    ReturnSlot();
    candidate.task->wake_at = std::max(candidate.task->wake_at, retry_at);
  }
}

std::vector<Planner::Started> Planner::ApplyClaims(const std::vector<Candidate>& reserved,
                                                   const std::vector<std::string>& tickets,
                                                   const std::vector<ClaimResult>& results,
                                                   MonoTime sent, std::vector<TaskPtr>* lost) {
  std::vector<Started> started;
  started.reserve(reserved.size());
  DatabaseAnswered(sent);
  for (std::size_t i = 0; i < reserved.size(); ++i) {
    const Candidate& candidate = reserved[i];
    const TaskPtr& task = candidate.task;
    const ClaimResult& claim = results[i];
    if (!claim.claimed) {
      ReturnSlot();
      // Held elsewhere, changed, or not due after all: a poll tells which.
      task->known_version.reset();
      task->poll_requested = true;
      lost->push_back(task);
      continue;
    }
    auto run = std::make_shared<PlannedRun>();
    // A claim that answered after shutdown began: its run is stopping before it starts.
    if (shutting_down_) MarkStopping(*run, StopReason::kShutdown);
    run->ticket = tickets[i];
    run->run_id = tickets[i];
    run->claimed_version = candidate.version;
    run->claimed_at = claim.db_now;
    run->start_recorded = candidate.record_start;
    if (options_.report_runs && !run->start_recorded) run->record_start_at = sent + kShortRun;
    run->trigger = candidate.trigger;
    run->trace = candidate.trace;
    if (candidate.trigger == RunTrigger::kManual) {
      task->manual_pending = false;
      run->caller = TriggerCaller(*task, sent);
      task->trigger_caller = TraceContext{};
    } else if (candidate.trigger == RunTrigger::kRetry) {
      run->attempt = candidate.attempt;
    } else {
      run->slot = candidate.due;
    }
    task->retry_attempt = 0;
    task->retry_due.reset();
    if (options_.report_runs) run->report = std::make_shared<RunReport>(options_.max_output_bytes);
    run->schedule = task->def.schedule;
    if (candidate.settings) run->schedule.settings = *candidate.settings;
    run->started = sent;
    run->timeout_at = sent + task->def.timeout;
    SetLeaseDeadlines(*run, sent + std::min(task->def.timeout, options_.engine.lease), sent);
    if (candidate.due && claim.db_now > *candidate.due) {
      run->lag = std::chrono::duration_cast<nanoseconds>(claim.db_now - *candidate.due);
    }
    task->run = run;
    task->phase = Phase::kRunning;
    started.push_back({task, std::move(run)});
  }
  return started;
}

bool Planner::OnStoreEvent(const StoreEvent& event, MonoTime now,
                           std::optional<MonoTime> parked_deadline) {
  using Kind = StoreEvent::Kind;
  bool kick = false;
  // Whether the dispatcher must step for a new deadline: always while it steps (it may have read
  // the old one), else only when the deadline moved earlier.
  const auto earlier = [&](MonoTime deadline) {
    return !parked_deadline || deadline < *parked_deadline;
  };
  const auto apply = [&](PlannedTask& task) {
    if (!task.global() || task.phase == Phase::kFinished) return;
    if (task.run && task.run->ours &&
        (event.kind == Kind::kCancel || event.kind == Kind::kSweep || event.kind == Kind::kResync ||
         event.kind == Kind::kDelete || event.kind == Kind::kServerChanged)) {
      task.run->renew_at = now;  // verify the ticket now
    }
    if (event.kind == Kind::kServerChanged && task.run && task.run->ours &&
        !task.run->ticket.empty()) {
      task.run->server_changed = true;
      task.run->unconfirmed = true;
    }
    if (event.kind == Kind::kResync || event.kind == Kind::kServerChanged) {
      task.release_echoes = 0;
    }
    if (event.kind == Kind::kTrigger) {
      task.manual_pending = true;
      // Another host's traced trigger: if this host takes the run, it is the caller's child.
      if (event.caller.valid()) {
        task.trigger_caller = event.caller;
        task.trigger_caller_at = now;
      }
    }
    if (event.kind == Kind::kClaim) {
      const std::size_t claim = std::hash<std::string>{}(event.ticket);
      if (std::find(task.own_claims.begin(), task.own_claims.end(), claim) !=
          task.own_claims.end()) {
        return;  // this host's
      }
      if (task.phase != Phase::kWaiting) return;
      // Held elsewhere: its release (or, if its host dies, the sweep) is announced later.
      task.known_version.reset();
      task.wake_at = kMonoInfinity;
      task.poll_at = kMonoInfinity;
      next_sweep_ = std::min(next_sweep_, now + options_.engine.lease + milliseconds(1));
      kick = kick || earlier(next_sweep_);
      return;
    }
    if (event.kind == Kind::kRelease && task.release_echoes > 0) {
      --task.release_echoes;
      return;
    }
    // Outside kWaiting the request waits: the task polls once it waits again.
    if (task.phase == Phase::kWaiting && event.kind == Kind::kRelease &&
        options_.engine.release_poll_delay.count() > 0) {
      task.poll_at = std::min(task.poll_at, now + options_.engine.release_poll_delay);
      kick = kick || earlier(task.poll_at);
    } else {
      task.poll_requested = true;
      kick = true;
    }
  };
  if (event.kind == Kind::kServerChanged) {
    // The new server may lack the last writes: registrations are written again, and no expired
    // run is swept for a lease, so that every host can first confirm (or claim again) what it
    // holds.
    reregister_due_ = true;
    no_sweep_before_ = now + options_.engine.lease;
    kick = true;
  }
  if (event.kind == Kind::kResync || event.kind == Kind::kServerChanged) {
    // The LISTEN session (so the server) is back.
    DatabaseAnswered(now);
    safety_interval_ = options_.engine.poll_interval;
    next_safety_poll_ = std::min(next_safety_poll_, now + safety_interval_);
    for (const auto& [id, task] : tasks_) apply(*task);
  } else if (PlannedTask* task = Find(event.task_id)) {
    apply(*task);
  }
  return kick || (event.kind != Kind::kRelease && event.kind != Kind::kClaim);
}

}  // namespace stagehand::engine_internal
