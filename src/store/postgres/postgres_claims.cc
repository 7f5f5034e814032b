#include "store/postgres/postgres_store.h"

namespace stagehand::store_internal {
namespace {

// The parameters a claim and a renewal of `id` start with: $1 id, $2 ticket, $3 the run's timeout
// and $4 the lease, both in milliseconds.
PgParams HoldParams(const std::string& id, const std::string& ticket,
                    std::chrono::milliseconds timeout, std::chrono::milliseconds lease) {
  PgParams params;
  params.Add(id)
      .Add(ticket)
      .Add(static_cast<long long>(timeout.count()))
      .Add(static_cast<long long>(lease.count()));
  return params;
}

}  // namespace

Result<ClaimResult> PostgresTaskStore::Claim(const std::string& id, const std::string& ticket,
                                             std::chrono::milliseconds timeout,
                                             std::chrono::milliseconds lease) {
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed, Run("claim", sql::TaskStatements().claim,
                                                    HoldParams(id, ticket, timeout, lease)));
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 0));
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> expires, TimeAt(executed.result, 0, 1));
  return ClaimResult{expires.has_value(), now, expires};
}

Result<std::vector<ClaimResult>> PostgresTaskStore::ClaimMany(std::span<const ClaimRequest> claims,
                                                              std::chrono::milliseconds lease) {
  if (claims.empty()) return std::vector<ClaimResult>();
  PgArray ids;
  PgArray tickets;
  PgArray timeouts;
  PgArray versions;
  std::unordered_map<std::string_view, std::size_t> index_of;
  index_of.reserve(claims.size());
  for (std::size_t i = 0; i < claims.size(); ++i) {
    ids.Add(claims[i].id);
    tickets.Add(claims[i].ticket);
    timeouts.AddInt(claims[i].timeout.count());
    versions.AddInt(claims[i].expected_version);
    index_of.emplace(claims[i].id, i);
  }
  PgParams params;
  params.Add(std::move(ids).Finish())
      .Add(std::move(tickets).Finish())
      .Add(std::move(timeouts).Finish())
      .Add(static_cast<long long>(lease.count()))
      .Add(std::move(versions).Finish())
      .Add(channel_);
  bool history = std::any_of(claims.begin(), claims.end(),
                             [](const ClaimRequest& claim) { return claim.history.has_value(); });
  if (history) {
    STAGEHAND_ASSIGN_OR_RETURN(bool exists, HistoryTablesExist());
    history = exists;
  }
  if (history) {
    RunOriginArrays origins(/*with_starts=*/false);
    for (const ClaimRequest& claim : claims) {
      if (claim.history) {
        origins.Add(*claim.history, std::nullopt);
      } else {
        origins.AddNull();
      }
    }
    std::move(origins).AddTo(params);
    params.Add(static_cast<long long>(limits_.Get().max_runs_per_task));
  }
  STAGEHAND_ASSIGN_OR_RETURN(
      Executed executed,
      Run("claim", history ? sql::RunStatements().claim_many : sql::TaskStatements().claim_many,
          params));
  const PgResult& result = executed.result;
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 2));
  std::vector<ClaimResult> results(claims.size(), ClaimResult{false, now, std::nullopt});
  for (int row = 0; row < result.rows(); ++row) {
    if (result.IsNull(row, 0)) continue;
    const auto found = index_of.find(result.Get(row, 0));
    if (found == index_of.end()) {
      return InternalError(fmt::format("{}: claim returned an unknown task", where_));
    }
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> expires, TimeAt(result, row, 1));
    results[found->second].claimed = true;
    results[found->second].expires_at = expires;
    if (history && !result.IsNull(row, 4)) {
      const ClaimRequest& claim = claims[found->second];
      RememberRecordedPlace(claim.ticket,
                            RingPlace{claim.id, static_cast<int>(result.GetInt(row, 4))});
    }
  }
  return results;
}

Result<LeaseStatus> PostgresTaskStore::RenewLease(const std::string& id, const std::string& ticket,
                                                  std::chrono::milliseconds timeout,
                                                  std::chrono::milliseconds lease) {
  PgParams params = HoldParams(id, ticket, timeout, lease);
  params.Add(CancelRequestedTicket(ticket));
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("renew lease", sql::TaskStatements().renew_lease, params));
  if (executed.result.rows() == 0) {
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> pending, PendingPauseTicket(id, ticket));
    if (!pending) return LeaseStatus::kLost;
    const std::string& stored = *pending;
    PgParams again;
    again.Add(id)
        .Add(stored)
        .Add(static_cast<long long>(timeout.count()))
        .Add(static_cast<long long>(lease.count()))
        .Add(RowTicket::Decode(stored).cancel_requested ? stored : CancelRequestedTicket(stored));
    STAGEHAND_ASSIGN_OR_RETURN(executed,
                               Run("renew lease", sql::TaskStatements().renew_lease, again));
    if (executed.result.rows() == 0) return LeaseStatus::kLost;
  }
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 0));
  return executed.result.GetBool(0, 1) ? LeaseStatus::kCancelRequested : LeaseStatus::kHeld;
}

Result<bool> PostgresTaskStore::Release(const std::string& id, const std::string& ticket,
                                        const TaskSchedule& schedule,
                                        const std::optional<std::string>& error_json) {
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan next,
                             store_internal::PlanReleaseNext(schedule, db_clock_.Now()));
  PgParams params;
  params.Add(id).Add(ticket);
  AddPlan(params, next);
  params.Add(error_json)
      .Add(channel_)
      .Add("release")
      .Add(CancelRequestedTicket(ticket))
      .Add(ErrorJson("Task was cancelled"));
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("release", sql::TaskStatements().release, params));
  if (executed.result.rows() == 0) {
    STAGEHAND_ASSIGN_OR_RETURN(ReleaseResult paused,
                               ReleaseIntoPause(id, ticket, next, error_json));
    return paused.released;
  }
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 0));
  return true;
}

Result<std::vector<ReleaseResult>> PostgresTaskStore::ReleaseMany(
    std::span<const ReleaseRequest> releases) {
  if (releases.empty()) return std::vector<ReleaseResult>();
  PgArray ids;
  PgArray tickets;
  PgArray errors;
  PgArray marked;
  PlanArrays next;
  std::unordered_map<std::string_view, std::size_t> index_of;
  index_of.reserve(releases.size());
  std::vector<NextRunPlan> plans;
  plans.reserve(releases.size());
  const WallTime db_now = db_clock_.Now();
  for (std::size_t i = 0; i < releases.size(); ++i) {
    const ReleaseRequest& release = releases[i];
    STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan plan, store_internal::PlanRelease(release, db_now));
    plans.push_back(plan);
    ids.Add(release.id);
    tickets.Add(release.ticket);
    errors.AddOrNull(release.error_json);
    marked.Add(CancelRequestedTicket(release.ticket));
    next.Add(plan);
    index_of.emplace(release.id, i);
  }
  PgParams params;
  params.Add(std::move(ids).Finish()).Add(std::move(tickets).Finish());
  std::move(next).AddTo(params);
  params.Add(std::move(errors).Finish())
      .Add(std::move(marked).Finish())
      .Add(ErrorJson("Task was cancelled"))
      .Add(channel_);
  bool history = std::any_of(releases.begin(), releases.end(), [](const ReleaseRequest& release) {
    return release.history.has_value();
  });
  if (history) {
    STAGEHAND_ASSIGN_OR_RETURN(bool exists, HistoryTablesExist());
    history = exists;
  }
  // The runs whose start this store recorded, or that a retried release finds recorded, closed
  // where they are once the rows are released; the others are written whole.
  std::vector<RunEnd> closes;
  std::set<std::string, std::less<>> found_recorded;
  std::vector<bool> written_whole(releases.size(), false);
  if (history) {
    STAGEHAND_ASSIGN_OR_RETURN(found_recorded, RecordedRetriedRuns(releases));
  }
  if (history) {
    const RunHistoryLimits limits = limits_.Get();
    RunFinishArrays finishes(limits.max_output_bytes);
    RunOriginArrays origins(/*with_starts=*/true);
    for (std::size_t i = 0; i < releases.size(); ++i) {
      const ReleaseRequest& release = releases[i];
      if (!release.history || IsRecorded(release.ticket) ||
          found_recorded.contains(release.ticket)) {
        finishes.AddNull();
        origins.AddNull();
        if (release.history) {
          closes.push_back(RunEnd{release.ticket, release.history->finish, std::nullopt});
        }
        continue;
      }
      finishes.Add(release.history->finish);
      origins.Add(release.history->origin, release.history->started_at);
      written_whole[i] = release.retried || IsDoubtful(release.ticket);
    }
    std::move(finishes).AddTo(params);
    std::move(origins).AddTo(params);
    params.Add(static_cast<long long>(limits.max_runs_per_task));
  }
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed, Run("release",
                                                    history ? sql::RunStatements().release_many
                                                            : sql::TaskStatements().release_many,
                                                    params));
  const PgResult& result = executed.result;
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 1));
  ReleaseResult unreleased;
  unreleased.db_now = now;
  std::vector<ReleaseResult> results(releases.size(), unreleased);
  for (std::size_t i = 0; i < releases.size(); ++i) {
    results[i].recorded = written_whole[i];
    ForgetDoubt(releases[i].ticket);
  }
  for (int row = 0; row < result.rows(); ++row) {
    if (result.IsNull(row, 0)) continue;
    const auto found = index_of.find(result.Get(row, 0));
    if (found == index_of.end()) {
      return InternalError(fmt::format("{}: release returned an unknown task", where_));
    }
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> next_start, TimeAt(result, row, 3));
    ReleaseResult& released = results[found->second];
    released.released = true;
    released.next_run_start_at = next_start;
    released.version = result.GetInt(row, 4);
  }
  if (!closes.empty()) {
    for (RunEnd& end : closes) end.ended_at = now;
    STAGEHAND_RETURN_IF_ERROR(RecordEnds(closes));
  }
  // A run whose ticket a pause marked meanwhile (rare) is released into the pause.
  for (std::size_t i = 0; i < releases.size(); ++i) {
    if (results[i].released) continue;
    STAGEHAND_ASSIGN_OR_RETURN(
        ReleaseResult paused,
        ReleaseIntoPause(releases[i].id, releases[i].ticket, plans[i], releases[i].error_json));
    if (paused.released) results[i] = paused;
  }
  return results;
}

Result<std::set<std::string, std::less<>>> PostgresTaskStore::RecordedRetriedRuns(
    std::span<const ReleaseRequest> releases) {
  std::vector<std::string> task_ids;
  std::vector<std::string> run_ids;
  for (const ReleaseRequest& release : releases) {
    if (!release.history || IsRecorded(release.ticket)) continue;
    if (!release.retried && !IsDoubtful(release.ticket)) continue;
    task_ids.push_back(release.id);
    run_ids.push_back(release.ticket);
  }
  std::set<std::string, std::less<>> recorded;
  if (run_ids.empty()) return recorded;
  PgParams params;
  params.Add(TextArray(task_ids)).Add(TextArray(run_ids));
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("release", sql::RunStatements().recorded_runs, params));
  for (int row = 0; row < executed.result.rows(); ++row) {
    recorded.emplace(executed.result.Get(row, 0));
  }
  return recorded;
}

Result<SkipResult> PostgresTaskStore::SkipSlot(const std::string& id, std::int64_t expected_version,
                                               WallTime slot, const TaskSchedule& schedule) {
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan next,
                             store_internal::PlanSkipNext(schedule, slot, db_clock_.Now()));
  STAGEHAND_CHECK(next.kind == NextRunPlan::Kind::kInstant ||
                  next.kind == NextRunPlan::Kind::kNull);
  PgParams params;
  params.Add(id).Add(static_cast<long long>(expected_version));
  if (next.kind == NextRunPlan::Kind::kInstant) {
    params.Add(store_internal::FormatPgTimestamp(next.instant));
  } else {
    params.AddNull();
  }
  params.Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("skip slot", sql::TaskStatements().skip_slot, params));
  SkipResult result;
  if (executed.result.rows() == 0) {
    result.db_now = db_clock_.Now();
    return result;
  }
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> stored, TimeAt(executed.result, 0, 0));
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 2));
  result.skipped = true;
  result.next_run_start_at = stored;
  result.version = executed.result.GetInt(0, 1);
  result.db_now = now;
  return result;
}

}  // namespace stagehand::store_internal
