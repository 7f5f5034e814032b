#include "store/sqlite/sqlite_sql.h"

#include <fmt/format.h>

namespace stagehand::store_internal::sqlite_sql {

namespace {

// The SQL for `kind`, reading its parameter (if any) from ?`param`.
std::string PlanExpression(NextRunPlan::Kind kind, int param) {
  switch (kind) {
    case NextRunPlan::Kind::kNull:
      return "NULL";
    case NextRunPlan::Kind::kNow:
      return "strftime('%Y-%m-%d %H:%M:%f','now')";
    case NextRunPlan::Kind::kNowPlus:
      return fmt::format("strftime('%Y-%m-%d %H:%M:%f','now',?{})", param);
    case NextRunPlan::Kind::kInstant:
      return fmt::format("?{}", param);
    case NextRunPlan::Kind::kScheduledPlusCadence:
      // Like PostgreSQL's greatest(), a NULL schedule counts as now.
      return fmt::format(
          "max(coalesce(strftime('%Y-%m-%d %H:%M:%f',next_run_start_at,?{}), "
          "strftime('%Y-%m-%d %H:%M:%f','now')), strftime('%Y-%m-%d %H:%M:%f','now'))",
          param);
  }
  STAGEHAND_CHECK(false);
  return {};
}

}  // namespace

std::string Upsert(NextRunPlan::Kind start, NextRunPlan::Kind reregister) {
  STAGEHAND_CHECK(start != NextRunPlan::Kind::kScheduledPlusCadence &&
                  reregister != NextRunPlan::Kind::kScheduledPlusCadence);
  const std::string next = PlanExpression(reregister, 4);
  return fmt::format(
      "INSERT INTO backstage_backend_tasks__tasks (id, next_run_start_at, settings_json) "
      "VALUES (?1, {0}, ?2) ON CONFLICT (id) DO UPDATE SET settings_json = excluded.settings_json, "
      "next_run_start_at = CASE WHEN backstage_backend_tasks__tasks.next_run_start_at IS NULL "
      "OR {1} < backstage_backend_tasks__tasks.next_run_start_at THEN {1} "
      "ELSE backstage_backend_tasks__tasks.next_run_start_at END "
      "RETURNING next_run_start_at, strftime('%Y-%m-%d %H:%M:%f','now'), "
      "stagehand_version(next_run_start_at, settings_json)",
      PlanExpression(start, 3), next);
}

std::string Release(NextRunPlan::Kind next) {
  return fmt::format(
      "UPDATE backstage_backend_tasks__tasks SET next_run_start_at = {}, "
      "current_run_ticket = NULL, current_run_started_at = NULL, current_run_expires_at = NULL, "
      "last_run_ended_at = strftime('%Y-%m-%d %H:%M:%f','now'), "
      "last_run_error_json = CASE WHEN current_run_ticket = ?5 THEN ?6 ELSE ?3 END "
      "WHERE id = ?1 AND current_run_ticket IN (?2, ?5) "
      "RETURNING next_run_start_at, stagehand_version(next_run_start_at, settings_json), "
      "strftime('%Y-%m-%d %H:%M:%f','now')",
      PlanExpression(next, 4));
}

std::string ReleaseIntoPause(NextRunPlan::Kind next) {
  return fmt::format(
      "UPDATE backstage_backend_tasks__tasks SET next_run_start_at = {}, "
      "current_run_ticket = ?5, current_run_started_at = CASE WHEN ?5 IS NULL THEN NULL "
      "ELSE strftime('%Y-%m-%d %H:%M:%f','now') END, current_run_expires_at = ?6, "
      "last_run_ended_at = strftime('%Y-%m-%d %H:%M:%f','now'), last_run_error_json = ?3 "
      "WHERE id = ?1 AND current_run_ticket = ?2 "
      "RETURNING next_run_start_at, stagehand_version(next_run_start_at, settings_json), "
      "strftime('%Y-%m-%d %H:%M:%f','now')",
      PlanExpression(next, 4));
}

}  // namespace stagehand::store_internal::sqlite_sql
