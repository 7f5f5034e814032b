#include "cli/run_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "cli/json_fields.h"
#include "cli/task_table.h"
#include "cli/text_table.h"
#include "stagehand/base/text.h"
#include "stagehand/cli/cli.h"
#include "stagehand/time/duration.h"

namespace stagehand::cli {
namespace {

constexpr std::size_t kRunErrorChars = 50;

std::optional<std::chrono::milliseconds> MillisecondsAt(const nlohmann::json& object,
                                                        const char* key) {
  std::optional<std::int64_t> value = IntegerAt(object, key);
  return value ? std::optional<std::chrono::milliseconds>(*value) : std::nullopt;
}

std::optional<int> SmallIntegerAt(const nlohmann::json& object, const char* key) {
  std::optional<std::int64_t> value = IntegerAt(object, key);
  if (!value || *value < std::numeric_limits<int>::min() ||
      *value > std::numeric_limits<int>::max()) {
    return std::nullopt;
  }
  return static_cast<int>(*value);
}

RunRecord ReadRun(const nlohmann::json& json) {
  RunRecord run;
  run.run_id = StringAt(json, "runId");
  run.task_id = StringAt(json, "taskId");
  run.plugin_id = StringAt(json, "pluginId");
  run.host = StringAt(json, "host");
  run.pid = IntegerAt(json, "pid").value_or(0);
  run.trigger = StringAt(json, "trigger");
  run.attempt = IntegerAt(json, "attempt").value_or(1);
  run.slot = TimeAt(json, "slot");
  run.started_at = TimeAt(json, "startedAt");
  run.ended_at = TimeAt(json, "endedAt");
  run.duration = MillisecondsAt(json, "durationMs");
  run.start_lag = MillisecondsAt(json, "startLagMs");
  run.outcome = StringAt(json, "outcome");
  if (auto error = json.find("error"); error != json.end() && error->is_object()) {
    run.error_name = StringAt(*error, "name");
    run.error_message = StringAt(*error, "message");
  }
  run.exit_code = SmallIntegerAt(json, "exitCode");
  run.signal = SmallIntegerAt(json, "signal");
  run.http_status = SmallIntegerAt(json, "httpStatus");
  return run;
}

std::string SignalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signal);
}

// Returns what an outcome says of a run in a sentence: "succeeded in", "failed after".
std::string_view OutcomeVerb(std::string_view outcome) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kVerbs{{
      {"succeeded", "succeeded in"},
      {"failed", "failed after"},
      {"timed_out", "timed out after"},
      {"cancelled", "was cancelled after"},
      {"lost", "was lost after"},
      {"fenced", "was fenced after"},
  }};
  for (const auto& [name, verb] : kVerbs) {
    if (name == outcome) {
      return verb;
    }
  }
  return "ended after";
}

}  // namespace

Result<RunPage> ParseRunPage(std::string_view body, std::string_view what) {
  nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return InvalidArgumentError(std::string(what) + " are not a JSON object");
  }
  auto runs = json.find("runs");
  if (runs == json.end() || !runs->is_array()) {
    return InvalidArgumentError(std::string(what) + " have no \"runs\" array");
  }
  RunPage page;
  page.runs.reserve(runs->size());
  for (const nlohmann::json& run : *runs) {
    page.runs.push_back(ReadRun(run));
  }
  if (std::string cursor = StringAt(json, "nextCursor"); !cursor.empty()) {
    page.next_cursor = std::move(cursor);
  }
  return page;
}

Result<RunDetail> ParseRunDetail(std::string_view body, std::string_view what) {
  nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return InvalidArgumentError(std::string(what) + " is not a JSON object");
  }
  RunDetail detail;
  detail.run = ReadRun(json);
  if (detail.run.run_id.empty()) {
    return InvalidArgumentError(std::string(what) + " has no \"runId\"");
  }
  detail.output = StringAt(json, "output");
  std::optional<std::int64_t> bytes = IntegerAt(json, "outputBytes");
  detail.output_bytes = bytes && *bytes > 0 ? static_cast<std::uint64_t>(*bytes) : 0;
  if (auto live = json.find("live"); live != json.end() && live->is_boolean()) {
    detail.live = live->get<bool>();
  }
  return detail;
}

bool HasEnded(std::string_view outcome) { return outcome != "running"; }

std::string FormatExit(const RunRecord& run) {
  if (run.exit_code) {
    return std::to_string(*run.exit_code);
  }
  if (run.signal) {
    return SignalName(*run.signal);
  }
  if (run.http_status) {
    return "HTTP " + std::to_string(*run.http_status);
  }
  return "-";
}

std::string_view OutcomeColour(std::string_view outcome) {
  if (outcome == "succeeded" || outcome == "running") {
    return kGreen;
  }
  if (outcome == "cancelled") {
    return kYellow;
  }
  if (outcome == "failed" || outcome == "timed_out" || outcome == "lost" || outcome == "fenced") {
    return kRed;
  }
  return {};
}

int ExitCodeForOutcome(std::string_view outcome) {
  if (outcome == "succeeded") {
    return kExitOk;
  }
  if (outcome == "failed") {
    return kExitRunFailed;
  }
  if (outcome == "timed_out") {
    return kExitRunTimedOut;
  }
  if (outcome == "cancelled") {
    return kExitRunCancelled;
  }
  if (outcome == "lost" || outcome == "fenced") {
    return kExitRunLost;
  }
  return kExitFailure;
}

std::string RenderRunTable(const std::vector<RunRecord>& runs, WallTime now, const TimeZone& zone,
                           bool colour) {
  std::vector<std::vector<Cell>> table;
  table.reserve(runs.size() + 1);
  table.push_back({Cell{"STARTED", {}}, Cell{"HOST", {}}, Cell{"TRIGGER", {}}, Cell{"OUTCOME", {}},
                   Cell{"DURATION", {}}, Cell{"LAG", {}}, Cell{"EXIT", {}}, Cell{"RUN ID", {}},
                   Cell{"ERROR", {}}});
  const auto or_dash = [](const std::string& text) { return text.empty() ? "-" : text; };
  for (const RunRecord& run : runs) {
    std::string error = run.error_message.empty() ? run.error_name : run.error_message;
    table.push_back({
        Cell{run.started_at ? FormatWhen(*run.started_at, now, zone) : "-", {}},
        Cell{or_dash(run.host), {}},
        Cell{or_dash(run.trigger), {}},
        Cell{or_dash(run.outcome), OutcomeColour(run.outcome)},
        Cell{run.duration ? FormatShortDuration(*run.duration) : "-", {}},
        Cell{run.start_lag ? FormatShortDuration(*run.start_lag) : "-", {}},
        Cell{FormatExit(run), {}},
        Cell{or_dash(run.run_id), {}},
        Cell{error.empty() ? "-" : Truncate(OneLine(error), kRunErrorChars),
             error.empty() ? std::string_view{} : kRed},
    });
  }
  return RenderTable(table, colour);
}

std::string DescribeRunEnd(const RunRecord& run) {
  std::string line = fmt::format("Run {} of {}/{} {}", run.run_id, run.plugin_id, run.task_id,
                                 OutcomeVerb(run.outcome));
  line += " " + (run.duration ? FormatShortDuration(*run.duration) : std::string("?"));
  if (!run.host.empty()) {
    line += " on " + run.host;
  }
  if (std::string exit = FormatExit(run); exit != "-") {
    line += " (" + (run.exit_code ? "exit " + exit : exit) + ")";
  }
  std::string error = run.error_message.empty() ? run.error_name : run.error_message;
  if (!error.empty()) {
    line += ": " + OneLine(error);
  }
  return line;
}

std::size_t OverlapOfSuffixAndPrefix(std::string_view seen, std::string_view text) {
  if (text.empty()) {
    return 0;
  }
  // failure[i]: the length of the longest proper prefix of text[0..i] that is also its suffix.
  std::vector<std::size_t> failure(text.size(), 0);
  for (std::size_t i = 1, k = 0; i < text.size(); ++i) {
    while (k > 0 && text[i] != text[k]) {
      k = failure[k - 1];
    }
    if (text[i] == text[k]) {
      ++k;
    }
    failure[i] = k;
  }
  std::size_t matched = 0;
  for (char c : seen) {
    if (matched == text.size()) {
      matched = failure[matched - 1];
    }
    while (matched > 0 && text[matched] != c) {
      matched = failure[matched - 1];
    }
    if (text[matched] == c) {
      ++matched;
    }
  }
  return matched;
}

OutputFollower::Step OutputFollower::First(const RunDetail& detail) {
  started_ = true;
  Step step;
  step.bytes = detail.output;
  if (detail.live && detail.output_bytes > detail.output.size()) {
    step.note = fmt::format("the first {} bytes of the output were not kept",
                            detail.output_bytes - detail.output.size());
  }
  shown_bytes_ = detail.live ? detail.output_bytes : detail.output.size();
  recent_ = detail.output;
  return step;
}

OutputFollower::Step OutputFollower::Next(const RunDetail& detail) {
  if (!started_) {
    return First(detail);
  }
  const std::string& tail = detail.output;
  Step step;
  if (detail.live) {
    const std::uint64_t total = detail.output_bytes;
    if (total <= shown_bytes_) {
      return step;
    }
    const std::uint64_t tail_start = total > tail.size() ? total - tail.size() : 0;
    if (tail_start > shown_bytes_) {
      step.note = fmt::format("{} bytes of the output were not kept", tail_start - shown_bytes_);
    }
    step.bytes = tail.substr(std::max(shown_bytes_, tail_start) - tail_start);
    shown_bytes_ = total;
    recent_ = tail;
    return step;
  }
  // The run's stored tail: its last bytes, of a total not told. When it holds all the output,
  // what was shown is its prefix; otherwise line it up with the bytes shown last.
  const std::size_t overlap = recent_.size();
  if (tail.size() >= shown_bytes_ && tail.compare(shown_bytes_ - overlap, overlap, recent_) == 0) {
    step.bytes = tail.substr(shown_bytes_);
  } else if (std::size_t lined_up = OverlapOfSuffixAndPrefix(recent_, tail); lined_up > 0) {
    step.bytes = tail.substr(lined_up);
  } else {
    step.note = "some of the output was not kept";
    step.bytes = tail;
  }
  shown_bytes_ = tail.size();
  recent_ = tail;
  return step;
}

}  // namespace stagehand::cli
