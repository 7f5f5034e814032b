// The pieces the PostgreSQL statement texts are built from (plans, rings, sweeps, the batched
// claim, release and upsert), shared by the task, run-history and registration statements.
// Private to src/store/postgres/*statements.cc; pure functions, callable from any thread.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace stagehand::store_internal::pg_sql {

// The next-run expression of a plan bound at parameters $kind, $kind+1, $kind+2. Only an UPDATE
// can use 'scheduled_plus', which reads the row's own next_run_start_at.
std::string Plan(int kind, bool in_update);

// As PlanColumns, for an UPDATE of `table`: also 'scheduled_plus', which reads the row's own
// next_run_start_at.
std::string PlanColumnsInUpdate(std::string_view from, std::string_view prefix,
                                std::string_view table);

// The next-run expression of a plan held in the columns `kind`, `seconds` and `instant` of `from`.
std::string PlanColumns(std::string_view from, std::string_view prefix);

// The version of the next_run_start_at and settings_json of the row aliased `alias`: the 64-bit
// hash of its settings seeded with its next start in microseconds since the epoch (the smallest
// bigint when it is NULL), so that a change of either gives another version.
std::string VersionOf(std::string_view alias);

// A scalar subquery that announces the rows of the CTE `rows` on the channel bound at parameter
// $<channel_param>: one NOTIFY per chunk of rows, "<kind>:" then "<bytes>:<value>" for each of
// `columns` of each row (ordered by id), chunks keeping each payload under PostgreSQL's
// 8,000-byte limit (an id or ticket is at most 255 characters). Its value is the NOTIFY count.
std::string NotifyInChunks(int channel_param, std::string_view kind, std::string_view rows,
                           std::initializer_list<std::string_view> columns);

// The JSON of the pending pause that the ticket in `column` carries (ADR 0013), or NULL.
std::string PendingPauseJson(std::string_view column);

// The run id that the ticket in `column` names: without a cancel's or a pending pause's mark.
std::string RunIdOfTicket(std::string_view column);

// The CTEs that record the runs of the CTE `source` in their tasks' rings of $<keep_param> rows
// (ADR 0011), the last one named `name` and returning task_id, slot and run_id. `source` has one
// row per run, with the run columns of stagehand_task_runs but seq and slot (trace_id last),
// output as bytea, and `ord`, the order of its task's runs within the source. Each run takes its
// task's next number (`seq`, counted in stagehand_task_run_counts, whose rows are locked in task
// order) and the ring row that number names, replacing the run recorded there $<keep_param> runs
// before; of a task's runs in one statement, only its newest $<keep_param> are written. With
// `one_per_task` (a source that holds at most one run per task, as claims and releases do) the
// count simply goes up by one.
// The count's and the ring's writes change no indexed column, so both are heap-only updates.
std::string RecordInRings(std::string_view source, int keep_param, std::string_view name,
                          bool one_per_task);

// The CTE `swept` of the polls that fold in the janitor: it releases every expired run, recording
// the error JSON bound at parameter $<error_param> and notifying on the channel at the next one,
// and clears every expired pause (ADR 0013) without a record, announced as a release. Its
// `paused` column tells the two apart: only the rows with `paused` false are reported as swept.
// An expired run whose ticket carries a pending pause leaves its row paused (`repause`), unless
// the pause's until has passed too. With `history`, it also closes the swept runs' history rows as
// lost with that error. The expired rows are locked first (in id order) to read their tickets.
std::string SweptCte(int error_param, bool history);

std::string PollChanged(bool sweep, bool history);

// The poll that folds in the janitor (poll_and_sweep), closing the swept runs' history with
// `history`. The outer query sees the table as it was before `swept` changed it, so a polled row
// that the sweep released counts as idle here.
std::string PollAndSweep(bool history);

// The batched claim (claim_many). Rows are locked in id order and rows another session holds are
// skipped, so concurrent batches never wait on each other (nor deadlock); the claim conditions,
// and the expected version where one is given, are checked again on the locked row's latest
// version. With `history`, the claimed runs that come with an origin ($7..$12) are recorded as
// running, started at the claim's time, in rings of $13 runs; each claimed row then also
// returns the ring slot of its run (NULL when none was recorded).
std::string ClaimMany(bool history);

// The UPDATE that closes the runs that `match` finds among the rows of the CTE `finishes` (run_id,
// ended_at (NULL: now()), outcome, error_json, exit_code, signal, http_status, output_hex): those
// running, or closed as lost (their host's own account replaces the sweep's).
std::string CloseRuns(std::string_view match);

// The batched release (release_many). Rows are locked in id order first, so two batches touching
// the same rows cannot deadlock. With `history`, the runs that come with a finish ($10..$22) are
// written whole, ended at the release's time, as their host tells it, whether or not their ticket
// still held it, into their tasks' rings of $23 runs (the runs whose start was recorded are closed
// by record_ends instead). Its writes go through the primary key alone, so its prepared plan
// never scans the history, however it grows.
std::string ReleaseMany(bool history);

// The janitor's sweep (sweep); with `history`, it closes the swept runs' history as lost.
std::string Sweep(bool history);

// The batched registration (upsert_many). Rows that exist are updated (keeping an earlier next
// start); the others are inserted. A row another writer inserts meanwhile gets the new settings and
// keeps its own next start. Rows are locked, and new ones inserted, in id order, as the releases
// lock them: a host registering while another releases the same tasks cannot deadlock with it.
// With `registrations`, the tasks that come with a host ($10) are also recorded as registered by it
// now, in id order (so that concurrent registrations of the same tasks never deadlock).
std::string UpsertMany(bool registrations);

// The prune rule (task_registrations.h) on a task row `t`, with the cutoff bound at parameter
// $<cutoff_param>; the registration's part is RegistrationRule.
std::string RowRule(int cutoff_param);

// The prune rule's part on a task's registration `r` (NULL columns without one).
std::string RegistrationRule(int cutoff_param);

}  // namespace stagehand::store_internal::pg_sql
