#include "store/postgres/postgres_store.h"

namespace stagehand::store_internal {

Result<bool> PostgresTaskStore::HistoryTablesExist() {
  const int known = history_tables_.load();
  if (known != kUnknown) return known == kPresent;
  Result<ConnectionPool::Lease> lease = pool_->Acquire(schema_);
  if (!lease.ok()) {
    return UnavailableError(
        fmt::format("{}: looking for the run history failed: cannot connect: {}", where_,
                    lease.status().message()));
  }
  PgResult result = (*lease)->ExecuteText(sql::kHistoryTableExists, PgParams());
  if (!result.ok()) return ErrorOf("looking for the run history", result);
  const bool exists = result.rows() > 0 && result.GetBool(0, 0);
  int expected = kUnknown;
  history_tables_.compare_exchange_strong(expected, exists ? kPresent : kAbsent);
  return history_tables_.load() == kPresent;
}

Status PostgresTaskStore::RecordStarts(std::span<const RunStart> starts) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateStarts(starts));
  if (starts.empty()) return Status::Ok();
  PgArray run_ids;
  PgArray task_ids;
  RunOriginArrays origins(/*with_starts=*/true);
  bool any = false;
  for (const RunStart& start : starts) {
    if (IsRecorded(start.run_id)) continue;  // a start recorded before: ignored
    any = true;
    run_ids.Add(start.run_id);
    task_ids.Add(start.task_id);
    origins.Add(start.origin, start.started_at);
  }
  if (!any) return Status::Ok();
  PgParams params;
  params.Add(std::move(run_ids).Finish()).Add(std::move(task_ids).Finish());
  std::move(origins).AddTo(params);
  params.Add(static_cast<long long>(limits_.Get().max_runs_per_task));
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("record run starts", sql::RunStatements().record_starts, params));
  const PgResult& result = executed.result;
  for (int row = 0; row < result.rows(); ++row) {
    RememberRecordedPlace(
        std::string(result.Get(row, 2)),
        RingPlace{std::string(result.Get(row, 0)), static_cast<int>(result.GetInt(row, 1))});
  }
  return Status::Ok();
}

Result<std::size_t> PostgresTaskStore::RecordEnds(std::span<const RunEnd> ends) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidateEnds(ends));
  if (ends.empty()) return std::size_t{0};
  const RunHistoryLimits limits = limits_.Get();
  // The runs whose place this store knows are closed through the primary key, the others found
  // by their id.
  struct Finishes {
    explicit Finishes(std::size_t max_output_bytes) : finish(max_output_bytes) {}
    PgArray task_ids;
    PgArray ring_slots;
    PgArray run_ids;
    PgArray ended;
    RunFinishArrays finish;
    bool empty = true;
  };
  Finishes placed(limits.max_output_bytes);
  Finishes unplaced(limits.max_output_bytes);
  for (const RunEnd& end : ends) {
    const std::optional<RingPlace> place = TakeRecordedPlace(end.run_id);
    Finishes& finishes = place ? placed : unplaced;
    finishes.empty = false;
    if (place) {
      finishes.task_ids.Add(place->task_id);
      finishes.ring_slots.AddInt(place->slot);
    }
    finishes.run_ids.Add(end.run_id);
    if (end.ended_at) {
      finishes.ended.Add(
          store_internal::FormatPgTimestamp(store_internal::ToMillis(*end.ended_at)));
    } else {
      finishes.ended.AddNull();
    }
    finishes.finish.Add(end.finish);
  }
  std::size_t closed = 0;
  for (Finishes* finishes : {&placed, &unplaced}) {
    if (finishes->empty) continue;
    PgParams params;
    if (finishes == &placed) {
      params.Add(std::move(finishes->task_ids).Finish())
          .Add(std::move(finishes->ring_slots).Finish());
    }
    params.Add(std::move(finishes->run_ids).Finish()).Add(std::move(finishes->ended).Finish());
    std::move(finishes->finish).AddTo(params);
    const sql::HistoryStatements& statements = sql::RunStatements();
    STAGEHAND_ASSIGN_OR_RETURN(
        Executed executed,
        Run("record run ends",
            finishes == &placed ? statements.record_ends : statements.record_ends_by_id, params));
    closed += static_cast<std::size_t>(executed.result.GetInt(0, 0));
  }
  return closed;
}

Result<TaskRun> PostgresTaskStore::ReadRun(const PgResult& result, int row) const {
  // Row `row` of `result`, as DecodeRunRow reads it.
  struct Row {
    const PostgresTaskStore& store;
    const PgResult& result;
    int row;
    std::string Text(int column) const { return std::string(result.Get(row, column)); }
    std::int64_t Int(int column) const { return result.GetInt(row, column); }
    std::optional<std::string> OptionalText(int column) const {
      return result.GetOptional(row, column);
    }
    std::optional<std::int64_t> OptionalInt(int column) const {
      if (result.IsNull(row, column)) return std::nullopt;
      return result.GetInt(row, column);
    }
    Result<std::optional<WallTime>> Time(int column) const {
      return store.TimeAt(result, row, column);
    }
  };
  return DecodeRunRow(Row{*this, result, row});
}

Result<RunPage> PostgresTaskStore::ListRuns(const std::string& task_id, int limit,
                                            const std::optional<std::string>& before) {
  STAGEHAND_RETURN_IF_ERROR(store_internal::ValidatePageSize(limit));
  const sql::HistoryStatements& statements = sql::RunStatements();
  std::optional<RunCursor> after;
  if (before) {
    after = store_internal::DecodeRunCursor(*before);
    if (!after) {
      PgParams anchor_params;
      anchor_params.Add(*before).Add(task_id);
      STAGEHAND_ASSIGN_OR_RETURN(Executed anchor,
                                 Run("list runs", statements.run_start, anchor_params));
      if (anchor.result.rows() == 0) {
        return InvalidArgumentError(
            fmt::format("before: '{}' is neither a page cursor nor a run id", *before));
      }
      STAGEHAND_ASSIGN_OR_RETURN(std::optional<WallTime> started, TimeAt(anchor.result, 0, 0));
      after = RunCursor{started.value_or(WallTime{}), *before};
    }
  }
  PgParams params;
  params.Add(task_id).Add(static_cast<long long>(limit) + 1);
  if (after) params.Add(store_internal::FormatPgTimestamp(after->started_at)).Add(after->run_id);
  STAGEHAND_ASSIGN_OR_RETURN(
      Executed executed,
      Run("list runs", after ? statements.list_runs_before : statements.list_runs, params));
  const PgResult& result = executed.result;
  RunPage page;
  const int count = std::min(result.rows(), limit);
  page.runs.reserve(static_cast<std::size_t>(count));
  for (int row = 0; row < count; ++row) {
    STAGEHAND_ASSIGN_OR_RETURN(TaskRun run, ReadRun(result, row));
    page.runs.push_back(std::move(run));
  }
  if (result.rows() > limit) {
    page.next_cursor =
        store_internal::EncodeRunCursor(page.runs.back().started_at, page.runs.back().run_id);
  }
  return page;
}

Result<TaskRun> PostgresTaskStore::GetRun(const std::string& run_id) {
  PgParams params;
  params.Add(run_id);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("get run", sql::RunStatements().get_run, params));
  if (executed.result.rows() == 0) {
    return NotFoundError(fmt::format("Run {} does not exist", run_id));
  }
  STAGEHAND_ASSIGN_OR_RETURN(TaskRun run, ReadRun(executed.result, 0));
  if (!executed.result.IsNull(0, 15)) {
    std::optional<std::string> output = store_internal::BytesOfHex(executed.result.Get(0, 15));
    if (!output) return InternalError(fmt::format("{}: run {}: unreadable output", where_, run_id));
    run.finish.output_tail = std::move(*output);
  }
  return run;
}

Result<std::size_t> PostgresTaskStore::MarkLost(std::span<const std::string> run_ids,
                                                const std::string& error_json) {
  if (run_ids.empty()) return std::size_t{0};
  PgParams params;
  params.Add(TextArray(run_ids)).Add(error_json);
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("mark runs lost", sql::RunStatements().mark_lost, params));
  return static_cast<std::size_t>(executed.result.affected());
}

Result<std::size_t> PostgresTaskStore::PruneExpired(std::size_t max_rows) {
  PgParams params;
  const RunHistoryLimits limits = limits_.Get();
  params.Add(std::chrono::duration<double>(limits.max_age).count())
      .Add(static_cast<long long>(max_rows))
      .Add(static_cast<long long>(limits.max_runs_per_task));
  STAGEHAND_ASSIGN_OR_RETURN(Executed executed,
                             Run("prune runs", sql::RunStatements().prune_expired, params));
  return static_cast<std::size_t>(executed.result.affected());
}

}  // namespace stagehand::store_internal
