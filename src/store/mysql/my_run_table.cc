#include "store/mysql/my_run_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "store/run_history_support.h"

namespace stagehand::store_internal {

namespace {

// The datetime of a `?` holding UTC epoch microseconds (NULL stays NULL).
constexpr std::string_view kDatetimeOf = "TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00')";

// The UTC epoch microseconds of the datetime column `column`.
std::string MicrosOf(std::string_view column) {
  return fmt::format("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {})", column);
}

// Every run select reads these columns, in this order (the output, when read, comes after).
std::string RunColumns() {
  return fmt::format(
      "run_id, task_id, host, pid, trigger_kind, {}, {}, {}, outcome, error_json, exit_code, "
      "`signal`, http_status, attempt, trace_id",
      MicrosOf("slot_at"), MicrosOf("started_at"), MicrosOf("ended_at"));
}
constexpr int kOutputColumn = 15;

constexpr std::string_view kExists =
    "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
    "AND TABLE_NAME = 'stagehand_task_runs'";

// `(?, ?, ...)` for `count` values; `(NULL)` for none.
std::string Placeholders(std::size_t count) {
  if (count == 0) return "(NULL)";
  std::string list = "(?";
  for (std::size_t i = 1; i < count; ++i) list += ", ?";
  return list + ")";
}

std::int64_t MicrosSinceEpoch(WallTime time) {
  return std::chrono::duration_cast<std::chrono::microseconds>(ToMillis(time).time_since_epoch())
      .count();
}

MyParams& AddTime(MyParams& params, const std::optional<WallTime>& time) {
  if (!time) return params.AddNull();
  return params.Add(MicrosSinceEpoch(*time));
}

MyParams& AddInt(MyParams& params, const std::optional<int>& value) {
  if (!value) return params.AddNull();
  return params.Add(*value);
}

std::int64_t ParseInt(std::string_view text) {
  std::int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

std::optional<std::int64_t> OptionalInt(const MyResult& result, int row, int column) {
  const std::optional<std::string>& text = result.GetOptional(row, column);
  if (!text) return std::nullopt;
  return ParseInt(*text);
}

WallTime FromMicros(std::int64_t micros) { return WallTime(std::chrono::microseconds(micros)); }

// The latest sequence number of each of `task_ids` that has runs.
constexpr std::string_view kLatestSeqSql =
    "SELECT task_id, max(seq) FROM stagehand_task_runs WHERE task_id IN {} GROUP BY task_id";

}  // namespace

Result<MyResult> MyRunTable::Run(std::string_view sql, const MyParams& params,
                                 std::string_view what) {
  MyResult result = session_.Execute(sql, params);
  if (!result.ok()) return error_of_(what, result);
  return result;
}

Result<bool> MyRunTable::Exists() {
  STAGEHAND_ASSIGN_OR_RETURN(MyResult found, Run(kExists, {}, "looking for the run history"));
  return found.GetInt(0, 0) > 0;
}

Status MyRunTable::RecordStarts(std::span<const MyRunStart> starts) {
  if (starts.empty()) return Status::Ok();
  // A recorded run id is left as it is (a retried batch), and neither counts nor is written again.
  MyParams ids;
  for (const MyRunStart& start : starts) ids.Add(*start.run_id);
  STAGEHAND_ASSIGN_OR_RETURN(
      MyResult recorded,
      Run(fmt::format("SELECT run_id FROM stagehand_task_runs WHERE run_id IN {}",
                      Placeholders(starts.size())),
          ids, "recording a run's start"));
  std::set<std::string, std::less<>> seen;
  for (int row = 0; row < recorded.rows(); ++row) seen.emplace(recorded.Get(row, 0));
  std::vector<const MyRunStart*> fresh;
  std::map<std::string, std::int64_t, std::less<>> per_task;  // task → its new runs
  for (const MyRunStart& start : starts) {
    if (!seen.insert(*start.run_id).second) continue;
    fresh.push_back(&start);
    ++per_task[*start.task_id];
  }
  if (fresh.empty()) return Status::Ok();
  // Counting takes each task's count row, in task order, until the commit: recordings of one
  // task's runs follow one another, and their numbers are unique.
  std::string count_sql = "INSERT INTO stagehand_task_run_counts (task_id, runs) VALUES ";
  MyParams counts;
  for (const auto& [task_id, added] : per_task) {
    count_sql += counts.size() == 0 ? "(?, ?)" : ", (?, ?)";
    counts.Add(task_id).Add(added);
  }
  count_sql += " ON DUPLICATE KEY UPDATE runs = runs + VALUES(runs)";
  STAGEHAND_RETURN_IF_ERROR(Run(count_sql, counts, "recording a run's start").status());
  MyParams tasks;
  for (const auto& [task_id, added] : per_task) tasks.Add(task_id);
  STAGEHAND_ASSIGN_OR_RETURN(
      MyResult totals,
      Run(fmt::format("SELECT task_id, runs FROM stagehand_task_run_counts WHERE task_id IN {}",
                      Placeholders(per_task.size())),
          tasks, "recording a run's start"));
  std::map<std::string, std::int64_t, std::less<>> next_seq;
  for (int row = 0; row < totals.rows(); ++row) {
    const std::string task_id(totals.Get(row, 0));
    next_seq[task_id] = totals.GetInt(row, 1) - per_task[task_id] + 1;
  }
  const std::string values = fmt::format(
      "(?, ?, ?, ?, ?, ?, {0}, coalesce({0}, UTC_TIMESTAMP(3)), 'running', ?, ?)", kDatetimeOf);
  std::string sql =
      "INSERT INTO stagehand_task_runs (run_id, task_id, seq, host, pid, trigger_kind, slot_at, "
      "started_at, outcome, attempt, trace_id) VALUES ";
  MyParams params;
  for (std::size_t i = 0; i < fresh.size(); ++i) {
    const MyRunStart& start = *fresh[i];
    sql += i == 0 ? values : ", " + values;
    params.Add(*start.run_id).Add(*start.task_id).Add(next_seq[*start.task_id]++);
    params.Add(start.origin->host).Add(start.origin->pid);
    params.Add(RunTriggerName(start.origin->trigger));
    AddTime(params, start.origin->slot);
    AddTime(params, start.started_at);
    params.Add(start.origin->attempt).Add(start.origin->trace_id);
  }
  // Another host recording the same run id meanwhile: its row stays.
  sql += " ON DUPLICATE KEY UPDATE run_id = run_id";
  return Run(sql, params, "recording a run's start").status();
}

Result<std::vector<std::pair<std::string, std::string>>> MyRunTable::CloseRuns(
    std::span<const MyRunEnd> ends, std::size_t max_output_bytes) {
  std::vector<std::pair<std::string, std::string>> closed;
  if (ends.empty()) return closed;
  MyParams ids;
  for (const MyRunEnd& end : ends) ids.Add(*end.run_id);
  STAGEHAND_ASSIGN_OR_RETURN(
      MyResult open,
      Run(fmt::format("SELECT run_id, task_id FROM stagehand_task_runs WHERE run_id IN {} AND "
                      "(ended_at IS NULL OR outcome = 'lost') FOR UPDATE",
                      Placeholders(ends.size())),
          ids, "recording a run's end"));
  std::map<std::string, std::string, std::less<>> closable;
  for (int row = 0; row < open.rows(); ++row) {
    closable.emplace(std::string(open.Get(row, 0)), std::string(open.Get(row, 1)));
  }
  const std::string sql = fmt::format(
      "UPDATE stagehand_task_runs SET ended_at = coalesce({}, UTC_TIMESTAMP(3)), outcome = ?, "
      "error_json = ?, exit_code = ?, `signal` = ?, http_status = ?, output = _binary ? "
      "WHERE run_id = ?",
      kDatetimeOf);
  for (const MyRunEnd& end : ends) {
    auto it = closable.find(*end.run_id);
    if (it == closable.end()) continue;
    const RunFinish& finish = *end.finish;
    MyParams params;
    AddTime(params, end.ended_at);
    params.Add(RunOutcomeName(finish.outcome)).Add(finish.error_json);
    AddInt(params, finish.exit_code);
    AddInt(params, finish.signal);
    AddInt(params, finish.http_status);
    params.Add(OutputTail(finish.output_tail, max_output_bytes)).Add(*end.run_id);
    STAGEHAND_RETURN_IF_ERROR(Run(sql, params, "recording a run's end").status());
    closed.emplace_back(it->first, it->second);
    closable.erase(it);
  }
  return closed;
}

Status MyRunTable::Trim(std::vector<std::string> tasks, int keep,
                        std::span<const std::string> closed) {
  std::sort(tasks.begin(), tasks.end());
  tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
  if (tasks.empty()) return Status::Ok();
  MyParams ids;
  for (const std::string& task : tasks) ids.Add(task);
  STAGEHAND_ASSIGN_OR_RETURN(MyResult latest,
                             Run(fmt::format(kLatestSeqSql, Placeholders(tasks.size())), ids,
                                 "trimming a task's run history"));
  std::string keep_closed;
  if (!closed.empty()) keep_closed = " AND run_id NOT IN " + Placeholders(closed.size());
  // Runs another transaction holds are left to a later trim (or the age limit): hosts ending runs
  // of one task at once never wait for each other here, so they cannot deadlock.
  const std::string sql = fmt::format(
      "SELECT run_id FROM stagehand_task_runs WHERE task_id = ? AND ended_at IS NOT NULL "
      "AND seq <= ? AND seq > ?{} FOR UPDATE SKIP LOCKED",
      keep_closed);
  MyParams doomed;
  std::size_t count = 0;
  for (int row = 0; row < latest.rows(); ++row) {
    const std::int64_t bound = latest.GetInt(row, 1) - keep;
    if (bound <= 0) continue;
    MyParams params;
    params.Add(latest.Get(row, 0)).Add(bound).Add(bound - kRunTrimWindow);
    for (const std::string& run_id : closed) params.Add(run_id);
    STAGEHAND_ASSIGN_OR_RETURN(MyResult found, Run(sql, params, "trimming a task's run history"));
    for (int i = 0; i < found.rows(); ++i, ++count) doomed.Add(found.Get(i, 0));
  }
  if (count == 0) return Status::Ok();
  return Run("DELETE FROM stagehand_task_runs WHERE run_id IN " + Placeholders(count), doomed,
             "trimming a task's run history")
      .status();
}

Result<std::size_t> MyRunTable::MarkLost(std::span<const std::string> run_ids,
                                         const std::string& error_json,
                                         const std::optional<WallTime>& at) {
  if (run_ids.empty()) return std::size_t{0};
  MyParams params;
  AddTime(params, at);
  params.Add(error_json);
  for (const std::string& run_id : run_ids) params.Add(run_id);
  STAGEHAND_ASSIGN_OR_RETURN(
      MyResult lost,
      Run(fmt::format("UPDATE stagehand_task_runs SET ended_at = coalesce({}, UTC_TIMESTAMP(3)), "
                      "outcome = 'lost', error_json = ? WHERE ended_at IS NULL AND run_id IN {}",
                      kDatetimeOf, Placeholders(run_ids.size())),
          params, "marking runs lost"));
  return static_cast<std::size_t>(lost.affected());
}

Result<RunPage> MyRunTable::List(const std::string& task_id, int limit,
                                 const std::optional<std::string>& before) {
  std::optional<std::pair<std::int64_t, std::string>> after;  // start (epoch µs), run id
  if (before) {
    if (std::optional<RunCursor> cursor = DecodeRunCursor(*before)) {
      after.emplace(MicrosSinceEpoch(cursor->started_at), cursor->run_id);
    } else {
      STAGEHAND_ASSIGN_OR_RETURN(
          MyResult anchor, Run(fmt::format("SELECT {} FROM stagehand_task_runs WHERE run_id = ?",
                                           MicrosOf("started_at")),
                               MyParams().Add(*before), "listing runs"));
      if (anchor.rows() == 0) {
        return InvalidArgumentError(
            fmt::format("before: '{}' is neither a page cursor nor a run id", *before));
      }
      after.emplace(anchor.GetInt(0, 0), *before);
    }
  }
  MyParams params;
  params.Add(task_id);
  std::string condition = "task_id = ?";
  if (after) {
    condition += fmt::format(" AND (started_at, run_id) < ({}, ?)", kDatetimeOf);
    params.Add(after->first).Add(after->second);
  }
  params.Add(limit + 1);
  STAGEHAND_ASSIGN_OR_RETURN(MyResult rows,
                             Run(fmt::format("SELECT {} FROM stagehand_task_runs WHERE {} "
                                             "ORDER BY started_at DESC, run_id DESC LIMIT ?",
                                             RunColumns(), condition),
                                 params, "listing runs"));
  RunPage page;
  for (int row = 0; row < rows.rows(); ++row) {
    if (page.runs.size() == static_cast<std::size_t>(limit)) {
      page.next_cursor = EncodeRunCursor(page.runs.back().started_at, page.runs.back().run_id);
      break;
    }
    STAGEHAND_ASSIGN_OR_RETURN(TaskRun run, ReadRun(rows, row));
    page.runs.push_back(std::move(run));
  }
  return page;
}

Result<TaskRun> MyRunTable::Get(const std::string& run_id) {
  STAGEHAND_ASSIGN_OR_RETURN(
      MyResult found,
      Run(fmt::format("SELECT {}, output FROM stagehand_task_runs WHERE run_id = ?", RunColumns()),
          MyParams().Add(run_id), "reading a run"));
  if (found.rows() == 0) return NotFoundError(fmt::format("Run {} does not exist", run_id));
  STAGEHAND_ASSIGN_OR_RETURN(TaskRun run, ReadRun(found, 0));
  run.finish.output_tail = found.GetOptional(0, kOutputColumn).value_or("");
  return run;
}

Result<std::size_t> MyRunTable::Prune(std::chrono::hours max_age, std::size_t max_rows) {
  STAGEHAND_ASSIGN_OR_RETURN(
      MyResult pruned,
      Run("DELETE FROM stagehand_task_runs WHERE started_at < UTC_TIMESTAMP(3) - INTERVAL ? HOUR "
          "ORDER BY started_at LIMIT ?",
          MyParams().Add(max_age.count()).Add(max_rows), "pruning the run history"));
  return static_cast<std::size_t>(pruned.affected());
}

Status MyRunTable::DeleteTask(const std::string& task_id) {
  STAGEHAND_RETURN_IF_ERROR(Run("DELETE FROM stagehand_task_runs WHERE task_id = ?",
                                MyParams().Add(task_id), "deleting a task's runs")
                                .status());
  return Run("DELETE FROM stagehand_task_run_counts WHERE task_id = ?", MyParams().Add(task_id),
             "deleting a task's runs")
      .status();
}

Result<TaskRun> MyRunTable::ReadRun(const MyResult& result, int row) {
  // Row `row` of `result`, as DecodeRunRow reads it (times as epoch microseconds).
  struct Row {
    const MyResult& result;
    int row;
    std::string Text(int column) const { return std::string(result.Get(row, column)); }
    std::int64_t Int(int column) const { return result.GetInt(row, column); }
    std::optional<std::string> OptionalText(int column) const {
      return result.GetOptional(row, column);
    }
    std::optional<std::int64_t> OptionalInt(int column) const {
      return store_internal::OptionalInt(result, row, column);
    }
    Result<std::optional<WallTime>> Time(int column) const {
      const std::optional<std::int64_t> micros = OptionalInt(column);
      if (!micros) return std::optional<WallTime>();
      return std::optional<WallTime>(FromMicros(*micros));
    }
  };
  return DecodeRunRow(Row{result, row});
}

}  // namespace stagehand::store_internal
