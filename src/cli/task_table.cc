#include "cli/task_table.h"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>
#include <utility>

#include "cli/client_verb.h"
#include "cli/json_fields.h"
#include "cli/run_view.h"
#include "cli/text_table.h"
#include "stagehand/base/text.h"
#include "stagehand/model/cadence.h"
#include "stagehand/time/duration.h"

namespace stagehand::cli {
namespace {

constexpr std::size_t kErrorChars = 60;

}  // namespace

Result<std::vector<TaskRow>> ParseTaskListing(std::string_view plugin_id, std::string_view body) {
  nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return InvalidArgumentError("the task listing of plugin '" + std::string(plugin_id) +
                                "' is not a JSON object");
  }
  auto tasks = json.find("tasks");
  if (tasks == json.end() || !tasks->is_array()) {
    return InvalidArgumentError("the task listing of plugin '" + std::string(plugin_id) +
                                "' has no \"tasks\" array");
  }
  std::vector<TaskRow> rows;
  rows.reserve(tasks->size());
  for (const nlohmann::json& task : *tasks) {
    TaskRow row;
    row.plugin_id = StringAt(task, "pluginId");
    if (row.plugin_id.empty()) {
      row.plugin_id = std::string(plugin_id);
    }
    row.task_id = StringAt(task, "taskId");
    row.scope = StringAt(task, "scope");
    row.time_zone = StringAt(task, "timeZone");
    if (task.is_object() && task.contains("settings")) {
      row.cadence = StringAt(task["settings"], "cadence");
    }
    if (task.is_object() && task.contains("pause") && task["pause"].is_object()) {
      const nlohmann::json& pause = task["pause"];
      row.pause = TaskRow::Pause{StringAt(pause, "by"), StringAt(pause, "reason"),
                                 TimeAt(pause, "until"), pause.value("pending", false) == true};
    }
    if (task.is_object() && task.contains("workerState")) {
      row.worker_status = StringAt(task["workerState"], "status");
    }
    if (task.is_object() && task.contains("taskState")) {
      const nlohmann::json& state = task["taskState"];
      row.task_status = StringAt(state, "status");
      row.starts_at = TimeAt(state, "startsAt");
      row.started_at = TimeAt(state, "startedAt");
      row.last_run_ended_at = TimeAt(state, "lastRunEndedAt");
      if (std::string error = StringAt(state, "lastRunError"); !error.empty()) {
        row.last_run_error = std::move(error);
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string FormatSpan(std::chrono::milliseconds span, std::size_t max_units) {
  using std::chrono::milliseconds;
  static constexpr std::array<std::pair<std::int64_t, std::string_view>, 5> kUnits{{
      {86'400'000, "d"},
      {3'600'000, "h"},
      {60'000, "m"},
      {1'000, "s"},
      {1, "ms"},
  }};
  std::int64_t rest = span.count();
  std::string text;
  if (rest < 0) {
    text = "-";
    rest = -rest;
  }
  std::size_t shown = 0;
  for (const auto& [unit_ms, suffix] : kUnits) {
    if (shown == max_units) {
      break;
    }
    std::int64_t count = rest / unit_ms;
    if (count > 0) {
      text += std::to_string(count) + std::string(suffix);
      rest -= count * unit_ms;
      ++shown;
    } else if (shown > 0) {
      // Units after the first shown are consecutive: "1h5s" would read oddly and "1h" is enough.
      ++shown;
    }
  }
  if (shown == 0) {
    text += "0s";
  }
  return text;
}

std::string FormatCadence(std::string_view text, std::string_view time_zone) {
  if (text.empty()) return "-";
  const Result<Cadence> cadence = Cadence::Parse(text);
  if (!cadence.ok()) return std::string(text);
  switch (cadence->kind()) {
    case Cadence::Kind::kManual:
      break;
    case Cadence::Kind::kCron:
      if (!time_zone.empty()) return fmt::format("{} ({})", text, time_zone);
      break;
    case Cadence::Kind::kDuration:
      if (cadence->period().count() > 0) return "every " + FormatSpan(cadence->period(), 5);
      break;
  }
  return std::string(text);
}

std::string FormatLocalTime(WallTime when, WallTime now, const TimeZone& zone) {
  using namespace std::chrono;
  const auto local = floor<seconds>(when) + zone.OffsetAt(when);
  const auto local_now = floor<seconds>(now) + zone.OffsetAt(now);
  const auto day = floor<days>(local);
  const hh_mm_ss<seconds> clock(local - day);
  std::string text = fmt::format("{:02}:{:02}:{:02}", clock.hours().count(),
                                 clock.minutes().count(), clock.seconds().count());
  if (day != floor<days>(local_now)) {
    const year_month_day date(day);
    text = fmt::format("{:04}-{:02}-{:02} ", static_cast<int>(date.year()),
                       static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day())) +
           text;
  }
  return text;
}

std::string FormatWhen(WallTime when, WallTime now, const TimeZone& zone) {
  const auto delta = std::chrono::duration_cast<std::chrono::milliseconds>(when - now);
  const std::string absolute = "(" + FormatLocalTime(when, now, zone) + ")";
  if (delta > -std::chrono::seconds(1) && delta < std::chrono::seconds(1)) {
    return "now " + absolute;
  }
  // Whole seconds are enough beside an absolute time to the second.
  const auto whole = std::chrono::duration_cast<std::chrono::seconds>(delta);
  if (delta.count() > 0) {
    return "in " + FormatSpan(std::chrono::abs(whole), 2) + " " + absolute;
  }
  return FormatSpan(std::chrono::abs(whole), 2) + " ago " + absolute;
}

std::string DisplayState(const TaskRow& row) {
  if (row.pause) {
    return row.pause->pending ? "pausing" : "paused";
  }
  if (row.worker_status == "running" || row.task_status == "running") {
    return "running";
  }
  if (!row.worker_status.empty()) {
    return row.worker_status;
  }
  if (!row.task_status.empty()) {
    return row.task_status;
  }
  return "-";
}

std::string ShortError(std::string_view last_run_error, std::size_t max_chars) {
  std::string message(last_run_error);
  nlohmann::json json = nlohmann::json::parse(last_run_error, nullptr, false);
  if (json.is_object()) {
    std::string inner = StringAt(json, "message");
    std::string name = StringAt(json, "name");
    if (!inner.empty()) {
      message = inner;
    } else if (!name.empty()) {
      message = name;
    }
  } else if (json.is_string()) {
    message = json.get<std::string>();
  }
  return Truncate(OneLine(message), max_chars);
}

std::string RenderTaskTable(const std::vector<TaskRow>& rows, WallTime now, const TimeZone& zone,
                            bool colour) {
  std::vector<std::vector<Cell>> table;
  table.reserve(rows.size() + 1);
  table.push_back({Cell{"PLUGIN", {}}, Cell{"TASK", {}}, Cell{"SCOPE", {}}, Cell{"CADENCE", {}},
                   Cell{"STATE", {}}, Cell{"NEXT RUN", {}}, Cell{"LAST RUN ENDED", {}},
                   Cell{"OUTCOME", {}}, Cell{"DURATION", {}}, Cell{"LAST ERROR", {}}});
  for (const TaskRow& row : rows) {
    std::string state = DisplayState(row);
    std::string next = "-";
    if (row.pause && row.pause->pending) {
      next = "paused when its run ends";
    } else if (row.pause) {
      next = row.pause->until ? "resumes " + FormatWhen(*row.pause->until, now, zone)
                              : "until resumed";
      if (!row.pause->reason.empty()) {
        next += " (" + Truncate(OneLine(row.pause->reason), kErrorChars) + ")";
      }
    } else if (state == "running") {
      if (row.started_at) {
        next = "started " + FormatWhen(*row.started_at, now, zone);
      }
    } else if (row.starts_at) {
      next = FormatWhen(*row.starts_at, now, zone);
    }
    std::string_view state_colour;
    if (state == "running") {
      state_colour = kGreen;
    } else if (state == "initial-wait" || state == "paused" || state == "pausing") {
      state_colour = kYellow;
    }
    table.push_back({
        Cell{row.plugin_id.empty() ? "-" : row.plugin_id, {}},
        Cell{row.task_id.empty() ? "-" : row.task_id, {}},
        Cell{row.scope.empty() ? "-" : row.scope, {}},
        Cell{FormatCadence(row.cadence, row.time_zone), {}},
        Cell{state, state_colour},
        Cell{next, {}},
        Cell{row.last_run_ended_at ? FormatWhen(*row.last_run_ended_at, now, zone) : "-", {}},
        Cell{row.last_outcome.value_or("-"), OutcomeColour(row.last_outcome.value_or(""))},
        Cell{row.last_duration ? FormatShortDuration(*row.last_duration) : "-", {}},
        Cell{row.last_run_error ? ShortError(*row.last_run_error, kErrorChars) : "-",
             row.last_run_error ? kRed : std::string_view{}},
    });
  }
  return RenderTable(table, colour);
}

}  // namespace stagehand::cli
