#include "stagehand/time/duration.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <system_error>

namespace stagehand {
namespace {

// Backstage's messages, verbatim: operators and tests compare them byte for byte.
constexpr const char* kIsoFormatError =
    "Invalid ISO format, expected a value similar to 'P2DT6H' (2 days 6 hours) or 'PT1M' "
    "(1 minute)";
constexpr const char* kIsoNoValuesError = "Invalid ISO format, no values given";
constexpr const char* kPlainNumberError =
    "The value cannot be a plain number; try adding a unit like 'ms' or 'seconds'";
constexpr const char* kNotDurationError =
    "Not a valid duration string, try a number followed by a unit such as '1d' or '2 seconds'";
constexpr const char* kNegativeError = "Negative durations are not allowed";
// What the `ms` package throws for an empty string (reachable with a whitespace-only value).
constexpr const char* kEmptyMsError = "val is not a non-empty string or a valid number. val=\"\"";

// Milliseconds per unit in luxon's casual conversion matrix.
constexpr double kCasualYearMs = 365.0 * 86400000.0;
constexpr double kCasualMonthMs = 30.0 * 86400000.0;
constexpr double kWeekMs = 7.0 * 86400000.0;
constexpr double kDayMs = 86400000.0;
constexpr double kHourMs = 3600000.0;
constexpr double kMinuteMs = 60000.0;
constexpr double kSecondMs = 1000.0;
// The `ms` package's year.
constexpr double kMsPackageYearMs = 365.25 * kDayMs;

// Returns the shortest decimal text that reads back as `value`, laid out as JavaScript's
// Number#toString does: plain decimal for 1e-6 <= |x| < 1e21, exponent form ("1e+21",
// "1.5e-7") otherwise.
std::string FormatJsNumber(double value) {
  if (std::isnan(value)) {
    return "NaN";
  }
  if (std::isinf(value)) {
    return value < 0 ? "-Infinity" : "Infinity";
  }
  if (value == 0) {
    return "0";
  }

  std::string out;
  if (value < 0) {
    out.push_back('-');
    value = -value;
  }
  std::array<char, 64> buf{};
  auto [end, ec] =
      std::to_chars(buf.data(), buf.data() + buf.size(), value, std::chars_format::scientific);
  STAGEHAND_CHECK(ec == std::errc());
  std::string_view sci(buf.data(), static_cast<std::size_t>(end - buf.data()));
  std::size_t e_pos = sci.find('e');
  STAGEHAND_CHECK(e_pos != std::string_view::npos);

  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') {
      digits.push_back(c);
    }
  }
  int exponent = 0;
  std::string_view exp_text = sci.substr(e_pos + 1);
  if (!exp_text.empty() && exp_text.front() == '+') {
    exp_text.remove_prefix(1);
  }
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exponent);

  // ECMAScript Number::toString: value = 0.d1d2...dk x 10^n.
  const int k = static_cast<int>(digits.size());
  const int n = exponent + 1;
  if (k <= n && n <= 21) {
    out += digits;
    out.append(static_cast<std::size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out.append(digits, 0, static_cast<std::size_t>(n));
    out.push_back('.');
    out.append(digits, static_cast<std::size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0.";
    out.append(static_cast<std::size_t>(-n), '0');
    out += digits;
  } else {
    out.push_back(digits.front());
    if (k > 1) {
      out.push_back('.');
      out.append(digits, 1);
    }
    out.push_back('e');
    out.push_back(n - 1 >= 0 ? '+' : '-');
    out += std::to_string(std::abs(n - 1));
  }
  return out;
}

// JavaScript's Math.round: nearest integer, ties toward +infinity.
double JsRound(double x) {
  double r = std::floor(x);
  if (x - r >= 0.5) {
    r += 1.0;
  }
  return r;
}

// JavaScript's parseFloat for text the grammars below have already validated as
// `-?digits(.digits)?` or `-?.digits`.
double ParseDecimal(std::string_view text) {
  double value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec == std::errc::result_out_of_range) {
    // Only underflow is possible for at most 40 digits; JavaScript reads that as (signed) zero.
    return text.front() == '-' ? -0.0 : 0.0;
  }
  STAGEHAND_CHECK(ec == std::errc() && ptr == last);
  return value;
}

HumanDuration OnlyMilliseconds(double ms) {
  HumanDuration d;
  d.milliseconds = ms;
  return d;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The capture groups of luxon's ISO duration regex, in order: years, months, weeks, days, hours,
// minutes, seconds, and the seconds' fraction digits.
struct IsoCaptures {
  bool negative_prefix = false;
  std::array<std::optional<std::string_view>, 8> groups;
};

enum IsoGroup { kYears, kMonths, kWeeks, kDays, kHours, kMinutes, kSeconds, kFraction };

// One `-?\d{1,20}([.,]-?\d{1,20})?` token followed by a designator letter.
struct IsoToken {
  std::string_view number;   // Sign, integer digits and, for '.' fractions, the fraction.
  std::string_view integer;  // Sign and integer digits.
  char separator = 0;        // '.', ',' or 0.
  bool fraction_signed = false;
  std::string_view fraction;  // Fraction digits with their sign, if any.
  char designator = 0;
};

// Reads a token at `pos`; returns false if the text there cannot start one.
bool ReadIsoToken(std::string_view text, std::size_t& pos, IsoToken& token) {
  const std::size_t start = pos;
  if (pos < text.size() && text[pos] == '-') {
    ++pos;
  }
  std::size_t digits_start = pos;
  while (pos < text.size() && IsDigit(text[pos])) {
    ++pos;
  }
  std::size_t digits = pos - digits_start;
  if (digits < 1 || digits > 20) {
    return false;
  }
  token.integer = text.substr(start, pos - start);
  token.separator = 0;
  token.fraction_signed = false;
  token.fraction = {};
  if (pos < text.size() && (text[pos] == '.' || text[pos] == ',')) {
    token.separator = text[pos++];
    const std::size_t fraction_start = pos;
    if (pos < text.size() && text[pos] == '-') {
      token.fraction_signed = true;
      ++pos;
    }
    digits_start = pos;
    while (pos < text.size() && IsDigit(text[pos])) {
      ++pos;
    }
    digits = pos - digits_start;
    if (digits < 1 || digits > 20) {
      return false;
    }
    token.fraction = text.substr(fraction_start, pos - fraction_start);
  }
  token.number = text.substr(start, pos - start);
  if (pos >= text.size()) {
    return false;
  }
  token.designator = text[pos++];
  return true;
}

// Matches `text` against luxon's isoDuration regex:
// ^-?P(?:(?:(N)Y)?(?:(N)M)?(?:(N)W)?(?:(N)D)?(?:T(?:(N)H)?(?:(N)M)?(?:(-?\d{1,20})(?:[.,](-?\d{1,20}))?S)?)?)$
// with N = -?\d{1,20}(?:\.\d{1,20})?. Every designator is a distinct letter in a fixed order, so
// a left-to-right scan decides the match without backtracking.
std::optional<IsoCaptures> MatchIso(std::string_view text) {
  IsoCaptures captures;
  std::size_t pos = 0;
  if (pos < text.size() && text[pos] == '-') {
    captures.negative_prefix = true;
    ++pos;
  }
  if (pos >= text.size() || text[pos] != 'P') {
    return std::nullopt;
  }
  ++pos;

  constexpr std::string_view kDateDesignators = "YMWD";
  std::size_t next_date = 0;
  while (pos < text.size() && text[pos] != 'T') {
    IsoToken token;
    if (!ReadIsoToken(text, pos, token)) {
      return std::nullopt;
    }
    if (token.separator == ',' || token.fraction_signed) {
      return std::nullopt;
    }
    std::size_t index = kDateDesignators.find(token.designator, next_date);
    if (index == std::string_view::npos) {
      return std::nullopt;
    }
    captures.groups[index] = token.number;
    next_date = index + 1;
  }
  if (pos == text.size()) {
    return captures;
  }

  ++pos;  // 'T'
  constexpr std::string_view kTimeDesignators = "HMS";
  std::size_t next_time = 0;
  while (pos < text.size()) {
    IsoToken token;
    if (!ReadIsoToken(text, pos, token)) {
      return std::nullopt;
    }
    std::size_t index = kTimeDesignators.find(token.designator, next_time);
    if (index == std::string_view::npos) {
      return std::nullopt;
    }
    if (token.designator == 'S') {
      captures.groups[kSeconds] = token.integer;
      if (token.separator != 0) {
        captures.groups[kFraction] = token.fraction;
      }
    } else {
      if (token.separator == ',' || token.fraction_signed) {
        return std::nullopt;
      }
      captures.groups[kHours + index] = token.number;
    }
    next_time = index + 1;
  }
  return captures;
}

// The component values of a match, as luxon's extractISODuration (and Backstage's copy of it)
// computes them; absent groups stay empty.
std::array<std::optional<double>, 8> IsoValues(const IsoCaptures& captures) {
  std::array<std::optional<double>, 8> values;
  const auto& groups = captures.groups;
  // JavaScript negates only "truthy" numbers (not 0 or -0) for the prefix, unless forced.
  auto maybe_negate = [&](std::optional<double>& v, bool force) {
    if (v && (force || (*v != 0 && !std::isnan(*v) && captures.negative_prefix))) {
      *v = -*v;
    }
  };
  for (int i = kYears; i <= kSeconds; ++i) {
    const auto index = static_cast<std::size_t>(i);
    if (groups[index]) {
      values[index] = ParseDecimal(*groups[index]);
    }
  }
  for (int i = kYears; i < kSeconds; ++i) {
    maybe_negate(values[static_cast<std::size_t>(i)], false);
  }
  maybe_negate(values[kSeconds], groups[kSeconds] && *groups[kSeconds] == "-0");

  if (groups[kFraction]) {
    std::string_view fraction = *groups[kFraction];
    // parseFloat("0." + fraction) stops at a '-' and reads "0.", i.e. zero.
    double f = 0;
    if (fraction.front() != '-') {
      std::string text = "0.";
      text += fraction;
      f = ParseDecimal(text);
    }
    values[kFraction] = std::floor(f * 1000.0);
    const bool negative_seconds = groups[kSeconds] && groups[kSeconds]->front() == '-';
    maybe_negate(values[kFraction], negative_seconds);
  }
  return values;
}

HumanDuration ToHuman(const std::array<std::optional<double>, 8>& v) {
  HumanDuration d;
  d.years = v[kYears];
  d.months = v[kMonths];
  d.weeks = v[kWeeks];
  d.days = v[kDays];
  d.hours = v[kHours];
  d.minutes = v[kMinutes];
  d.seconds = v[kSeconds];
  d.milliseconds = v[kFraction];
  return d;
}

Result<HumanDuration> ParseIsoConfigDuration(std::string_view text) {
  std::optional<IsoCaptures> captures = MatchIso(text);
  if (!captures) {
    return InvalidArgumentError(kIsoFormatError);
  }
  std::array<std::optional<double>, 8> values = IsoValues(*captures);
  bool any = false;
  bool any_non_zero = false;
  for (auto& v : values) {
    if (!v) {
      continue;
    }
    any = true;
    // Backstage keeps only truthy numbers.
    if (*v == 0 || std::isnan(*v)) {
      v.reset();
    } else {
      any_non_zero = true;
    }
  }
  if (!any) {
    return InvalidArgumentError(kIsoNoValuesError);
  }
  if (!any_non_zero) {
    return OnlyMilliseconds(0.0);
  }
  return ToHuman(values);
}

char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Returns the length in milliseconds of one `unit` of the `ms` package, or nullopt for an
// unknown unit. `unit` is already lower-case.
std::optional<double> MsUnitLength(std::string_view unit) {
  struct Unit {
    double ms;
    std::array<std::string_view, 5> names;  // Unused slots are empty.
  };
  static constexpr std::array<Unit, 7> kUnits = {{
      {1, {"milliseconds", "millisecond", "msecs", "msec", "ms"}},
      {kSecondMs, {"seconds", "second", "secs", "sec", "s"}},
      {kMinuteMs, {"minutes", "minute", "mins", "min", "m"}},
      {kHourMs, {"hours", "hour", "hrs", "hr", "h"}},
      {kDayMs, {"days", "day", "d"}},
      {kWeekMs, {"weeks", "week", "w"}},
      {kMsPackageYearMs, {"years", "year", "yrs", "yr", "y"}},
  }};
  for (const Unit& u : kUnits) {
    for (std::string_view name : u.names) {
      if (!name.empty() && name == unit) {
        return u.ms;
      }
    }
  }
  return std::nullopt;
}

// The `ms` package's parse(): returns milliseconds, or nullopt where it returns undefined.
// Grammar (case-insensitive): ^(-?(?:\d+)?\.?\d+) *(unit)?$, at most 100 characters.
std::optional<double> ParseMsString(std::string_view text) {
  if (text.size() > 100) {
    return std::nullopt;
  }
  std::size_t pos = 0;
  if (pos < text.size() && text[pos] == '-') {
    ++pos;
  }
  std::size_t integer_digits = 0;
  while (pos < text.size() && IsDigit(text[pos])) {
    ++pos;
    ++integer_digits;
  }
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    std::size_t fraction_digits = 0;
    while (pos < text.size() && IsDigit(text[pos])) {
      ++pos;
      ++fraction_digits;
    }
    if (fraction_digits == 0) {
      return std::nullopt;
    }
  } else if (integer_digits == 0) {
    return std::nullopt;
  }
  std::string_view number = text.substr(0, pos);
  while (pos < text.size() && text[pos] == ' ') {
    ++pos;
  }

  std::string unit;
  for (char c : text.substr(pos)) {
    unit.push_back(AsciiLower(c));
  }
  double unit_ms = 1;
  if (!unit.empty()) {
    std::optional<double> found = MsUnitLength(unit);
    if (!found) {
      return std::nullopt;
    }
    unit_ms = *found;
  }

  return ParseDecimal(number) * unit_ms;
}

// Backstage's parseMsDuration.
Result<HumanDuration> ParseMsConfigDuration(std::string_view text) {
  bool all_digits = !text.empty();
  for (char c : text) {
    all_digits = all_digits && IsDigit(c);
  }
  if (all_digits) {
    return InvalidArgumentError(kPlainNumberError);
  }
  if (text.empty()) {
    return InvalidArgumentError(kEmptyMsError);
  }

  std::optional<double> parsed = ParseMsString(text);
  if (!parsed || !std::isfinite(*parsed)) {
    return InvalidArgumentError(kNotDurationError);
  }
  double ms = *parsed;
  if (ms < 0) {
    return InvalidArgumentError(kNegativeError);
  }
  if (ms == 0) {
    return OnlyMilliseconds(0.0);
  }

  // The same double arithmetic as Backstage, so fractional inputs decompose identically.
  HumanDuration d;
  auto take = [&ms](double unit_ms, std::optional<double>& field) {
    if (ms >= unit_ms) {
      const double count = std::floor(ms / unit_ms);
      ms -= count * unit_ms;
      field = count;
    }
  };
  take(kMsPackageYearMs, d.years);
  take(kWeekMs, d.weeks);
  take(kDayMs, d.days);
  take(kHourMs, d.hours);
  take(kMinuteMs, d.minutes);
  take(kSecondMs, d.seconds);
  if (ms > 0) {
    d.milliseconds = ms;
  }
  return d;
}

// Returns the byte length of a JavaScript whitespace or line terminator code point (UTF-8)
// starting at `text[pos]`, or 0.
std::size_t JsWhitespaceAt(std::string_view text, std::size_t pos) {
  auto byte = [&](std::size_t i) {
    return pos + i < text.size() ? static_cast<unsigned char>(text[pos + i]) : 0u;
  };
  const unsigned b0 = byte(0);
  switch (b0) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
      return 1;
    case 0xC2:
      return byte(1) == 0xA0 ? 2 : 0;  // U+00A0
    case 0xE1:
      return byte(1) == 0x9A && byte(2) == 0x80 ? 3 : 0;  // U+1680
    case 0xE2:
      if (byte(1) == 0x80) {
        const unsigned b2 = byte(2);
        // U+2000..U+200A, U+2028, U+2029, U+202F.
        return (b2 >= 0x80 && b2 <= 0x8A) || b2 == 0xA8 || b2 == 0xA9 || b2 == 0xAF ? 3 : 0;
      }
      return byte(1) == 0x81 && byte(2) == 0x9F ? 3 : 0;  // U+205F
    case 0xE3:
      return byte(1) == 0x80 && byte(2) == 0x80 ? 3 : 0;  // U+3000
    case 0xEF:
      return byte(1) == 0xBB && byte(2) == 0xBF ? 3 : 0;  // U+FEFF
    default:
      return 0;
  }
}

}  // namespace

std::string_view TrimJsWhitespace(std::string_view text) {
  std::size_t begin = 0;
  while (begin < text.size()) {
    const std::size_t n = JsWhitespaceAt(text, begin);
    if (n == 0) {
      break;
    }
    begin += n;
  }
  std::size_t end = text.size();
  while (end > begin) {
    std::size_t n = 0;
    for (std::size_t len = 1; len <= 3 && len <= end - begin; ++len) {
      if (JsWhitespaceAt(text, end - len) == len) {
        n = len;
        break;
      }
    }
    if (n == 0) {
      break;
    }
    end -= n;
  }
  return text.substr(begin, end - begin);
}

double ToMillisecondsCasual(const HumanDuration& d) {
  // luxon's Duration#as("milliseconds"): every present unit is boiled down to milliseconds,
  // largest first, and the integer and fractional parts are then recombined.
  double own = 0;
  auto add = [&own](const std::optional<double>& v, double unit_ms) {
    if (v) {
      own += unit_ms * *v;
    }
  };
  add(d.years, kCasualYearMs);
  add(d.months, kCasualMonthMs);
  add(d.weeks, kWeekMs);
  add(d.days, kDayMs);
  add(d.hours, kHourMs);
  add(d.minutes, kMinuteMs);
  add(d.seconds, kSecondMs);
  if (d.milliseconds) {
    own += *d.milliseconds;
  }
  const double integer = std::trunc(own);
  const double fraction = (own * 1000 - integer * 1000) / 1000;
  // Past about 1.8e305 ms luxon's recombination overflows to NaN, which its getter reports as
  // 0; a huge duration must not turn into an immediate one, so keep the plain sum there.
  if (!std::isfinite(fraction)) {
    return own;
  }
  double result = integer;
  if (fraction != 0) {
    result += fraction;
  }
  return result;
}

std::chrono::milliseconds ToChronoMilliseconds(const HumanDuration& d) {
  using Rep = std::chrono::milliseconds::rep;
  const double ms = std::round(ToMillisecondsCasual(d));
  if (std::isnan(ms)) {
    return std::chrono::milliseconds(0);
  }
  // 2^63 is exactly representable; anything at or above it saturates.
  constexpr double kLimit = 9223372036854775808.0;
  if (ms >= kLimit) {
    return std::chrono::milliseconds(std::numeric_limits<Rep>::max());
  }
  if (ms < -kLimit) {
    return std::chrono::milliseconds(std::numeric_limits<Rep>::min());
  }
  return std::chrono::milliseconds(static_cast<Rep>(ms));
}

std::string FormatIsoDuration(const HumanDuration& d) {
  // luxon's getters read `values.x || 0`, so absent and NaN fields count as zero.
  auto get = [](const std::optional<double>& v) { return v && !std::isnan(*v) ? *v : 0.0; };
  const double years = get(d.years);
  const double months = get(d.months);
  const double weeks = get(d.weeks);
  const double days = get(d.days);
  const double hours = get(d.hours);
  const double minutes = get(d.minutes);
  const double seconds = get(d.seconds);
  const double milliseconds = get(d.milliseconds);

  std::string s = "P";
  auto append = [&s](double value, char designator) {
    if (value != 0) {
      s += FormatJsNumber(value);
      s.push_back(designator);
    }
  };
  append(years, 'Y');
  append(months, 'M');
  append(weeks, 'W');
  append(days, 'D');
  if (hours != 0 || minutes != 0 || seconds != 0 || milliseconds != 0) {
    s.push_back('T');
  }
  append(hours, 'H');
  append(minutes, 'M');
  if (seconds != 0 || milliseconds != 0) {
    s += FormatJsNumber(JsRound((seconds + milliseconds / 1000) * 1000) / 1000);
    s.push_back('S');
  }
  if (s == "P") {
    s = "PT0S";
  }
  return s;
}

std::string FormatIsoDuration(std::chrono::milliseconds d) {
  return FormatIsoDuration(OnlyMilliseconds(static_cast<double>(d.count())));
}

std::string FormatShortDuration(std::chrono::milliseconds d) {
  if (d.count() < 0) return "-" + FormatShortDuration(-d);
  const std::int64_t total_ms = d.count();
  if (total_ms < 1000) return std::to_string(total_ms) + "ms";
  const std::int64_t hours = total_ms / 3'600'000;
  const std::int64_t minutes = total_ms / 60'000 % 60;
  const std::int64_t seconds = total_ms / 1000 % 60;
  const std::int64_t millis = total_ms % 1000;
  std::string out;
  if (hours > 0) out += std::to_string(hours) + "h";
  if (minutes > 0 || (hours > 0 && (seconds > 0 || millis > 0))) {
    out += std::to_string(minutes) + "m";
  }
  if (seconds > 0 || millis > 0) {
    out += std::to_string(seconds);
    if (millis > 0) {
      std::string fraction = std::to_string(1000 + millis).substr(1);
      while (fraction.back() == '0') fraction.pop_back();
      out += "." + fraction;
    }
    out += "s";
  }
  return out;
}

Result<HumanDuration> ParseIsoDuration(std::string_view text) {
  std::optional<IsoCaptures> captures = MatchIso(text);
  if (!captures) {
    return InvalidArgumentError(kIsoFormatError);
  }
  return ToHuman(IsoValues(*captures));
}

bool IsValidIsoDuration(std::string_view text) { return MatchIso(text).has_value(); }

Result<HumanDuration> ParseDurationString(std::string_view text) {
  std::string_view trimmed = TrimJsWhitespace(text);
  if (!trimmed.empty() && trimmed.front() == 'P') {
    return ParseIsoConfigDuration(trimmed);
  }
  return ParseMsConfigDuration(trimmed);
}

}  // namespace stagehand
