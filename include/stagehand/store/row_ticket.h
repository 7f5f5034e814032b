// What a task row's current_run_ticket holds. Backstage writes a run's own ticket there;
// stagehand writes three more forms over it (docs/adr/0013-pausing-a-task-in-backstages-row.md):
// - a run asked to stop by a cancel: its ticket marked by the cancel. The row stays held by the
//   run until its owner releases it (or the janitor sweeps it), so every statement that treats a
//   NULL ticket as free (claim, trigger, readiness; Backstage's too) sees it as running;
// - a task paused by an operator: the pause as JSON ({"by":…,"reason":…,"until":…}), with
//   current_run_started_at = when it was paused and current_run_expires_at = when it resumes by
//   itself (NULL: when resumed). Nobody claims a row that holds a ticket; no janitor clears one
//   without an expiry; stagehand's sweep clears an expired pause without recording a run's end;
// - a run with a pause that waits for it to end: the run's ticket (keeping a cancel's mark) and
//   the pause's JSON. The run goes on; its release, or the sweep of its expiry, leaves the row
//   paused.
// RowTicket is the one codec of these forms: every store and every reader of a row decodes and
// encodes tickets through it (the SQL statements that recognise a form spell it as
// store/ticket_sql.h says, which the codec's tests check). Run tickets never contain ':'.
// Plain value type; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "stagehand/model/task_pause.h"

namespace stagehand {

struct TaskRow;

// A decoded ticket. Its views are into the text it was decoded from (or that the caller set),
// which must outlive it.
struct RowTicket {
  enum class Kind {
    kRun,         // a run holds the row
    kPaused,      // an operator paused the task
    kUnreadable,  // a pending pause's mark without the ':' that ends a run ticket: held by no run
  };

  // Decodes a stored ticket; every text decodes, and Encode() gives it back byte for byte.
  static RowTicket Decode(std::string_view stored);
  // Returns the ticket's stored text.
  std::string Encode() const;

  // Whether an operator's pause holds the row.
  bool paused() const { return kind == Kind::kPaused; }
  // Whether it holds the row for the run `ticket`, in any form (plain, marked by a cancel, with a
  // pending pause).
  bool HeldBy(std::string_view ticket) const { return kind == Kind::kRun && run == ticket; }
  // The pause's fields that pause_json holds (by, reason, until); nothing when there is none.
  // Fields that are missing or of another type stay empty.
  TaskPause DecodePause() const;

  // Returns, for a run's ticket, the ticket with the pending pause `request` (replacing one it
  // had), keeping a cancel's mark.
  std::string WithPendingPause(const PauseRequest& request) const;
  // Returns, for a run's ticket, the ticket without its pending pause, keeping a cancel's mark.
  std::string WithoutPendingPause() const;

  Kind kind = Kind::kRun;
  // kRun: the run's own ticket (its run id). kUnreadable: the text after the pending pause's mark.
  std::string_view run;
  // kRun, kUnreadable: a cancel asked the run to stop.
  bool cancel_requested = false;
  // kPaused: the pause's JSON. kRun: the JSON of the pause that waits for the run, if any.
  std::optional<std::string_view> pause_json;

  friend bool operator==(const RowTicket&, const RowTicket&) = default;
};

// Returns the ticket a cancel writes over the stored ticket `ticket` of a run: the same ticket,
// marked (RowTicket::cancel_requested).
std::string CancelRequestedTicket(std::string_view ticket);

// Returns the ticket a pause writes on a row that no run holds.
std::string PausedTicket(const PauseRequest& request);

// Returns the pause `row` holds, or nullopt if it is neither paused nor pausing when its run
// ends (then TaskPause::pending, `since` the run's start).
std::optional<TaskPause> PauseOf(const TaskRow& row);

}  // namespace stagehand
