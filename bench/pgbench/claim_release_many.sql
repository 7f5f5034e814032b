-- One batched claim+release, the PostgreSQL store's own batched statements (src/store/postgres/
-- statements.cc: "claim_many" and "release_many", without the run history), each client claiming
-- and releasing all of its own `batch` task rows at once, with pgbench variables where the store
-- binds parameters. The arrays are built once per client, in its first transaction.
-- postgres_statements_test checks that these statements stay identical to the store's.
-- Run by bench/store_claim_bench --batch=N with:
--   pgbench -n -M prepared -c 8 -j 2 -T 10 -D batch=N -D ready=0 -D timeout_ms=60000
--     -D lease_ms=60000 -D channel=stagehand_tasks -D cancelled=none -f claim_release_many.sql
-- against a database whose task rows have the ids 0 .. 8N-1 (client c uses c*N .. c*N+N-1).
-- Each transaction is N runs: runs per second = tps * N.
\set first :client_id * :batch
\if :ready = 0
SELECT 1 AS ready,
       array_agg((:first::int + g)::text ORDER BY g) AS ids,
       array_agg('t' || (:first::int + g)::text ORDER BY g) AS tickets,
       array_fill(:timeout_ms::float8, ARRAY[:batch::int]) AS timeouts,
       array_fill(NULL::int8, ARRAY[:batch::int]) AS expected,
       array_fill('scheduled_plus'::text, ARRAY[:batch::int]) AS next_kinds,
       array_fill(0::float8, ARRAY[:batch::int]) AS next_seconds,
       array_fill(NULL::timestamptz, ARRAY[:batch::int]) AS next_instants,
       array_fill(NULL::text, ARRAY[:batch::int]) AS errors,
       array_fill(NULL::text, ARRAY[:batch::int]) AS marked_tickets
FROM generate_series(0, :batch::int - 1) AS g
\gset
\endif

WITH input AS (
  SELECT u.id, u.ticket, u.timeout_ms, u.expected
  FROM unnest(:ids::text[], :tickets::text[], :timeouts::float8[], :expected::int8[])
       AS u(id, ticket, timeout_ms, expected)
), locked AS (
  SELECT t.id FROM backstage_backend_tasks__tasks AS t
  JOIN input AS i ON i.id = t.id
  WHERE t.current_run_ticket IS NULL AND t.next_run_start_at <= now()
    AND (i.expected IS NULL OR hashtextextended(coalesce(t.settings_json, ''), coalesce(round(extract(epoch FROM t.next_run_start_at) * 1000000)::int8, -9223372036854775808)) = i.expected)
  ORDER BY t.id
  FOR UPDATE OF t SKIP LOCKED
), claimed AS (
  UPDATE backstage_backend_tasks__tasks AS t
  SET current_run_ticket = i.ticket,
      current_run_started_at = now(),
      current_run_expires_at = now() + least(i.timeout_ms, :lease_ms::float8) * interval '1 millisecond'
  FROM input AS i
  WHERE t.id = i.id AND t.id IN (SELECT id FROM locked)
    AND t.current_run_ticket IS NULL AND t.next_run_start_at <= now()
    AND (i.expected IS NULL OR hashtextextended(coalesce(t.settings_json, ''), coalesce(round(extract(epoch FROM t.next_run_start_at) * 1000000)::int8, -9223372036854775808)) = i.expected)
  RETURNING t.id, t.current_run_expires_at, t.current_run_ticket
)
SELECT id, current_run_expires_at, now(), NULL FROM claimed
UNION ALL
SELECT NULL, NULL, now(), (
  SELECT count(*) FROM (
    SELECT pg_notify(:channel::text, 'claims:' || string_agg(octet_length(c.id)::text || ':' || c.id || octet_length(c.current_run_ticket)::text || ':' || c.current_run_ticket, '' ORDER BY c.id))
    FROM (SELECT id, current_run_ticket, sum(octet_length(id) + 8 + octet_length(current_run_ticket) + 8 + 0) OVER (ORDER BY id) / 6000 AS chunk FROM claimed) AS c
    GROUP BY c.chunk
  ) AS notified
)::text;

WITH input AS (
  SELECT u.id, u.ticket, u.next_kind, u.next_seconds, u.next_instant, u.error_json, u.marked
  FROM unnest(:ids::text[], :tickets::text[], :next_kinds::text[], :next_seconds::float8[], :next_instants::timestamptz[], :errors::text[],
              :marked_tickets::text[])
       AS u(id, ticket, next_kind, next_seconds, next_instant, error_json, marked)
), locked AS (
  SELECT t.id FROM backstage_backend_tasks__tasks AS t
  WHERE t.id = ANY (:ids::text[])
  ORDER BY t.id
  FOR UPDATE
), released AS (
  UPDATE backstage_backend_tasks__tasks AS t
  SET next_run_start_at = CASE i.next_kind WHEN 'null' THEN NULL WHEN 'now' THEN now() WHEN 'now_plus' THEN now() + i.next_seconds * interval '1 second' WHEN 'instant' THEN i.next_instant WHEN 'scheduled_plus' THEN greatest(t.next_run_start_at + i.next_seconds * interval '1 second', now()) END,
      current_run_ticket = NULL,
      current_run_started_at = NULL,
      current_run_expires_at = NULL,
      last_run_ended_at = now(),
      last_run_error_json = CASE WHEN t.current_run_ticket = i.marked THEN :cancelled::text
                                 ELSE i.error_json END
  FROM input AS i
  WHERE t.id = i.id AND t.id IN (SELECT id FROM locked)
    AND t.current_run_ticket IN (i.ticket, i.marked)
  RETURNING t.id, t.next_run_start_at, hashtextextended(coalesce(t.settings_json, ''), coalesce(round(extract(epoch FROM t.next_run_start_at) * 1000000)::int8, -9223372036854775808)) AS version
)
SELECT r.id, now(), NULL, r.next_run_start_at, r.version
FROM released AS r
UNION ALL
SELECT NULL, now(), (
  SELECT count(*) FROM (
    SELECT pg_notify(:channel::text, 'releases:' || string_agg(octet_length(c.id)::text || ':' || c.id, '' ORDER BY c.id))
    FROM (SELECT id, sum(octet_length(id) + 8 + 0) OVER (ORDER BY id) / 6000 AS chunk FROM released) AS c
    GROUP BY c.chunk
  ) AS notified
)::text, NULL, NULL;
