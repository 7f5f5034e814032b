// The rules of Backstage's task row (§4) and stagehand's extensions (cancel marks, pauses, ADR
// 0013) applied to a TaskRow in memory: what a claim, renewal, release, trigger, cancel, pause,
// resume, skip and sweep do to one row, given the database's now. The SQL stores state the same
// rules in their statements; the stores that cannot (the memory store, and the MySQL store, which
// locks rows, applies these rules and writes the rows back) call these. Pure; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "stagehand/base/status.h"
#include "stagehand/store/task_store.h"
#include "store/next_run.h"
#include "store/task_pause.h"

namespace stagehand::store_internal {

// Evaluates `plan` as the SQL stores' statements do, with `now` as the database's now() and
// `scheduled` as the row's current next_run_start_at. greatest() ignores a NULL scheduled time,
// as PostgreSQL's does. Offsets past about 200 years are clamped.
std::optional<WallTime> EvaluatePlan(const NextRunPlan& plan, WallTime now,
                                     const std::optional<WallTime>& scheduled);

// The PollEntry::version of a row: FNV-1a of its settings, seeded with its next start in
// microseconds since the epoch (a NULL next start has a seed of its own).
std::int64_t RowVersion(const TaskRow& row);

// The row's ticket decoded, when it holds the row for the run `ticket` in any form (plain, marked
// by a cancel, with a pending pause). Views into row.current_run_ticket.
std::optional<RowTicket> HeldFor(const TaskRow& row, const std::string& ticket);

// Clears a row's ticket and run times, recording nothing (a resumed pause).
void ClearTicket(TaskRow& row);

// Registers a row: a new row (`inserted`) starts at `insert`'s time; an existing one takes
// `reregister`'s time when it had none or that time is earlier. Sets the settings.
void RegisterRow(TaskRow& row, bool inserted, const PlannedUpsert& plan, WallTime now);

// Claim's rules (and the expected version, when given). Returns whether it claimed.
bool ClaimRow(TaskRow& row, const std::string& ticket, std::chrono::milliseconds timeout,
              std::chrono::milliseconds lease, std::optional<std::int64_t> expected_version,
              WallTime now);

// RenewLease's rules: kLost when the ticket holds the row in no form.
LeaseStatus RenewRow(TaskRow& row, const std::string& ticket, std::chrono::milliseconds timeout,
                     std::chrono::milliseconds lease, WallTime now);

// Release's rules, with the next start from `plan`. A cancelled run records the cancel; a pending
// pause leaves the row paused. With `claimed_version` (ReleaseRequest::claimed_version), a row
// that holds no ticket at that version is released as if the ticket held it. Returns whether it
// released the row.
bool ReleaseRow(TaskRow& row, const std::string& ticket, const NextRunPlan& plan,
                const std::optional<std::string>& error_json, WallTime now,
                std::optional<std::int64_t> claimed_version = std::nullopt);

// Whether the row holds no ticket and has PollEntry::version `version`: nobody claimed or changed
// it since a claim that required that version.
bool IsUnclaimedAt(const TaskRow& row, std::int64_t version);

// Reclaim's rules. Returns whether it claimed the row again.
bool ReclaimRow(TaskRow& row, const std::string& ticket, std::int64_t claimed_version,
                std::chrono::milliseconds timeout, std::chrono::milliseconds lease, WallTime now);

// SkipSlot's rules: moves an idle row of `expected_version` to `plan`'s time. Returns whether it
// did.
bool SkipRow(TaskRow& row, std::int64_t expected_version, const NextRunPlan& plan, WallTime now);

// Trigger's rules. Errors: kConflict "Task {id} is paused" or "Task {id} is currently running".
Status TriggerRow(TaskRow& row, WallTime now);

// Cancel's rules on a row whose settings parse: marks its run's ticket and brings its expiry
// forward to at most now + hold; a marked run is left as it is. Errors: kConflict "Task {id} is
// not running" (no run, or paused).
Status CancelRow(TaskRow& row, std::chrono::milliseconds hold, WallTime now);

// Pause's rules for a request ValidatePause accepted: a row without a run is paused (or its pause
// changed); a running row's ticket takes the pending form and its expiry comes forward to at most
// now + hold.
void PauseRow(TaskRow& row, const PauseRequest& request, std::chrono::milliseconds hold,
              WallTime now);

// Resume's rules. Errors: kConflict "Task {id} is not paused".
Status ResumeRow(TaskRow& row);

// PollResult::earliest_next of `entries`: the earliest next start among the rows that are idle
// and whose settings parse.
std::optional<WallTime> EarliestIdleNext(std::span<const PollEntry> entries);

// What the janitor's sweep did to one row.
enum class SweepOutcome {
  kUntouched,  // not expired
  kResumed,    // an expired pause, cleared without a record
  kSwept,      // an expired run, ended as timed out (left paused when a pause waited for it)
};

// The sweep's rules (§7) on one row: a row whose expiry is before `now` is reset.
SweepOutcome SweepRow(TaskRow& row, WallTime now);

}  // namespace stagehand::store_internal
