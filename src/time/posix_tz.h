// The POSIX TZ rule at the end of a TZif file ("EST5EDT,M3.2.0,M11.1.0"), which says how a zone
// keeps changing after its last listed transition. The system tz files list transitions only up
// to 2037 and date/tz (3.0.1, OS database) ignores the rule, so without it every zone would stay
// on standard time from 2038 on; LookupSpan applies the rule instead, as Node (ICU) does.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "time/time_zone_internal.h"

namespace stagehand::time_internal {

// A day of the year in POSIX TZ form, plus the local time of day of the change.
struct PosixDate {
  enum class Kind {
    kJulianNoLeap,  // Jn: day 1-365, February 29 never counted.
    kZeroBased,     // n: day 0-365, February 29 counted.
    kMonthWeekDay,  // Mm.w.d: day d (0 = Sunday) of week w (5 = last) of month m.
  };
  Kind kind = Kind::kMonthWeekDay;
  int day = 0;  // Jn or n
  int month = 0;
  int week = 0;
  int weekday = 0;
  std::int64_t time_seconds = 7200;  // May be negative or beyond 24h.
};

// A zone rule with daylight saving time. Offsets are seconds east of UTC.
struct PosixRule {
  std::int32_t standard_offset = 0;
  std::int32_t daylight_offset = 0;
  PosixDate start;  // Daylight time starts; the time is local standard time.
  PosixDate end;    // Daylight time ends; the time is local daylight time.
};

// Parses a POSIX TZ string. Returns nullopt if it is malformed or has no daylight saving time.
std::optional<PosixRule> ParsePosixRule(std::string_view text);

// Returns the span of constant offset containing `utc_seconds` under `rule`, clipped to begin no
// earlier than `not_before` (where the rule takes over from listed transitions).
ZoneSpan SpanUnderRule(const PosixRule& rule, std::int64_t utc_seconds, std::int64_t not_before);

}  // namespace stagehand::time_internal
