// What src/time needs from a TimeZone beyond its public API: the span of constant UTC offset
// around an instant, and the process-zone resolution rule in a form tests can call directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "stagehand/time/time_zone.h"

namespace stagehand::time_internal {

// A maximal span [begin, end) of UTC seconds during which a zone's UTC offset is constant.
// Consecutive spans may have the same offset (e.g. when only the abbreviation changes).
struct ZoneSpan {
  std::int64_t begin;
  std::int64_t end;
  std::int32_t offset_seconds;
};

// Returns the span of `zone` containing the UTC second `utc_seconds`.
ZoneSpan LookupSpan(const TimeZone& zone, std::int64_t utc_seconds);

// Returns the zone TimeZone::ProcessDefault() would pick for the given value of the TZ variable
// (nullopt when it is unset): an IANA name with an optional leading ':' (a path ending in
// "zoneinfo/<name>" also works), else /etc/localtime's zone, else UTC. A TZ that names no known
// zone means UTC, as it does for glibc and Node.
TimeZone ResolveProcessZone(std::optional<std::string_view> tz_env);

}  // namespace stagehand::time_internal
