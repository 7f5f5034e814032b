#include "stagehand/model/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "stagehand/base/hash.h"

namespace stagehand {

std::vector<ScheduleDurationIssue> FindScheduleDurationIssues(const ScheduleDefinition& schedule) {
  std::vector<ScheduleDurationIssue> issues;
  std::optional<DurationSpec> frequency;
  if (const auto* human = std::get_if<HumanDuration>(&schedule.frequency)) {
    frequency = *human;
  } else if (const auto* chrono = std::get_if<std::chrono::milliseconds>(&schedule.frequency)) {
    frequency = *chrono;
  }
  if (frequency && ToMilliseconds(*frequency) <= std::chrono::milliseconds::zero()) {
    issues.push_back({"frequency", fmt::format("must be longer than zero, got {}",
                                               FormatDurationSpec(*frequency))});
  }
  if (ToMilliseconds(schedule.timeout) <= std::chrono::milliseconds::zero()) {
    issues.push_back({"timeout", fmt::format("must be longer than zero, got {}",
                                             FormatDurationSpec(schedule.timeout))});
  }
  if (schedule.initial_delay &&
      ToMilliseconds(*schedule.initial_delay) < std::chrono::milliseconds::zero()) {
    issues.push_back({"initialDelay", fmt::format("cannot be negative, got {}",
                                                  FormatDurationSpec(*schedule.initial_delay))});
  }
  if (schedule.catchup_window &&
      ToMilliseconds(*schedule.catchup_window) < std::chrono::milliseconds::zero()) {
    issues.push_back({"catchupWindow", fmt::format("cannot be negative, got {}",
                                                   FormatDurationSpec(*schedule.catchup_window))});
  }
  if (schedule.jitter) {
    const std::chrono::milliseconds jitter = ToMilliseconds(*schedule.jitter);
    if (jitter < std::chrono::milliseconds::zero()) {
      issues.push_back({"jitter", fmt::format("cannot be negative, got {}",
                                              FormatDurationSpec(*schedule.jitter))});
    } else if (frequency && ToMilliseconds(*frequency) > std::chrono::milliseconds::zero() &&
               jitter >= ToMilliseconds(*frequency)) {
      // A delay as long as the cadence would move a start past the next one.
      issues.push_back({"jitter", fmt::format("must be shorter than the frequency {}, got {}",
                                              FormatDurationSpec(*frequency),
                                              FormatDurationSpec(*schedule.jitter))});
    }
  }
  if (schedule.retry) {
    const RetryPolicy& retry = *schedule.retry;
    if (retry.attempts < 0 || retry.attempts > kMaxRetryAttempts) {
      issues.push_back({"retry.attempts", fmt::format("must be a whole number from 0 to {}, got {}",
                                                      kMaxRetryAttempts, retry.attempts)});
    }
    if (ToMilliseconds(retry.backoff) <= std::chrono::milliseconds::zero()) {
      issues.push_back({"retry.backoff", fmt::format("must be longer than zero, got {}",
                                                     FormatDurationSpec(retry.backoff))});
    } else if (retry.max_backoff &&
               ToMilliseconds(*retry.max_backoff) < ToMilliseconds(retry.backoff)) {
      issues.push_back(
          {"retry.maxBackoff",
           fmt::format("cannot be shorter than retry.backoff {}, got {}",
                       FormatDurationSpec(retry.backoff), FormatDurationSpec(*retry.max_backoff))});
    }
  }
  return issues;
}

std::chrono::milliseconds RetryDelay(const RetryPolicy& policy, int retry, std::uint64_t seed) {
  const std::chrono::milliseconds cap =
      policy.max_backoff
          ? ToMilliseconds(*policy.max_backoff)
          : std::chrono::duration_cast<std::chrono::milliseconds>(kDefaultMaxRetryBackoff);
  std::chrono::milliseconds delay =
      std::max(ToMilliseconds(policy.backoff), std::chrono::milliseconds(1));
  for (int doubling = 1; doubling < retry && delay < cap; ++doubling) delay *= 2;
  delay = std::min(delay, cap);
  const std::int64_t half = delay.count() / 2;
  const std::int64_t spread = delay.count() - half;  // the random part, [0, spread]
  return std::chrono::milliseconds(
      half + static_cast<std::int64_t>(seed % static_cast<std::uint64_t>(spread + 1)));
}

WallTime FirstSlotAfter(WallTime slot, std::chrono::milliseconds step, WallTime now) {
  if (now < slot) return slot + step;
  const auto behind = std::chrono::floor<std::chrono::milliseconds>(now - slot);
  return slot + (behind / step + 1) * step;
}

std::chrono::milliseconds JitterOffset(std::string_view task_id, std::chrono::milliseconds jitter) {
  if (jitter <= std::chrono::milliseconds::zero()) return std::chrono::milliseconds::zero();
  return std::chrono::milliseconds(
      static_cast<std::int64_t>(Fnv1a64(task_id) % static_cast<std::uint64_t>(jitter.count())));
}

std::string_view TaskScopeName(TaskScope scope) {
  switch (scope) {
    case TaskScope::kGlobal:
      return "global";
    case TaskScope::kLocal:
      return "local";
  }
  return "global";
}

std::string FormatDurationSpec(const DurationSpec& duration) {
  return std::visit([](const auto& d) { return FormatIsoDuration(d); }, duration);
}

std::chrono::milliseconds ToMilliseconds(const DurationSpec& duration) {
  if (const auto* human = std::get_if<HumanDuration>(&duration)) {
    return ToChronoMilliseconds(*human);
  }
  return std::get<std::chrono::milliseconds>(duration);
}

Result<Cadence> CadenceOf(const Frequency& frequency) {
  struct CadenceVisitor {
    Result<Cadence> operator()(const CronFrequency& cron) const {
      if (cron.program != nullptr && cron.program->source() == cron.expression) {
        return Cadence::Cron(cron.program);
      }
      STAGEHAND_ASSIGN_OR_RETURN(CronExpression program, CronExpression::Parse(cron.expression));
      return Cadence::Cron(std::move(program));
    }
    Result<Cadence> operator()(const HumanDuration& d) const { return Cadence::Every(d); }
    Result<Cadence> operator()(std::chrono::milliseconds d) const { return Cadence::Every(d); }
    Result<Cadence> operator()(const ManualFrequency&) const { return Cadence::Manual(); }
  };
  return std::visit(CadenceVisitor{}, frequency);
}

Result<TaskSettingsV2> BuildTaskSettings(const ScheduleDefinition& schedule) {
  TaskSettingsV2 settings;
  STAGEHAND_ASSIGN_OR_RETURN(settings.cadence, CadenceOf(schedule.frequency));
  if (schedule.initial_delay) {
    settings.initial_delay_duration = FormatDurationSpec(*schedule.initial_delay);
  }
  settings.timeout_after_duration = FormatDurationSpec(schedule.timeout);
  return settings;
}

Status ValidateScheduleDurations(const ScheduleDefinition& schedule) {
  std::vector<std::string> lines;
  for (const ScheduleDurationIssue& issue : FindScheduleDurationIssues(schedule)) {
    lines.push_back(fmt::format("{} {}", issue.field, issue.reason));
  }
  if (lines.empty()) {
    return Status::Ok();
  }
  return InvalidArgumentError(fmt::format("{}", fmt::join(lines, "; ")));
}

}  // namespace stagehand
