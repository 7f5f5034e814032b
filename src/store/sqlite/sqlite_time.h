// The text form of timestamps in a SQLite plugin database. Backstage writes UTC text
// "YYYY-MM-DD HH:MM:SS" (second precision); stagehand writes "YYYY-MM-DD HH:MM:SS.SSS". Both order
// correctly as strings, which is how every statement compares them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"

namespace stagehand::store_internal {

// Returns `instant` as "YYYY-MM-DD HH:MM:SS.SSS" in UTC, truncated to the millisecond.
std::string FormatSqliteTime(WallTime instant);

// Parses a stored timestamp: "YYYY-MM-DD HH:MM:SS" with an optional fraction of up to 9 digits,
// also with 'T' instead of the space and an optional trailing 'Z'; always UTC.
// Errors: kInvalidArgument quoting the text.
Result<WallTime> ParseSqliteTime(std::string_view text);

// Returns the instant `epoch_ms` milliseconds after 1970-01-01 UTC (the form JavaScript drivers
// store when they bind a Date).
WallTime FromEpochMilliseconds(std::int64_t epoch_ms);

// Returns `seconds` as a SQLite date modifier: "+600 seconds", "+0.3 seconds", "-300 seconds".
std::string SecondsModifier(double seconds);

}  // namespace stagehand::store_internal
