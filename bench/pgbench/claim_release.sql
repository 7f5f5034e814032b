-- One claim+release pair, the PostgreSQL store's own two statements (src/store/postgres/
-- statements.cc: "claim" and "release"), with pgbench variables where the store binds parameters.
-- The release's NULL instant and NULL error are literals because pgbench cannot bind NULL.
-- postgres_bench_script_test checks that these statements stay identical to the store's.
-- Run by bench/store_claim_bench with:
--   pgbench -n -M prepared -c 8 -j 2 -T 10 -D rows_per_client=N -D timeout_ms=60000
--     -D lease_ms=60000 -D plan_kind=scheduled_plus -D seconds=0 -D channel=stagehand_tasks
--     -D event=release -D marked=none -D cancelled=none -f claim_release.sql
-- against a database whose task rows have the ids 0 .. 8N-1 (client c uses c*N .. c*N+N-1).
\set id :client_id * :rows_per_client + random(0, :rows_per_client - 1)
\set ticket random(1, 2000000000)

WITH claimed AS (
  UPDATE backstage_backend_tasks__tasks
  SET current_run_ticket = :ticket::text,
      current_run_started_at = now(),
      current_run_expires_at = now() + least(:timeout_ms::float8, :lease_ms::float8) * interval '1 millisecond'
  WHERE id = :id::text AND current_run_ticket IS NULL AND next_run_start_at <= now()
  RETURNING current_run_expires_at
)
SELECT now(), (SELECT current_run_expires_at FROM claimed);

UPDATE backstage_backend_tasks__tasks
SET next_run_start_at = CASE :plan_kind::text WHEN 'null' THEN NULL WHEN 'now' THEN now() WHEN 'now_plus' THEN now() + :seconds::float8 * interval '1 second' WHEN 'instant' THEN NULL::timestamptz WHEN 'scheduled_plus' THEN greatest(next_run_start_at + :seconds::float8 * interval '1 second', now()) END,
    current_run_ticket = NULL,
    current_run_started_at = NULL,
    current_run_expires_at = NULL,
    last_run_ended_at = now(),
    last_run_error_json = CASE WHEN current_run_ticket = :marked::text THEN :cancelled::text ELSE NULL::text END
WHERE id = :id::text AND current_run_ticket IN (:ticket::text, :marked::text)
RETURNING now(), pg_notify(:channel::text, :event::text || ':' || id);
