#include "stagehand/time/time_zone.h"

#include <date/tz.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "stagehand/base/file.h"
#include "stagehand/base/mutex.h"
#include "time/civil.h"
#include "time/posix_tz.h"
#include "time/time_zone_internal.h"

namespace stagehand {
namespace {

using time_internal::CivilDate;
using time_internal::CivilFromDays;
using time_internal::DaysFromCivil;
using time_internal::DaysInMonth;
using time_internal::FloorDiv;
using time_internal::IsLeapYear;
using time_internal::kSecondsPerDay;
using time_internal::PosixDate;
using time_internal::PosixRule;
using time_internal::WeekdayFromDays;

// Where date/tz reads the system tz database.
constexpr std::string_view kZoneInfoDir = "/usr/share/zoneinfo/";

// date/tz ends the last span of every zone in the year 32767.
constexpr std::int64_t kFinalSpanEnd = 900'000'000'000;

const date::time_zone* Native(const TimeZone& zone) {
  return static_cast<const date::time_zone*>(zone.native());
}

const date::time_zone* LocateNative(std::string_view name) {
  try {
    return date::locate_zone(name);
  } catch (const std::exception&) {
    return nullptr;
  }
}

std::int64_t FloorSeconds(WallTime instant) {
  return std::chrono::floor<std::chrono::seconds>(instant).time_since_epoch().count();
}

std::int64_t FloorMillis(WallTime instant) {
  return std::chrono::floor<std::chrono::milliseconds>(instant).time_since_epoch().count();
}

// Formats the local calendar time `local_millis` (milliseconds since 1970 in local time) as
// "YYYY-MM-DDTHH:MM:SS.mmm". WallTime spans years 1677-2262, so the year always has 4 digits.
std::string FormatLocalMillis(std::int64_t local_millis) {
  const std::int64_t days = FloorDiv(local_millis, kSecondsPerDay * 1000);
  const std::int64_t millis_of_day = local_millis - days * kSecondsPerDay * 1000;
  const CivilDate date = CivilFromDays(days);
  const std::int64_t seconds_of_day = millis_of_day / 1000;
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}", date.year, date.month, date.day,
                     seconds_of_day / 3600, seconds_of_day / 60 % 60, seconds_of_day % 60,
                     millis_of_day % 1000);
}

// A cursor over a text, one character at a time: what the scanners below read with.
class TextCursor {
 public:
  explicit TextCursor(std::string_view text) : text_(text) {}

  bool AtEnd() const { return pos_ == text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  bool Consume(char c) {
    if (Peek() != c) {
      return false;
    }
    ++pos_;
    return true;
  }

 protected:
  std::string_view text_;
  std::size_t pos_ = 0;
};

// A cursor over the text of an ISO instant.
class IsoScanner : public TextCursor {
 public:
  using TextCursor::TextCursor;

  // Reads exactly `width` decimal digits.
  std::optional<int> Digits(int width) {
    int value = 0;
    for (int i = 0; i < width; ++i) {
      const char c = Peek();
      if (c < '0' || c > '9') {
        return std::nullopt;
      }
      value = value * 10 + (c - '0');
      ++pos_;
    }
    return value;
  }

  // Reads 1 to 9 digits of a decimal fraction, returned as nanoseconds.
  std::optional<std::int64_t> FractionNanos() {
    std::int64_t nanos = 0;
    int count = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      if (++count > 9) {
        return std::nullopt;
      }
      nanos = nanos * 10 + (Peek() - '0');
      ++pos_;
    }
    if (count == 0) {
      return std::nullopt;
    }
    for (; count < 9; ++count) {
      nanos *= 10;
    }
    return nanos;
  }
};

// A cursor over a POSIX TZ string.
class PosixScanner : public TextCursor {
 public:
  using TextCursor::TextCursor;

  // A zone abbreviation: letters, or anything between '<' and '>'.
  bool Name() {
    if (Consume('<')) {
      const std::size_t close = text_.find('>', pos_);
      if (close == std::string_view::npos || close == pos_) {
        return false;
      }
      pos_ = close + 1;
      return true;
    }
    const std::size_t start = pos_;
    while ((Peek() >= 'a' && Peek() <= 'z') || (Peek() >= 'A' && Peek() <= 'Z')) {
      ++pos_;
    }
    return pos_ > start;
  }

  std::optional<int> Number(int max_digits) {
    int value = 0;
    int digits = 0;
    while (digits < max_digits && Peek() >= '0' && Peek() <= '9') {
      value = value * 10 + (Peek() - '0');
      ++pos_;
      ++digits;
    }
    if (digits == 0) {
      return std::nullopt;
    }
    return value;
  }

  // [+-]hh[:mm[:ss]], in seconds.
  std::optional<std::int64_t> Duration() {
    int sign = 1;
    if (Consume('-')) {
      sign = -1;
    } else {
      Consume('+');
    }
    const std::optional<int> hours = Number(3);
    if (!hours || *hours > 167) {
      return std::nullopt;
    }
    std::int64_t seconds = std::int64_t{*hours} * 3600;
    if (Consume(':')) {
      const std::optional<int> minutes = Number(2);
      if (!minutes || *minutes > 59) {
        return std::nullopt;
      }
      seconds += std::int64_t{*minutes} * 60;
      if (Consume(':')) {
        const std::optional<int> secs = Number(2);
        if (!secs || *secs > 59) {
          return std::nullopt;
        }
        seconds += *secs;
      }
    }
    return sign * seconds;
  }

  // Jn, n or Mm.w.d, then an optional /time.
  std::optional<PosixDate> Date() {
    PosixDate date;
    if (Consume('J')) {
      const std::optional<int> day = Number(3);
      if (!day || *day < 1 || *day > 365) {
        return std::nullopt;
      }
      date.kind = PosixDate::Kind::kJulianNoLeap;
      date.day = *day;
    } else if (Consume('M')) {
      const std::optional<int> month = Number(2);
      if (!month || *month < 1 || *month > 12 || !Consume('.')) {
        return std::nullopt;
      }
      const std::optional<int> week = Number(1);
      if (!week || *week < 1 || *week > 5 || !Consume('.')) {
        return std::nullopt;
      }
      const std::optional<int> weekday = Number(1);
      if (!weekday || *weekday > 6) {
        return std::nullopt;
      }
      date.kind = PosixDate::Kind::kMonthWeekDay;
      date.month = *month;
      date.week = *week;
      date.weekday = *weekday;
    } else {
      const std::optional<int> day = Number(3);
      if (!day || *day > 365) {
        return std::nullopt;
      }
      date.kind = PosixDate::Kind::kZeroBased;
      date.day = *day;
    }
    if (Consume('/')) {
      const std::optional<std::int64_t> time = Duration();
      if (!time) {
        return std::nullopt;
      }
      date.time_seconds = *time;
    }
    return date;
  }
};

// Returns the day (counted from 1970-01-01) on which `date` falls in `year`.
std::int64_t DayOfYearRule(const PosixDate& date, std::int64_t year) {
  const std::int64_t january_first = DaysFromCivil(year, 1, 1);
  switch (date.kind) {
    case PosixDate::Kind::kJulianNoLeap:
      return january_first + date.day - 1 + (IsLeapYear(year) && date.day >= 60 ? 1 : 0);
    case PosixDate::Kind::kZeroBased:
      return january_first + date.day;
    case PosixDate::Kind::kMonthWeekDay:
      break;
  }
  const auto month = static_cast<unsigned>(date.month);
  const std::int64_t first = DaysFromCivil(year, month, 1);
  const auto first_weekday = static_cast<int>(WeekdayFromDays(first));
  std::int64_t day = (date.weekday - first_weekday + 7) % 7 + 7 * (date.week - 1);
  while (day >= DaysInMonth(year, month)) {
    day -= 7;
  }
  return first + day;
}

// Reads the POSIX TZ rule at the end of the TZif file of `zone_name`, if it has daylight time.
std::optional<PosixRule> LoadPosixRule(const std::string& zone_name) {
  // TZif files are a few kilobytes; anything much larger is not one.
  constexpr std::size_t kMaxSize = 1 << 20;
  Result<std::string> file = ReadFile(std::string(kZoneInfoDir) + zone_name, kMaxSize);
  if (!file.ok()) {
    return std::nullopt;
  }
  const std::string& data = *file;
  // Version 2 and later files end with "\n<rule>\n".
  if (data.size() < 6 || data.compare(0, 4, "TZif") != 0 || data[4] < '2' || data.back() != '\n') {
    return std::nullopt;
  }
  const std::size_t open = data.rfind('\n', data.size() - 2);
  if (open == std::string::npos) {
    return std::nullopt;
  }
  return time_internal::ParsePosixRule(
      std::string_view(data).substr(open + 1, data.size() - open - 2));
}

// Returns the daylight-saving rule that continues `zone` after its listed transitions, or null.
const PosixRule* PosixRuleOf(const TimeZone& zone) {
  thread_local const void* cached_zone = nullptr;
  thread_local const PosixRule* cached_rule = nullptr;
  if (zone.native() == cached_zone) {
    return cached_rule;
  }

  struct RuleCache {
    Mutex mu;
    std::unordered_map<const void*, std::optional<PosixRule>> rules STAGEHAND_GUARDED_BY(mu);
  };
  static RuleCache& cache = *new RuleCache;
  const PosixRule* rule = nullptr;
  {
    MutexLock lock(cache.mu);
    auto it = cache.rules.find(zone.native());
    if (it == cache.rules.end()) {
      it = cache.rules.emplace(zone.native(), LoadPosixRule(zone.name())).first;
    }
    rule = it->second ? &*it->second : nullptr;
  }
  cached_zone = zone.native();
  cached_rule = rule;
  return rule;
}

Status IsoError(std::string_view text) {
  return InvalidArgumentError(
      fmt::format("invalid ISO-8601 instant '{}' (expected e.g. 2026-03-07T12:00:00Z or "
                  "2026-03-07T12:00:00.250+01:00)",
                  text));
}

}  // namespace

TimeZone TimeZone::Utc() {
  static const TimeZone kUtc = [] {
    const date::time_zone* native = LocateNative("UTC");
    STAGEHAND_CHECK(native != nullptr);  // Every tz database has UTC.
    return TimeZone(native);
  }();
  return kUtc;
}

TimeZone TimeZone::ProcessDefault() {
  static const TimeZone kProcessZone = [] {
    const char* tz = std::getenv("TZ");  // NOLINT(concurrency-mt-unsafe): read once, at first use
    return time_internal::ResolveProcessZone(tz == nullptr ? std::nullopt
                                                           : std::optional<std::string_view>(tz));
  }();
  return kProcessZone;
}

Result<TimeZone> TimeZone::Locate(std::string_view name) {
  const date::time_zone* native = name.empty() ? nullptr : LocateNative(name);
  if (native == nullptr) {
    return InvalidArgumentError(fmt::format("unknown time zone '{}'", name));
  }
  return TimeZone(native);
}

const std::string& TimeZone::name() const { return Native(*this)->name(); }

std::chrono::seconds TimeZone::OffsetAt(WallTime instant) const {
  return std::chrono::seconds(
      time_internal::LookupSpan(*this, FloorSeconds(instant)).offset_seconds);
}

std::string FormatIsoInstant(WallTime instant, const TimeZone& zone) {
  const std::int64_t millis = FloorMillis(instant);
  const std::int32_t offset =
      time_internal::LookupSpan(zone, FloorDiv(millis, 1000)).offset_seconds;
  const std::int32_t magnitude = offset < 0 ? -offset : offset;
  return fmt::format("{}{}{:02}:{:02}", FormatLocalMillis(millis + std::int64_t{offset} * 1000),
                     offset < 0 ? '-' : '+', magnitude / 3600, magnitude / 60 % 60);
}

std::string FormatIsoInstantUtc(WallTime instant) {
  return FormatLocalMillis(FloorMillis(instant)) + "Z";
}

Result<WallTime> ParseIsoInstant(std::string_view text) {
  IsoScanner in(text);
  const std::optional<int> year = in.Digits(4);
  if (!year || !in.Consume('-')) {
    return IsoError(text);
  }
  const std::optional<int> month = in.Digits(2);
  if (!month || !in.Consume('-')) {
    return IsoError(text);
  }
  const std::optional<int> day = in.Digits(2);
  if (!day || !(in.Consume('T') || in.Consume('t') || in.Consume(' '))) {
    return IsoError(text);
  }
  const std::optional<int> hour = in.Digits(2);
  if (!hour || !in.Consume(':')) {
    return IsoError(text);
  }
  const std::optional<int> minute = in.Digits(2);
  if (!minute || !in.Consume(':')) {
    return IsoError(text);
  }
  const std::optional<int> second = in.Digits(2);
  if (!second) {
    return IsoError(text);
  }
  std::int64_t nanos = 0;
  if (in.Consume('.') || in.Consume(',')) {
    const std::optional<std::int64_t> fraction = in.FractionNanos();
    if (!fraction) {
      return IsoError(text);
    }
    nanos = *fraction;
  }
  std::int64_t offset_seconds = 0;
  if (!(in.Consume('Z') || in.Consume('z'))) {
    const char sign = in.Peek();
    if (!(in.Consume('+') || in.Consume('-'))) {
      return IsoError(text);
    }
    const std::optional<int> offset_hours = in.Digits(2);
    if (!offset_hours) {
      return IsoError(text);
    }
    in.Consume(':');
    const std::optional<int> offset_minutes = in.Digits(2);
    if (!offset_minutes || *offset_hours > 23 || *offset_minutes > 59) {
      return IsoError(text);
    }
    offset_seconds = (std::int64_t{*offset_hours} * 3600 + std::int64_t{*offset_minutes} * 60) *
                     (sign == '-' ? -1 : 1);
  }
  if (!in.AtEnd()) {
    return IsoError(text);
  }
  if (*month < 1 || *month > 12 || *day < 1 ||
      static_cast<unsigned>(*day) > DaysInMonth(*year, static_cast<unsigned>(*month)) ||
      *hour > 23 || *minute > 59 || *second > 59) {
    return IsoError(text);
  }

  const std::int64_t utc_seconds =
      DaysFromCivil(*year, static_cast<unsigned>(*month), static_cast<unsigned>(*day)) *
          kSecondsPerDay +
      std::int64_t{*hour} * 3600 + std::int64_t{*minute} * 60 + *second - offset_seconds;
  // WallTime counts nanoseconds in 64 bits: years 1677 to 2262.
  constexpr std::int64_t kLimitSeconds =
      std::numeric_limits<std::int64_t>::max() / 1'000'000'000 - 1;
  if (utc_seconds < -kLimitSeconds || utc_seconds > kLimitSeconds) {
    return InvalidArgumentError(fmt::format("instant '{}' is out of range", text));
  }
  return WallTime(std::chrono::duration_cast<WallTime::duration>(std::chrono::seconds(utc_seconds) +
                                                                 std::chrono::nanoseconds(nanos)));
}

namespace time_internal {

ZoneSpan LookupSpan(const TimeZone& zone, std::int64_t utc_seconds) {
  const date::sys_info info =
      Native(zone)->get_info(date::sys_seconds(std::chrono::seconds(utc_seconds)));
  const ZoneSpan span{info.begin.time_since_epoch().count(), info.end.time_since_epoch().count(),
                      static_cast<std::int32_t>(info.offset.count())};
  if (span.end < kFinalSpanEnd) {
    return span;
  }
  const PosixRule* rule = PosixRuleOf(zone);
  return rule == nullptr ? span : SpanUnderRule(*rule, utc_seconds, span.begin);
}

std::optional<PosixRule> ParsePosixRule(std::string_view text) {
  PosixScanner in(text);
  PosixRule rule;
  if (!in.Name()) {
    return std::nullopt;
  }
  const std::optional<std::int64_t> standard = in.Duration();
  if (!standard || in.AtEnd() || !in.Name()) {
    return std::nullopt;
  }
  // POSIX offsets count hours west of Greenwich.
  rule.standard_offset = static_cast<std::int32_t>(-*standard);
  rule.daylight_offset = rule.standard_offset + 3600;
  if (in.Peek() != ',') {
    const std::optional<std::int64_t> daylight = in.Duration();
    if (!daylight) {
      return std::nullopt;
    }
    rule.daylight_offset = static_cast<std::int32_t>(-*daylight);
  }
  if (!in.Consume(',')) {
    return std::nullopt;
  }
  const std::optional<PosixDate> start = in.Date();
  if (!start || !in.Consume(',')) {
    return std::nullopt;
  }
  const std::optional<PosixDate> end = in.Date();
  if (!end || !in.AtEnd()) {
    return std::nullopt;
  }
  rule.start = *start;
  rule.end = *end;
  return rule;
}

ZoneSpan SpanUnderRule(const PosixRule& rule, std::int64_t utc_seconds, std::int64_t not_before) {
  struct Change {
    std::int64_t at;
    std::int32_t offset;
  };
  // Two changes a year; those of the two years before and after surround any instant even when
  // a rule's time of day runs days past midnight.
  const std::int64_t year = CivilFromDays(FloorDiv(utc_seconds, kSecondsPerDay)).year;
  std::array<Change, 10> changes{};
  std::size_t n = 0;
  for (std::int64_t y = year - 2; y <= year + 2; ++y) {
    changes[n++] = {DayOfYearRule(rule.start, y) * kSecondsPerDay + rule.start.time_seconds -
                        rule.standard_offset,
                    rule.daylight_offset};
    changes[n++] = {
        DayOfYearRule(rule.end, y) * kSecondsPerDay + rule.end.time_seconds - rule.daylight_offset,
        rule.standard_offset};
  }
  std::sort(changes.begin(), changes.end(),
            [](const Change& a, const Change& b) { return a.at < b.at; });
  const auto after = std::find_if(changes.begin(), changes.end(),
                                  [&](const Change& c) { return c.at > utc_seconds; });
  if (after == changes.begin() || after == changes.end()) {
    return ZoneSpan{not_before, kFinalSpanEnd, rule.standard_offset};
  }
  const Change& current = *std::prev(after);
  return ZoneSpan{std::max(current.at, not_before), after->at, current.offset};
}

TimeZone ResolveProcessZone(std::optional<std::string_view> tz_env) {
  if (!tz_env) {
    try {
      if (const date::time_zone* current = date::current_zone(); current != nullptr) {
        if (Result<TimeZone> zone = TimeZone::Locate(current->name()); zone.ok()) {
          return *zone;
        }
      }
    } catch (const std::exception&) {
      // No usable /etc/localtime: fall through to UTC.
    }
    return TimeZone::Utc();
  }
  std::string_view name = *tz_env;
  if (!name.empty() && name.front() == ':') {
    name.remove_prefix(1);
  }
  if (constexpr std::string_view kZoneInfo = "zoneinfo/"; !name.empty() && name.front() == '/') {
    if (const std::size_t at = name.rfind(kZoneInfo); at != std::string_view::npos) {
      name.remove_prefix(at + kZoneInfo.size());
    }
  }
  Result<TimeZone> zone = TimeZone::Locate(name);
  return zone.ok() ? *zone : TimeZone::Utc();
}

}  // namespace time_internal
}  // namespace stagehand
