// Cron expressions with the semantics of the npm `cron` package (v3.5) that Backstage uses:
// 5 fields, or 6 with seconds first; month and weekday names; presets (@daily, @weekdays, ...);
// lists, ranges and steps; day-of-week 0-7; Vixie OR of day-of-month and day-of-week.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {

// A parsed cron expression. Immutable value type; thread-safe.
class CronExpression {
 public:
  // Parses `expression`. The errors (kInvalidArgument) name the field as the cron package does:
  // "Field (minute) cannot be parsed", "Field (hour) has a step of zero",
  // "Field (dayOfWeek) has an invalid range", "Field value (60) is out of range",
  // "Field (1-*) has an invalid wildcard expression", "Unknown alias: mon", "Too few fields",
  // "Too many fields". An expression that matches no date at all (e.g. `0 0 30 2 *`) is rejected
  // with "Something went wrong. No execution date was found in the next 8 years."
  static Result<CronExpression> Parse(std::string_view expression);

  // How many times Parse has run in this process: for tests that prove a layer does not parse a
  // schedule again. Thread-safe.
  static std::uint64_t ParseCount();

  // Returns the first whole second strictly after `after` that matches, evaluated in `zone`.
  // A local time skipped by a DST jump fires at the jump; a repeated local hour fires once (at
  // its first occurrence). As in the cron package, the jump fires only if the day after it
  // matches both day fields and the month field selects that month and the next one; and when
  // `after` lies inside the second occurrence of a repeated hour, the rest of that occurrence
  // still counts. Errors: kInvalidArgument if nothing matches within 8 years.
  Result<WallTime> NextAfter(WallTime after, const TimeZone& zone) const;

  // Returns whether the whole second containing `instant` is a fire time in `zone`, by the
  // rules of NextAfter: a DST jump counts when it fires, and the second occurrence of a repeated
  // local time never does. NextAfter(t - 1s) == t for every fire time t.
  bool Matches(WallTime instant, const TimeZone& zone) const;

  // The expression as given to Parse (not normalised).
  const std::string& source() const { return source_; }

 private:
  CronExpression() = default;

  std::string source_;
  std::uint64_t seconds_ = 0;        // bits 0-59
  std::uint64_t minutes_ = 0;        // bits 0-59
  std::uint32_t hours_ = 0;          // bits 0-23
  std::uint32_t days_of_month_ = 0;  // bits 1-31
  std::uint16_t months_ = 0;         // bits 1-12
  std::uint8_t days_of_week_ = 0;    // bits 0-6, Sunday = 0
  bool day_of_month_restricted_ = false;
  bool day_of_week_restricted_ = false;

  friend class CronParser;
  friend class CronMatcher;
};

}  // namespace stagehand
