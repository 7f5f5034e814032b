#include "stagehand/store/mysql_task_store.h"

#include "store/mysql/mysql_store.h"

namespace stagehand::store_internal {

Status MySqlTaskStore::Migrate() {
  STAGEHAND_ASSIGN_OR_RETURN(MyPool::Lease session, Borrow());
  const store_internal::MyErrorOf error_of = ErrorOf();
  STAGEHAND_RETURN_IF_ERROR(store_internal::MigrateMySql(*session, where_, error_of));
  STAGEHAND_RETURN_IF_ERROR(store_internal::MigrateMySqlStagehand(*session, where_, error_of));
  change_log_ = ChangeLog::kPresent;
  history_table_ = Table::kPresent;
  registrations_table_ = Table::kPresent;
  return Status::Ok();
}

Result<UpsertResult> MySqlTaskStore::Upsert(const std::string& id, const TaskSchedule& schedule) {
  const TaskUpsert task{id, schedule, std::nullopt};
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<UpsertResult> results, UpsertMany(std::span(&task, 1)));
  return results.front();
}

Result<std::vector<UpsertResult>> MySqlTaskStore::UpsertMany(std::span<const TaskUpsert> tasks) {
  if (tasks.empty()) return std::vector<UpsertResult>();
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<store_internal::PlannedUpsert> planned,
                             store_internal::PlanUpserts(tasks, db_clock_.Now()));
  std::vector<std::string> ids;
  for (const TaskUpsert& task : tasks) ids.push_back(task.id);
  return InTransaction<std::vector<UpsertResult>>(
      "registering tasks", [&](Transaction& tx) -> Result<std::vector<UpsertResult>> {
        MyConnection& session = tx.session;
        STAGEHAND_ASSIGN_OR_RETURN(WallTime now, NowOn(session));
        for (std::size_t first = 0; first < tasks.size(); first += kRegisterChunk) {
          const std::size_t count = std::min(kRegisterChunk, tasks.size() - first);
          MyParams params;
          for (std::size_t i = first; i < first + count; ++i) {
            const store_internal::PlannedUpsert& plan = planned[i];
            const std::optional<WallTime> start =
                StoredTime(store_internal::EvaluatePlan(plan.insert, now, std::nullopt), now);
            const std::optional<WallTime> again =
                StoredTime(store_internal::EvaluatePlan(plan.reregister, now, std::nullopt), now);
            params.Add(tasks[i].id).Add(plan.settings_json);
            AddTime(params, start);
            AddTime(params, again);
          }
          STAGEHAND_RETURN_IF_ERROR(
              Run(session, RegisterSql(count), params, "registering tasks").status());
        }
        STAGEHAND_RETURN_IF_ERROR(RecordRegistrations(session, tasks));
        STAGEHAND_ASSIGN_OR_RETURN(ReadRows read, Read(session, ids, Lock::kNone));
        std::vector<UpsertResult> results;
        for (const TaskUpsert& task : tasks) {
          tx.Announce(StoreEvent::Kind::kUpsert, task.id);
          const TaskRow& row = read.rows.at(task.id);
          results.push_back(
              UpsertResult{row.next_run_start_at, now, store_internal::RowVersion(row)});
        }
        return results;
      });
}

Result<PollResult> MySqlTaskStore::Poll(std::span<const std::string> ids, bool sweep_expired) {
  const std::vector<std::string> wanted(ids.begin(), ids.end());
  const auto poll = [&](Transaction& tx) -> Result<PollResult> {
    MyConnection& session = tx.session;
    PollResult result;
    if (sweep_expired) {
      STAGEHAND_ASSIGN_OR_RETURN(std::vector<std::string> swept, SweepOn(tx));
      result.swept_ids = std::move(swept);
    }
    STAGEHAND_ASSIGN_OR_RETURN(ReadRows read, Read(session, wanted, Lock::kNone));
    result.db_now = read.now;
    for (const std::string& id : wanted) {
      result.entries.push_back(Entry(id, read.rows, read.now));
    }
    result.earliest_next = store_internal::EarliestIdleNext(result.entries);
    return result;
  };
  if (sweep_expired) return InTransaction<PollResult>("polling tasks", poll);
  STAGEHAND_ASSIGN_OR_RETURN(MyPool::Lease session, Borrow());
  Transaction read_only{*session, {}};
  Result<PollResult> result = poll(read_only);
  if (!result.ok()) DiscardIfLost(session);
  return result;
}

Result<ClaimResult> MySqlTaskStore::Claim(const std::string& id, const std::string& ticket,
                                          std::chrono::milliseconds timeout,
                                          std::chrono::milliseconds lease) {
  ClaimRequest claim;
  claim.id = id;
  claim.ticket = ticket;
  claim.timeout = timeout;
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<ClaimResult> results,
                             ClaimRows(std::span(&claim, 1), lease, Lock::kWait));
  return results.front();
}

Result<std::vector<ClaimResult>> MySqlTaskStore::ClaimMany(std::span<const ClaimRequest> claims,
                                                           std::chrono::milliseconds lease) {
  return ClaimRows(claims, lease, Lock::kSkipLocked);
}

Result<LeaseStatus> MySqlTaskStore::RenewLease(const std::string& id, const std::string& ticket,
                                               std::chrono::milliseconds timeout,
                                               std::chrono::milliseconds lease) {
  return ChangeRow<LeaseStatus>(
      "renewing a lease", id, std::nullopt, [&](TaskRow* row, WallTime now) {
        if (row == nullptr) return Result<LeaseStatus>(LeaseStatus::kLost);
        return Result<LeaseStatus>(store_internal::RenewRow(*row, ticket, timeout, lease, now));
      });
}

Result<bool> MySqlTaskStore::Release(const std::string& id, const std::string& ticket,
                                     const TaskSchedule& schedule,
                                     const std::optional<std::string>& error_json) {
  ReleaseRequest release;
  release.id = id;
  release.ticket = ticket;
  release.schedule = schedule;
  release.error_json = error_json;
  STAGEHAND_ASSIGN_OR_RETURN(std::vector<ReleaseResult> results,
                             ReleaseMany(std::span(&release, 1)));
  return results.front().released;
}

Result<std::vector<ReleaseResult>> MySqlTaskStore::ReleaseMany(
    std::span<const ReleaseRequest> releases) {
  if (releases.empty()) return std::vector<ReleaseResult>();
  std::vector<NextRunPlan> plans;
  const WallTime estimate = db_clock_.Now();
  for (const ReleaseRequest& release : releases) {
    STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan plan, store_internal::PlanRelease(release, estimate));
    plans.push_back(plan);
  }
  std::vector<std::string> ids;
  for (const ReleaseRequest& release : releases) ids.push_back(release.id);
  return InTransaction<std::vector<ReleaseResult>>(
      "releasing tasks", [&](Transaction& tx) -> Result<std::vector<ReleaseResult>> {
        MyConnection& session = tx.session;
        STAGEHAND_ASSIGN_OR_RETURN(ReadRows read, Read(session, ids, Lock::kWait));
        std::vector<ReleaseResult> results(releases.size());
        std::vector<TaskRow> changed;
        std::vector<store_internal::MyRunStart> starts;
        std::vector<store_internal::MyRunEnd> ends;
        for (std::size_t i = 0; i < releases.size(); ++i) {
          ReleaseResult& result = results[i];
          result.db_now = read.now;
          if (const std::optional<ReleasedRun>& run = releases[i].history) {
            starts.push_back({&releases[i].ticket, &releases[i].id, &run->origin,
                              std::optional(run->started_at)});
            ends.push_back({&releases[i].ticket, &run->finish, read.now});
          }
          auto it = read.rows.find(releases[i].id);
          if (it == read.rows.end()) continue;
          TaskRow& row = it->second;
          if (!store_internal::ReleaseRow(row, releases[i].ticket, plans[i], releases[i].error_json,
                                          read.now)) {
            continue;
          }
          RoundForStorage(row, read.now);
          tx.Announce(StoreEvent::Kind::kRelease, row.id);
          result.released = true;
          result.next_run_start_at = row.next_run_start_at;
          result.version = store_internal::RowVersion(row);
          changed.push_back(row);
        }
        STAGEHAND_RETURN_IF_ERROR(Write(session, changed));
        STAGEHAND_RETURN_IF_ERROR(RecordReleasedRuns(session, starts, ends));
        return results;
      });
}

Result<SkipResult> MySqlTaskStore::SkipSlot(const std::string& id, std::int64_t expected_version,
                                            WallTime slot, const TaskSchedule& schedule) {
  STAGEHAND_ASSIGN_OR_RETURN(NextRunPlan plan,
                             store_internal::PlanSkipNext(schedule, slot, db_clock_.Now()));
  return ChangeRow<SkipResult>(
      "skipping a missed slot", id, StoreEvent(StoreEvent::Kind::kRelease, id),
      [&](TaskRow* row, WallTime now) {
        SkipResult result;
        result.db_now = now;
        if (row == nullptr || !store_internal::SkipRow(*row, expected_version, plan, now)) {
          return Result<SkipResult>(result);
        }
        RoundForStorage(*row, now);
        result.skipped = true;
        result.next_run_start_at = row->next_run_start_at;
        result.version = store_internal::RowVersion(*row);
        return Result<SkipResult>(result);
      });
}

Status MySqlTaskStore::Trigger(const std::string& id, const TraceContext& caller) {
  StoreEvent triggered(StoreEvent::Kind::kTrigger, id);
  triggered.caller = caller;
  return ChangeRow<bool>("triggering a task", id, triggered,
                         [&](TaskRow* row, WallTime now) -> Result<bool> {
                           if (row == nullptr) return Missing(id);
                           STAGEHAND_RETURN_IF_ERROR(store_internal::TriggerRow(*row, now));
                           return true;
                         })
      .status();
}

Status MySqlTaskStore::Cancel(const std::string& id, std::chrono::milliseconds hold) {
  return ChangeRow<bool>("cancelling a task", id, StoreEvent(StoreEvent::Kind::kCancel, id),
                         [&](TaskRow* row, WallTime now) -> Result<bool> {
                           if (row == nullptr) return Missing(id);
                           if (!row->current_run_ticket || row->current_run_ticket->empty() ||
                               RowTicket::Decode(*row->current_run_ticket).paused()) {
                             return ConflictError(fmt::format("Task {} is not running", id));
                           }
                           Result<TaskSettingsV2> settings =
                               TaskSettingsV2::FromJson(row->settings_json);
                           if (!settings.ok()) {
                             return InvalidArgumentError(
                                 fmt::format("{}: task '{}' has unparsable settings: {}", where_,
                                             id, settings.status().message()));
                           }
                           STAGEHAND_RETURN_IF_ERROR(store_internal::CancelRow(*row, hold, now));
                           return true;
                         })
      .status();
}

Result<std::vector<std::string>> MySqlTaskStore::SweepExpired() {
  return InTransaction<std::vector<std::string>>(
      "resetting expired runs", [&](Transaction& tx) -> Result<std::vector<std::string>> {
        if (change_log_ == ChangeLog::kPresent) {
          STAGEHAND_RETURN_IF_ERROR(store_internal::PruneChanges(tx.session, ErrorOf()));
        }
        return SweepOn(tx);
      });
}

Result<std::vector<TaskRow>> MySqlTaskStore::States() {
  STAGEHAND_ASSIGN_OR_RETURN(MyPool::Lease session, Borrow());
  Result<MyResult> result = Run(
      *session,
      fmt::format("SELECT {} FROM backstage_backend_tasks__tasks AS t ORDER BY t.id", RowColumns()),
      {}, "listing tasks");
  if (!result.ok()) {
    DiscardIfLost(session);
    return result.status();
  }
  std::vector<TaskRow> rows;
  for (int i = 0; i < result->rows(); ++i) rows.push_back(RowAt(*result, i, 0));
  return rows;
}

Status MySqlTaskStore::Delete(const std::string& id) {
  return InTransaction<bool>("deleting a task",
                             [&](Transaction& tx) -> Result<bool> {
                               STAGEHAND_ASSIGN_OR_RETURN(
                                   MyResult deleted,
                                   Run(tx.session, kDelete, MyParams().Add(id), "deleting a task"));
                               if (deleted.affected() > 0)
                                 tx.Announce(StoreEvent::Kind::kDelete, id);
                               return true;
                             })
      .status();
}

Result<WallTime> MySqlTaskStore::DatabaseNow() {
  STAGEHAND_ASSIGN_OR_RETURN(MyPool::Lease session, Borrow());
  Result<WallTime> now = NowOn(*session);
  if (!now.ok()) DiscardIfLost(session);
  return now;
}

std::unique_ptr<Notifications> MySqlTaskStore::Listen(
    std::function<void(const StoreEvent&)> handler) {
  // Every change committed after this point is delivered.
  std::optional<std::int64_t> seen;
  if (Result<MyPool::Lease> session = Borrow(); session.ok()) {
    (void)ChangeLogPresent(**session);
    if (change_log_ == ChangeLog::kPresent) {
      if (Result<std::int64_t> latest = store_internal::LatestChange(**session); latest.ok()) {
        seen = *latest;
      }
    }
  }
  // A database an older stagehand migrated (with migrations skipped since) has no change log:
  // the hosts then rely on their polls alone, as on SQLite.
  if (change_log_ == ChangeLog::kAbsent) return nullptr;
  return std::make_unique<store_internal::MyChangeListener>(
      params_, store_internal::ProcessWaiterName(), seen,
      [handler](const store_internal::ChangeRecord& change) {
        std::optional<StoreEvent> event = EventOf(change);
        handler(event ? *event : StoreEvent());
      },
      [handler] { handler(StoreEvent()); });
}

Result<MyPool::Lease> MySqlTaskStore::Borrow() {
  Result<MyPool::Lease> session = pool_.Borrow();
  if (!session.ok()) {
    return UnavailableError(fmt::format("{}: {}", where_, session.status().message()));
  }
  return session;
}

Status MySqlTaskStore::Failure(std::string_view what, const MyResult& result) const {
  return UnavailableError(fmt::format("{}: {} failed: {}", where_, what, result.error()));
}

Result<MyResult> MySqlTaskStore::Run(MyConnection& session, std::string_view sql,
                                     const MyParams& params, std::string_view what) {
  MyResult result = session.Execute(sql, params);
  if (result.ok()) return result;
  last_error_ = result.error_code();
  lost_ = result.connection_lost();
  return Failure(what, result);
}

void MySqlTaskStore::DiscardIfLost(MyPool::Lease& session) {
  if (lost_) session.Discard();
}

store_internal::MyErrorOf MySqlTaskStore::ErrorOf() const {
  return [this](std::string_view what, const MyResult& result) {
    last_error_ = result.error_code();
    lost_ = result.connection_lost();
    return Failure(what, result);
  };
}

Result<bool> MySqlTaskStore::TablePresent(MyConnection& session, std::atomic<Table>& known,
                                          std::string_view name, bool again_if_absent) {
  if (known == Table::kUnknown || (known == Table::kAbsent && again_if_absent)) {
    STAGEHAND_ASSIGN_OR_RETURN(MyResult found, Run(session, kTableExists, MyParams().Add(name),
                                                   "looking for stagehand's tables"));
    known = found.GetInt(0, 0) > 0 ? Table::kPresent : Table::kAbsent;
  }
  return known == Table::kPresent;
}

Status MySqlTaskStore::RequireTable(const Result<bool>& present, std::string_view name) const {
  if (!present.ok()) return present.status();
  if (*present) return Status::Ok();
  return FailedPreconditionError(
      fmt::format("{}: the database has no {} table (it was migrated by an older stagehand); "
                  "run the migrations (stagehand db migrate)",
                  where_, name));
}

Result<bool> MySqlTaskStore::ChangeLogPresent(MyConnection& session) {
  if (change_log_ == ChangeLog::kUnknown) {
    STAGEHAND_ASSIGN_OR_RETURN(bool exists, store_internal::ChangeLogExists(session, ErrorOf()));
    change_log_ = exists ? ChangeLog::kPresent : ChangeLog::kAbsent;
  }
  return change_log_ == ChangeLog::kPresent;
}

Result<std::int64_t> MySqlTaskStore::Announce(Transaction& tx) {
  if (tx.events.empty()) return std::int64_t{0};
  STAGEHAND_ASSIGN_OR_RETURN(bool present, ChangeLogPresent(tx.session));
  if (!present) return std::int64_t{0};
  std::vector<store_internal::ChangeRecord> records;
  records.reserve(tx.events.size());
  for (const StoreEvent& event : tx.events) records.push_back(RecordOf(event));
  return store_internal::AppendChanges(tx.session, records, ErrorOf());
}

Result<std::vector<ClaimResult>> MySqlTaskStore::ClaimRows(std::span<const ClaimRequest> claims,
                                                           std::chrono::milliseconds lease,
                                                           Lock lock) {
  if (claims.empty()) return std::vector<ClaimResult>();
  std::vector<std::string> ids;
  for (const ClaimRequest& claim : claims) ids.push_back(claim.id);
  return InTransaction<std::vector<ClaimResult>>(
      "claiming tasks", [&](Transaction& tx) -> Result<std::vector<ClaimResult>> {
        MyConnection& session = tx.session;
        STAGEHAND_ASSIGN_OR_RETURN(ReadRows read, Read(session, ids, lock));
        std::vector<ClaimResult> results(claims.size(), ClaimResult{false, read.now, std::nullopt});
        std::vector<TaskRow> claimed;
        std::vector<store_internal::MyRunStart> starts;
        for (std::size_t i = 0; i < claims.size(); ++i) {
          const ClaimRequest& claim = claims[i];
          auto it = read.rows.find(claim.id);
          if (it == read.rows.end() ||
              !store_internal::ClaimRow(it->second, claim.ticket, claim.timeout, lease,
                                        claim.expected_version, read.now)) {
            continue;
          }
          RoundForStorage(it->second, read.now);
          results[i].claimed = true;
          results[i].expires_at = it->second.current_run_expires_at;
          if (lock == Lock::kSkipLocked) {
            tx.Announce(StoreEvent::Kind::kClaim, claim.id, claim.ticket);
          }
          if (claim.history) {
            starts.push_back({&claim.ticket, &claim.id, &*claim.history, read.now});
          }
          claimed.push_back(it->second);
        }
        STAGEHAND_RETURN_IF_ERROR(Write(session, claimed));
        if (!starts.empty()) {
          STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryPresent(session));
          if (history) STAGEHAND_RETURN_IF_ERROR(Runs(session).RecordStarts(starts));
        }
        return results;
      });
}

Result<std::vector<std::string>> MySqlTaskStore::SweepOn(Transaction& tx) {
  MyConnection& session = tx.session;
  // The expired rows are found by a plain read, then locked by id: a locking read of the whole
  // table would wait for, and hold up, every claim and release in flight on any row.
  STAGEHAND_ASSIGN_OR_RETURN(
      MyResult expired,
      Run(session,
          "SELECT id FROM backstage_backend_tasks__tasks WHERE current_run_expires_at < NOW(6)", {},
          "reading expired runs"));
  if (expired.rows() == 0) return std::vector<std::string>();
  std::vector<std::string> ids;
  for (int row = 0; row < expired.rows(); ++row) ids.emplace_back(expired.Get(row, 0));
  std::sort(ids.begin(), ids.end());
  STAGEHAND_ASSIGN_OR_RETURN(ReadRows read, Read(session, ids, Lock::kWait));
  std::vector<std::string> swept;
  std::vector<std::string> lost_runs;
  std::vector<TaskRow> changed;
  for (auto& [id, row] : read.rows) {
    const std::optional<std::string> ticket = row.current_run_ticket;
    const store_internal::SweepOutcome outcome = store_internal::SweepRow(row, read.now);
    if (outcome == store_internal::SweepOutcome::kUntouched) continue;
    if (outcome == store_internal::SweepOutcome::kSwept) {
      swept.push_back(id);
      if (ticket) lost_runs.emplace_back(store_internal::RunIdOfTicket(*ticket));
    }
    tx.Announce(outcome == store_internal::SweepOutcome::kSwept ? StoreEvent::Kind::kSweep
                                                                : StoreEvent::Kind::kRelease,
                id);
    RoundForStorage(row, read.now);
    changed.push_back(row);
  }
  STAGEHAND_RETURN_IF_ERROR(Write(session, changed));
  if (!lost_runs.empty()) {
    STAGEHAND_ASSIGN_OR_RETURN(bool history, HistoryPresent(session));
    if (history) {
      STAGEHAND_RETURN_IF_ERROR(
          Runs(session).MarkLost(lost_runs, ErrorJson("Task timed out"), read.now));
    }
  }
  return swept;
}

Result<ReadRows> MySqlTaskStore::Read(MyConnection& session, std::span<const std::string> ids,
                                      Lock lock) {
  MyParams params;
  for (const std::string& id : ids) params.Add(id);
  const WallTime sent = clock_.Now();
  STAGEHAND_ASSIGN_OR_RETURN(
      MyResult result,
      Run(session, ReadRowsSql(IdsCondition(ids.size()), lock), params, "reading tasks"));
  db_clock_.Observe(sent, clock_.Now(), FromMicros(result.GetInt(0, 0)));
  return RowsOf(result);
}

Result<ReadRows> MySqlTaskStore::RowsOf(const MyResult& result) {
  ReadRows read;
  read.now = FromMicros(result.GetInt(0, 0));
  for (int i = 0; i < result.rows(); ++i) {
    if (result.IsNull(i, 1)) continue;
    TaskRow row = RowAt(result, i, 1);
    std::string id = row.id;
    read.rows.emplace(std::move(id), std::move(row));
  }
  return read;
}

TaskRow MySqlTaskStore::RowAt(const MyResult& result, int i, int first) {
  const auto time = [&](int column) -> std::optional<WallTime> {
    if (result.IsNull(i, first + column)) return std::nullopt;
    return WallTime(std::chrono::seconds(ParseInt(result.Get(i, first + column))));
  };
  TaskRow row;
  row.id = std::string(result.Get(i, first));
  row.settings_json = std::string(result.Get(i, first + 1));
  row.next_run_start_at = time(2);
  row.current_run_ticket = result.GetOptional(i, first + 3);
  row.current_run_started_at = time(4);
  row.current_run_expires_at = time(5);
  row.last_run_error_json = result.GetOptional(i, first + 6);
  row.last_run_ended_at = time(7);
  static_assert(kRowColumnCount == 8);
  return row;
}

Status MySqlTaskStore::Write(MyConnection& session, std::span<const TaskRow> rows) {
  if (rows.empty()) return Status::Ok();
  MyParams params;
  for (const TaskRow& row : rows) {
    params.Add(row.id).Add(row.settings_json);
    AddTime(params, row.next_run_start_at);
    params.Add(row.current_run_ticket);
    AddTime(params, row.current_run_started_at);
    AddTime(params, row.current_run_expires_at);
    params.Add(row.last_run_error_json);
    AddTime(params, row.last_run_ended_at);
  }
  return Run(session, WriteRowsSql(rows.size()), params, "writing tasks").status();
}

Result<WallTime> MySqlTaskStore::NowOn(MyConnection& session) {
  const WallTime sent = clock_.Now();
  STAGEHAND_ASSIGN_OR_RETURN(MyResult result, Run(session, fmt::format("SELECT {}", kNowMicros), {},
                                                  "reading the database clock"));
  const WallTime now = FromMicros(result.GetInt(0, 0));
  db_clock_.Observe(sent, clock_.Now(), now);
  return now;
}

PollEntry MySqlTaskStore::Entry(const std::string& id, const std::map<std::string, TaskRow>& rows,
                                WallTime now) {
  PollEntry entry;
  entry.id = id;
  auto it = rows.find(id);
  if (it == rows.end()) {
    entry.readiness = Readiness::kMissing;
    return entry;
  }
  const TaskRow& row = it->second;
  entry.next_run_start_at = row.next_run_start_at;
  entry.current_run_expires_at = row.current_run_expires_at;
  entry.running = row.current_run_ticket.has_value();
  entry.version = store_internal::RowVersion(row);
  Result<TaskSettingsV2> settings = TaskSettingsV2::FromJson(row.settings_json);
  if (!settings.ok()) {
    entry.readiness = Readiness::kInvalidSettings;
    entry.settings_error = settings.status().message();
    return entry;
  }
  entry.settings = std::move(*settings);
  const bool due = row.next_run_start_at && *row.next_run_start_at <= now;
  entry.readiness = due && !entry.running ? Readiness::kReady : Readiness::kNotReady;
  return entry;
}

Status MySqlTaskStore::Missing(const std::string& id) {
  return NotFoundError(fmt::format("Task {} does not exist", id));
}

thread_local unsigned MySqlTaskStore::last_error_ = 0;
thread_local bool MySqlTaskStore::lost_ = false;
thread_local MySqlTaskStore::Pinned MySqlTaskStore::pinned_;

}  // namespace stagehand::store_internal

namespace stagehand {

using store_internal::MyConnection;
using store_internal::MyResult;
using store_internal::MySqlTaskStore;

Result<std::unique_ptr<TaskStore>> OpenMySqlTaskStore(const std::string& plugin_id,
                                                      const MySqlStoreOptions& options,
                                                      const Clock& clock) {
  if (options.database.empty()) {
    return InvalidArgumentError(
        fmt::format("plugin {}: no MySQL database given for its tasks", plugin_id));
  }
  store_internal::MyConnectParams params;
  params.host = options.host;
  params.port = options.port;
  params.socket_path = options.socket_path;
  params.user = options.user;
  params.password = options.password;
  params.connect_timeout = options.connect_timeout;
  params.call_timeout = options.call_timeout;
  params.tls_required = options.tls_required;
  {
    Result<std::unique_ptr<MyConnection>> admin = MyConnection::Open(params);
    if (!admin.ok()) {
      return UnavailableError(fmt::format("plugin {}: {}", plugin_id, admin.status().message()));
    }
    STAGEHAND_ASSIGN_OR_RETURN(std::string quoted, MyConnection::QuoteIdentifier(options.database));
    MyResult created = (*admin)->Execute("CREATE DATABASE IF NOT EXISTS " + quoted);
    if (!created.ok()) {
      return UnavailableError(fmt::format("plugin {}: cannot create the MySQL database {}: {}",
                                          plugin_id, options.database, created.error()));
    }
  }
  params.database = options.database;
  return std::unique_ptr<TaskStore>(
      new MySqlTaskStore(plugin_id, options, std::move(params), clock));
}

}  // namespace stagehand
