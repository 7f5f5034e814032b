#include "stagehand/store/postgres_task_store.h"

#include "store/postgres/postgres_store.h"

namespace stagehand::store_internal {

std::optional<RingPlace> PostgresTaskStore::TakeRecordedPlace(const std::string& run_id) {
  MutexLock lock(recorded_mu_);
  const auto found = recorded_.find(run_id);
  if (found == recorded_.end()) return std::nullopt;
  RingPlace place = std::move(found->second);
  recorded_.erase(found);
  return place;
}

bool PostgresTaskStore::IsRecorded(const std::string& run_id) {
  MutexLock lock(recorded_mu_);
  return recorded_.contains(run_id);
}

void PostgresTaskStore::OnServerChanged() {
  server_changed_at_.store(clock_.MonoNow().time_since_epoch().count());
  MutexLock lock(recorded_mu_);
  for (auto& [run_id, place] : recorded_) {
    if (doubtful_.size() >= kMaxRecordedPlaces) break;
    doubtful_.insert(run_id);
  }
  recorded_.clear();
}

bool PostgresTaskStore::SweepHeld() const {
  const MonoTime changed{MonoTime::duration(server_changed_at_.load())};
  return changed != MonoTime::min() && clock_.MonoNow() - changed < kSweepHoldAfterServerChange;
}

bool PostgresTaskStore::IsDoubtful(const std::string& run_id) {
  MutexLock lock(recorded_mu_);
  return doubtful_.contains(run_id);
}

void PostgresTaskStore::ForgetDoubt(const std::string& run_id) {
  MutexLock lock(recorded_mu_);
  doubtful_.erase(run_id);
}

void PostgresTaskStore::RememberRecordedPlace(std::string run_id, RingPlace place) {
  MutexLock lock(recorded_mu_);
  if (recorded_.size() >= kMaxRecordedPlaces) recorded_.clear();
  recorded_.insert_or_assign(std::move(run_id), std::move(place));
}

Status PostgresTaskStore::ErrorOf(std::string_view operation, const PgResult& result) const {
  const std::string state = result.SqlState();
  const std::string message =
      state.empty() ? fmt::format("{}: {} failed: {}", where_, operation, result.error())
                    : fmt::format("{}: {} failed: {} (SQLSTATE {})", where_, operation,
                                  result.error(), state);
  if (result.connection_lost()) return UnavailableError(message);
  if (state == kUndefinedTable) {
    return FailedPreconditionError(
        message + "; the tasks table or the run history is missing (run the migrations)");
  }
  if (state == kStringTooLong) return InvalidArgumentError(message);
  // 40: transaction rollback (serialization, deadlock); 53: insufficient resources; 55: object not
  // in prerequisite state (lock not available); 57: operator intervention (statement timeout,
  // shutdown).
  const std::string_view state_class = std::string_view(state).substr(0, 2);
  if (state.empty() || state_class == "40" || state_class == "53" || state_class == "55" ||
      state_class == "57") {
    return UnavailableError(message);
  }
  return InternalError(message);
}

template <typename Pick>
Result<Executed> PostgresTaskStore::RunPicked(std::string_view operation, Pick pick) {
  std::optional<ConnectionPool::Lease> lease;
  PgConnection* session = nullptr;
  if (pinned_session.store == this) {
    session = pinned_session.connection;
  } else {
    Result<ConnectionPool::Lease> acquired = pool_->Acquire(schema_);
    if (!acquired.ok()) {
      return UnavailableError(fmt::format("{}: {} failed: cannot connect: {}", where_, operation,
                                          acquired.status().message()));
    }
    lease.emplace(*std::move(acquired));
    session = &**lease;
  }
  const auto [statement, params] = pick();
  const WallTime sent = clock_.Now();
  PgResult result = session->Execute(*statement, *params);
  const WallTime received = clock_.Now();
  if (!result.ok()) return ErrorOf(operation, result);
  return Executed{std::move(result), sent, received};
}

Result<Executed> PostgresTaskStore::Run(std::string_view operation, const PgStatement& statement,
                                        const PgParams& params) {
  return RunPicked(operation, [&] { return std::pair(&statement, &params); });
}

Result<std::optional<WallTime>> PostgresTaskStore::TimeAt(const PgResult& result, int row,
                                                          int column) const {
  if (result.IsNull(row, column)) return std::optional<WallTime>();
  Result<WallTime> parsed = store_internal::ParsePgTimestamp(result.Get(row, column));
  if (!parsed.ok()) {
    return InternalError(fmt::format("{}: {}", where_, parsed.status().message()));
  }
  return std::optional<WallTime>(*parsed);
}

Status PostgresTaskStore::ReadTimes(
    const PgResult& result, int row,
    std::initializer_list<std::pair<int, std::optional<WallTime>*>> columns) const {
  for (const auto& [column, target] : columns) {
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> parsed, TimeAt(result, row, column));
    *target = parsed;
  }
  return Status::Ok();
}

Result<WallTime> PostgresTaskStore::ObserveNow(const Executed& executed, int row, int column) {
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> now, TimeAt(executed.result, row, column));
  if (!now.has_value()) return InternalError(fmt::format("{}: now() returned NULL", where_));
  db_clock_.Observe(executed.sent, executed.received, *now);
  return *now;
}

Status PostgresTaskStore::Migrate() {
  {
    // Returned to the pool before the warm-up, which borrows sessions of its own.
    Result<ConnectionPool::Lease> lease = pool_->Acquire(schema_);
    if (!lease.ok()) {
      return UnavailableError(fmt::format("{}: migration failed: cannot connect: {}", where_,
                                          lease.status().message()));
    }
    const auto error_of = [this](std::string_view operation, const PgResult& result) {
      return ErrorOf(operation, result);
    };
    STAGEHAND_RETURN_IF_ERROR(store_internal::MigratePostgres(**lease, where_, error_of));
    STAGEHAND_RETURN_IF_ERROR(store_internal::MigratePostgresHistory(**lease, where_, error_of));
    history_tables_ = kPresent;
    registrations_table_ = kPresent;
  }
  // Best effort: statements prepare themselves on first use otherwise.
  (void)WarmUp();
  return Status::Ok();
}

Result<UpsertResult> PostgresTaskStore::Upsert(const std::string& id,
                                               const TaskSchedule& schedule) {
  STAGEHAND_RETURN_IF_ERROR(schedule.settings.Validate());
  const WallTime db_now = db_clock_.Now();
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan start, store_internal::PlanInsertStart(schedule, db_now));
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan next,
                             store_internal::PlanReregisterStart(schedule, db_now));

  PgParams params;
  params.Add(id).Add(schedule.settings.ToJson());
  AddPlan(params, start);
  AddPlan(params, next);
  params.Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("upsert", sql::TaskStatements().upsert, params));
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> stored, TimeAt(executed.result, 0, 0));
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 1));
  return UpsertResult{stored, now, executed.result.GetInt(0, 3)};
}

Result<std::vector<UpsertResult>> PostgresTaskStore::UpsertMany(std::span<const TaskUpsert> tasks) {
  if (tasks.empty()) return std::vector<UpsertResult>();
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<store_internal::PlannedUpsert> planned,
                             store_internal::PlanUpserts(tasks, db_clock_.Now()));
  PgArray ids;
  PgArray settings;
  PlanArrays start;
  PlanArrays next;
  std::unordered_map<std::string_view, std::size_t> index_of;
  index_of.reserve(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    ids.Add(tasks[i].id);
    settings.Add(planned[i].settings_json);
    start.Add(planned[i].insert);
    next.Add(planned[i].reregister);
    index_of.emplace(tasks[i].id, i);
  }
  PgParams params;
  params.Add(std::move(ids).Finish()).Add(std::move(settings).Finish());
  std::move(start).AddTo(params);
  std::move(next).AddTo(params);
  params.Add(channel_);
  bool registering = std::any_of(tasks.begin(), tasks.end(), [](const TaskUpsert& task) {
    return task.registered_by.has_value();
  });
  if (registering) {
    STAGEHAND_ASSIGN_OR_RETURN(bool exists, RegistrationsTableExists(/*again_if_absent=*/false));
    registering = exists;
  }
  if (registering) {
    PgArray hosts;
    for (const TaskUpsert& task : tasks) hosts.AddOrNull(task.registered_by);
    params.Add(std::move(hosts).Finish());
  }
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("upsert",
                                 registering ? sql::RegistrationStatements().upsert_many
                                             : sql::TaskStatements().upsert_many,
                                 params));
  const PgResult& result = executed.result;
  if (result.rows() != static_cast<int>(tasks.size())) {
    return InternalError(
        fmt::format("{}: upsert of {} tasks wrote {} rows", where_, tasks.size(), result.rows()));
  }
  STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, 0, 2));
  std::vector<UpsertResult> results(tasks.size(), UpsertResult{std::nullopt, now});
  for (int row = 0; row < result.rows(); ++row) {
    const auto found = index_of.find(result.Get(row, 0));
    if (found == index_of.end()) {
      return InternalError(fmt::format("{}: upsert returned an unknown task", where_));
    }
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> stored, TimeAt(result, row, 1));
    results[found->second].next_run_start_at = stored;
    results[found->second].version = result.GetInt(row, 4);
  }
  return results;
}

Result<PollResult> PostgresTaskStore::Poll(std::span<const std::string> ids, bool sweep_expired) {
  PgParams params;
  params.Add(TextArray(ids));
  const sql::Statements& statements = sql::TaskStatements();
  STAGEHAND_ASSIGN_OR_RETURN(
      Executed executed, RunPoll(sweep_expired, params, statements.poll, statements.poll_and_sweep,
                                 sql::RunStatements().poll_and_sweep));
  return ReadPoll(executed, ids, /*only_listed=*/false);
}

Result<Executed> PostgresTaskStore::RunPoll(bool sweep, const PgParams& params,
                                            const PgStatement& plain, const PgStatement& sweeping,
                                            const PgStatement& sweeping_with_history) {
  PgParams sweeping_params = params;
  const PgStatement* sweep_statement = &sweeping;
  if (sweep) {
    sweeping_params.Add(ErrorJson("Task timed out")).Add(channel_);
    STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryTablesExist());
    if (history) sweep_statement = &sweeping_with_history;
  }
  // Decided once the session is there: acquiring it is what finds a new server.
  return RunPicked("poll", [&] {
    return sweep && !SweepHeld() ? std::pair(sweep_statement, &sweeping_params)
                                 : std::pair(&plain, &params);
  });
}

Result<PollResult> PostgresTaskStore::PollChanged(
    std::span<const std::string> ids, std::span<const std::optional<std::int64_t>> known_versions,
    bool sweep_expired) {
  STAGEHAND_CHECK(ids.size() == known_versions.size());
  PgArray versions;
  for (const std::optional<std::int64_t>& version : known_versions) versions.AddInt(version);
  PgParams params;
  params.Add(TextArray(ids)).Add(std::move(versions).Finish());
  const sql::Statements& statements = sql::TaskStatements();
  STAGEHAND_ASSIGN_OR_RETURN(
      Executed executed,
      RunPoll(sweep_expired, params, statements.poll_changed, statements.poll_changed_and_sweep,
              sql::RunStatements().poll_changed_and_sweep));
  return ReadPoll(executed, ids, /*only_listed=*/true);
}

Result<PollResult> PostgresTaskStore::ReadPoll(const Executed& executed,
                                               std::span<const std::string> ids, bool only_listed) {
  const PgResult& result = executed.result;
  PollResult poll;
  std::unordered_map<std::string_view, int> rows_by_id;
  std::unordered_set<std::string_view> missing;
  for (int row = 0; row < result.rows(); ++row) {
    const std::string_view kind = result.Get(row, 0);
    if (kind == "clock") {
      STAGEHAND_ASSIGN_OR_RETURN(WallTime now, ObserveNow(executed, row, 7));
      poll.db_now = now;
    } else if (kind == "swept") {
      poll.swept_ids.emplace_back(result.Get(row, 1));
    } else if (kind == "missing") {
      missing.insert(result.Get(row, 1));
    } else {
      rows_by_id.emplace(result.Get(row, 1), row);
    }
  }

  poll.entries.reserve(only_listed ? rows_by_id.size() + missing.size() : ids.size());
  for (const std::string& id : ids) {
    const auto found = rows_by_id.find(id);
    if (found == rows_by_id.end()) {
      if (only_listed && missing.count(id) == 0) continue;
      PollEntry& entry = poll.entries.emplace_back();
      entry.id = id;
      entry.readiness = Readiness::kMissing;
      continue;
    }
    PollEntry& entry = poll.entries.emplace_back();
    entry.id = id;
    const int row = found->second;
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> next, TimeAt(result, row, 3));
    STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> expires, TimeAt(result, row, 5));
    entry.next_run_start_at = next;
    entry.running = result.GetBool(row, 4);
    entry.current_run_expires_at = expires;
    entry.version = result.GetInt(row, 8);
    if (!entry.running && entry.next_run_start_at &&
        (!poll.earliest_next || *entry.next_run_start_at < *poll.earliest_next)) {
      poll.earliest_next = entry.next_run_start_at;
    }
    Result<TaskSettingsV2> settings = TaskSettingsV2::FromJson(result.Get(row, 2));
    if (!settings.ok()) {
      entry.readiness = Readiness::kInvalidSettings;
      entry.settings_error = settings.status().message();
      continue;
    }
    entry.settings = std::move(*settings);
    entry.readiness = result.GetBool(row, 6) ? Readiness::kReady : Readiness::kNotReady;
  }
  return poll;
}

Status PostgresTaskStore::WarmUp() {
  const sql::Statements& s = sql::TaskStatements();
  const PgStatement* const statements[] = {
      &s.upsert,
      &s.upsert_many,
      &s.poll,
      &s.poll_changed,
      &s.poll_changed_and_sweep,
      &s.poll_and_sweep,
      &s.claim,
      &s.claim_many,
      &s.renew_lease,
      &s.release,
      &s.release_many,
      &s.trigger,
      &s.read_for_cancel,
      &s.mark_cancelled,
      &s.sweep,
      &s.states,
      &s.remove,
      &s.now,
  };
  // The first execution of a statement in a session also pays for loading the table's and its
  // index's catalog entries and for planning. Run the hot ones once on an id no row can have (ids
  // are varchar(255)), so they change nothing and notify nobody.
  const std::string no_such_id(256, '-');
  PgParams one_id;
  one_id.Add(no_such_id);
  PgParams empty_poll;
  empty_poll.Add("{}").Add("{}");
  PgParams claim;  // id, ticket, timeout ms, lease ms
  claim.Add(no_such_id).Add("warm-up").Add(1LL).Add(1LL);
  PgParams renew = claim;
  renew.Add(CancelRequestedTicket("warm-up"));
  PgParams release;
  release.Add(no_such_id).Add("warm-up");
  AddPlan(release, NextRunPlan{NextRunPlan::Kind::kNull});
  release.AddNull().Add(channel_).Add("release").Add(CancelRequestedTicket("warm-up")).AddNull();
  PgParams trigger;  // id, channel, traceparent, tracestate
  trigger.Add(no_such_id).Add(channel_).Add("").Add("");
  const std::string ids = TextArray(std::span<const std::string>(&no_such_id, 1));
  PgParams claim_many;  // ids, tickets, timeouts ms, lease ms, expected versions, channel
  claim_many.Add(ids).Add("{warm-up}").Add("{1}").Add(1LL).Add("{NULL}").Add(channel_);
  PgParams release_many;  // ids, tickets, next plans, error JSONs, marked tickets, ...
  release_many.Add(ids)
      .Add("{warm-up}")
      .Add("{" + std::string(sql::kPlanNull) + "}")
      .Add("{0}")
      .Add("{NULL}")
      .Add("{NULL}")
      .Add("{" + CancelRequestedTicket("warm-up") + "}")
      .AddNull()
      .Add(channel_);
  const std::pair<const PgStatement*, const PgParams*> runs[] = {
      {&s.poll_changed, &empty_poll}, {&s.claim, &claim},
      {&s.claim_many, &claim_many},   {&s.renew_lease, &renew},
      {&s.release, &release},         {&s.release_many, &release_many},
      {&s.trigger, &trigger},         {&s.read_for_cancel, &one_id},
  };
  const sql::HistoryStatements& h = sql::RunStatements();
  const PgStatement* const history_statements[] = {
      &h.claim_many,    &h.release_many, &h.sweep, &h.poll_and_sweep, &h.poll_changed_and_sweep,
      &h.record_starts, &h.record_ends,
  };
  const bool history = history_tables_.load() == kPresent;
  return pool_->WarmUp(schema_, [&](PgConnection& connection) -> Status {
    if (connection.warmed()) return Status::Ok();
    for (const PgStatement* statement : statements) {
      if (std::optional<PgResult> failed = connection.Prepare(*statement)) {
        return ErrorOf("prepare", *failed);
      }
    }
    if (history) {
      for (const PgStatement* statement : history_statements) {
        if (std::optional<PgResult> failed = connection.Prepare(*statement)) {
          return ErrorOf("prepare", *failed);
        }
      }
    }
    for (const auto& [statement, params] : runs) {
      if (PgResult result = connection.Execute(*statement, *params); !result.ok()) {
        return ErrorOf("warm-up", result);
      }
    }
    // Planning any statement on the history loads its table's and indexes' catalog entries.
    if (history) {
      if (PgResult result = connection.Execute(h.get_run, one_id); !result.ok()) {
        return ErrorOf("warm-up", result);
      }
    }
    connection.MarkWarmed();
    return Status::Ok();
  });
}

Result<std::optional<std::string>> PostgresTaskStore::ReadColumn(const std::string& id,
                                                                 int column) {
  PgParams params;
  params.Add(id);
  STAGEHAND_ASSIGN_OR_RETURN(Executed read,
                             Run("read task", sql::TaskStatements().read_for_cancel, params));
  if (read.result.rows() == 0) return std::optional<std::string>();
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(read, 0, 2));
  return read.result.GetOptional(0, column);
}

Result<std::optional<RunError>> PostgresTaskStore::LastRunError(const std::string& id) {
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<std::string> stored, ReadColumn(id, 3));
  if (!stored) return std::optional<RunError>();
  return std::optional(RunError::Decode(std::move(*stored)));
}

Status PostgresTaskStore::Trigger(const std::string& id) { return Trigger(id, TraceContext{}); }

Status PostgresTaskStore::Trigger(const std::string& id, const TraceContext& caller) {
  PgParams params;
  params.Add(id).Add(channel_);
  params.Add(caller.valid() ? FormatTraceparent(caller) : std::string()).Add(caller.trace_state);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("trigger", sql::TaskStatements().trigger, params));
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 2));
  if (!executed.result.GetBool(0, 0)) {
    return NotFoundError(fmt::format("Task {} does not exist", id));
  }
  if (!executed.result.GetBool(0, 1)) {
    if (executed.result.GetBool(0, 3)) return store_internal::PausedError(id);
    return ConflictError(fmt::format("Task {} is currently running", id));
  }
  return Status::Ok();
}

Status PostgresTaskStore::Cancel(const std::string& id, std::chrono::milliseconds hold) {
  const sql::Statements& statements = sql::TaskStatements();
  PgParams read_params;
  read_params.Add(id);
  STAGEHAND_ASSIGN_OR_RETURN(Executed read, Run("cancel", statements.read_for_cancel, read_params));
  if (read.result.rows() == 0) return NotFoundError(fmt::format("Task {} does not exist", id));
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(read, 0, 2));
  const std::optional<std::string> ticket = read.result.GetOptional(0, 1);
  if (!ticket || ticket->empty() || RowTicket::Decode(*ticket).paused()) {
    return ConflictError(fmt::format("Task {} is not running", id));
  }
  Result<TaskSettingsV2> settings = TaskSettingsV2::FromJson(read.result.Get(0, 0));
  if (!settings.ok()) {
    return InvalidArgumentError(fmt::format("{}: task {} has invalid settings_json: {}", where_, id,
                                            settings.status().message()));
  }
  if (RowTicket::Decode(*ticket).cancel_requested) return Status::Ok();

  PgParams params;
  params.Add(id)
      .Add(*ticket)
      .Add(CancelRequestedTicket(*ticket))
      .Add(static_cast<long long>(hold.count()))
      .Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed, Run("cancel", statements.mark_cancelled, params));
  if (executed.result.rows() == 0) {
    return ConflictError(fmt::format("Task {} is not running", id));
  }
  STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 0));
  return Status::Ok();
}

Result<std::vector<std::string>> PostgresTaskStore::SweepExpired() {
  PgParams params;
  params.Add(ErrorJson("Task timed out")).Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryTablesExist());
  STAGEHAND_ASSIGN_OR_RETURN(
      Executed executed,
      Run("sweep", history ? sql::RunStatements().sweep : sql::TaskStatements().sweep, params));
  std::vector<std::string> ids;
  ids.reserve(static_cast<size_t>(executed.result.rows()));
  for (int row = 0; row < executed.result.rows(); ++row) {
    ids.emplace_back(executed.result.Get(row, 0));
  }
  if (!ids.empty()) {
    STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 1));
  }
  return ids;
}

Result<std::vector<TaskRow>> PostgresTaskStore::States() {
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("states", sql::TaskStatements().states, PgParams()));
  const PgResult& result = executed.result;
  std::vector<TaskRow> rows;
  rows.reserve(static_cast<size_t>(result.rows()));
  for (int row = 0; row < result.rows(); ++row) {
    TaskRow& out = rows.emplace_back();
    out.id = result.Get(row, 0);
    out.settings_json = result.Get(row, 1);
    out.current_run_ticket = result.GetOptional(row, 3);
    out.last_run_error_json = result.GetOptional(row, 6);
    STAGEHAND_RETURN_IF_ERROR(ReadTimes(result, row,
                                        {{2, &out.next_run_start_at},
                                         {4, &out.current_run_started_at},
                                         {5, &out.current_run_expires_at},
                                         {7, &out.last_run_ended_at}}));
  }
  if (!rows.empty()) {
    STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 8));
  }
  return rows;
}

Status PostgresTaskStore::Delete(const std::string& id) {
  PgParams params;
  params.Add(id).Add(channel_);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("delete", sql::TaskStatements().remove, params));
  if (executed.result.rows() > 0) {
    STAGEHAND_RETURN_IF_ERROR(ObserveNow(executed, 0, 0));
  }
  return Status::Ok();
}

Result<WallTime> PostgresTaskStore::DatabaseNow() {
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("read the clock", sql::TaskStatements().now, PgParams()));
  return ObserveNow(executed, 0, 0);
}

namespace {

// A store's subscription: its channel on the LISTEN hub (none behind a transaction pooler
// without a notify connection), and the pool's server changes.
class PgSubscription final : public Notifications {
 public:
  PgSubscription(std::unique_ptr<Notifications> channel, std::shared_ptr<ConnectionPool> pool,
                 int observer)
      : channel_(std::move(channel)), pool_(std::move(pool)), observer_(observer) {}
  ~PgSubscription() override { pool_->RemoveServerChangeObserver(observer_); }
  PgSubscription(const PgSubscription&) = delete;
  PgSubscription& operator=(const PgSubscription&) = delete;
  bool announces_writes() const override { return channel_ != nullptr; }

 private:
  std::unique_ptr<Notifications> channel_;
  std::shared_ptr<ConnectionPool> pool_;
  int observer_;
};

}  // namespace

std::unique_ptr<Notifications> PostgresTaskStore::Listen(
    std::function<void(const StoreEvent&)> handler) {
  auto shared = std::make_shared<std::function<void(const StoreEvent&)>>(std::move(handler));
  const int observer = pool_->AddServerChangeObserver([shared] {
    (*shared)(StoreEvent{StoreEvent::Kind::kServerChanged, ""});
  });
  const store_internal::PgConnectParams& params = pool_->params();
  if (params.transaction_pooler && params.notify_conninfo.empty()) {
    // A pooler in transaction mode cannot hold a LISTEN: the engine polls alone.
    return std::make_unique<PgSubscription>(nullptr, pool_, observer);
  }
  std::unique_ptr<Notifications> channel = Shared().hub().Subscribe(
      pool_->params(), channel_,
      [shared, pool = pool_](const StoreEvent& event) {
        // The LISTEN session is back: so is the server, whatever the pool's backoff says.
        if (event.kind == StoreEvent::Kind::kResync) pool->RetryNow();
        (*shared)(event);
      },
      // The server stopped answering the LISTEN session: the statements in flight on the pool's
      // sessions would wait out their call timeout on it.
      [pool = pool_] { pool->SeverLent("the server stopped answering"); });
  return std::make_unique<PgSubscription>(std::move(channel), pool_, observer);
}

DatabaseHealth PostgresTaskStore::Health() const {
  const store_internal::PoolHealth pool = pool_->Health();
  DatabaseHealth health{pool.reachable, pool.unreachable_since, pool.reason, pool.reconnects,
                        pool.server_changes};
  const std::optional<store_internal::PgNotificationHub::ListenHealth> listen =
      Shared().hub().Health(pool_->params());
  // A LISTEN session found down says the server is, unless a statement was answered since (the
  // session is then only slower to come back).
  if (listen && !listen->up && !(pool.reachable && pool.answered_at > listen->noticed_at)) {
    if (health.reachable || listen->down_since < health.unreachable_since) {
      health.unreachable_since = listen->down_since;
    }
    if (health.reachable) health.reason = listen->reason;
    health.reachable = false;
  }
  return health;
}

// Creates `database` through the connection's own database when it does not exist. Another
// process creating it at the same moment is fine.
Status EnsureDatabase(const PgConnectParams& params, const std::string& where) {
  PgConnectParams admin = params;
  admin.database.clear();
  admin.search_path.clear();
  Result<std::unique_ptr<PgConnection>> opened = PgConnection::Open(admin);
  if (!opened.ok()) {
    return UnavailableError(
        fmt::format("{}: cannot connect: {}", where, opened.status().message()));
  }
  PgConnection& connection = **opened;
  PgParams name;
  name.Add(params.database);
  PgResult exists = connection.ExecuteText(sql::kDatabaseExists, name);
  if (!exists.ok()) {
    return UnavailableError(
        fmt::format("{}: cannot look up the database: {}", where, exists.error()));
  }
  if (exists.rows() > 0) return Status::Ok();
  Result<std::string> quoted = connection.QuoteIdentifier(params.database);
  if (!quoted.ok()) return quoted.status().WithPrefix(where + ": ");
  PgResult created = connection.ExecuteScript(sql::CreateDatabase(*quoted).c_str());
  const std::string state = created.SqlState();
  if (created.ok() || state == kDuplicateDatabase || state == kUniqueViolation) {
    return Status::Ok();
  }
  return UnavailableError(
      fmt::format("{}: cannot create the database: {}", where, created.error()));
}

}  // namespace stagehand::store_internal

namespace stagehand {

using store_internal::ConnectionPool;
using store_internal::DatabaseClock;
using store_internal::kDuplicateSchema;
using store_internal::kUniqueViolation;
using store_internal::NextRunPlan;
using store_internal::PgArray;
using store_internal::PgConnection;
using store_internal::PgConnectParams;
using store_internal::PgParams;
using store_internal::PgResult;
using store_internal::PgStatement;
using store_internal::PlanArrays;
using store_internal::PlanKindName;
using store_internal::PostgresTaskStore;
using store_internal::RunCursor;
using store_internal::RunFinishArrays;
using store_internal::RunOriginArrays;
using store_internal::TextArray;
namespace sql = store_internal::pg_sql;

Result<std::unique_ptr<TaskStore>> OpenPostgresTaskStore(const std::string& plugin_id,
                                                         const PostgresStoreOptions& options,
                                                         const Clock& clock) {
  PgConnectParams params;
  params.conninfo = options.connection;
  params.database = options.database;
  params.search_path = options.schema;
  params.connect_timeout = options.connect_timeout;
  params.statement_timeout = options.statement_timeout;
  params.call_timeout = options.call_timeout;
  params.transaction_pooler = options.transaction_pooler;
  params.notify_conninfo = options.notify_connection;
  std::string where =
      fmt::format("plugin '{}', database '{}'", plugin_id, store_internal::DatabaseNameOf(params));
  if (!options.schema.empty()) where += fmt::format(", schema '{}'", options.schema);

  WallTime sent = clock.Now();
  WallTime db_now{};
  Result<std::unique_ptr<PgConnection>> first = PgConnection::Open(params, &db_now);
  if (!first.ok() && !options.database.empty()) {
    STAGEHAND_RETURN_IF_ERROR(EnsureDatabase(params, where));
    sent = clock.Now();
    first = PgConnection::Open(params, &db_now);
  }
  if (!first.ok()) {
    return UnavailableError(fmt::format("{}: cannot connect: {}", where, first.status().message()));
  }
  const WallTime received = clock.Now();

  if (!options.schema.empty()) {
    Result<std::string> quoted = (*first)->QuoteIdentifier(options.schema);
    if (!quoted.ok()) return quoted.status().WithPrefix(where + ": ");
    PgResult created = (*first)->ExecuteScript(sql::CreateSchema(*quoted).c_str());
    const std::string state = created.SqlState();
    if (!created.ok() && state != kDuplicateSchema && state != kUniqueViolation) {
      return UnavailableError(
          fmt::format("{}: cannot create the schema: {}", where, created.error()));
    }
  }

  std::shared_ptr<PostgresConnections> connections = options.connections;
  if (!connections) {
    PostgresConnections::Options own;
    own.max_statement_connections = 0;  // the pool's own maximum is the only cap
    connections = PostgresConnections::CreateWithoutCloser(clock, own);
  }
  store_internal::PoolOptions pool_options;
  pool_options.min = options.pool_min;
  pool_options.max = options.pool_size;
  pool_options.idle_timeout = options.idle_timeout;
  auto store = std::make_unique<PostgresTaskStore>(plugin_id, params, std::move(where),
                                                   pool_options, std::move(connections), clock);
  store->db_clock().Observe(sent, received, db_now);
  store->pool().Adopt(std::move(*first));
  return std::unique_ptr<TaskStore>(std::move(store));
}

}  // namespace stagehand
