#include "stagehand/time/cron.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "time/civil.h"
#include "time/time_zone_internal.h"

namespace stagehand {
namespace {

using time_internal::CivilDate;
using time_internal::CivilFromDays;
using time_internal::DaysFromCivil;
using time_internal::DaysInMonth;
using time_internal::FloorDiv;
using time_internal::kSecondsPerDay;
using time_internal::LookupSpan;
using time_internal::WeekdayFromDays;
using time_internal::ZoneSpan;

constexpr std::string_view kNeverFires =
    "Something went wrong. No execution date was found in the next 8 years.";

// How far NextAfter searches, as the cron package does.
constexpr std::int64_t kSearchHorizonDays = std::int64_t{8} * 366;

enum Unit : int { kSecond, kMinute, kHour, kDayOfMonth, kMonth, kDayOfWeek, kUnitCount };

struct UnitSpec {
  std::string_view name;
  int low;
  int high;
  std::string_view wildcard;  // What '*' stands for, spelled as the cron package spells it.
};

constexpr std::array<UnitSpec, kUnitCount> kUnits = {{
    {"second", 0, 59, "0-59"},
    {"minute", 0, 59, "0-59"},
    {"hour", 0, 23, "0-23"},
    {"dayOfMonth", 1, 31, "1-31"},
    {"month", 1, 12, "1-12"},
    {"dayOfWeek", 0, 7, "0-7"},
}};

struct Preset {
  std::string_view name;
  std::string_view expansion;
};

constexpr std::array<Preset, 9> kPresets = {{
    {"@yearly", "0 0 0 1 1 *"},
    {"@monthly", "0 0 0 1 * *"},
    {"@weekly", "0 0 0 * * 0"},
    {"@daily", "0 0 0 * * *"},
    {"@hourly", "0 0 * * * *"},
    {"@minutely", "0 * * * * *"},
    {"@secondly", "* * * * * *"},
    {"@weekdays", "0 0 0 * * 1-5"},
    {"@weekends", "0 0 0 * * 0,6"},
}};

struct Alias {
  std::string_view name;
  std::string_view number;
};

constexpr std::array<Alias, 19> kAliases = {{
    {"jan", "1"},  {"feb", "2"},  {"mar", "3"}, {"apr", "4"}, {"may", "5"},
    {"jun", "6"},  {"jul", "7"},  {"aug", "8"}, {"sep", "9"}, {"oct", "10"},
    {"nov", "11"}, {"dec", "12"}, {"sun", "0"}, {"mon", "1"}, {"tue", "2"},
    {"wed", "3"},  {"thu", "4"},  {"fri", "5"}, {"sat", "6"},
}};

bool IsLowerAscii(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Returns the byte length of the whitespace character at `pos`, or 0. Matches JavaScript's \s,
// including the non-ASCII spaces in UTF-8, because the cron package splits fields with /\s+/.
std::size_t WhitespaceAt(std::string_view s, std::size_t pos) {
  const auto byte = [&](std::size_t i) {
    return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u;
  };
  const unsigned c = byte(pos);
  if (c == ' ' || (c >= 0x09 && c <= 0x0d)) {
    return 1;
  }
  if (c == 0xc2 && byte(pos + 1) == 0xa0) {
    return 2;  // U+00A0
  }
  if (c == 0xe1 && byte(pos + 1) == 0x9a && byte(pos + 2) == 0x80) {
    return 3;  // U+1680
  }
  if (c == 0xe2 && byte(pos + 1) == 0x80) {
    const unsigned c2 = byte(pos + 2);
    if ((c2 >= 0x80 && c2 <= 0x8a) || c2 == 0xa8 || c2 == 0xa9 || c2 == 0xaf) {
      return 3;
    }
  }
  if (c == 0xe2 && byte(pos + 1) == 0x81 && byte(pos + 2) == 0x9f) {
    return 3;  // U+205F
  }
  if (c == 0xe3 && byte(pos + 1) == 0x80 && byte(pos + 2) == 0x80) {
    return 3;  // U+3000
  }
  if (c == 0xef && byte(pos + 1) == 0xbb && byte(pos + 2) == 0xbf) {
    return 3;  // U+FEFF
  }
  return 0;
}

// Returns the lowest set bit of `mask` at or above `from`, or 64 if there is none.
int NextBit(std::uint64_t mask, int from) {
  if (from >= 64) {
    return 64;
  }
  const std::uint64_t rest = mask >> from;
  return rest == 0 ? 64 : from + std::countr_zero(rest);
}

bool HasBit(std::uint64_t mask, std::int64_t bit) { return ((mask >> bit) & 1U) != 0; }

// kWeekdayPattern[k] has the bits of the days of a month that fall k days after the 1st's weekday.
constexpr std::array<std::uint32_t, 7> kWeekdayPattern = [] {
  std::array<std::uint32_t, 7> patterns{};
  for (unsigned k = 0; k < 7; ++k) {
    for (unsigned day = 1 + k; day <= 31; day += 7) {
      patterns[k] |= std::uint32_t{1} << day;
    }
  }
  return patterns;
}();

std::int64_t FloorSeconds(WallTime instant) {
  return std::chrono::floor<std::chrono::seconds>(instant).time_since_epoch().count();
}

// The last whole second a WallTime (64-bit nanoseconds) can hold.
constexpr std::int64_t kMaxWallSeconds = std::numeric_limits<std::int64_t>::max() / 1'000'000'000;

}  // namespace

// Turns the text of an expression into the field bitmasks, replicating the cron package's
// pre-processing (lowercasing, presets, textual alias substitution) and its error messages.
class CronParser {
 public:
  static Result<CronExpression> Parse(std::string_view expression);

 private:
  static Status ParseField(std::string_view field, Unit unit, std::uint64_t& bits);
  static Status ParseRange(std::string_view range, std::string_view field, Unit unit,
                           std::uint64_t& bits);
  static std::string ExpandWildcards(std::string_view text, Unit unit);
  static bool FiresAtAll(const CronExpression& cron);
};

// Evaluates a parsed expression against local (wall-clock) seconds and UTC instants.
class CronMatcher {
 public:
  explicit CronMatcher(const CronExpression& cron) : cron_(cron) {}

  // Returns the first local second at or after `local_start` that matches every field, or
  // nullopt if there is none up to `local_limit`.
  std::optional<std::int64_t> NextLocal(std::int64_t local_start, std::int64_t local_limit) const;

  // Returns whether the local second `local` matches every field.
  bool LocalMatches(std::int64_t local) const;

  // Returns whether the expression fires at a spring-forward jump whose skipped local seconds
  // are [gap_begin, gap_end).
  bool GapFires(std::int64_t gap_begin, std::int64_t gap_end) const;

 private:
  // Returns the bits (1-31) of the days of month `month` of `year` that match.
  std::uint32_t DayMask(std::int64_t year, unsigned month) const;

  // Returns the first matching second of the day at or after `second_of_day`, or -1.
  std::int64_t NextTimeOfDay(std::int64_t second_of_day) const;

  const CronExpression& cron_;
};

Result<CronExpression> CronParser::Parse(std::string_view expression) {
  std::string lowered(expression);
  for (char& c : lowered) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  std::string_view text = lowered;
  for (const Preset& preset : kPresets) {
    if (text == preset.name) {
      text = preset.expansion;
      break;
    }
  }

  // Every run of up to three letters is a month or weekday name, replaced by its number in the
  // text itself (so "1jan" reads as "11", as it does in the cron package).
  std::string substituted;
  substituted.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (!IsLowerAscii(text[i])) {
      substituted.push_back(text[i++]);
      continue;
    }
    std::size_t length = 1;
    while (length < 3 && i + length < text.size() && IsLowerAscii(text[i + length])) {
      ++length;
    }
    const std::string_view run = text.substr(i, length);
    const auto* alias = std::find_if(kAliases.begin(), kAliases.end(),
                                     [&](const Alias& a) { return a.name == run; });
    if (alias == kAliases.end()) {
      return InvalidArgumentError(fmt::format("Unknown alias: {}", run));
    }
    substituted.append(alias->number);
    i += length;
  }

  std::array<std::string_view, kUnitCount> fields;
  std::size_t count = 0;
  const std::string_view source = substituted;
  for (std::size_t i = 0; i < source.size();) {
    if (const std::size_t ws = WhitespaceAt(source, i); ws != 0) {
      i += ws;
      continue;
    }
    const std::size_t start = i;
    while (i < source.size() && WhitespaceAt(source, i) == 0) {
      ++i;
    }
    if (count == kUnitCount) {
      return InvalidArgumentError("Too many fields");
    }
    fields[count++] = source.substr(start, i - start);
  }
  if (count < kUnitCount - 1) {
    return InvalidArgumentError("Too few fields");
  }
  if (count == kUnitCount - 1) {
    std::copy_backward(fields.begin(), fields.begin() + kUnitCount - 1, fields.end());
    fields[kSecond] = "0";
  }

  std::array<std::uint64_t, kUnitCount> bits{};
  for (int unit = kSecond; unit < kUnitCount; ++unit) {
    STAGEHAND_RETURN_IF_ERROR(ParseField(fields[static_cast<std::size_t>(unit)],
                                         static_cast<Unit>(unit),
                                         bits[static_cast<std::size_t>(unit)]));
  }
  // Day of week 7 is Sunday, like 0.
  if (HasBit(bits[kDayOfWeek], 7)) {
    bits[kDayOfWeek] = (bits[kDayOfWeek] & 0x7f) | 1U;
  }

  CronExpression cron;
  cron.source_ = std::string(expression);
  cron.seconds_ = bits[kSecond];
  cron.minutes_ = bits[kMinute];
  cron.hours_ = static_cast<std::uint32_t>(bits[kHour]);
  cron.days_of_month_ = static_cast<std::uint32_t>(bits[kDayOfMonth]);
  cron.months_ = static_cast<std::uint16_t>(bits[kMonth]);
  cron.days_of_week_ = static_cast<std::uint8_t>(bits[kDayOfWeek]);
  cron.day_of_month_restricted_ = std::popcount(cron.days_of_month_) != 31;
  cron.day_of_week_restricted_ = std::popcount(cron.days_of_week_) != 7;
  if (!FiresAtAll(cron)) {
    return InvalidArgumentError(std::string(kNeverFires));
  }
  return cron;
}

Status CronParser::ParseField(std::string_view field, Unit unit, std::uint64_t& bits) {
  // The wildcard check covers every item before any item is parsed.
  for (std::size_t start = 0;;) {
    const std::size_t comma = std::min(field.find(',', start), field.size());
    const std::string_view item = field.substr(start, comma - start);
    if (const std::size_t star = item.find('*'); star != std::string_view::npos && star != 0) {
      return InvalidArgumentError(
          fmt::format("Field ({}) has an invalid wildcard expression", item));
    }
    if (comma == field.size()) {
      break;
    }
    start = comma + 1;
  }
  for (std::size_t start = 0;;) {
    const std::size_t comma = std::min(field.find(',', start), field.size());
    const std::string_view item = field.substr(start, comma - start);
    if (item.find('*') == std::string_view::npos) {
      STAGEHAND_RETURN_IF_ERROR(ParseRange(item, field, unit, bits));
    } else {
      STAGEHAND_RETURN_IF_ERROR(ParseRange(ExpandWildcards(item, unit), field, unit, bits));
    }
    if (comma == field.size()) {
      break;
    }
    start = comma + 1;
  }
  return Status::Ok();
}

// Parses one `N`, `N-M`, `N/S` or `N-M/S` item (wildcards already expanded) into `bits`.
Status CronParser::ParseRange(std::string_view range, std::string_view field, Unit unit,
                              std::uint64_t& bits) {
  const UnitSpec& spec = kUnits[static_cast<std::size_t>(unit)];
  std::size_t pos = 0;
  // Reads a run of digits, saturating far above every bound so huge numbers stay out of range.
  const auto number = [&]() -> std::optional<std::int64_t> {
    const std::size_t start = pos;
    std::int64_t value = 0;
    for (; pos < range.size() && IsDigit(range[pos]); ++pos) {
      value = std::min<std::int64_t>(value * 10 + (range[pos] - '0'), 1'000'000'000);
    }
    if (pos == start) {
      return std::nullopt;
    }
    return value;
  };
  const auto unparsable = [&] {
    return InvalidArgumentError(fmt::format("Field ({}) cannot be parsed", spec.name));
  };

  const std::optional<std::int64_t> lower = number();
  if (!lower) {
    return unparsable();
  }
  std::optional<std::int64_t> upper;
  std::optional<std::int64_t> step;
  if (pos < range.size() && range[pos] == '-') {
    ++pos;
    upper = number();
    if (!upper) {
      return unparsable();
    }
  }
  if (pos < range.size() && range[pos] == '/') {
    ++pos;
    step = number();
    if (!step) {
      return unparsable();
    }
  }
  if (pos != range.size()) {
    return unparsable();
  }

  if (step && *step == 0) {
    return InvalidArgumentError(fmt::format("Field ({}) has a step of zero", spec.name));
  }
  if (upper && *lower > *upper) {
    return InvalidArgumentError(fmt::format("Field ({}) has an invalid range", spec.name));
  }
  if (*lower < spec.low || *lower > spec.high || (upper && *upper > spec.high)) {
    return InvalidArgumentError(
        fmt::format("Field value ({}) is out of range", ExpandWildcards(field, unit)));
  }
  const std::int64_t last = upper ? *upper : (step ? spec.high : *lower);
  const std::int64_t stride = step ? *step : 1;
  for (std::int64_t value = *lower; value <= last; value += stride) {
    bits |= std::uint64_t{1} << value;
  }
  return Status::Ok();
}

std::string CronParser::ExpandWildcards(std::string_view text, Unit unit) {
  std::string expanded;
  for (const char c : text) {
    if (c == '*') {
      expanded.append(kUnits[static_cast<std::size_t>(unit)].wildcard);
    } else {
      expanded.push_back(c);
    }
  }
  return expanded;
}

// Returns false only when the day of month is restricted, the day of week is not, and no chosen
// month has any of the chosen days (e.g. `0 0 30 2 *`). Any other valid expression fires at
// least once in every 8 years (a February 29 recurs within 8 years, even across 2100).
bool CronParser::FiresAtAll(const CronExpression& cron) {
  if (!cron.day_of_month_restricted_ || cron.day_of_week_restricted_) {
    return true;
  }
  for (unsigned month = 1; month <= 12; ++month) {
    if (!HasBit(cron.months_, month)) {
      continue;
    }
    const unsigned longest = month == 2 ? 29 : DaysInMonth(2001, month);
    const auto possible = static_cast<std::uint32_t>((std::uint64_t{1} << (longest + 1)) - 2);
    if ((cron.days_of_month_ & possible) != 0) {
      return true;
    }
  }
  return false;
}

std::uint32_t CronMatcher::DayMask(std::int64_t year, unsigned month) const {
  const unsigned days = DaysInMonth(year, month);
  const auto valid = static_cast<std::uint32_t>((std::uint64_t{1} << (days + 1)) - 2);
  if (!cron_.day_of_week_restricted_) {
    return cron_.days_of_month_ & valid;
  }
  const unsigned first_weekday = WeekdayFromDays(DaysFromCivil(year, month, 1));
  std::uint32_t by_weekday = 0;
  for (unsigned k = 0; k < 7; ++k) {
    if (HasBit(cron_.days_of_week_, (first_weekday + k) % 7)) {
      by_weekday |= kWeekdayPattern[k];
    }
  }
  by_weekday &= valid;
  // Vixie cron: when both day fields are restricted, either may match.
  return cron_.day_of_month_restricted_ ? ((cron_.days_of_month_ & valid) | by_weekday)
                                        : by_weekday;
}

std::int64_t CronMatcher::NextTimeOfDay(std::int64_t second_of_day) const {
  int hour = static_cast<int>(second_of_day / 3600);
  int minute = static_cast<int>(second_of_day / 60 % 60);
  int second = static_cast<int>(second_of_day % 60);
  for (;;) {
    const int next_hour = NextBit(cron_.hours_, hour);
    if (next_hour >= 24) {
      return -1;
    }
    if (next_hour != hour) {
      hour = next_hour;
      minute = 0;
      second = 0;
    }
    const int next_minute = NextBit(cron_.minutes_, minute);
    if (next_minute >= 60) {
      ++hour;
      minute = 0;
      second = 0;
      continue;
    }
    if (next_minute != minute) {
      minute = next_minute;
      second = 0;
    }
    const int next_second = NextBit(cron_.seconds_, second);
    if (next_second >= 60) {
      ++minute;
      second = 0;
      continue;
    }
    return std::int64_t{hour} * 3600 + std::int64_t{minute} * 60 + next_second;
  }
}

std::optional<std::int64_t> CronMatcher::NextLocal(std::int64_t local_start,
                                                   std::int64_t local_limit) const {
  const std::int64_t start_day = FloorDiv(local_start, kSecondsPerDay);
  const std::int64_t limit_day = FloorDiv(local_limit, kSecondsPerDay);
  const CivilDate start = CivilFromDays(start_day);
  std::int64_t year = start.year;
  unsigned month = start.month;
  unsigned first_day = start.day;
  std::int64_t first_second = local_start - start_day * kSecondsPerDay;
  for (;;) {
    const std::int64_t month_start = DaysFromCivil(year, month, 1);
    if (month_start > limit_day) {
      return std::nullopt;
    }
    if (HasBit(cron_.months_, month)) {
      const std::uint32_t days = DayMask(year, month);
      for (int day = NextBit(days, static_cast<int>(first_day)); day < 32;
           day = NextBit(days, day + 1)) {
        const std::int64_t time_of_day =
            NextTimeOfDay(static_cast<unsigned>(day) == first_day ? first_second : 0);
        if (time_of_day >= 0) {
          const std::int64_t local = (month_start + day - 1) * kSecondsPerDay + time_of_day;
          if (local > local_limit) {
            return std::nullopt;
          }
          return local;
        }
      }
    }
    first_day = 1;
    first_second = 0;
    if (++month > 12) {
      month = 1;
      ++year;
    }
  }
}

bool CronMatcher::LocalMatches(std::int64_t local) const {
  const std::int64_t day = FloorDiv(local, kSecondsPerDay);
  const CivilDate date = CivilFromDays(day);
  if (!HasBit(cron_.months_, date.month) || !HasBit(DayMask(date.year, date.month), date.day)) {
    return false;
  }
  const std::int64_t second_of_day = local - day * kSecondsPerDay;
  return NextTimeOfDay(second_of_day) == second_of_day;
}

// The cron package (3.5) fires at a spring-forward jump only when the day after the jump has a
// matching day of month AND day of week (even when Vixie rules would accept either), when the
// month after that day's month is also selected (a leftover of zero-based months: a jump in
// December never fires, a jump in March fires only if April is selected too), and when a
// skipped second matches the hour, minute and second fields. We replicate this so that every
// host computes the same times as a Backstage host would.
bool CronMatcher::GapFires(std::int64_t gap_begin, std::int64_t gap_end) const {
  const std::int64_t day = FloorDiv(gap_end, kSecondsPerDay);
  const CivilDate date = CivilFromDays(day);
  if (!HasBit(cron_.months_, date.month) || !HasBit(cron_.months_, date.month + 1) ||
      !HasBit(cron_.days_of_month_, date.day) ||
      !HasBit(cron_.days_of_week_, WeekdayFromDays(day))) {
    return false;
  }
  for (std::int64_t local = gap_begin; local < gap_end;) {
    const std::int64_t day_start = FloorDiv(local, kSecondsPerDay) * kSecondsPerDay;
    const std::int64_t time_of_day = NextTimeOfDay(local - day_start);
    if (time_of_day >= 0 && day_start + time_of_day < gap_end) {
      return true;
    }
    local = day_start + kSecondsPerDay;
  }
  return false;
}

namespace {
std::atomic<std::uint64_t> parse_count{0};
}  // namespace

Result<CronExpression> CronExpression::Parse(std::string_view expression) {
  parse_count.fetch_add(1, std::memory_order_relaxed);
  return CronParser::Parse(expression);
}

std::uint64_t CronExpression::ParseCount() { return parse_count.load(std::memory_order_relaxed); }

Result<WallTime> CronExpression::NextAfter(WallTime after, const TimeZone& zone) const {
  const CronMatcher matcher(*this);
  const std::int64_t start = FloorSeconds(after);
  ZoneSpan span = LookupSpan(zone, start);
  std::int64_t local_start = start + span.offset_seconds + 1;
  const std::int64_t local_limit = local_start + kSearchHorizonDays * kSecondsPerDay;
  std::int64_t found = 0;
  for (;;) {
    const std::optional<std::int64_t> local = matcher.NextLocal(local_start, local_limit);
    if (!local) {
      return InvalidArgumentError(std::string(kNeverFires));
    }
    const std::int64_t instant = *local - span.offset_seconds;
    if (instant < span.end) {
      found = instant;
      break;
    }
    // The next match lies beyond a change of UTC offset. Local time either jumps forward
    // (skipping [jump + old, jump + new)) or back (repeating [jump + new, jump + old), whose
    // second occurrence is skipped).
    const std::int64_t jump = span.end;
    const ZoneSpan next = LookupSpan(zone, jump);
    if (next.offset_seconds > span.offset_seconds &&
        matcher.GapFires(jump + span.offset_seconds, jump + next.offset_seconds)) {
      found = jump;
      break;
    }
    local_start = jump + std::max(span.offset_seconds, next.offset_seconds);
    span = next;
  }
  if (found > kMaxWallSeconds) {
    return InvalidArgumentError("No execution date was found before the end of representable time");
  }
  return WallTime(std::chrono::duration_cast<WallTime::duration>(std::chrono::seconds(found)));
}

bool CronExpression::Matches(WallTime instant, const TimeZone& zone) const {
  const CronMatcher matcher(*this);
  const std::int64_t second = FloorSeconds(instant);
  const ZoneSpan span = LookupSpan(zone, second);
  if (second - span.begin < kSecondsPerDay) {
    const ZoneSpan previous = LookupSpan(zone, span.begin - 1);
    const std::int64_t shift = std::int64_t{previous.offset_seconds} - span.offset_seconds;
    if (shift < 0 && second == span.begin &&
        matcher.GapFires(span.begin + previous.offset_seconds, span.begin + span.offset_seconds)) {
      return true;
    }
    // The second occurrence of a repeated local time never fires.
    if (shift > 0 && second - span.begin < shift) {
      return false;
    }
  }
  return matcher.LocalMatches(second + span.offset_seconds);
}

}  // namespace stagehand
