#include "store/postgres/postgres_store.h"

namespace stagehand::store_internal {

Result<std::optional<std::string>> PostgresTaskStore::PendingPauseTicket(
    const std::string& id, const std::string& ticket) {
  Result<std::optional<std::string>> stored = StoredTicket(id);
  if (!stored.ok() || !*stored) return stored;
  const RowTicket held = RowTicket::Decode(**stored);
  if (!held.HeldBy(ticket) || !held.pause_json) return std::optional<std::string>();
  return stored;
}

Result<ReleaseResult> PostgresTaskStore::ReleaseIntoPause(
    const std::string& id, const std::string& ticket, const NextRunPlan& next,
    const std::optional<std::string>& error_json) {
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> stored, PendingPauseTicket(id, ticket));
  ReleaseResult result;
  result.db_now = db_clock_.Now();
  if (!stored) return result;
  const RowTicket held = RowTicket::Decode(*stored);
  const std::optional<store_internal::PauseAfterRun> pause =
      store_internal::PauseLeftBy(held, result.db_now);
  PgParams params;
  params.Add(id).Add(*stored);
  AddPlan(params, next);
  params.Add(held.cancel_requested ? std::optional(ErrorJson("Task was cancelled")) : error_json)
      .Add(channel_)
      .Add("release")
      .Add(pause ? std::optional(pause->ticket) : std::nullopt);
  if (pause && pause->until) {
    params.Add(store_internal::FormatPgTimestamp(store_internal::ToMillis(*pause->until)));
  } else {
    params.AddNull();
  }
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("release", sql::TaskStatements().release_into_pause, params));
  if (executed.result.rows() == 0) return result;
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 0));
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> next_start, TimeAt(executed.result, 0, 2));
  result.released = true;
  result.db_now = now;
  result.next_run_start_at = next_start;
  result.version = executed.result.GetInt(0, 3);
  return result;
}

Status PostgresTaskStore::RewriteTicket(const std::string& id, const std::string& stored,
                                        const std::string& replacement,
                                        std::optional<std::chrono::milliseconds> hold,
                                        std::string_view operation) {
  PgParams params;
  params.Add(id).Add(stored).Add(replacement).Add(channel_);
  if (hold) {
    params.Add(static_cast<long long>(hold->count()));
  } else {
    params.AddNull();
  }
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run(operation, sql::TaskStatements().rewrite_ticket, params));
  if (executed.result.rows() == 0) {
    return ConflictError(fmt::format("Task {} changed while it was being {}; try again", id,
                                     operation == "pause" ? "paused" : "resumed"));
  }
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 0));
  return Status::Ok();
}

Result<KeyedOutcome> PostgresTaskStore::ApplyOnce(
    const KeyedRequest& request, const std::function<Result<KeptAnswer>()>& apply) {
  STAGEHAND_CHECK(pinned_session.store != this);
  constexpr std::string_view kOperation = "keeping an idempotency key";
  Result<ConnectionPool::Lease> lease = pool_->Acquire(schema_);
  if (!lease.ok()) {
    return UnavailableError(fmt::format("{}: {} failed: cannot connect: {}", where_, kOperation,
                                        lease.status().message()));
  }
  PgConnection& session = **lease;
  const auto roll_back = [&] {
    if (PgResult rolled = session.ExecuteScript(sql::kRollback); !rolled.ok()) {
      (void)ErrorOf(kOperation, rolled);
    }
  };
  if (PgResult begun = session.ExecuteScript(sql::kBegin); !begun.ok()) {
    return ErrorOf(kOperation, begun);
  }
  PgParams key;
  key.Add(request.key).Add(request.fingerprint).Add(static_cast<double>(request.retention.count()));
  PgResult kept = session.ExecuteText(sql::kKeepRequestKey, key);
  if (!kept.ok()) {
    roll_back();
    return ErrorOf(kOperation, kept);
  }
  if (kept.rows() == 0) {
    // Kept, and not expired: the first request with the key committed (its statement waited
    // for that commit), so its answer is there.
    PgParams read;
    read.Add(request.key);
    PgResult earlier = session.ExecuteText(sql::kReadRequestKey, read);
    roll_back();
    if (!earlier.ok()) return ErrorOf(kOperation, earlier);
    if (earlier.rows() == 0) {
      return UnavailableError(
          fmt::format("{}: the idempotency key {} went while it was read: send the request again",
                      where_, request.key));
    }
    if (earlier.Get(0, 0) != request.fingerprint) {
      return ConflictError(
          fmt::format("the idempotency key {} was first sent with another request", request.key));
    }
    return KeyedOutcome{
        KeptAnswer{static_cast<int>(earlier.GetInt(0, 1)), std::string(earlier.Get(0, 2))},
        /*replayed=*/true};
  }
  Result<KeptAnswer> answer = [&] {
    pinned_session = PinnedSession{this, &session};
    const Unpin unpin;
    return apply();
  }();
  if (!answer.ok()) {
    roll_back();
    return answer.status();
  }
  PgParams answered;
  answered.Add(request.key).Add(static_cast<long long>(answer->status)).Add(answer->body);
  if (PgResult written = session.ExecuteText(sql::kAnswerRequestKey, answered); !written.ok()) {
    roll_back();
    return ErrorOf(kOperation, written);
  }
  if (PgResult committed = session.ExecuteScript(sql::kCommit); !committed.ok()) {
    return UnavailableError(fmt::format(
        "{}: {}: the commit's outcome is unknown ({}): send the request again with its key", where_,
        kOperation, committed.error()));
  }
  return KeyedOutcome{*std::move(answer), /*replayed=*/false};
}

Status PostgresTaskStore::Pause(const std::string& id, const PauseRequest& request,
                                std::chrono::milliseconds hold) {
  // The statement compares `until` with the database's clock; the texts are checked here.
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePauseTexts(request));
  PgParams params;
  params.Add(id).Add(PausedTicket(request));
  if (request.until) {
    params.Add(store_internal::FormatPgTimestamp(store_internal::ToMillis(*request.until)));
  } else {
    params.AddNull();
  }
  params.Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed, Run("pause", sql::TaskStatements().pause, params));
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 2));
  if (!executed.result.GetBool(0, 0)) {
    return NotFoundError(fmt::format("Task {} does not exist", id));
  }
  if (executed.result.GetBool(0, 3)) return store_internal::PauseUntilPassedError();
  if (executed.result.GetBool(0, 1)) return Status::Ok();
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> stored, StoredTicket(id));
  const std::optional<RowTicket> held =
      stored ? std::optional(RowTicket::Decode(*stored)) : std::nullopt;
  if (!held || held->kind != RowTicket::Kind::kRun) {
    return ConflictError(fmt::format("Task {} changed while it was being paused", id));
  }
  return RewriteTicket(id, *stored, held->WithPendingPause(request), hold, "pause");
}

Status PostgresTaskStore::Resume(const std::string& id) {
  PgParams params;
  params.Add(id).Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("resume", sql::TaskStatements().resume, params));
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 2));
  if (!executed.result.GetBool(0, 0)) {
    return NotFoundError(fmt::format("Task {} does not exist", id));
  }
  if (executed.result.GetBool(0, 1)) return Status::Ok();
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> stored, StoredTicket(id));
  const std::optional<RowTicket> held =
      stored ? std::optional(RowTicket::Decode(*stored)) : std::nullopt;
  if (!held || held->kind != RowTicket::Kind::kRun || !held->pause_json) {
    return store_internal::NotPausedError(id);
  }
  return RewriteTicket(id, *stored, held->WithoutPendingPause(), std::nullopt, "resume");
}

Result<bool> PostgresTaskStore::RegistrationsTableExists(bool again_if_absent) {
  const int known = registrations_table_.load();
  if (known == kPresent || (known == kAbsent && !again_if_absent)) return known == kPresent;
  Result<ConnectionPool::Lease> lease = pool_->Acquire(schema_);
  if (!lease.ok()) {
    return UnavailableError(
        fmt::format("{}: looking for the task registrations failed: cannot connect: {}", where_,
                    lease.status().message()));
  }
  PgResult result = (*lease)->ExecuteText(sql::kRegistrationsTableExists, PgParams());
  if (!result.ok()) return ErrorOf("looking for the task registrations", result);
  const bool exists = result.rows() > 0 && result.GetBool(0, 0);
  if (exists) {
    registrations_table_ = kPresent;
  } else {
    int expected = known;
    registrations_table_.compare_exchange_strong(expected, kAbsent);
  }
  return registrations_table_.load() == kPresent;
}

Status PostgresTaskStore::RequireRegistrations() {
  STAGEHAND_ASSIGN_OR_RETURN(bool exists, RegistrationsTableExists(/*again_if_absent=*/true));
  if (exists) return Status::Ok();
  return FailedPreconditionError(
      fmt::format("{}: the database has no stagehand_task_registrations table (it was migrated by "
                  "an older stagehand); run the migrations (stagehand db migrate)",
                  where_));
}

Result<std::size_t> PostgresTaskStore::RefreshRegistrations(std::span<const std::string> task_ids,
                                                            const std::string& host) {
  if (task_ids.empty()) return std::size_t{0};
  STAGEHAND_ASSIGN_OR_RETURN(bool exists, RegistrationsTableExists(/*again_if_absent=*/true));
  if (!exists) return std::size_t{0};
  PgParams params;
  params.Add(TextArray(task_ids)).Add(host);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed, Run("refresh task registrations",
                                                    sql::RegistrationStatements().refresh, params));
  return static_cast<std::size_t>(executed.result.affected());
}

Result<std::vector<PruneCandidate>> PostgresTaskStore::ListPruneCandidates(WallTime cutoff) {
  STAGEHAND_RETURN_IF_ERROR(RequireRegistrations());
  PgParams params;
  params.Add(store_internal::FormatPgTimestamp(cutoff));
  STAGEHAND_ASSIGN_OR_RETURN(
      Executed executed,
      Run("list prune candidates", sql::RegistrationStatements().prune_candidates, params));
  const PgResult& result = executed.result;
  std::vector<PruneCandidate> candidates;
  candidates.reserve(static_cast<std::size_t>(result.rows()));
  for (int row = 0; row < result.rows(); ++row) {
    PruneCandidate& candidate = candidates.emplace_back();
    candidate.task_id = result.Get(row, 0);
    candidate.host = result.GetOptional(row, 1);
    STAGEHAND_RETURN_IF_ERROR(ReadTimes(result, row,
                                        {{2, &candidate.last_seen_at},
                                         {3, &candidate.last_run_ended_at},
                                         {4, &candidate.next_run_start_at}}));
  }
  return candidates;
}

Result<std::vector<std::string>> PostgresTaskStore::PruneTasks(
    std::span<const std::string> task_ids, WallTime cutoff, PruneScope scope) {
  STAGEHAND_RETURN_IF_ERROR(RequireRegistrations());
  if (task_ids.empty()) return std::vector<std::string>();
  PgParams params;
  params.Add(TextArray(task_ids))
      .Add(store_internal::FormatPgTimestamp(cutoff))
      .Add(scope == PruneScope::kIncludeUnregistered)
      .Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("prune tasks", sql::RegistrationStatements().prune_tasks, params));
  std::vector<std::string> deleted;
  deleted.reserve(static_cast<std::size_t>(executed.result.rows()));
  for (int row = 0; row < executed.result.rows(); ++row) {
    deleted.emplace_back(executed.result.Get(row, 0));
  }
  return deleted;
}

}  // namespace stagehand::store_internal
