// libFuzzer target for config duration strings (`10m`, `2 hours`, `PT30S`): ParseDurationString
// must never crash, must return only Backstage's messages, must never yield a negative `ms`-form
// duration, and its results must format to ISO text that reads back to the same text.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "stagehand/time/duration.h"

namespace {

constexpr double kStableSecondsLimit = 1e12;

void Require(bool condition) {
  if (!condition) {
    std::abort();
  }
}

bool IsKnownMessage(const std::string& message) {
  return message ==
             "Invalid ISO format, expected a value similar to 'P2DT6H' (2 days 6 hours) or "
             "'PT1M' (1 minute)" ||
         message == "Invalid ISO format, no values given" ||
         message ==
             "The value cannot be a plain number; try adding a unit like 'ms' or 'seconds'" ||
         message ==
             "Not a valid duration string, try a number followed by a unit such as '1d' or "
             "'2 seconds'" ||
         message == "Negative durations are not allowed" ||
         message == "val is not a non-empty string or a valid number. val=\"\"";
}

bool SecondsAreModerate(const stagehand::HumanDuration& d) {
  const double seconds = d.seconds.value_or(0) + d.milliseconds.value_or(0) / 1000;
  return std::isfinite(seconds) && std::abs(seconds) < kStableSecondsLimit;
}

// Returns `iso` without a trailing "0S" component: FormatIsoDuration writes one when a
// sub-millisecond remainder rounds to zero, and it reads back as a zero second, which is omitted.
std::string WithoutZeroSeconds(const std::string& iso) {
  if (iso == "PT0S" || iso.size() < 3 || iso.compare(iso.size() - 2, 2, "0S") != 0) {
    return iso;
  }
  const char before = iso[iso.size() - 3];
  if (before != 'T' && before != 'H' && before != 'M') {
    return iso;
  }
  std::string out = iso.substr(0, iso.size() - 2);
  if (out.back() == 'T') {
    out.pop_back();
  }
  return out == "P" ? "PT0S" : out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  stagehand::Result<stagehand::HumanDuration> parsed = stagehand::ParseDurationString(text);
  if (!parsed.ok()) {
    Require(parsed.status().code() == stagehand::StatusCode::kInvalidArgument);
    Require(IsKnownMessage(parsed.status().message()));
    return 0;
  }
  const stagehand::HumanDuration& d = *parsed;
  const std::string_view trimmed = stagehand::TrimJsWhitespace(text);
  Require(!trimmed.empty());
  if (trimmed.front() != 'P') {
    Require(stagehand::ToMillisecondsCasual(d) >= 0);
    for (const auto& field :
         {d.years, d.months, d.weeks, d.days, d.hours, d.minutes, d.seconds, d.milliseconds}) {
      Require(!field || *field >= 0);
    }
  } else {
    Require(stagehand::IsValidIsoDuration(trimmed));
  }
  (void)stagehand::ToChronoMilliseconds(d);

  const std::string first = stagehand::FormatIsoDuration(d);
  stagehand::Result<stagehand::HumanDuration> reparsed = stagehand::ParseDurationString(first);
  if (!reparsed.ok() || !SecondsAreModerate(*reparsed)) {
    return 0;
  }
  Require(stagehand::FormatIsoDuration(*reparsed) == WithoutZeroSeconds(first));
  return 0;
}
