#include "store/row_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "stagehand/model/task_state.h"
#include "store/run_history_support.h"

namespace stagehand::store_internal {

namespace {

// Times are std::chrono::system_clock nanoseconds, which cover about ±292 years; longer offsets
// (absurd cadences such as P1000Y) are clamped rather than overflowing.
constexpr double kMaxOffsetSeconds = 200.0 * 365 * 24 * 3600;

std::chrono::milliseconds OffsetOf(double seconds) {
  const double clamped = std::clamp(seconds, -kMaxOffsetSeconds, kMaxOffsetSeconds);
  return std::chrono::round<std::chrono::milliseconds>(std::chrono::duration<double>(clamped));
}

// Ends the run holding the row with `held`: the row is free, or paused when a pause waited for
// the run.
void EndRun(TaskRow& row, WallTime now, std::optional<std::string> error_json,
            const std::optional<RowTicket>& held) {
  std::optional<PauseAfterRun> pause;
  if (held) pause = PauseLeftBy(*held, now);
  if (pause) {
    row.current_run_ticket = std::move(pause->ticket);
    row.current_run_started_at = now;
    row.current_run_expires_at =
        pause->until ? std::optional(ToMillis(*pause->until)) : std::nullopt;
  } else {
    ClearTicket(row);
  }
  row.last_run_ended_at = now;
  row.last_run_error_json = std::move(error_json);
}

// Brings the row's expiry forward to at most now + hold.
void HoldExpiry(TaskRow& row, std::chrono::milliseconds hold, WallTime now) {
  row.current_run_expires_at =
      row.current_run_expires_at ? std::min(*row.current_run_expires_at, now + hold) : now + hold;
}

}  // namespace

std::optional<WallTime> EvaluatePlan(const NextRunPlan& plan, WallTime now,
                                     const std::optional<WallTime>& scheduled) {
  switch (plan.kind) {
    case NextRunPlan::Kind::kNull:
      return std::nullopt;
    case NextRunPlan::Kind::kNow:
      return now;
    case NextRunPlan::Kind::kNowPlus:
      return now + OffsetOf(plan.seconds);
    case NextRunPlan::Kind::kInstant:
      return WallTime(std::chrono::floor<std::chrono::milliseconds>(plan.instant));
    case NextRunPlan::Kind::kScheduledPlusCadence:
      if (!scheduled) return now;
      return std::max(*scheduled + OffsetOf(plan.seconds), now);
  }
  return std::nullopt;
}

std::int64_t RowVersion(const TaskRow& row) {
  std::uint64_t hash = 14695981039346656037ULL;
  const std::uint64_t seed =
      row.next_run_start_at
          ? static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                           row.next_run_start_at->time_since_epoch())
                                           .count())
          : 0x8000000000000000ULL;
  for (int byte = 0; byte < 8; ++byte) {
    hash ^= (seed >> (8 * byte)) & 0xffU;
    hash *= 1099511628211ULL;
  }
  for (const char c : row.settings_json) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return static_cast<std::int64_t>(hash >> 1);
}

std::optional<RowTicket> HeldFor(const TaskRow& row, const std::string& ticket) {
  if (!row.current_run_ticket) return std::nullopt;
  const RowTicket held = RowTicket::Decode(*row.current_run_ticket);
  if (!held.HeldBy(ticket)) return std::nullopt;
  return held;
}

void ClearTicket(TaskRow& row) {
  row.current_run_ticket.reset();
  row.current_run_started_at.reset();
  row.current_run_expires_at.reset();
}

void RegisterRow(TaskRow& row, bool inserted, const PlannedUpsert& plan, WallTime now) {
  if (inserted) {
    row.next_run_start_at = EvaluatePlan(plan.insert, now, std::nullopt);
  } else {
    const std::optional<WallTime> candidate = EvaluatePlan(plan.reregister, now, std::nullopt);
    // SQL: CASE WHEN existing IS NULL OR candidate < existing THEN candidate ELSE existing END.
    if (!row.next_run_start_at || (candidate && *candidate < *row.next_run_start_at)) {
      row.next_run_start_at = candidate;
    }
  }
  row.settings_json = plan.settings_json;
}

bool ClaimRow(TaskRow& row, const std::string& ticket, std::chrono::milliseconds timeout,
              std::chrono::milliseconds lease, std::optional<std::int64_t> expected_version,
              WallTime now) {
  if (row.current_run_ticket || !row.next_run_start_at || *row.next_run_start_at > now) {
    return false;
  }
  if (expected_version && RowVersion(row) != *expected_version) return false;
  row.current_run_ticket = ticket;
  row.current_run_started_at = now;
  row.current_run_expires_at = now + std::min(timeout, lease);
  return true;
}

LeaseStatus RenewRow(TaskRow& row, const std::string& ticket, std::chrono::milliseconds timeout,
                     std::chrono::milliseconds lease, WallTime now) {
  const std::optional<RowTicket> held = HeldFor(row, ticket);
  if (!held) return LeaseStatus::kLost;
  const WallTime started = row.current_run_started_at.value_or(now);
  row.current_run_expires_at = std::min(started + timeout, now + lease);
  return held->cancel_requested ? LeaseStatus::kCancelRequested : LeaseStatus::kHeld;
}

bool ReleaseRow(TaskRow& row, const std::string& ticket, const NextRunPlan& plan,
                const std::optional<std::string>& error_json, WallTime now,
                std::optional<std::int64_t> claimed_version) {
  const std::optional<RowTicket> held = HeldFor(row, ticket);
  if (!held && !(claimed_version && IsUnclaimedAt(row, *claimed_version))) return false;
  row.next_run_start_at = EvaluatePlan(plan, now, row.next_run_start_at);
  EndRun(row, now, held && held->cancel_requested ? ErrorJson("Task was cancelled") : error_json,
         held);
  return true;
}

bool IsUnclaimedAt(const TaskRow& row, std::int64_t version) {
  return !row.current_run_ticket && RowVersion(row) == version;
}

bool ReclaimRow(TaskRow& row, const std::string& ticket, std::int64_t claimed_version,
                std::chrono::milliseconds timeout, std::chrono::milliseconds lease, WallTime now) {
  if (!IsUnclaimedAt(row, claimed_version)) return false;
  row.current_run_ticket = ticket;
  row.current_run_started_at = now;
  row.current_run_expires_at = now + std::min(timeout, lease);
  return true;
}

bool SkipRow(TaskRow& row, std::int64_t expected_version, const NextRunPlan& plan, WallTime now) {
  if (row.current_run_ticket || RowVersion(row) != expected_version) return false;
  row.next_run_start_at = EvaluatePlan(plan, now, row.next_run_start_at);
  return true;
}

Status TriggerRow(TaskRow& row, WallTime now) {
  if (row.current_run_ticket && RowTicket::Decode(*row.current_run_ticket).paused()) {
    return PausedError(row.id);
  }
  if (row.current_run_ticket) {
    return ConflictError(fmt::format("Task {} is currently running", row.id));
  }
  row.next_run_start_at = now;
  return Status::Ok();
}

Status CancelRow(TaskRow& row, std::chrono::milliseconds hold, WallTime now) {
  if (!row.current_run_ticket || row.current_run_ticket->empty()) {
    return ConflictError(fmt::format("Task {} is not running", row.id));
  }
  const RowTicket stored = RowTicket::Decode(*row.current_run_ticket);
  if (stored.paused()) return ConflictError(fmt::format("Task {} is not running", row.id));
  if (stored.cancel_requested) return Status::Ok();
  row.current_run_ticket = CancelRequestedTicket(*row.current_run_ticket);
  HoldExpiry(row, hold, now);
  return Status::Ok();
}

void PauseRow(TaskRow& row, const PauseRequest& request, std::chrono::milliseconds hold,
              WallTime now) {
  if (row.current_run_ticket) {
    const RowTicket stored = RowTicket::Decode(*row.current_run_ticket);
    if (!stored.paused()) {
      row.current_run_ticket = stored.WithPendingPause(request);
      HoldExpiry(row, hold, now);
      return;
    }
  }
  row.current_run_ticket = PausedTicket(request);
  row.current_run_started_at = now;
  row.current_run_expires_at =
      request.until ? std::optional(ToMillis(*request.until)) : std::nullopt;
}

Status ResumeRow(TaskRow& row) {
  if (!row.current_run_ticket) return NotPausedError(row.id);
  const RowTicket stored = RowTicket::Decode(*row.current_run_ticket);
  if (stored.paused()) {
    ClearTicket(row);
    return Status::Ok();
  }
  if (stored.kind != RowTicket::Kind::kRun || !stored.pause_json) return NotPausedError(row.id);
  row.current_run_ticket = stored.WithoutPendingPause();
  return Status::Ok();
}

std::optional<WallTime> EarliestIdleNext(std::span<const PollEntry> entries) {
  std::optional<WallTime> earliest;
  for (const PollEntry& entry : entries) {
    const bool scheduled =
        entry.readiness == Readiness::kReady || entry.readiness == Readiness::kNotReady;
    if (!scheduled || entry.running || !entry.next_run_start_at) continue;
    if (!earliest || *entry.next_run_start_at < *earliest) earliest = entry.next_run_start_at;
  }
  return earliest;
}

SweepOutcome SweepRow(TaskRow& row, WallTime now) {
  if (!row.current_run_expires_at || *row.current_run_expires_at >= now) {
    return SweepOutcome::kUntouched;
  }
  std::optional<RowTicket> held;
  if (row.current_run_ticket) held = RowTicket::Decode(*row.current_run_ticket);
  if (held && held->paused()) {
    ClearTicket(row);
    return SweepOutcome::kResumed;
  }
  EndRun(row, now, ErrorJson("Task timed out"), held);
  return SweepOutcome::kSwept;
}

}  // namespace stagehand::store_internal
