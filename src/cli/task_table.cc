#include "cli/task_table.h"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>
#include <utility>

#include "cli/client_verb.h"
#include "stagehand/base/text.h"
#include "stagehand/time/duration.h"

namespace stagehand::cli {
namespace {

constexpr std::string_view kBold = "\033[1m";
constexpr std::string_view kGreen = "\033[32m";
constexpr std::string_view kYellow = "\033[33m";
constexpr std::string_view kRed = "\033[31m";
constexpr std::string_view kReset = "\033[0m";

constexpr std::size_t kErrorChars = 60;

// Returns the string at `key` of `object`, or "" when absent or not a string.
std::string StringAt(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) {
    return "";
  }
  auto found = object.find(key);
  return found != object.end() && found->is_string() ? found->get<std::string>() : "";
}

std::optional<WallTime> TimeAt(const nlohmann::json& object, const char* key) {
  std::string text = StringAt(object, key);
  if (text.empty()) {
    return std::nullopt;
  }
  Result<WallTime> parsed = ParseIsoInstant(text);
  return parsed.ok() ? std::optional<WallTime>(*parsed) : std::nullopt;
}

// Returns the number of code points in the UTF-8 `text`: its width in the table.
std::size_t DisplayWidth(std::string_view text) {
  std::size_t width = 0;
  for (char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0U) != 0x80U) {
      ++width;
    }
  }
  return width;
}

// Returns the first `max_chars` code points of `text`, with "…" in place of the last one when
// `text` is longer.
std::string Truncate(std::string_view text, std::size_t max_chars) {
  if (DisplayWidth(text) <= max_chars) {
    return std::string(text);
  }
  std::string cut;
  std::size_t chars = 0;
  for (char c : text) {
    bool starts_char = (static_cast<unsigned char>(c) & 0xC0U) != 0x80U;
    if (starts_char && ++chars == max_chars) {
      break;
    }
    cut += c;
  }
  return cut + "…";
}

// Returns a table cell and the colour it is shown in (empty for none).
struct Cell {
  std::string text;
  std::string_view colour;
};

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
    if (task.is_object() && task.contains("settings")) {
      row.cadence = StringAt(task["settings"], "cadence");
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

std::string FormatCadence(std::string_view cadence) {
  if (cadence.empty()) {
    return "-";
  }
  if (cadence.front() != 'P') {
    return std::string(cadence);
  }
  Result<HumanDuration> duration = ParseIsoDuration(cadence);
  if (!duration.ok()) {
    return std::string(cadence);
  }
  std::chrono::milliseconds span = ToChronoMilliseconds(*duration);
  if (span.count() <= 0) {
    return std::string(cadence);
  }
  return "every " + FormatSpan(span, 5);
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
  constexpr std::size_t kColumns = 8;
  std::vector<std::array<Cell, kColumns>> table;
  table.reserve(rows.size() + 1);
  table.push_back({Cell{"PLUGIN", kBold}, Cell{"TASK", kBold}, Cell{"SCOPE", kBold},
                   Cell{"CADENCE", kBold}, Cell{"STATE", kBold}, Cell{"NEXT RUN", kBold},
                   Cell{"LAST RUN ENDED", kBold}, Cell{"LAST ERROR", kBold}});
  for (const TaskRow& row : rows) {
    std::string state = DisplayState(row);
    std::string next = "-";
    if (state == "running") {
      if (row.started_at) {
        next = "started " + FormatWhen(*row.started_at, now, zone);
      }
    } else if (row.starts_at) {
      next = FormatWhen(*row.starts_at, now, zone);
    }
    std::string_view state_colour;
    if (state == "running") {
      state_colour = kGreen;
    } else if (state == "initial-wait") {
      state_colour = kYellow;
    }
    table.push_back({
        Cell{row.plugin_id.empty() ? "-" : row.plugin_id, {}},
        Cell{row.task_id.empty() ? "-" : row.task_id, {}},
        Cell{row.scope.empty() ? "-" : row.scope, {}},
        Cell{FormatCadence(row.cadence), {}},
        Cell{state, state_colour},
        Cell{next, {}},
        Cell{row.last_run_ended_at ? FormatWhen(*row.last_run_ended_at, now, zone) : "-", {}},
        Cell{row.last_run_error ? ShortError(*row.last_run_error, kErrorChars) : "-",
             row.last_run_error ? kRed : std::string_view{}},
    });
  }
  std::array<std::size_t, kColumns> widths{};
  for (const auto& line : table) {
    for (std::size_t i = 0; i < kColumns; ++i) {
      widths[i] = std::max(widths[i], DisplayWidth(line[i].text));
    }
  }
  std::string out;
  for (const auto& line : table) {
    std::string text;
    for (std::size_t i = 0; i < kColumns; ++i) {
      const Cell& cell = line[i];
      if (colour && !cell.colour.empty()) {
        text += std::string(cell.colour) + cell.text + std::string(kReset);
      } else {
        text += cell.text;
      }
      if (i + 1 < kColumns) {
        text += std::string(widths[i] - DisplayWidth(cell.text) + 2, ' ');
      }
    }
    out += text + '\n';
  }
  return out;
}

}  // namespace stagehand::cli
