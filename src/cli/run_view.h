// The run history as the client verbs show it (`runs`, `logs`, `trigger --wait`, `tasks`): the
// REST shapes of a run and of a page of runs read into values, the `runs` table, and which bytes
// of a followed run's output are new. Pure functions of their inputs; thread-safe unless stated.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::cli {

// One run as `GET .../tasks/<taskId>/runs` lists it. Names are the REST ones ("manual",
// "timed_out"). A value type.
struct RunRecord {
  std::string run_id;
  std::string task_id;
  std::string plugin_id;
  std::string host;
  std::int64_t pid = 0;
  std::string trigger;  // schedule, manual, retry, catch_up
  std::int64_t attempt = 1;
  std::optional<WallTime> slot;
  std::optional<WallTime> started_at;
  std::optional<WallTime> ended_at;
  std::optional<std::chrono::milliseconds> duration;
  std::optional<std::chrono::milliseconds> start_lag;
  std::string outcome;        // running, succeeded, failed, timed_out, cancelled, lost, fenced
  std::string error_name;     // empty when the run has no error
  std::string error_message;  // empty when the run has no error
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::optional<int> http_status;
};

// One run as `GET .../runs/<runId>` answers: the record, its output and whether it is live. A
// value type.
struct RunDetail {
  RunRecord run;
  std::string output;  // the tail kept (or, for a live run, printed so far)
  // For a live run, every byte printed so far; otherwise the length of `output`.
  std::uint64_t output_bytes = 0;
  bool live = false;  // still going on the host that answered
};

// A page of runs, newest first, and the cursor of the next (older) page. A value type.
struct RunPage {
  std::vector<RunRecord> runs;
  std::optional<std::string> next_cursor;
};

// Parses `{"runs":[RUN...],"nextCursor":str|null}`. Unknown keys are ignored; a time that does not
// parse is absent. Errors: kInvalidArgument naming what is missing ("the runs of jobs/backup have
// no \"runs\" array"), with `what` ("the runs of jobs/backup") in front.
Result<RunPage> ParseRunPage(std::string_view body, std::string_view what);

// Parses a run with its "output", "outputBytes" and "live". Errors: kInvalidArgument when the
// body is not a JSON object or has no "runId", with `what` in front.
Result<RunDetail> ParseRunDetail(std::string_view body, std::string_view what);

// Returns whether `outcome` is that of a run that has ended (anything but "running").
bool HasEnded(std::string_view outcome);

// Returns how the run ended beside its outcome: "0" / "1" for an exit code, "SIGKILL" for a
// signal, "HTTP 503" for a status, "-" when none is known.
std::string FormatExit(const RunRecord& run);

// Returns the colour an outcome is shown in: green for succeeded and running, yellow for
// cancelled, red for every other ended outcome, none for "" or an unknown name.
std::string_view OutcomeColour(std::string_view outcome);

// Returns the exit code of `trigger --wait` for a run's outcome: kExitOk (succeeded),
// kExitRunFailed, kExitRunTimedOut, kExitRunCancelled, kExitRunLost (lost, fenced), or
// kExitFailure for any other name.
int ExitCodeForOutcome(std::string_view outcome);

// Returns the `runs` table of `runs` (newest first): STARTED (relative and absolute in `zone`),
// HOST, TRIGGER, OUTCOME, DURATION, LAG, EXIT, RUN ID and ERROR (its message, cut to 50
// characters); "-" for what is unknown. With `colour`, succeeded and running are green,
// cancelled yellow, every other ended outcome red.
std::string RenderRunTable(const std::vector<RunRecord>& runs, WallTime now, const TimeZone& zone,
                           bool colour);

// Returns the one line `trigger --wait` ends with: "Run <id> of jobs/backup failed after 2s on
// web-1 (exit 1): <error message>", without the error part when there is none.
std::string DescribeRunEnd(const RunRecord& run);

// Returns the length of the longest prefix of `text` that is also a suffix of `seen`, in time
// linear in their sizes.
std::size_t OverlapOfSuffixAndPrefix(std::string_view seen, std::string_view text);

// Which bytes of one run's output have been shown, over successive answers of `GET
// .../runs/<runId>` for it: a live run's output is counted by outputBytes; once the run is no
// longer live, its stored tail (whose total length is not known) is lined up with the bytes shown
// last. Not thread-safe.
class OutputFollower {
 public:
  // What to print for one answer: the new bytes, and a note when bytes were not kept or had to be
  // skipped (empty when none). A value type.
  struct Step {
    std::string bytes;
    std::string note;
  };

  // Returns the bytes of `detail.output` not shown yet and marks them shown.
  Step Next(const RunDetail& detail);

 private:
  Step First(const RunDetail& detail);

  bool started_ = false;
  std::uint64_t shown_bytes_ = 0;  // by outputBytes: how far the live output was shown
  std::string recent_;             // the last bytes shown, at most one tail's worth
};

}  // namespace stagehand::cli
