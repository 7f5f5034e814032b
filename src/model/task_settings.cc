#include "stagehand/model/task_settings.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "stagehand/base/json_string.h"
#include "stagehand/time/duration.h"

namespace stagehand {
namespace {

constexpr std::string_view kInvalidCron = "Invalid cron";
constexpr std::string_view kInvalidDuration = "Invalid duration, expecting ISO Period";

// Returns the name zod gives the JSON type of `value` in "received ..." messages.
std::string_view ReceivedType(const nlohmann::json* value) {
  if (value == nullptr) {
    return "undefined";
  }
  switch (value->type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return "boolean";
    case nlohmann::json::value_t::string:
      return "string";
    case nlohmann::json::value_t::array:
      return "array";
    case nlohmann::json::value_t::object:
      return "object";
    default:
      return "number";
  }
}

class IssueList {
 public:
  void Add(std::string_view path, std::string_view message) {
    issues_.push_back(fmt::format("{}: {}", path, message));
  }

  Status ToStatus() const {
    if (issues_.empty()) {
      return Status::Ok();
    }
    return InvalidArgumentError(fmt::format("Invalid settings: {}", fmt::join(issues_, "; ")));
  }

 private:
  std::vector<std::string> issues_;
};

void CheckDuration(const char* key, std::string_view duration, IssueList& issues) {
  if (!duration.empty() && !IsValidIsoDuration(duration)) {
    issues.Add(key, kInvalidDuration);
  }
}

void CheckDurations(const TaskSettingsV2& settings, IssueList& issues) {
  if (settings.initial_delay_duration) {
    CheckDuration("initialDelayDuration", *settings.initial_delay_duration, issues);
  }
  CheckDuration("timeoutAfterDuration", settings.timeout_after_duration, issues);
}

const nlohmann::json* Find(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// Reads the string at `key` into `out`, or records zod's type issue. A missing optional key is
// not an issue.
bool ReadString(const nlohmann::json& object, const char* key, bool required, IssueList& issues,
                std::string& out) {
  const nlohmann::json* value = Find(object, key);
  if (value == nullptr && !required) {
    return false;
  }
  if (value == nullptr || !value->is_string()) {
    issues.Add(key,
               fmt::format("Invalid input: expected string, received {}", ReceivedType(value)));
    return false;
  }
  out = value->get<std::string>();
  return true;
}

}  // namespace

std::string TaskSettingsV2::ToJson() const {
  std::string out = R"({"version":2,"cadence":)";
  AppendJsonString(out, cadence.text());
  if (initial_delay_duration) {
    out += R"(,"initialDelayDuration":)";
    AppendJsonString(out, *initial_delay_duration);
  }
  out += R"(,"timeoutAfterDuration":)";
  AppendJsonString(out, timeout_after_duration);
  out += '}';
  return out;
}

Result<TaskSettingsV2> TaskSettingsV2::FromJson(std::string_view json) {
  const nlohmann::json parsed = nlohmann::json::parse(json.begin(), json.end(), nullptr, false);
  if (parsed.is_discarded()) {
    return InvalidArgumentError("Invalid settings: malformed JSON");
  }
  if (!parsed.is_object()) {
    return InvalidArgumentError(fmt::format(
        "Invalid settings: Invalid input: expected object, received {}", ReceivedType(&parsed)));
  }
  IssueList issues;
  const nlohmann::json* version = Find(parsed, "version");
  if (version == nullptr || !version->is_number() || version->get<double>() != 2) {
    issues.Add("version", "Invalid input: expected 2");
  }
  TaskSettingsV2 settings;
  if (std::string cadence; ReadString(parsed, "cadence", true, issues, cadence)) {
    if (Result<Cadence> typed = Cadence::Parse(cadence); typed.ok()) {
      settings.cadence = *std::move(typed);
    } else {
      issues.Add("cadence", Cadence::Classify(cadence) == Cadence::Kind::kDuration
                                ? kInvalidDuration
                                : kInvalidCron);
    }
  }
  std::string initial_delay;
  if (ReadString(parsed, "initialDelayDuration", false, issues, initial_delay)) {
    CheckDuration("initialDelayDuration", initial_delay, issues);
    settings.initial_delay_duration = std::move(initial_delay);
  }
  if (ReadString(parsed, "timeoutAfterDuration", true, issues, settings.timeout_after_duration)) {
    CheckDuration("timeoutAfterDuration", settings.timeout_after_duration, issues);
  }
  STAGEHAND_RETURN_IF_ERROR(issues.ToStatus());
  return settings;
}

Status TaskSettingsV2::Validate() const {
  IssueList issues;
  CheckDurations(*this, issues);
  return issues.ToStatus();
}

}  // namespace stagehand
