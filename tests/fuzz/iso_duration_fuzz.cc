// libFuzzer target for luxon's ISO-8601 duration dialect: ParseIsoDuration must never crash,
// must agree with IsValidIsoDuration, and what it accepts must format to text that, when it
// reads back at all, formats to itself again.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "stagehand/time/duration.h"

namespace {

// Beyond this many seconds a 3-decimal seconds value no longer survives binary rounding.
constexpr double kStableSecondsLimit = 1e12;

void Require(bool condition) {
  if (!condition) {
    std::abort();
  }
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
  stagehand::Result<stagehand::HumanDuration> parsed = stagehand::ParseIsoDuration(text);
  Require(parsed.ok() == stagehand::IsValidIsoDuration(text));
  if (!parsed.ok()) {
    Require(parsed.status().code() == stagehand::StatusCode::kInvalidArgument);
    return 0;
  }
  (void)stagehand::ToChronoMilliseconds(*parsed);

  const std::string first = stagehand::FormatIsoDuration(*parsed);
  Require(!first.empty() && first.front() == 'P');
  stagehand::Result<stagehand::HumanDuration> reparsed = stagehand::ParseIsoDuration(first);
  // Text with exponents ("1e+21") or more than 20 digits is outside luxon's grammar.
  if (!reparsed.ok() || !SecondsAreModerate(*reparsed)) {
    return 0;
  }
  Require(stagehand::FormatIsoDuration(*reparsed) == WithoutZeroSeconds(first));
  return 0;
}
