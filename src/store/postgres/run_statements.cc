#include <fmt/format.h>

#include <initializer_list>
#include <optional>
#include <string_view>

#include "stagehand/store/task_store.h"
#include "store/postgres/statement_parts.h"
#include "store/postgres/statements.h"

namespace stagehand::store_internal::pg_sql {

namespace {

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

}  // namespace

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

}  // namespace stagehand::store_internal::pg_sql
