// Conversions between WallTime and PostgreSQL's timestamptz text, for sessions pinned to
// TimeZone 'UTC' and DateStyle 'ISO' (see PgConnection).
#pragma once

#include <string>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/time/clock.h"

namespace stagehand::store_internal {

// Returns `instant` as "YYYY-MM-DD HH:MM:SS.ffffff+00", truncated to microseconds, the form
// PostgreSQL reads back exactly as a timestamptz.
std::string FormatPgTimestamp(WallTime instant);

// Parses timestamptz output of a UTC/ISO session ("2026-11-30 04:42:26.5+00"; "infinity" and
// "-infinity" map to the farthest representable instants; out-of-range years are clamped
// likewise). Errors: kInvalidArgument naming the text.
Result<WallTime> ParsePgTimestamp(std::string_view text);

}  // namespace stagehand::store_internal
