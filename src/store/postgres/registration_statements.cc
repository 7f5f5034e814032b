#include <fmt/format.h>

#include <initializer_list>
#include <optional>
#include <string_view>

#include "stagehand/store/task_store.h"
#include "store/postgres/statement_parts.h"
#include "store/postgres/statements.h"

namespace stagehand::store_internal::pg_sql {

namespace {

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

}  // namespace stagehand::store_internal::pg_sql
