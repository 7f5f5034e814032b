// The class behind OpenSqliteTaskStore, its definitions split by concern: sqlite_task_store.cc (the
// task table), sqlite_run_history.cc (RunHistory), sqlite_extensions.cc (registrations, request
// keys, pauses). Private to those files.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <utility>

#include "stagehand/base/recursive_mutex.h"
#include "stagehand/model/task_state.h"
#include "stagehand/store/sqlite_task_store.h"
#include "store/next_run.h"
#include "store/prune_rule.h"
#include "store/row_rules.h"
#include "store/run_history_support.h"
#include "store/sqlite/sqlite_database.h"
#include "store/sqlite/sqlite_history_sql.h"
#include "store/sqlite/sqlite_migrations.h"
#include "store/sqlite/sqlite_run_table.h"
#include "store/sqlite/sqlite_sql.h"
#include "store/sqlite/sqlite_time.h"
#include "store/task_pause.h"

namespace stagehand::store_internal {

inline std::string DurationModifier(std::chrono::milliseconds duration) {
  return store_internal::SecondsModifier(std::chrono::duration<double>(duration).count());
}

inline void BindPlan(SqliteStatement& stmt, int param, const NextRunPlan& plan) {
  switch (plan.kind) {
    case NextRunPlan::Kind::kNowPlus:
    case NextRunPlan::Kind::kScheduledPlusCadence:
      stmt.Bind(param, store_internal::SecondsModifier(plan.seconds));
      break;
    case NextRunPlan::Kind::kInstant:
      stmt.Bind(param, store_internal::FormatSqliteTime(plan.instant));
      break;
    case NextRunPlan::Kind::kNull:
    case NextRunPlan::Kind::kNow:
      break;
  }
}

// The SQLite TaskStore, its run history and its task registrations: one connection, serialised by
// a mutex. Thread-safe.
class SqliteTaskStore final : public TaskStore,
                              public RunHistory,
                              public TaskRegistrations,
                              public RequestKeys {
 public:
  SqliteTaskStore(std::string plugin_id, std::unique_ptr<SqliteDatabase> db, const Clock& clock)
      : plugin_id_(std::move(plugin_id)), clock_(clock), db_clock_(clock), db_(std::move(db)) {}

  const std::string& plugin_id() const override { return plugin_id_; }

  Status Migrate() override;

  Result<UpsertResult> Upsert(const std::string& id, const TaskSchedule& schedule) override;

  Result<std::vector<UpsertResult>> UpsertMany(std::span<const TaskUpsert> tasks) override;

  Result<PollResult> Poll(std::span<const std::string> ids, bool sweep_expired) override;

  Result<PollResult> PollChanged(std::span<const std::string> ids,
                                 std::span<const std::optional<std::int64_t>> known_versions,
                                 bool sweep_expired) override;

  Status WarmUp() override;

  Result<ClaimResult> Claim(const std::string& id, const std::string& ticket,
                            std::chrono::milliseconds timeout,
                            std::chrono::milliseconds lease) override;

  Result<std::vector<ClaimResult>> ClaimMany(std::span<const ClaimRequest> claims,
                                             std::chrono::milliseconds lease) override;

  Result<std::vector<ReleaseResult>> ReleaseMany(std::span<const ReleaseRequest> releases) override;

  Result<LeaseStatus> RenewLease(const std::string& id, const std::string& ticket,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds lease) override;

  Result<bool> Release(const std::string& id, const std::string& ticket,
                       const TaskSchedule& schedule,
                       const std::optional<std::string>& error_json) override;

  Result<SkipResult> SkipSlot(const std::string& id, std::int64_t expected_version, WallTime slot,
                              const TaskSchedule& schedule) override;

  using TaskStore::Trigger;  // no notifications: a caller's trace context stays on this host
  Status Trigger(const std::string& id) override;

  Status Pause(const std::string& id, const PauseRequest& request,
               std::chrono::milliseconds hold) override;

  Status Resume(const std::string& id) override;

  Status Cancel(const std::string& id, std::chrono::milliseconds hold) override;

  Result<std::vector<std::string>> SweepExpired() override;

  Result<std::vector<TaskRow>> States() override;

  Status Delete(const std::string& id) override;

  Result<WallTime> DatabaseNow() override;

  std::unique_ptr<Notifications> Listen(std::function<void(const StoreEvent&)>) override;

  RunHistory* history() override { return this; }

  TaskRegistrations* registrations() override { return this; }

  RequestKeys* request_keys() override { return this; }

  // Holds mu_ (recursive: `apply`'s own calls of this store take it again) and the write lock for
  // the whole request; `apply`'s transactions become savepoints of this one.
  Result<KeyedOutcome> ApplyOnce(const KeyedRequest& request,
                                 const std::function<Result<KeptAnswer>()>& apply) override;

  void SetLimits(const RunHistoryLimits& limits) override { limits_.Set(limits); }

  RunHistoryLimits limits() const override { return limits_.Get(); }

  Status RecordStarts(std::span<const RunStart> starts) override;

  Result<std::size_t> RecordEnds(std::span<const RunEnd> ends) override;

  Result<RunPage> ListRuns(const std::string& task_id, int limit,
                           const std::optional<std::string>& before) override;

  Result<TaskRun> GetRun(const std::string& run_id) override;

  Result<std::size_t> MarkLost(std::span<const std::string> run_ids,
                               const std::string& error_json) override;

  Result<std::size_t> PruneExpired(std::size_t max_rows) override;

  Result<std::size_t> RefreshRegistrations(std::span<const std::string> task_ids,
                                           const std::string& host) override;

  Result<std::vector<PruneCandidate>> ListPruneCandidates(WallTime cutoff) override;

  Result<std::vector<std::string>> PruneTasks(std::span<const std::string> task_ids,
                                              WallTime cutoff, PruneScope scope) override;

  Result<bool> TablesExist() override;

 private:
  // Claim, with mu_ held; with an `expected_version`, only a row of that version is claimed.
  Result<ClaimResult> ClaimLocked(const std::string& id, const std::string& ticket,
                                  std::chrono::milliseconds timeout,
                                  std::chrono::milliseconds lease,
                                  std::optional<std::int64_t> expected_version)
      STAGEHAND_REQUIRES(mu_);

  // Reads a timestamp column of task `id`: NULL, our or Backstage's text, or integer epoch
  // milliseconds.
  Result<std::optional<WallTime>> ReadTime(const SqliteStatement& stmt, int column,
                                           std::string_view id) const STAGEHAND_REQUIRES(mu_);

  // Reads the nullable time columns of task `id` into their targets.
  Status ReadTimes(const SqliteStatement& stmt, std::string_view id,
                   std::initializer_list<std::pair<int, std::optional<WallTime>*>> columns) const
      STAGEHAND_REQUIRES(mu_);

  // Reads the database's now from `column` and feeds the clock estimate.
  Result<WallTime> ObserveNow(const SqliteStatement& stmt, int column, WallTime sent)
      STAGEHAND_REQUIRES(mu_);

  Result<WallTime> NowLocked() STAGEHAND_REQUIRES(mu_);

  // Runs a poll statement (kPoll or kPollChanged) with `argument` as ?1.
  Result<PollResult> PollWith(std::string_view poll_sql, const std::string& argument,
                              bool sweep_expired);

  Result<PollEntry> ReadPollEntry(const SqliteStatement& stmt) STAGEHAND_REQUIRES(mu_);

  // Whether the history tables exist, with mu_ held: known after Migrate, else looked up once.
  Result<bool> HistoryTablesLocked() STAGEHAND_REQUIRES(mu_);

  // Trims the history of each of `tasks` (ids may repeat) to its newest `keep` runs, keeping the
  // runs in `closed` (just closed by the caller), with mu_ held.
  Status TrimLocked(std::vector<std::string>& tasks, int keep, std::span<const std::string> closed)
      STAGEHAND_REQUIRES(mu_);

  // Why a conditional update of task `id` (`what`, for errors) changed no row, with mu_ held:
  // kNotFound when the row does not exist, else `refusal` of the ticket it holds (empty: none).
  Status UnchangedLocked(const std::string& id, const char* what,
                         const std::function<Status(const std::string& ticket)>& refusal)
      STAGEHAND_REQUIRES(mu_);

  // Extends the expiry of the run holding `id` with `ticket` (kHeld) or `marked`
  // (kCancelRequested), with mu_ held; nullopt when neither holds it.
  Result<std::optional<LeaseStatus>> RenewLocked(const std::string& id, const std::string& ticket,
                                                 const std::string& marked,
                                                 std::chrono::milliseconds timeout,
                                                 std::chrono::milliseconds lease)
      STAGEHAND_REQUIRES(mu_);

  // Replaces the ticket `stored` of `id`, bringing its expiry forward by the modifier `hold` when
  // given, with mu_ held. Errors: kConflict when another process changed it meanwhile.
  Status RewriteTicketLocked(const std::string& id, const std::string& stored,
                             const std::string& replacement, const std::optional<std::string>& hold,
                             const char* what) STAGEHAND_REQUIRES(mu_);

  // Returns the ticket of `id` when it holds the row for the run `ticket` with a pending pause
  // (ADR 0013), with mu_ held; nullopt otherwise.
  Result<std::optional<std::string>> PendingPauseTicketLocked(const std::string& id,
                                                              const std::string& ticket)
      STAGEHAND_REQUIRES(mu_);

  // Resets the expired runs, with mu_ held; where the history tables exist, inside the caller's
  // transaction, also closes their runs as lost at the same now.
  Result<std::vector<std::string>> SweepLocked() STAGEHAND_REQUIRES(mu_);

  // Resets the expired runs whose tickets carry a pending pause, leaving their rows paused (and
  // closing their runs as lost when `history`), with mu_ held. Returns their ids.
  Result<std::vector<std::string>> SweepIntoPausesLocked(bool history) STAGEHAND_REQUIRES(mu_);

  // Release, with mu_ held. A result that is not released carries no db_now.
  Result<ReleaseResult> ReleaseLocked(const std::string& id, const std::string& ticket,
                                      const NextRunPlan& next,
                                      const std::optional<std::string>& error_json)
      STAGEHAND_REQUIRES(mu_);

  // Release of a run whose ticket carries a pending pause, with mu_ held: leaves the row paused.
  // Not released when the row holds no such ticket for the run.
  Result<ReleaseResult> ReleaseIntoPauseLocked(const std::string& id, const std::string& ticket,
                                               const NextRunPlan& next,
                                               const std::optional<std::string>& error_json)
      STAGEHAND_REQUIRES(mu_);

  // Steps a release statement (Release, ReleaseIntoPause) to its end. nullopt when it released
  // nothing (then it carries no db_now).
  Result<std::optional<ReleaseResult>> StepRelease(SqliteStatement& stmt, const std::string& id)
      STAGEHAND_REQUIRES(mu_);

  // A task row with its registration, as the prune rule reads them.
  struct PruneRow {
    TaskRow task;  // id and the times the rule reads
    std::optional<std::string> host;
    std::optional<WallTime> last_seen_at;
  };

  // Reads kPruneRows (no `ids`) or kPruneRowsOf (`ids`: a JSON array), with mu_ held.
  Result<std::vector<PruneRow>> PruneRowsLocked(const std::optional<std::string>& ids)
      STAGEHAND_REQUIRES(mu_);

  // Whether stagehand_task_registrations exists, with mu_ held: known after Migrate, else looked
  // up once, or again when it was absent and `again_if_absent`.
  Result<bool> RegistrationsTableLocked(bool again_if_absent) STAGEHAND_REQUIRES(mu_);

  // Errors: kFailedPrecondition when stagehand_task_registrations is missing (looked for again if
  // it was before), with mu_ held.
  Status RequireRegistrationsLocked() STAGEHAND_REQUIRES(mu_);

  // Records the registrations `tasks` carry, inside the caller's transaction, with mu_ held;
  // nothing when none carries one or the table is missing.
  Status RecordRegistrationsLocked(std::span<const TaskUpsert> tasks) STAGEHAND_REQUIRES(mu_);

  enum class HistoryTables { kUnknown, kPresent, kAbsent };

  const std::string plugin_id_;
  const Clock& clock_;
  DatabaseClock db_clock_;
  store_internal::LimitsHolder limits_;
  RecursiveMutex mu_;
  std::unique_ptr<SqliteDatabase> db_ STAGEHAND_GUARDED_BY(mu_);
  HistoryTables history_tables_ STAGEHAND_GUARDED_BY(mu_) = HistoryTables::kUnknown;
  // Whether stagehand_task_registrations exists.
  HistoryTables registrations_table_ STAGEHAND_GUARDED_BY(mu_) = HistoryTables::kUnknown;
};

}  // namespace stagehand::store_internal
