#include "store/postgres/statement_parts.h"

#include <fmt/format.h>

#include <initializer_list>
#include <optional>
#include <string_view>

#include "stagehand/store/task_store.h"
#include "store/ticket_sql.h"

namespace stagehand::store_internal::pg_sql {

// The statements below spell the ticket forms with these literals (and their lengths).
static_assert(ticket_sql::kCancelRequested == "cancel:");
static_assert(ticket_sql::kPaused == "paused:");
static_assert(ticket_sql::kPausePending == "pausing:");

// The next-run expression of a plan bound at parameters $kind, $kind+1, $kind+2. Only an UPDATE
// can use 'scheduled_plus', which reads the row's own next_run_start_at.
std::string Plan(int kind, bool in_update) {
  const std::string scheduled_plus =
      in_update ? fmt::format(
                      " WHEN 'scheduled_plus' THEN"
                      " greatest(next_run_start_at + ${}::float8 * interval '1 second', now())",
                      kind + 1)
                : "";
  return fmt::format(
      "CASE ${0}::text"
      " WHEN 'null' THEN NULL"
      " WHEN 'now' THEN now()"
      " WHEN 'now_plus' THEN now() + ${1}::float8 * interval '1 second'"
      " WHEN 'instant' THEN ${2}::timestamptz"
      "{3}"
      " END",
      kind, kind + 1, kind + 2, scheduled_plus);
}

// As PlanColumns, for an UPDATE of `table`: also 'scheduled_plus', which reads the row's own
// next_run_start_at.
std::string PlanColumnsInUpdate(std::string_view from, std::string_view prefix,
                                std::string_view table) {
  return fmt::format(
      "CASE {0}.{1}_kind"
      " WHEN 'null' THEN NULL"
      " WHEN 'now' THEN now()"
      " WHEN 'now_plus' THEN now() + {0}.{1}_seconds * interval '1 second'"
      " WHEN 'instant' THEN {0}.{1}_instant"
      " WHEN 'scheduled_plus' THEN"
      " greatest({2}.next_run_start_at + {0}.{1}_seconds * interval '1 second', now())"
      " END",
      from, prefix, table);
}

// The next-run expression of a plan held in the columns `kind`, `seconds` and `instant` of `from`.
std::string PlanColumns(std::string_view from, std::string_view prefix) {
  return fmt::format(
      "CASE {0}.{1}_kind"
      " WHEN 'null' THEN NULL"
      " WHEN 'now' THEN now()"
      " WHEN 'now_plus' THEN now() + {0}.{1}_seconds * interval '1 second'"
      " WHEN 'instant' THEN {0}.{1}_instant"
      " END",
      from, prefix);
}

// The version of the next_run_start_at and settings_json of the row aliased `alias`: the 64-bit
// hash of its settings seeded with its next start in microseconds since the epoch (the smallest
// bigint when it is NULL), so that a change of either gives another version.
std::string VersionOf(std::string_view alias) {
  return fmt::format(
      "hashtextextended(coalesce({0}.settings_json, ''), "
      "coalesce(round(extract(epoch FROM {0}.next_run_start_at) * 1000000)::int8, "
      "-9223372036854775808))",
      alias);
}

// A scalar subquery that announces the rows of the CTE `rows` on the channel bound at parameter
// $<channel_param>: one NOTIFY per chunk of rows, "<kind>:" then "<bytes>:<value>" for each of
// `columns` of each row (ordered by id), chunks keeping each payload under PostgreSQL's
// 8,000-byte limit (an id or ticket is at most 255 characters). Its value is the NOTIFY count.
std::string NotifyInChunks(int channel_param, std::string_view kind, std::string_view rows,
                           std::initializer_list<std::string_view> columns) {
  std::string items;
  std::string sizes;
  std::string selected;
  for (const std::string_view column : columns) {
    if (!items.empty()) items += " || ";
    items += fmt::format("octet_length(c.{0})::text || ':' || c.{0}", column);
    sizes += fmt::format("octet_length({}) + 8 + ", column);
    selected += fmt::format("{}, ", column);
  }
  return fmt::format(R"sql((
  SELECT count(*) FROM (
    SELECT pg_notify(${channel}::text, '{kind}:' || string_agg({items}, '' ORDER BY c.id))
    FROM (SELECT {selected}sum({sizes}0) OVER (ORDER BY id) / 6000 AS chunk FROM {rows}) AS c
    GROUP BY c.chunk
  ) AS notified
)::text)sql",
                     fmt::arg("channel", channel_param), fmt::arg("kind", kind),
                     fmt::arg("items", items), fmt::arg("selected", selected),
                     fmt::arg("sizes", sizes), fmt::arg("rows", rows));
}

// The JSON of the pending pause that the ticket in `column` carries (ADR 0013), or NULL.
std::string PendingPauseJson(std::string_view column) {
  return fmt::format(
      "CASE WHEN starts_with({0}, 'pausing:') THEN substr({0}, 9 + strpos(substr({0}, 9), ':'))"
      " WHEN starts_with({0}, 'cancel:pausing:')"
      " THEN substr({0}, 16 + strpos(substr({0}, 16), ':')) END",
      column);
}

// The run id that the ticket in `column` names: without a cancel's or a pending pause's mark.
std::string RunIdOfTicket(std::string_view column) {
  const std::string unmarked =
      fmt::format("CASE WHEN starts_with({0}, 'cancel:') THEN substr({0}, 8) ELSE {0} END", column);
  return fmt::format(
      "CASE WHEN starts_with({0}, 'pausing:') THEN split_part(substr({0}, 9), ':', 1) ELSE {0} "
      "END",
      unmarked);
}

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
                          bool one_per_task) {
  const std::string numbered =
      one_per_task ? fmt::format(R"sql(, {name}_counted AS (
  INSERT INTO stagehand_task_run_counts AS c (task_id, runs)
  SELECT task_id, 1 FROM {source} ORDER BY task_id
  ON CONFLICT (task_id) DO UPDATE SET runs = c.runs + 1
  RETURNING c.task_id, c.runs
), {name}_numbered AS (
  SELECT s.*, c.runs AS last_seq, c.runs AS seq
  FROM {source} AS s JOIN {name}_counted AS c ON c.task_id = s.task_id
))sql",
                                 fmt::arg("name", name), fmt::arg("source", source))
                   : fmt::format(R"sql(, {name}_wanted AS (
  SELECT task_id, count(*) AS n FROM {source} GROUP BY task_id
), {name}_counted AS (
  INSERT INTO stagehand_task_run_counts AS c (task_id, runs)
  SELECT task_id, n FROM {name}_wanted ORDER BY task_id
  ON CONFLICT (task_id) DO UPDATE SET runs = c.runs + excluded.runs
  RETURNING c.task_id, c.runs
), {name}_numbered AS (
  SELECT s.*, c.runs AS last_seq,
         c.runs + 1 - row_number() OVER (PARTITION BY s.task_id ORDER BY s.ord DESC) AS seq
  FROM {source} AS s JOIN {name}_counted AS c ON c.task_id = s.task_id
))sql",
                                 fmt::arg("name", name), fmt::arg("source", source));
  return numbered + fmt::format(R"sql(, {name} AS (
  INSERT INTO stagehand_task_runs AS r (task_id, slot, seq, run_id, host, pid, trigger_kind,
                                        slot_at, started_at, ended_at, outcome, error_json,
                                        exit_code, signal, http_status, attempt, output, trace_id)
  SELECT n.task_id, ((n.seq - 1) % ${keep}::int4)::int4, n.seq, n.run_id, n.host, n.pid,
         n.trigger_kind, n.slot_at, n.started_at, n.ended_at, n.outcome, n.error_json,
         n.exit_code, n.signal, n.http_status, n.attempt, n.output, n.trace_id
  FROM {name}_numbered AS n
  WHERE n.seq > n.last_seq - ${keep}::int4
  ORDER BY 1, 2
  ON CONFLICT (task_id, slot) DO UPDATE
  SET seq = excluded.seq, run_id = excluded.run_id, host = excluded.host, pid = excluded.pid,
      trigger_kind = excluded.trigger_kind, slot_at = excluded.slot_at,
      started_at = excluded.started_at, ended_at = excluded.ended_at, outcome = excluded.outcome,
      error_json = excluded.error_json, exit_code = excluded.exit_code, signal = excluded.signal,
      http_status = excluded.http_status, attempt = excluded.attempt, output = excluded.output,
      trace_id = excluded.trace_id
  RETURNING r.task_id, r.slot, r.run_id
))sql",
                                fmt::arg("name", name), fmt::arg("keep", keep_param));
}

// The CTE `swept` of the polls that fold in the janitor: it releases every expired run, recording
// the error JSON bound at parameter $<error_param> and notifying on the channel at the next one,
// and clears every expired pause (ADR 0013) without a record, announced as a release. Its
// `paused` column tells the two apart: only the rows with `paused` false are reported as swept.
// An expired run whose ticket carries a pending pause leaves its row paused (`repause`), unless
// the pause's until has passed too. With `history`, it also closes the swept runs' history rows as
// lost with that error. The expired rows are locked first (in id order) to read their tickets.
std::string SweptCte(int error_param, bool history) {
  std::string cte =
      fmt::format(R"sql(
WITH expired AS (
  SELECT id, current_run_ticket, starts_with(current_run_ticket, 'paused:') AS paused,
         {pending} AS pause_json
  FROM backstage_backend_tasks__tasks
  WHERE current_run_expires_at < now()
  ORDER BY id
  FOR UPDATE
), pending AS (
  SELECT e.id, e.pause_json, u.pause_until,
         e.pause_json IS NOT NULL AND coalesce(u.pause_until > now(), true) AS repause
  FROM expired AS e
  CROSS JOIN LATERAL (SELECT (e.pause_json::jsonb ->> 'until')::timestamptz AS pause_until) AS u
), swept AS (
  UPDATE backstage_backend_tasks__tasks AS t
  SET current_run_ticket = CASE WHEN p.repause THEN 'paused:' || p.pause_json END,
      current_run_started_at = CASE WHEN p.repause THEN now() END,
      current_run_expires_at = CASE WHEN p.repause THEN p.pause_until END,
      last_run_ended_at = CASE WHEN e.paused THEN t.last_run_ended_at ELSE now() END,
      last_run_error_json = CASE WHEN e.paused THEN t.last_run_error_json ELSE ${error}::text END
  FROM expired AS e JOIN pending AS p ON p.id = e.id
  WHERE t.id = e.id
  RETURNING t.id, e.current_run_ticket AS ticket, e.paused,
            pg_notify(${channel}::text, CASE WHEN e.paused THEN 'release:' ELSE 'sweep:' END || t.id)
))sql",
                  fmt::arg("pending", PendingPauseJson("current_run_ticket")),
                  fmt::arg("error", error_param), fmt::arg("channel", error_param + 1));
  if (history) {
    // A run whose start is not written yet (a short task's run in its first second, whose claim
    // left it to its release) stays unwritten: its host is not known here, and the runs of
    // Backstage workers, which no history holds, look the same.
    cte += fmt::format(R"sql(, lost AS (
  UPDATE stagehand_task_runs AS r
  SET ended_at = now(), outcome = 'lost', error_json = ${0}::text
  FROM swept AS s
  WHERE NOT s.paused AND r.task_id = s.id AND r.run_id = {1} AND r.ended_at IS NULL
))sql",
                       error_param, RunIdOfTicket("s.ticket"));
  }
  return cte;
}

std::string PollChanged(bool sweep, bool history) {
  // As in poll_and_sweep, the outer query sees the table as it was before `swept` changed it.
  const std::string swept_cte = sweep ? SweptCte(3, history) : "";
  const std::string running = sweep ? "t.current_run_ticket IS NOT NULL AND s.id IS NULL"
                                    : "t.current_run_ticket IS NOT NULL";
  const std::string idle =
      sweep ? "(t.current_run_ticket IS NULL OR s.id IS NOT NULL)" : "t.current_run_ticket IS NULL";
  const std::string expires = sweep ? "CASE WHEN s.id IS NULL THEN t.current_run_expires_at END"
                                    : "t.current_run_expires_at";
  const std::string tasks =
      sweep ? "(backstage_backend_tasks__tasks AS t LEFT JOIN swept AS s ON s.id = t.id)"
            : "backstage_backend_tasks__tasks AS t";
  const std::string swept_rows =
      sweep ? "UNION ALL SELECT 'swept', id, NULL, NULL, NULL, NULL, NULL, now(), NULL FROM swept "
              "WHERE NOT paused"
            : "";
  return fmt::format(R"sql({swept_cte}
SELECT CASE WHEN t.id IS NULL THEN 'missing' ELSE 'task' END, k.id, t.settings_json,
       t.next_run_start_at, {running}, {expires},
       coalesce(t.next_run_start_at <= now() AND {idle}, false), now(), {version}
FROM unnest($1::text[], $2::int8[]) AS k(id, known)
LEFT JOIN {tasks} ON t.id = k.id
WHERE t.id IS NULL OR {running} OR t.next_run_start_at <= now()
   OR {version} IS DISTINCT FROM k.known
{swept_rows}
UNION ALL
SELECT 'clock', NULL, NULL, NULL, NULL, NULL, NULL, now(), NULL
)sql",
                     fmt::arg("swept_cte", swept_cte), fmt::arg("running", running),
                     fmt::arg("expires", expires), fmt::arg("idle", idle),
                     fmt::arg("version", VersionOf("t")), fmt::arg("tasks", tasks),
                     fmt::arg("swept_rows", swept_rows));
}

// The poll that folds in the janitor (poll_and_sweep), closing the swept runs' history with
// `history`. The outer query sees the table as it was before `swept` changed it, so a polled row
// that the sweep released counts as idle here.
std::string PollAndSweep(bool history) {
  return SweptCte(2, history) + R"sql(
SELECT 'task', t.id, t.settings_json, t.next_run_start_at,
       t.current_run_ticket IS NOT NULL AND s.id IS NULL,
       CASE WHEN s.id IS NULL THEN t.current_run_expires_at END,
       coalesce(t.next_run_start_at <= now() AND (t.current_run_ticket IS NULL OR s.id IS NOT NULL),
                false),
       now(), )sql" +
         VersionOf("t") +
         R"sql(
FROM backstage_backend_tasks__tasks AS t
LEFT JOIN swept AS s ON s.id = t.id
WHERE t.id = ANY ($1::text[])
UNION ALL
SELECT 'swept', id, NULL, NULL, NULL, NULL, NULL, now(), NULL FROM swept WHERE NOT paused
UNION ALL
SELECT 'clock', NULL, NULL, NULL, NULL, NULL, NULL, now(), NULL
)sql";
}

// The batched claim (claim_many). Rows are locked in id order and rows another session holds are
// skipped, so concurrent batches never wait on each other (nor deadlock); the claim conditions,
// and the expected version where one is given, are checked again on the locked row's latest
// version. With `history`, the claimed runs that come with an origin ($7..$12) are recorded as
// running, started at the claim's time, in rings of $13 runs; each claimed row then also
// returns the ring slot of its run (NULL when none was recorded).
std::string ClaimMany(bool history) {
  const std::string returning = history ? "t.id, t.current_run_expires_at, t.current_run_ticket, "
                                          "t.current_run_started_at"
                                        : "t.id, t.current_run_expires_at, t.current_run_ticket";
  const std::string started = history ? R"sql(, origins AS (
  SELECT o.id, o.host, o.pid, o.trigger_kind, o.slot_at, o.attempt, o.trace_id
  FROM unnest($1::text[], $7::text[], $8::int8[], $9::text[], $10::timestamptz[], $11::int4[],
              $12::text[])
       AS o(id, host, pid, trigger_kind, slot_at, attempt, trace_id)
  WHERE o.host IS NOT NULL
), starting AS (
  SELECT c.id AS task_id, 1 AS ord, c.current_run_ticket AS run_id, o.host, o.pid,
         o.trigger_kind, o.slot_at, c.current_run_started_at AS started_at,
         NULL::timestamptz AS ended_at, 'running' AS outcome, NULL::text AS error_json,
         NULL::int4 AS exit_code, NULL::int4 AS signal, NULL::int4 AS http_status, o.attempt,
         NULL::bytea AS output, o.trace_id
  FROM claimed AS c JOIN origins AS o ON o.id = c.id
))sql" + RecordInRings("starting", 13, "started", /*one_per_task=*/true)
                                      : "";
  const std::string notify = NotifyInChunks(6, "claims", "claimed", {"id", "current_run_ticket"});
  const std::string rows =
      history ? "SELECT c.id, c.current_run_expires_at, now(), NULL, s.slot FROM claimed AS c "
                "LEFT JOIN started AS s ON s.task_id = c.id\nUNION ALL\n"
                "SELECT NULL, NULL, now(), " +
                    notify + ", NULL"
              : "SELECT id, current_run_expires_at, now(), NULL FROM claimed\nUNION ALL\n"
                "SELECT NULL, NULL, now(), " +
                    notify;
  return fmt::format(
      R"sql(
WITH input AS (
  SELECT u.id, u.ticket, u.timeout_ms, u.expected
  FROM unnest($1::text[], $2::text[], $3::float8[], $5::int8[])
       AS u(id, ticket, timeout_ms, expected)
), locked AS (
  SELECT t.id FROM backstage_backend_tasks__tasks AS t
  JOIN input AS i ON i.id = t.id
  WHERE t.current_run_ticket IS NULL AND t.next_run_start_at <= now()
    AND (i.expected IS NULL OR {version} = i.expected)
  ORDER BY t.id
  FOR UPDATE OF t SKIP LOCKED
), claimed AS (
  UPDATE backstage_backend_tasks__tasks AS t
  SET current_run_ticket = i.ticket,
      current_run_started_at = now(),
      current_run_expires_at = now() + least(i.timeout_ms, $4::float8) * interval '1 millisecond'
  FROM input AS i
  WHERE t.id = i.id AND t.id IN (SELECT id FROM locked)
    AND t.current_run_ticket IS NULL AND t.next_run_start_at <= now()
    AND (i.expected IS NULL OR {version} = i.expected)
  RETURNING {returning}
){started}
{rows}
)sql",
      fmt::arg("version", VersionOf("t")), fmt::arg("returning", returning),
      fmt::arg("started", started), fmt::arg("rows", rows));
}

// The UPDATE that closes the runs that `match` finds among the rows of the CTE `finishes` (run_id,
// ended_at (NULL: now()), outcome, error_json, exit_code, signal, http_status, output_hex): those
// running, or closed as lost (their host's own account replaces the sweep's).
std::string CloseRuns(std::string_view match) {
  return fmt::format(R"sql(
  UPDATE stagehand_task_runs AS r
  SET ended_at = coalesce(f.ended_at, now()), outcome = f.outcome, error_json = f.error_json,
      exit_code = f.exit_code, signal = f.signal, http_status = f.http_status,
      output = decode(f.output_hex, 'hex')
  FROM finishes AS f
  WHERE {} AND r.run_id = f.run_id AND (r.ended_at IS NULL OR r.outcome = 'lost')
)sql",
                     match);
}

// The batched release (release_many). Rows are locked in id order first, so two batches touching
// the same rows cannot deadlock. With `history`, the runs that come with a finish ($10..$22) are
// written whole, ended at the release's time, as their host tells it, whether or not their ticket
// still held it, into their tasks' rings of $23 runs (the runs whose start was recorded are closed
// by record_ends instead). Its writes go through the primary key alone, so its prepared plan
// never scans the history, however it grows.
std::string ReleaseMany(bool history) {
  const std::string ended = history ? R"sql(, whole AS (
  SELECT f.id AS task_id, f.ord, f.run_id, f.host, f.pid, f.trigger_kind, f.slot_at,
         f.started_at, now() AS ended_at, f.outcome, f.error_json, f.exit_code, f.signal,
         f.http_status, f.attempt, decode(f.output_hex, 'hex') AS output, f.trace_id
  FROM unnest($1::text[], $2::text[], $10::text[], $11::text[], $12::int4[], $13::int4[],
              $14::int4[], $15::text[], $16::text[], $17::int8[], $18::text[],
              $19::timestamptz[], $20::timestamptz[], $21::int4[], $22::text[])
       WITH ORDINALITY
       AS f(id, run_id, outcome, error_json, exit_code, signal, http_status, output_hex, host, pid,
            trigger_kind, slot_at, started_at, attempt, trace_id, ord)
  WHERE f.outcome IS NOT NULL
))sql" + RecordInRings("whole", 23, "written", /*one_per_task=*/true)
                                    : "";
  return fmt::format(
      R"sql(
WITH input AS (
  SELECT u.id, u.ticket, u.next_kind, u.next_seconds, u.next_instant, u.error_json, u.marked
  FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::timestamptz[], $6::text[],
              $7::text[])
       AS u(id, ticket, next_kind, next_seconds, next_instant, error_json, marked)
), locked AS (
  SELECT t.id FROM backstage_backend_tasks__tasks AS t
  WHERE t.id = ANY ($1::text[])
  ORDER BY t.id
  FOR UPDATE
), released AS (
  UPDATE backstage_backend_tasks__tasks AS t
  SET next_run_start_at = {next},
      current_run_ticket = NULL,
      current_run_started_at = NULL,
      current_run_expires_at = NULL,
      last_run_ended_at = now(),
      last_run_error_json = CASE WHEN t.current_run_ticket = i.marked THEN $8::text
                                 ELSE i.error_json END
  FROM input AS i
  WHERE t.id = i.id AND t.id IN (SELECT id FROM locked)
    AND t.current_run_ticket IN (i.ticket, i.marked)
  RETURNING t.id, t.next_run_start_at, {version} AS version
){ended}
SELECT r.id, now(), NULL, r.next_run_start_at, r.version
FROM released AS r
UNION ALL
SELECT NULL, now(), {notify}, NULL, NULL
)sql",
      fmt::arg("next", PlanColumnsInUpdate("i", "next", "t")), fmt::arg("version", VersionOf("t")),
      fmt::arg("ended", ended),
      fmt::arg("notify", NotifyInChunks(9, "releases", "released", {"id"})));
}

// The janitor's sweep (sweep); with `history`, it closes the swept runs' history as lost.
std::string Sweep(bool history) {
  return SweptCte(1, history) + R"sql(
SELECT id, now(), NULL FROM swept WHERE NOT paused
)sql";
}

// The batched registration (upsert_many). Rows that exist are updated (keeping an earlier next
// start); the others are inserted. A row another writer inserts meanwhile gets the new settings and
// keeps its own next start. Rows are locked, and new ones inserted, in id order, as the releases
// lock them: a host registering while another releases the same tasks cannot deadlock with it.
// With `registrations`, the tasks that come with a host ($10) are also recorded as registered by it
// now, in id order (so that concurrent registrations of the same tasks never deadlock).
std::string UpsertMany(bool registrations) {
  const std::string registered = registrations ? R"sql(, registered AS (
  INSERT INTO stagehand_task_registrations AS r (task_id, host, last_seen_at)
  SELECT g.id, g.host, now() FROM unnest($1::text[], $10::text[]) AS g(id, host)
  WHERE g.host IS NOT NULL
  ORDER BY g.id
  ON CONFLICT (task_id) DO UPDATE SET host = excluded.host, last_seen_at = excluded.last_seen_at
))sql"
                                               : "";
  return fmt::format(R"sql(
WITH input AS (
  SELECT u.id, u.settings_json, {start} AS start_at, {next} AS next_at
  FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::timestamptz[], $6::text[],
              $7::float8[], $8::timestamptz[])
       AS u(id, settings_json, start_kind, start_seconds, start_instant, next_kind, next_seconds,
            next_instant)
), locked AS (
  SELECT t.id FROM backstage_backend_tasks__tasks AS t
  WHERE t.id = ANY ($1::text[])
  ORDER BY t.id
  FOR UPDATE
), updated AS (
  UPDATE backstage_backend_tasks__tasks AS t
  SET settings_json = i.settings_json,
      next_run_start_at = CASE
        WHEN t.next_run_start_at IS NULL OR i.next_at < t.next_run_start_at THEN i.next_at
        ELSE t.next_run_start_at
      END
  FROM input AS i
  WHERE t.id = i.id AND t.id IN (SELECT id FROM locked)
  RETURNING t.id, t.next_run_start_at, t.settings_json
), inserted AS (
  INSERT INTO backstage_backend_tasks__tasks AS t (id, next_run_start_at, settings_json)
  SELECT i.id, i.start_at, i.settings_json FROM input AS i
  WHERE NOT EXISTS (SELECT FROM updated AS u WHERE u.id = i.id)
  ORDER BY i.id
  ON CONFLICT (id) DO UPDATE SET settings_json = excluded.settings_json
  RETURNING t.id, t.next_run_start_at, t.settings_json
), written AS (
  SELECT id, next_run_start_at, settings_json FROM updated
  UNION ALL
  SELECT id, next_run_start_at, settings_json FROM inserted
){registered}
SELECT w.id, w.next_run_start_at, now(), pg_notify($9::text, 'upsert:' || w.id), {version}
FROM written AS w
)sql",
                     fmt::arg("start", PlanColumns("u", "start")),
                     fmt::arg("next", PlanColumns("u", "next")),
                     fmt::arg("version", VersionOf("w")), fmt::arg("registered", registered));
}

// The prune rule (task_registrations.h) on a task row `t`, with the cutoff bound at parameter
// $<cutoff_param>; the registration's part is RegistrationRule.
std::string RowRule(int cutoff_param) {
  return fmt::format(R"sql((t.current_run_ticket IS NULL OR t.current_run_expires_at < now())
  AND (t.current_run_started_at IS NULL OR t.current_run_started_at < ${0}::timestamptz)
  AND (t.last_run_ended_at IS NULL OR t.last_run_ended_at < ${0}::timestamptz)
  AND (t.next_run_start_at IS NULL OR t.next_run_start_at < ${0}::timestamptz))sql",
                     cutoff_param);
}

// The prune rule's part on a task's registration `r` (NULL columns without one).
std::string RegistrationRule(int cutoff_param) {
  return fmt::format("(r.last_seen_at IS NULL OR r.last_seen_at < ${}::timestamptz)", cutoff_param);
}

}  // namespace stagehand::store_internal::pg_sql
