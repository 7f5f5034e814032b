#include "stagehand/backend/schedule_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "stagehand/time/cron.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {
namespace {

constexpr std::array<std::string_view, 8> kUnitNames = {
    "years", "months", "weeks", "days", "hours", "minutes", "seconds", "milliseconds"};

struct DurationUnit {
  std::string_view name;
  std::optional<double> HumanDuration::*field;
};

constexpr std::array<DurationUnit, 8> kUnits = {{
    {kUnitNames[0], &HumanDuration::years},
    {kUnitNames[1], &HumanDuration::months},
    {kUnitNames[2], &HumanDuration::weeks},
    {kUnitNames[3], &HumanDuration::days},
    {kUnitNames[4], &HumanDuration::hours},
    {kUnitNames[5], &HumanDuration::minutes},
    {kUnitNames[6], &HumanDuration::seconds},
    {kUnitNames[7], &HumanDuration::milliseconds},
}};

constexpr std::string_view kUnitList =
    "'years', 'months', 'weeks', 'days', 'hours', 'minutes', 'seconds', 'milliseconds'";

// The keys of a schedule, and those that belong inside its `frequency` object.
constexpr std::array<std::string_view, 7> kScheduleKeys = {
    "frequency", "timeout", "initialDelay", "scope", "catchupWindow", "jitter", "retry"};
constexpr std::array<std::string_view, 3> kRetryKeys = {"attempts", "backoff", "maxBackoff"};
constexpr std::array<std::string_view, 3> kFrequencyKeysBelow = {
    "frequency.cron", "frequency.timeZone", "frequency.trigger"};
// The keys of each form of a `frequency` object other than a duration.
constexpr std::array<std::string_view, 2> kCronKeys = {"cron", "timeZone"};
constexpr std::array<std::string_view, 1> kTriggerKeys = {"trigger"};
constexpr std::array<std::string_view, 3> kFrequencyFormKeys = {"cron", "timeZone", "trigger"};

bool IsKnownUnit(std::string_view name) {
  return std::find(kUnitNames.begin(), kUnitNames.end(), name) != kUnitNames.end();
}

// Adds a problem for each key of the object at `key` that is not in `known` (see AddUnknownKeys).
// Returns whether every key is known, true when the value is missing or not an object.
bool CheckObjectKeys(const Config& config, std::string_view key,
                     std::span<const std::string_view> known,
                     std::span<const std::string_view> elsewhere, ConfigProblems& problems) {
  const ConfigNode* node = config.Node(key);
  if (node == nullptr || !std::holds_alternative<ConfigNode::Object>(node->value)) {
    return true;
  }
  Result<Config> block = config.GetConfig(key);
  return !block.ok() || AddUnknownKeys(*block, known, problems, elsewhere);
}

// Returns `status`'s message as JavaScript prints the error Backstage's ConfigReader would have
// thrown: type errors are TypeErrors, missing values and failed conversions plain Errors.
std::string AsJsError(const Status& status) {
  const std::string& message = status.message();
  const bool type_error = message.rfind("Invalid type in config", 0) == 0 ||
                          message.rfind("Invalid config key", 0) == 0;
  return fmt::format("{}: {}", type_error ? "TypeError" : "Error", message);
}

// Returns whether JavaScript would treat `node` as truthy.
bool IsTruthy(const ConfigNode& node) {
  if (std::holds_alternative<ConfigNode::Null>(node.value)) {
    return false;
  }
  if (const auto* flag = std::get_if<bool>(&node.value)) {
    return *flag;
  }
  if (const auto* number = std::get_if<double>(&node.value)) {
    return *number != 0 && !std::isnan(*number);
  }
  if (const auto* text = std::get_if<std::string>(&node.value)) {
    return !text->empty();
  }
  return true;
}

Result<CronFrequency> ReadCronFrequency(const Config& config) {
  STAGEHAND_ASSIGN_OR_RETURN(auto expression, config.GetString("frequency.cron"));
  Result<CronExpression> parsed = CronExpression::Parse(expression);
  if (!parsed.ok()) {
    return InvalidArgumentError(
        fmt::format("Invalid cron expression at '{}' in '{}': {}", config.FullKey("frequency.cron"),
                    config.Context("frequency.cron"), parsed.status().message()));
  }
  STAGEHAND_ASSIGN_OR_RETURN(auto time_zone, config.GetOptionalString("frequency.timeZone"));
  CronFrequency frequency{std::move(expression), "",
                          std::make_shared<const CronExpression>(*std::move(parsed))};
  if (time_zone.has_value()) {
    if (auto zone = TimeZone::Locate(*time_zone); !zone.ok()) {
      return InvalidArgumentError(
          fmt::format("Invalid time zone at '{}' in '{}': {}", config.FullKey("frequency.timeZone"),
                      config.Context("frequency.timeZone"), zone.status().message()));
    }
    frequency.time_zone = *std::move(time_zone);
  }
  return frequency;
}

Result<Frequency> ReadFrequency(const Config& config) {
  const ConfigNode* node = config.Node("frequency");
  if (node == nullptr) {
    return InvalidArgumentError(fmt::format("Missing required config value at '{}' in '{}'",
                                            config.FullKey("frequency"), config.Context()));
  }
  if (std::holds_alternative<ConfigNode::Object>(node->value)) {
    const ConfigNode* cron = config.Node("frequency.cron");
    if (cron != nullptr && IsTruthy(*cron)) {
      STAGEHAND_ASSIGN_OR_RETURN(auto frequency, ReadCronFrequency(config));
      return Frequency(std::move(frequency));
    }
    const ConfigNode* trigger = config.Node("frequency.trigger");
    if (trigger != nullptr) {
      const auto* text = std::get_if<std::string>(&trigger->value);
      if (text != nullptr && *text == "manual") {
        return Frequency(ManualFrequency{});
      }
    }
  }
  STAGEHAND_ASSIGN_OR_RETURN(auto duration, ReadDurationFromConfig(config, "frequency"));
  return Frequency(std::move(duration));
}

// Reads the `retry` block of a schedule: {attempts, backoff, maxBackoff}, the durations as the
// schedule's others, every key named from the schedule ('retry.backoff'). Ranges are checked with
// the schedule's other fields (FindScheduleDurationIssues). Errors: kInvalidArgument naming the
// key.
Result<RetryPolicy> ReadRetryPolicy(const Config& schedule) {
  RetryPolicy policy;
  STAGEHAND_ASSIGN_OR_RETURN(double attempts, schedule.GetNumber("retry.attempts"));
  if (attempts != std::floor(attempts) || attempts < 0 || attempts > kMaxRetryAttempts) {
    return InvalidArgumentError(InvalidConfigValue(
        schedule, "retry.attempts",
        fmt::format("must be a whole number from 0 to {}, got {}", kMaxRetryAttempts, attempts)));
  }
  policy.attempts = static_cast<int>(attempts);
  if (schedule.Has("retry.backoff")) {
    STAGEHAND_ASSIGN_OR_RETURN(policy.backoff, ReadDurationFromConfig(schedule, "retry.backoff"));
  }
  if (schedule.Has("retry.maxBackoff")) {
    STAGEHAND_ASSIGN_OR_RETURN(policy.max_backoff,
                               ReadDurationFromConfig(schedule, "retry.maxBackoff"));
  }
  return policy;
}

}  // namespace

Result<HumanDuration> ReadDurationFromConfig(const Config& config, std::string_view key) {
  if (!key.empty()) {
    const ConfigNode* node = config.Node(key);
    if (node != nullptr && std::holds_alternative<std::string>(node->value)) {
      STAGEHAND_ASSIGN_OR_RETURN(auto raw, config.GetString(key));
      const std::string_view value = TrimJsWhitespace(raw);
      auto parsed = ParseDurationString(value);
      if (!parsed.ok()) {
        return InvalidArgumentError(
            fmt::format("Invalid duration '{}' in config at '{}', Error: {}", value, key,
                        parsed.status().message()));
      }
      return parsed;
    }
  }

  Config root = config;
  if (!key.empty()) {
    auto sub = config.GetConfig(key);
    if (!sub.ok()) {
      return InvalidArgumentError(
          fmt::format("Failed to read duration from config, {}", AsJsError(sub.status())));
    }
    root = *std::move(sub);
  }
  HumanDuration result;
  bool found = false;
  for (const DurationUnit& unit : kUnits) {
    auto value = root.GetOptionalNumber(unit.name);
    if (!value.ok()) {
      return InvalidArgumentError(
          fmt::format("Failed to read duration from config, {}", AsJsError(value.status())));
    }
    if (value->has_value()) {
      result.*unit.field = **value;
      found = true;
    }
  }

  const std::string prefix = key.empty()
                                 ? std::string("Failed to read duration from config")
                                 : fmt::format("Failed to read duration from config at '{}'", key);
  if (!found) {
    return InvalidArgumentError(
        fmt::format("{}, Error: Needs one or more of {}", prefix, kUnitList));
  }
  std::vector<std::string> unknown;
  for (const std::string& name : root.Keys()) {
    if (!IsKnownUnit(name)) {
      unknown.push_back(fmt::format("'{}'", name));
    }
  }
  if (!unknown.empty()) {
    return InvalidArgumentError(fmt::format("{}, Error: Unknown {} {}; expected one or more of {}",
                                            prefix, unknown.size() == 1 ? "property" : "properties",
                                            fmt::join(unknown, ", "), kUnitList));
  }
  return result;
}

Result<ScheduleDefinition> ReadScheduleDefinitionFromConfig(const Config& config) {
  ScheduleDefinition schedule;
  STAGEHAND_ASSIGN_OR_RETURN(schedule.frequency, ReadFrequency(config));

  STAGEHAND_ASSIGN_OR_RETURN(schedule.timeout, ReadDurationFromConfig(config, "timeout"));

  if (config.Has("initialDelay")) {
    STAGEHAND_ASSIGN_OR_RETURN(schedule.initial_delay,
                               ReadDurationFromConfig(config, "initialDelay"));
  }
  // stagehand's extensions (ADR 0014), read as the other durations are.
  for (auto [key, field] : {std::pair{"catchupWindow", &ScheduleDefinition::catchup_window},
                            std::pair{"jitter", &ScheduleDefinition::jitter}}) {
    if (!config.Has(key)) continue;
    STAGEHAND_ASSIGN_OR_RETURN(schedule.*field, ReadDurationFromConfig(config, key));
  }

  STAGEHAND_ASSIGN_OR_RETURN(std::optional<Config> retry, config.GetOptionalConfig("retry"));
  if (retry) {
    STAGEHAND_ASSIGN_OR_RETURN(schedule.retry, ReadRetryPolicy(config));
  }

  STAGEHAND_ASSIGN_OR_RETURN(auto scope, config.GetOptionalString("scope"));
  if (scope.has_value()) {
    if (*scope == "global") {
      schedule.scope = TaskScope::kGlobal;
    } else if (*scope == "local") {
      schedule.scope = TaskScope::kLocal;
    } else {
      return InvalidArgumentError(fmt::format(
          R"(Only "global" or "local" are allowed for TaskScheduleDefinition.scope, but got: {})",
          *scope));
    }
  }

  ConfigProblems problems;
  for (const ScheduleDurationIssue& issue : FindScheduleDurationIssues(schedule)) {
    problems.Add(InvalidConfigValue(config, issue.field, issue.reason));
  }
  STAGEHAND_RETURN_IF_ERROR(problems.ToStatus());
  return schedule;
}

bool CheckDurationKeys(const Config& config, std::string_view key, ConfigProblems& problems) {
  return CheckObjectKeys(config, key, kUnitNames, {}, problems);
}

bool CheckScheduleKeys(const Config& schedule, ConfigProblems& problems) {
  bool known = AddUnknownKeys(schedule, kScheduleKeys, problems, kFrequencyKeysBelow);
  if (schedule.Has("frequency.cron")) {
    known = CheckObjectKeys(schedule, "frequency", kCronKeys, {}, problems) && known;
  } else if (schedule.Has("frequency.trigger")) {
    known = CheckObjectKeys(schedule, "frequency", kTriggerKeys, {}, problems) && known;
  } else {
    known =
        CheckObjectKeys(schedule, "frequency", kUnitNames, kFrequencyFormKeys, problems) && known;
  }
  known = CheckDurationKeys(schedule, "timeout", problems) && known;
  known = CheckDurationKeys(schedule, "initialDelay", problems) && known;
  known = CheckDurationKeys(schedule, "catchupWindow", problems) && known;
  known = CheckDurationKeys(schedule, "jitter", problems) && known;
  known = CheckObjectKeys(schedule, "retry", kRetryKeys, {}, problems) && known;
  known = CheckDurationKeys(schedule, "retry.backoff", problems) && known;
  known = CheckDurationKeys(schedule, "retry.maxBackoff", problems) && known;
  return known;
}

}  // namespace stagehand
