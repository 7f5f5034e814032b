// IANA time zones for cron evaluation. Wraps Howard Hinnant's date/tz behind one small type so that
// no other header includes <date/tz.h>.
#pragma once

#include <string>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"

namespace stagehand {

// A handle to an IANA zone from the system tz database. Cheap to copy; thread-safe.
class TimeZone {
 public:
  // Returns UTC.
  static TimeZone Utc();
  // Returns the zone of the process: the `TZ` environment variable if set (an IANA name, with an
  // optional leading ':'), else /etc/localtime, else UTC. A TZ that names no known zone means
  // UTC, as it does for Node and glibc. Resolved once, at the first call.
  static TimeZone ProcessDefault();
  // Looks up an IANA zone by name ("Europe/Berlin"). Errors: kInvalidArgument naming the zone.
  static Result<TimeZone> Locate(std::string_view name);

  const std::string& name() const;

  // Returns the offset from UTC at `instant`, in seconds (e.g. -14400 for EDT).
  std::chrono::seconds OffsetAt(WallTime instant) const;

  // The underlying date::time_zone (opaque here; src/time casts it back).
  const void* native() const { return native_; }

  friend bool operator==(const TimeZone& a, const TimeZone& b) { return a.native_ == b.native_; }

 private:
  explicit TimeZone(const void* native) : native_(native) {}
  const void* native_;
};

// Formats `instant` as ISO-8601 with milliseconds and a numeric offset in `zone`, as luxon's
// DateTime#toISO does: "2026-03-08T03:00:00.000-04:00" (never "Z").
std::string FormatIsoInstant(WallTime instant, const TimeZone& zone);

// Formats `instant` in UTC with a "Z" suffix and milliseconds: "2026-03-08T07:00:00.000Z".
std::string FormatIsoInstantUtc(WallTime instant);

// Parses an ISO-8601 instant with a 'Z' or numeric offset ("2026-03-07T12:00:00Z",
// "2026-03-07T12:00:00.250+01:00"). Errors: kInvalidArgument.
Result<WallTime> ParseIsoInstant(std::string_view text);

}  // namespace stagehand
