// The rules every store applies to pauses (ADR 0013), beside the SQL or code that writes them:
// validation of a request and the errors Pause, Resume, Trigger and Cancel answer for a paused
// task. Pure; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/store/row_ticket.h"
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

// The pause a row is left with when the run that holds it with a pending pause ends.
struct PauseAfterRun {
  std::string ticket;             // the paused ticket
  std::optional<WallTime> until;  // its expiry
};

// Returns the pause that the run's ticket `held` leaves when its run ends at `now`: nullopt
// without a pending pause, or when its until has passed.
std::optional<PauseAfterRun> PauseLeftBy(const RowTicket& held, WallTime now);

// kConflict "Task {id} is paused" (Trigger of a paused task).
Status PausedError(const std::string& id);
// kConflict "Task {id} is not paused" (Resume of a task that is not).
Status NotPausedError(const std::string& id);

}  // namespace stagehand::store_internal
