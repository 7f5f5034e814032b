// Durations as Backstage spells them: HumanDuration objects, ISO-8601 duration strings (luxon's
// dialect) and config duration strings (`10m`, `2 hours`, `PT30S`). Pure functions, thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"

namespace stagehand {

// A duration made of calendar-ish units, like Backstage's HumanDuration. Each field may be
// fractional or negative; an absent field is not the same as a zero one (config readers keep the
// fields that were written). Plain value type.
struct HumanDuration {
  std::optional<double> years;
  std::optional<double> months;
  std::optional<double> weeks;
  std::optional<double> days;
  std::optional<double> hours;
  std::optional<double> minutes;
  std::optional<double> seconds;
  std::optional<double> milliseconds;

  friend bool operator==(const HumanDuration&, const HumanDuration&) = default;
};

// Returns the length of `d` in milliseconds with luxon's "casual" conversion: 1 year = 365 days,
// 1 month = 30 days, 1 week = 7 days, 1 day = 24 hours. May be fractional or negative.
double ToMillisecondsCasual(const HumanDuration& d);

// Returns `d` rounded to whole milliseconds (half away from zero), saturating at the limits.
std::chrono::milliseconds ToChronoMilliseconds(const HumanDuration& d);

// Formats `d` exactly as luxon's Duration#toISO does for Backstage's settings_json: no carrying
// between units, zero units omitted, seconds and milliseconds merged into one rounded `S` value,
// `PT0S` for an all-zero duration. Examples: {minutes:90} -> "PT90M", {milliseconds:100} ->
// "PT0.1S", {} -> "PT0S".
std::string FormatIsoDuration(const HumanDuration& d);

// Formats a std::chrono duration as luxon's Duration.fromMillis(ms).toISO(): "PT3600S", "PT0.1S".
std::string FormatIsoDuration(std::chrono::milliseconds d);

// Formats `d` for people, in the largest units that keep it exact to the millisecond: "250ms",
// "2s", "1.5s", "90s" stays "1m30s", "2m", "1h", "1h0m5s" for 3,605 s; negative durations get a
// leading '-'. Used in log lines and run outcomes ("timed out after 2s").
std::string FormatShortDuration(std::chrono::milliseconds d);

// Parses an ISO-8601 duration in luxon's dialect (`P1Y2M3W4DT5H6M7.8S`, `PT1,5S`, `-PT5M`, `P`,
// `PT`). Returns the components that were written (a leading '-' negates them all).
// Errors: kInvalidArgument with the message
// "Invalid ISO format, expected a value similar to 'P2DT6H' (2 days 6 hours) or 'PT1M' (1 minute)".
Result<HumanDuration> ParseIsoDuration(std::string_view text);

// Returns whether `text` parses with ParseIsoDuration.
bool IsValidIsoDuration(std::string_view text);

// Parses a config duration string as Backstage's readDurationFromConfig does for string values:
// trims it; a leading 'P' selects the ISO form, anything else the `ms` form (`10m`, `2 hours`,
// `1.5d`, `25 ms`). Returns the decomposed duration (e.g. "1850ms" -> {seconds:1,
// milliseconds:850}; zero -> {milliseconds:0}). Errors (kInvalidArgument), with Backstage's exact
// messages:
//   "Invalid ISO format, expected a value similar to 'P2DT6H' (2 days 6 hours) or 'PT1M' (1
//   minute)" "Invalid ISO format, no values given" "The value cannot be a plain number; try adding
//   a unit like 'ms' or 'seconds'" "Not a valid duration string, try a number followed by a unit
//   such as '1d' or '2 seconds'" "Negative durations are not allowed" "val is not a non-empty
//   string or a valid number. val=\"\"" (empty or all-whitespace text; the `ms` package's own
//   error, which Backstage passes through)
Result<HumanDuration> ParseDurationString(std::string_view text);

// Returns `text` without the leading and trailing whitespace that JavaScript's String#trim
// removes (ASCII whitespace and line breaks, and their Unicode kin such as U+00A0 and U+FEFF, as
// UTF-8). ParseDurationString trims this way; config readers quote the trimmed value in errors.
std::string_view TrimJsWhitespace(std::string_view text);

}  // namespace stagehand
