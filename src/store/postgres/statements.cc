#include "store/postgres/statements.h"

#include <fmt/format.h>

#include <initializer_list>
#include <optional>
#include <string_view>

#include "stagehand/store/task_store.h"

namespace stagehand::store_internal::pg_sql {

// The history statements strip a cancel's mark from a ticket with this literal.
static_assert(kCancelRequestedPrefix == "cancel:");
static_assert(kPausedPrefix == "paused:");
static_assert(kPausePendingPrefix == "pausing:");

namespace {

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

struct Texts {
  std::string upsert =
      fmt::format(R"sql(
INSERT INTO backstage_backend_tasks__tasks AS t (id, next_run_start_at, settings_json)
VALUES ($1::text, {start}, $2::text)
ON CONFLICT (id) DO UPDATE SET
  settings_json = excluded.settings_json,
  next_run_start_at = CASE
    WHEN t.next_run_start_at IS NULL OR {next} < t.next_run_start_at THEN {next}
    ELSE t.next_run_start_at
  END
RETURNING t.next_run_start_at, now(), pg_notify($9::text, 'upsert:' || t.id), {version}
)sql",
                  fmt::arg("start", Plan(3, false)), fmt::arg("next", Plan(6, false)),
                  fmt::arg("version", VersionOf("t")));

  std::string upsert_many = UpsertMany(false);

  std::string poll = fmt::format(R"sql(
SELECT 'task', id, settings_json, next_run_start_at,
       current_run_ticket IS NOT NULL,
       current_run_expires_at,
       coalesce(next_run_start_at <= now() AND current_run_ticket IS NULL, false),
       now(), {version}
FROM backstage_backend_tasks__tasks AS t
WHERE id = ANY ($1::text[])
UNION ALL
SELECT 'clock', NULL, NULL, NULL, NULL, NULL, NULL, now(), NULL
)sql",
                                 fmt::arg("version", VersionOf("t")));

  std::string poll_changed = PollChanged(false, false);
  std::string poll_changed_and_sweep = PollChanged(true, false);

  std::string poll_and_sweep = PollAndSweep(false);

  std::string claim = R"sql(
WITH claimed AS (
  UPDATE backstage_backend_tasks__tasks
  SET current_run_ticket = $2::text,
      current_run_started_at = now(),
      current_run_expires_at = now() + least($3::float8, $4::float8) * interval '1 millisecond'
  WHERE id = $1::text AND current_run_ticket IS NULL AND next_run_start_at <= now()
  RETURNING current_run_expires_at
)
SELECT now(), (SELECT current_run_expires_at FROM claimed)
)sql";

  std::string claim_many = ClaimMany(false);

  std::string renew_lease = R"sql(
UPDATE backstage_backend_tasks__tasks
SET current_run_expires_at = least(current_run_started_at + $3::float8 * interval '1 millisecond',
                                   now() + $4::float8 * interval '1 millisecond')
WHERE id = $1::text AND current_run_ticket IN ($2::text, $5::text)
RETURNING now(), current_run_ticket = $5::text
)sql";

  std::string release = fmt::format(R"sql(
UPDATE backstage_backend_tasks__tasks
SET next_run_start_at = {next},
    current_run_ticket = NULL,
    current_run_started_at = NULL,
    current_run_expires_at = NULL,
    last_run_ended_at = now(),
    last_run_error_json = CASE WHEN current_run_ticket = $9::text THEN $10::text ELSE $6::text END
WHERE id = $1::text AND current_run_ticket IN ($2::text, $9::text)
RETURNING now(), pg_notify($7::text, $8::text || ':' || id)
)sql",
                                    fmt::arg("next", Plan(3, true)));

  std::string release_many = ReleaseMany(false);

  std::string skip_slot = fmt::format(R"sql(
UPDATE backstage_backend_tasks__tasks AS t
SET next_run_start_at = $3::timestamptz
WHERE t.id = $1::text AND t.current_run_ticket IS NULL AND {version} = $2::int8
RETURNING t.next_run_start_at, {version}, now(), pg_notify($4::text, 'release:' || t.id)
)sql",
                                      fmt::arg("version", VersionOf("t")));

  std::string trigger = R"sql(
WITH target AS (
  SELECT id, current_run_ticket FROM backstage_backend_tasks__tasks WHERE id = $1::text
), triggered AS (
  UPDATE backstage_backend_tasks__tasks
  SET next_run_start_at = now()
  WHERE id = $1::text AND current_run_ticket IS NULL
  RETURNING pg_notify($2::text, CASE WHEN $3::text = '' THEN 'trigger:' || id
    ELSE 'traced-trigger:' || octet_length(id) || ':' || id || octet_length($3::text) || ':' ||
         $3::text || octet_length($4::text) || ':' || $4::text END)
)
SELECT (SELECT count(*) FROM target) > 0, (SELECT count(*) FROM triggered) > 0, now(),
       coalesce((SELECT starts_with(current_run_ticket, 'paused:') FROM target), false)
)sql";

  std::string pause = R"sql(
WITH target AS (
  SELECT id FROM backstage_backend_tasks__tasks WHERE id = $1::text
), paused AS (
  UPDATE backstage_backend_tasks__tasks
  SET current_run_ticket = $2::text,
      current_run_started_at = now(),
      current_run_expires_at = $3::timestamptz
  WHERE id = $1::text
    AND (current_run_ticket IS NULL OR starts_with(current_run_ticket, 'paused:'))
    AND ($3::timestamptz IS NULL OR $3::timestamptz > now())
  RETURNING pg_notify($4::text, 'upsert:' || id)
)
SELECT (SELECT count(*) FROM target) > 0, (SELECT count(*) FROM paused) > 0, now(),
       coalesce($3::timestamptz <= now(), false)
)sql";

  std::string resume = R"sql(
WITH target AS (
  SELECT id FROM backstage_backend_tasks__tasks WHERE id = $1::text
), resumed AS (
  UPDATE backstage_backend_tasks__tasks
  SET current_run_ticket = NULL, current_run_started_at = NULL, current_run_expires_at = NULL
  WHERE id = $1::text AND starts_with(current_run_ticket, 'paused:')
  RETURNING pg_notify($2::text, 'release:' || id)
)
SELECT (SELECT count(*) FROM target) > 0, (SELECT count(*) FROM resumed) > 0, now()
)sql";

  std::string rewrite_ticket = R"sql(
UPDATE backstage_backend_tasks__tasks
SET current_run_ticket = $3::text,
    current_run_expires_at = CASE WHEN $5::float8 IS NULL THEN current_run_expires_at
      ELSE least(current_run_expires_at, now() + $5::float8 * interval '1 millisecond') END
WHERE id = $1::text AND current_run_ticket = $2::text
RETURNING now(), pg_notify($4::text, 'upsert:' || id)
)sql";

  std::string release_into_pause =
      fmt::format(R"sql(
UPDATE backstage_backend_tasks__tasks
SET next_run_start_at = {next},
    current_run_ticket = $9::text,
    current_run_started_at = CASE WHEN $9::text IS NULL THEN NULL ELSE now() END,
    current_run_expires_at = $10::timestamptz,
    last_run_ended_at = now(),
    last_run_error_json = $6::text
WHERE id = $1::text AND current_run_ticket = $2::text
RETURNING now(), pg_notify($7::text, $8::text || ':' || id), next_run_start_at, {version}
)sql",
                  fmt::arg("next", Plan(3, true)),
                  fmt::arg("version", VersionOf("backstage_backend_tasks__tasks")));

  std::string read_for_cancel = R"sql(
SELECT settings_json, current_run_ticket, now(), last_run_error_json
FROM backstage_backend_tasks__tasks
WHERE id = $1::text
)sql";

  std::string mark_cancelled = R"sql(
UPDATE backstage_backend_tasks__tasks
SET current_run_ticket = $3::text,
    current_run_expires_at = least(current_run_expires_at,
                                   now() + $4::float8 * interval '1 millisecond')
WHERE id = $1::text AND current_run_ticket = $2::text
RETURNING now(), pg_notify($5::text, 'cancel:' || id)
)sql";

  std::string sweep = Sweep(false);

  std::string states = R"sql(
SELECT id, settings_json, next_run_start_at, current_run_ticket, current_run_started_at,
       current_run_expires_at, last_run_error_json, last_run_ended_at, now()
FROM backstage_backend_tasks__tasks
ORDER BY id COLLATE "C"
)sql";

  std::string remove = R"sql(
DELETE FROM backstage_backend_tasks__tasks
WHERE id = $1::text
RETURNING now(), pg_notify($2::text, 'delete:' || id)
)sql";

  std::string now = "SELECT now()";
};

// The columns of a run, in the order PostgresTaskStore reads them.
constexpr std::string_view kRunColumns =
    "run_id, task_id, host, pid, trigger_kind, slot_at, started_at, ended_at, outcome, error_json, "
    "exit_code, signal, http_status, attempt, trace_id";

struct HistoryTexts {
  std::string claim_many = ClaimMany(true);
  std::string release_many = ReleaseMany(true);
  std::string sweep = Sweep(true);
  std::string poll_and_sweep = PollAndSweep(true);
  std::string poll_changed_and_sweep = PollChanged(true, true);

  std::string record_starts = R"sql(
WITH starting AS (
  SELECT u.task_id, u.ord, u.run_id, u.host, u.pid, u.trigger_kind, u.slot_at,
         coalesce(u.started_at, now()) AS started_at, NULL::timestamptz AS ended_at,
         'running' AS outcome, NULL::text AS error_json, NULL::int4 AS exit_code,
         NULL::int4 AS signal, NULL::int4 AS http_status, u.attempt, NULL::bytea AS output,
         u.trace_id
  FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[], $6::timestamptz[],
              $7::timestamptz[], $8::int4[], $9::text[]) WITH ORDINALITY
       AS u(run_id, task_id, host, pid, trigger_kind, slot_at, started_at, attempt, trace_id, ord)
))sql" + RecordInRings("starting", 10, "started", /*one_per_task=*/false) +
                              R"sql(
SELECT task_id, slot, run_id FROM started
)sql";

  std::string record_ends = R"sql(
WITH finishes AS (
  SELECT f.*
  FROM unnest($1::text[], $2::int4[], $3::text[], $4::timestamptz[], $5::text[], $6::text[],
              $7::int4[], $8::int4[], $9::int4[], $10::text[])
       AS f(task_id, ring_slot, run_id, ended_at, outcome, error_json, exit_code, signal,
            http_status, output_hex)
), ended AS ()sql" + CloseRuns("r.task_id = f.task_id AND r.slot = f.ring_slot") +
                            R"sql(  RETURNING 1
)
SELECT count(*) FROM ended
)sql";

  std::string record_ends_by_id = R"sql(
WITH finishes AS (
  SELECT f.*
  FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::int4[], $6::int4[],
              $7::int4[], $8::text[])
       AS f(run_id, ended_at, outcome, error_json, exit_code, signal, http_status, output_hex)
), ended AS ()sql" + CloseRuns("true") +
                                  R"sql(  RETURNING 1
)
SELECT count(*) FROM ended
)sql";

  std::string recorded_runs = R"sql(
SELECT r.run_id FROM stagehand_task_runs AS r
JOIN unnest($1::text[], $2::text[]) AS u(task_id, run_id)
  ON r.task_id = u.task_id AND r.run_id = u.run_id
)sql";

  std::string list_runs = fmt::format(R"sql(
SELECT {} FROM stagehand_task_runs
WHERE task_id = $1::text
ORDER BY started_at DESC, run_id DESC
LIMIT $2::int8
)sql",
                                      kRunColumns);

  std::string list_runs_before = fmt::format(R"sql(
SELECT {} FROM stagehand_task_runs
WHERE task_id = $1::text AND (started_at, run_id) < ($3::timestamptz, $4::text)
ORDER BY started_at DESC, run_id DESC
LIMIT $2::int8
)sql",
                                             kRunColumns);

  std::string get_run = fmt::format(R"sql(
SELECT {}, encode(output, 'hex') FROM stagehand_task_runs WHERE run_id = $1::text
)sql",
                                    kRunColumns);

  std::string run_start =
      "SELECT started_at FROM stagehand_task_runs WHERE task_id = $2::text AND run_id = $1::text";

  std::string mark_lost = R"sql(
UPDATE stagehand_task_runs
SET ended_at = now(), outcome = 'lost', error_json = $2::text
WHERE run_id = ANY ($1::text[]) AND ended_at IS NULL
)sql";

  std::string prune_expired = R"sql(
DELETE FROM stagehand_task_runs
WHERE (task_id, slot) IN (
  SELECT task_id, slot FROM stagehand_task_runs
  WHERE started_at < now() - $1::float8 * interval '1 second' OR slot >= $3::int4
  ORDER BY started_at
  LIMIT $2::int8
  FOR UPDATE SKIP LOCKED)
)sql";
};

// The texts of RegistryStatements.
struct RegistryTexts {
  std::string upsert_many = UpsertMany(true);

  std::string refresh = R"sql(
INSERT INTO stagehand_task_registrations AS r (task_id, host, last_seen_at)
SELECT t.id, $2::text, now() FROM backstage_backend_tasks__tasks AS t
WHERE t.id = ANY ($1::text[])
ORDER BY t.id
ON CONFLICT (task_id) DO UPDATE SET host = excluded.host, last_seen_at = excluded.last_seen_at
)sql";

  std::string prune_candidates = fmt::format(R"sql(
SELECT t.id, r.host, r.last_seen_at, t.last_run_ended_at, t.next_run_start_at
FROM backstage_backend_tasks__tasks AS t
LEFT JOIN stagehand_task_registrations AS r ON r.task_id = t.id
WHERE {row_rule}
  AND {registration_rule}
ORDER BY t.id COLLATE "C"
)sql",
                                             fmt::arg("row_rule", RowRule(1)),
                                             fmt::arg("registration_rule", RegistrationRule(1)));

  // The task rows are locked first, then their registrations, each in id order (the order of a
  // registration's own writes, so the two never deadlock): a claim or a refresh in flight is
  // waited for, and the rule is checked again on the rows it left, so a task claimed or refreshed
  // meanwhile is kept. A re-registration waits for the deletion, then inserts the row anew.
  std::string prune_tasks = fmt::format(R"sql(
WITH locked AS (
  SELECT t.id FROM backstage_backend_tasks__tasks AS t
  WHERE t.id = ANY ($1::text[]) AND {row_rule}
  ORDER BY t.id
  FOR UPDATE
), registrations_now AS (
  SELECT r.task_id, r.last_seen_at FROM stagehand_task_registrations AS r
  WHERE r.task_id IN (SELECT id FROM locked)
  ORDER BY r.task_id
  FOR UPDATE
), doomed AS (
  SELECT l.id FROM locked AS l
  LEFT JOIN registrations_now AS r ON r.task_id = l.id
  WHERE ($3::bool OR r.task_id IS NOT NULL) AND {registration_rule}
), removed AS (
  DELETE FROM backstage_backend_tasks__tasks AS t
  USING doomed AS d
  WHERE t.id = d.id
  RETURNING t.id, pg_notify($4::text, 'delete:' || t.id)
), runs AS (
  DELETE FROM stagehand_task_runs WHERE task_id IN (SELECT id FROM removed)
), run_counts AS (
  DELETE FROM stagehand_task_run_counts WHERE task_id IN (SELECT id FROM removed)
), registrations AS (
  DELETE FROM stagehand_task_registrations WHERE task_id IN (SELECT id FROM removed)
)
SELECT id FROM removed ORDER BY id COLLATE "C"
)sql",
                                        fmt::arg("row_rule", RowRule(2)),
                                        fmt::arg("registration_rule", RegistrationRule(2)));
};

}  // namespace

const Statements& TaskStatements() {
  static const Texts* const texts = new Texts();
  static const Statements statements{
      .upsert = {0, "stagehand_upsert", texts->upsert.c_str()},
      .upsert_many = {12, "stagehand_upsert_many", texts->upsert_many.c_str()},
      .poll = {1, "stagehand_poll", texts->poll.c_str()},
      .poll_changed = {13, "stagehand_poll_changed", texts->poll_changed.c_str()},
      .poll_changed_and_sweep = {14, "stagehand_poll_changed_and_sweep",
                                 texts->poll_changed_and_sweep.c_str()},
      .poll_and_sweep = {2, "stagehand_poll_and_sweep", texts->poll_and_sweep.c_str()},
      .claim = {3, "stagehand_claim", texts->claim.c_str()},
      .claim_many = {16, "stagehand_claim_many", texts->claim_many.c_str()},
      .renew_lease = {4, "stagehand_renew_lease", texts->renew_lease.c_str()},
      .release = {5, "stagehand_release", texts->release.c_str()},
      .release_many = {17, "stagehand_release_many", texts->release_many.c_str()},
      .skip_slot = {39, "stagehand_skip_slot", texts->skip_slot.c_str()},
      .trigger = {6, "stagehand_trigger", texts->trigger.c_str()},
      .pause = {35, "stagehand_pause", texts->pause.c_str()},
      .resume = {36, "stagehand_resume", texts->resume.c_str()},
      .rewrite_ticket = {37, "stagehand_rewrite_ticket", texts->rewrite_ticket.c_str()},
      .release_into_pause = {38, "stagehand_release_into_pause", texts->release_into_pause.c_str()},
      .read_for_cancel = {7, "stagehand_read_for_cancel", texts->read_for_cancel.c_str()},
      .mark_cancelled = {15, "stagehand_mark_cancelled", texts->mark_cancelled.c_str()},
      .sweep = {8, "stagehand_sweep", texts->sweep.c_str()},
      .states = {9, "stagehand_states", texts->states.c_str()},
      .remove = {10, "stagehand_delete", texts->remove.c_str()},
      .now = {11, "stagehand_now", texts->now.c_str()},
  };
  return statements;
}

const HistoryStatements& RunStatements() {
  static const HistoryTexts* const texts = new HistoryTexts();
  static const HistoryStatements statements{
      .claim_many = {18, "stagehand_claim_many_history", texts->claim_many.c_str()},
      .release_many = {19, "stagehand_release_many_history", texts->release_many.c_str()},
      .sweep = {20, "stagehand_sweep_history", texts->sweep.c_str(), true},
      .poll_and_sweep = {21, "stagehand_poll_and_sweep_history", texts->poll_and_sweep.c_str(),
                         true},
      .poll_changed_and_sweep = {22, "stagehand_poll_changed_and_sweep_history",
                                 texts->poll_changed_and_sweep.c_str(), true},
      .record_starts = {23, "stagehand_record_starts", texts->record_starts.c_str()},
      .record_ends = {24, "stagehand_record_ends", texts->record_ends.c_str(), true},
      .record_ends_by_id = {40, "stagehand_record_ends_by_id", texts->record_ends_by_id.c_str(),
                            true},
      .recorded_runs = {41, "stagehand_recorded_runs", texts->recorded_runs.c_str(), true},
      .list_runs = {25, "stagehand_list_runs", texts->list_runs.c_str(), true},
      .list_runs_before = {26, "stagehand_list_runs_before", texts->list_runs_before.c_str(), true},
      .get_run = {27, "stagehand_get_run", texts->get_run.c_str(), true},
      .run_start = {28, "stagehand_run_start", texts->run_start.c_str(), true},
      .mark_lost = {29, "stagehand_mark_lost", texts->mark_lost.c_str(), true},
      .prune_expired = {30, "stagehand_prune_expired", texts->prune_expired.c_str(), true},
  };
  return statements;
}

const RegistryStatements& RegistrationStatements() {
  static const RegistryTexts* const texts = new RegistryTexts();
  static const RegistryStatements statements{
      .upsert_many = {31, "stagehand_upsert_many_registered", texts->upsert_many.c_str()},
      .refresh = {32, "stagehand_refresh_registrations", texts->refresh.c_str()},
      .prune_candidates = {33, "stagehand_prune_candidates", texts->prune_candidates.c_str()},
      .prune_tasks = {34, "stagehand_prune_tasks", texts->prune_tasks.c_str(), true},
  };
  return statements;
}

const char* const kSessionSetup = R"sql(
SELECT set_config('statement_timeout', $1::text, false),
       set_config('TimeZone', 'UTC', false),
       set_config('DateStyle', 'ISO, YMD', false),
       CASE WHEN $2::text <> '' THEN set_config('search_path', $2::text, false) END,
       now(),
       set_config('enable_seqscan', 'off', false),
       set_config('jit', 'off', false)
)sql";

// kSessionSetup's columns behind a transaction pooler: only what the pooler carries from session
// to session (it tracks TimeZone and DateStyle per client); the parameters are not used.
const char* const kPooledSessionSetup = R"sql(
SELECT $1::text, set_config('TimeZone', 'UTC', false), set_config('DateStyle', 'ISO, YMD', false),
       $2::text, now()
)sql";

const char* const kServerIdentity = R"sql(
SELECT (SELECT system_identifier::text FROM pg_control_system()), pg_is_in_recovery(),
       CASE WHEN NOT pg_is_in_recovery() THEN pg_walfile_name(pg_current_wal_lsn()) END
)sql";

const char* const kSetSearchPath =
    "SELECT CASE WHEN $1::text <> '' THEN set_config('search_path', $1::text, false) "
    "ELSE set_config('search_path', reset_val, false) END FROM pg_settings "
    "WHERE name = 'search_path'";

const char* const kDatabaseExists = "SELECT 1 FROM pg_database WHERE datname = $1::text";

std::string CreateDatabase(std::string_view quoted_name) {
  return fmt::format("CREATE DATABASE {}", quoted_name);
}

std::string CreateSchema(std::string_view quoted_name) {
  return fmt::format("CREATE SCHEMA IF NOT EXISTS {}", quoted_name);
}

std::string Listen(std::string_view quoted_channel) {
  return fmt::format("LISTEN {}", quoted_channel);
}

std::string Unlisten(std::string_view quoted_channel) {
  return fmt::format("UNLISTEN {}", quoted_channel);
}

const char* const kBegin = "BEGIN";
const char* const kCommit = "COMMIT";
const char* const kRollback = "ROLLBACK";

const char* const kMigrationAdvisoryLock = R"sql(
SELECT pg_advisory_xact_lock(
  hashtextextended('stagehand:backstage_backend_tasks__knex_migrations:' || current_schema(), 0))
)sql";

// Knex's own DDL for its bookkeeping tables.
const char* const kCreateMigrationsTable =
    R"sql(create table if not exists "backstage_backend_tasks__knex_migrations" ("id" serial primary key, "name" varchar(255), "batch" integer, "migration_time" timestamptz))sql";

const char* const kCreateMigrationsLockTable =
    R"sql(create table if not exists "backstage_backend_tasks__knex_migrations_lock" ("index" serial primary key, "is_locked" integer))sql";

const char* const kInsertLockRowIfMissing = R"sql(
INSERT INTO backstage_backend_tasks__knex_migrations_lock (is_locked)
SELECT 0 WHERE NOT EXISTS (SELECT FROM backstage_backend_tasks__knex_migrations_lock)
)sql";

const char* const kReadMigrationLock = R"sql(
SELECT is_locked FROM backstage_backend_tasks__knex_migrations_lock ORDER BY "index" FOR UPDATE
)sql";

const char* const kTakeMigrationLock = R"sql(
UPDATE backstage_backend_tasks__knex_migrations_lock SET is_locked = 1 WHERE is_locked = 0
)sql";

const char* const kFreeMigrationLock =
    "UPDATE backstage_backend_tasks__knex_migrations_lock SET is_locked = 0";

const char* const kListMigrations =
    "SELECT name FROM backstage_backend_tasks__knex_migrations ORDER BY id";

const char* const kLatestBatch =
    "SELECT coalesce(max(batch), 0) FROM backstage_backend_tasks__knex_migrations";

const char* const kRecordMigration = R"sql(
INSERT INTO backstage_backend_tasks__knex_migrations (name, batch, migration_time)
VALUES ($1::text, $2::int4, now())
)sql";

const char* const kPause = "SELECT pg_sleep($1::float8)";

// The DDL knex generates for Backstage's migrations/scheduler/*.js on PostgreSQL.
const Migration kMigrations[3] = {
    {"20210928160613_init.js",
     R"sql(create table "backstage_backend_tasks__tasks" ("id" varchar(255) not null, "settings_json" text not null, "next_run_start_at" timestamptz not null, "current_run_ticket" text null, "current_run_started_at" timestamptz null, "current_run_expires_at" timestamptz null, constraint "backstage_backend_tasks__tasks_pkey" primary key ("id"));
comment on table "backstage_backend_tasks__tasks" is 'Tasks used for scheduling work on multiple workers';
comment on column "backstage_backend_tasks__tasks"."id" is 'The unique ID of this particular task';
comment on column "backstage_backend_tasks__tasks"."settings_json" is 'JSON serialized object with properties for this task';
comment on column "backstage_backend_tasks__tasks"."next_run_start_at" is 'The next time that the task should be started';
comment on column "backstage_backend_tasks__tasks"."current_run_ticket" is 'A unique ticket for the current task run';
comment on column "backstage_backend_tasks__tasks"."current_run_started_at" is 'The time that the current task run started';
comment on column "backstage_backend_tasks__tasks"."current_run_expires_at" is 'The time that the current task run will time out')sql"},
    {"20240712211735_nullable_next_run.js",
     R"sql(alter table "backstage_backend_tasks__tasks" alter column "next_run_start_at" drop not null)sql"},
    {"20250411000000_last_run.js",
     R"sql(alter table "backstage_backend_tasks__tasks" add column "last_run_error_json" text null, add column "last_run_ended_at" timestamptz null;
comment on column "backstage_backend_tasks__tasks"."last_run_error_json" is 'JSON serialized error object from the last task run, if it failed';
comment on column "backstage_backend_tasks__tasks"."last_run_ended_at" is 'The last time that the task ended')sql"},
};

const char* const kHistoryAdvisoryLock = R"sql(
SELECT pg_advisory_xact_lock(hashtextextended('stagehand:stagehand_migrations:' || current_schema(), 0))
)sql";

const char* const kCreateHistoryMigrationsTable = R"sql(
CREATE TABLE IF NOT EXISTS stagehand_migrations (
  name varchar(255) NOT NULL,
  migrated_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT stagehand_migrations_pkey PRIMARY KEY (name)
)
)sql";

const char* const kListHistoryMigrations = "SELECT name FROM stagehand_migrations ORDER BY name";

const char* const kRecordHistoryMigration =
    "INSERT INTO stagehand_migrations (name) VALUES ($1::text)";

const char* const kHistoryTableExists = "SELECT to_regclass('stagehand_task_runs') IS NOT NULL";

const char* const kKeepRequestKey = R"sql(
WITH expired AS (
  SELECT request_key FROM stagehand_request_keys
  WHERE expires_at < now()
  ORDER BY expires_at
  LIMIT 16
  FOR UPDATE SKIP LOCKED
), removed AS (
  DELETE FROM stagehand_request_keys AS k USING expired AS e
  WHERE k.request_key = e.request_key AND k.request_key <> $1::text
)
INSERT INTO stagehand_request_keys AS k
  (request_key, fingerprint, status, body, created_at, expires_at)
VALUES ($1::text, $2::text, 0, '', now(), now() + $3::float8 * interval '1 millisecond')
ON CONFLICT (request_key) DO UPDATE
SET fingerprint = excluded.fingerprint, status = 0, body = '', created_at = excluded.created_at,
    expires_at = excluded.expires_at
WHERE k.expires_at <= now()
RETURNING 1
)sql";

const char* const kReadRequestKey = R"sql(
SELECT fingerprint, status, body FROM stagehand_request_keys WHERE request_key = $1::text
)sql";

const char* const kAnswerRequestKey = R"sql(
UPDATE stagehand_request_keys SET status = $2::int4, body = $3::text WHERE request_key = $1::text
)sql";

const char* const kRegistrationsTableExists =
    "SELECT to_regclass('stagehand_task_registrations') IS NOT NULL";

// run_id is compared in the "C" collation, so pages are ordered by its bytes on every server. Since
// 0004 the table holds a ring of rows per task (ADR 0011): its only index is the primary key
// (task_id, slot), so that no write of a run changes an indexed column once its task's ring is
// full, and pages keep free space, so that every write of a run is a heap-only update.
const Migration kHistoryMigrations[6] = {
    {"0001_task_runs",
     R"sql(CREATE TABLE stagehand_task_runs (
  run_id text COLLATE "C" NOT NULL,
  task_id varchar(255) NOT NULL,
  seq int8 NOT NULL,
  host text NOT NULL,
  pid int8 NOT NULL,
  trigger_kind text NOT NULL,
  slot_at timestamptz NULL,
  started_at timestamptz NOT NULL,
  ended_at timestamptz NULL,
  outcome text NOT NULL,
  error_json text NULL,
  exit_code int4 NULL,
  signal int4 NULL,
  http_status int4 NULL,
  attempt int4 NOT NULL,
  output bytea NULL,
  CONSTRAINT stagehand_task_runs_pkey PRIMARY KEY (run_id)
) WITH (fillfactor = 80);
CREATE INDEX stagehand_task_runs_by_task ON stagehand_task_runs (task_id, started_at, run_id);
CREATE INDEX stagehand_task_runs_by_seq ON stagehand_task_runs (task_id, seq);
CREATE INDEX stagehand_task_runs_by_start ON stagehand_task_runs (started_at);
COMMENT ON TABLE stagehand_task_runs IS 'stagehand''s run history: one row per run of a task by a stagehand host (Backstage workers write none)')sql"},
    // One row per task, no foreign key to Backstage's table (whose rows Backstage's own tools may
    // delete); only the primary key: a refresh finds its rows by it, and a prune reads them all.
    {"0002_task_registrations",
     R"sql(CREATE TABLE stagehand_task_registrations (
  task_id varchar(255) NOT NULL,
  host text NOT NULL,
  last_seen_at timestamptz NOT NULL,
  CONSTRAINT stagehand_task_registrations_pkey PRIMARY KEY (task_id)
);
COMMENT ON TABLE stagehand_task_registrations IS 'stagehand''s task registrations: the stagehand host that registered each task last, and when a host last refreshed it (Backstage workers write none)')sql"},
    // A run's writes touch two indexes instead of four: the trim counts runs by their start through
    // by_task, and the age prune finds old runs through a BRIN index (next to nothing to keep up as
    // rows are appended). seq is no longer read (SeqOf).
    {"0003_task_runs_two_indexes",
     R"sql(DROP INDEX stagehand_task_runs_by_seq;
DROP INDEX stagehand_task_runs_by_start;
CREATE INDEX stagehand_task_runs_by_start ON stagehand_task_runs USING brin (started_at))sql"},
    // Each task's runs become a ring of rows, numbered by a count per task: a run takes the row of
    // the run recorded max_runs_per_task runs before it, so retention deletes nothing and no write
    // touches an index. The runs already recorded keep their order (slot 0 the oldest); the rows
    // beyond a host's max_runs_per_task go with the age prune (PruneExpired).
    {"0004_task_run_rings",
     R"sql(ALTER TABLE stagehand_task_runs DROP CONSTRAINT stagehand_task_runs_pkey;
DROP INDEX stagehand_task_runs_by_task;
DROP INDEX stagehand_task_runs_by_start;
ALTER TABLE stagehand_task_runs ADD COLUMN slot int4;
UPDATE stagehand_task_runs AS r SET slot = n.slot, seq = n.slot + 1
FROM (SELECT run_id,
             (row_number() OVER (PARTITION BY task_id ORDER BY started_at, run_id) - 1)::int4 AS slot
      FROM stagehand_task_runs) AS n
WHERE r.run_id = n.run_id;
ALTER TABLE stagehand_task_runs ALTER COLUMN slot SET NOT NULL, SET (fillfactor = 70);
ALTER TABLE stagehand_task_runs ADD CONSTRAINT stagehand_task_runs_pkey PRIMARY KEY (task_id, slot);
CREATE TABLE stagehand_task_run_counts (
  task_id varchar(255) NOT NULL,
  runs int8 NOT NULL,
  CONSTRAINT stagehand_task_run_counts_pkey PRIMARY KEY (task_id)
) WITH (fillfactor = 50);
INSERT INTO stagehand_task_run_counts (task_id, runs)
SELECT task_id, count(*) FROM stagehand_task_runs GROUP BY task_id;
COMMENT ON TABLE stagehand_task_runs IS 'stagehand''s run history: a ring of rows per task holding the newest runs that stagehand hosts recorded (Backstage workers write none)';
COMMENT ON TABLE stagehand_task_run_counts IS 'stagehand''s run history: how many runs of each task stagehand hosts have recorded (the ring slot of the next is that count modulo the runs kept)')sql"},
    // A run's trace id (32 lowercase hex digits), NULL when its trace was not sampled. A nullable
    // column without a default: the table is not rewritten.
    {"0005_run_trace_id", "ALTER TABLE stagehand_task_runs ADD COLUMN trace_id text NULL"},
    // Idempotency keys (RequestKeys): the answer to each keyed request, kept until expires_at;
    // status 0 while the request is being applied, in the transaction that applies it.
    {"0006_request_keys",
     R"sql(CREATE TABLE stagehand_request_keys (
  request_key text COLLATE "C" NOT NULL,
  fingerprint text NOT NULL,
  status int4 NOT NULL,
  body text NOT NULL,
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  CONSTRAINT stagehand_request_keys_pkey PRIMARY KEY (request_key)
);
CREATE INDEX stagehand_request_keys_by_expiry ON stagehand_request_keys (expires_at);
COMMENT ON TABLE stagehand_request_keys IS 'stagehand''s idempotency keys: the answer to each REST request sent with an Idempotency-Key header, kept for a retention (Backstage workers write none)')sql"},
};

}  // namespace stagehand::store_internal::pg_sql
