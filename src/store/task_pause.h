// The rules every store applies to pauses (ADR 0013), beside the SQL or code that writes them:
// validation of a request and the errors Pause, Resume, Trigger and Cancel answer for a paused
// task. Pure; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand::store_internal {

// Checks a pause request's texts. Errors: kInvalidArgument naming `by` or `reason`.
Status ValidatePauseTexts(const PauseRequest& request);
// Checks a pause request against the database's `now`: its texts and that `until` is after now.
// Errors: kInvalidArgument naming the field.
Status ValidatePause(const PauseRequest& request, WallTime now);

// kInvalidArgument "Invalid pause: 'until' is not in the future" (what ValidatePause answers for a
// past `until`, for stores whose statement compares it with the database's clock).
Status PauseUntilPassedError();

// Whether `ticket` is a pause's (kPausedPrefix).
bool IsPausedTicket(const std::string& ticket);

// A ticket that holds a row for a run: the run's own ticket, possibly marked by a cancel and by a
// pause that waits for the run to end (kPausePendingPrefix). Views into the stored ticket.
struct HeldTicket {
  std::string_view run_ticket;
  bool cancel_requested = false;
  std::optional<std::string_view> pending_pause;  // the pause's JSON
};

// Returns what a stored ticket says of its run; nullopt for a pause's ticket.
std::optional<HeldTicket> ParseHeldTicket(std::string_view stored);

// Returns the ticket a pause writes on a row a run holds with `held`: its pending form, keeping a
// cancel's mark; a pending pause is replaced.
std::string PausePendingTicket(const HeldTicket& held, const PauseRequest& request);

// Returns the ticket a resume writes on a row a run holds with a pending pause: the run's ticket,
// keeping a cancel's mark.
std::string WithoutPendingPause(const HeldTicket& held);

// The pause a row is left with when the run that holds it with a pending pause ends.
struct PauseAfterRun {
  std::string ticket;             // the paused ticket
  std::optional<WallTime> until;  // its expiry
};

// Returns the pause that `held` leaves when its run ends at `now`: nullopt without a pending
// pause, or when its until has passed.
std::optional<PauseAfterRun> PauseLeftBy(const HeldTicket& held, WallTime now);

// kConflict "Task {id} is paused" (Trigger of a paused task).
Status PausedError(const std::string& id);
// kConflict "Task {id} is not paused" (Resume of a task that is not).
Status NotPausedError(const std::string& id);

}  // namespace stagehand::store_internal
