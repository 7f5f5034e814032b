#include "store/postgres/pg_time.h"

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cstdint>

namespace stagehand::store_internal {

namespace {

using std::chrono::microseconds;

// The calendar range a nanosecond system_clock can hold (about 1677..2262), with a margin.
constexpr int kMinYear = 1678;
constexpr int kMaxYear = 2261;

bool ParseDigits(std::string_view text, size_t pos, size_t count, int& out) {
  if (pos + count > text.size()) return false;
  const char* begin = text.data() + pos;
  auto [end, error] = std::from_chars(begin, begin + count, out);
  return error == std::errc() && end == begin + count;
}

Status Unparsable(std::string_view text) {
  return InvalidArgumentError(fmt::format("unparsable timestamptz '{}'", text));
}

}  // namespace

std::string FormatPgTimestamp(WallTime instant) {
  const auto us = std::chrono::floor<microseconds>(instant);
  const auto day = std::chrono::floor<std::chrono::days>(us);
  const std::chrono::year_month_day date(day);
  const std::chrono::hh_mm_ss<microseconds> time(us - day);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}+00", static_cast<int>(date.year()),
                     static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()),
                     time.hours().count(), time.minutes().count(), time.seconds().count(),
                     time.subseconds().count());
}

Result<WallTime> ParsePgTimestamp(std::string_view text) {
  if (text == "infinity") return WallTime::max();
  if (text == "-infinity") return WallTime::min();
  // YYYY-MM-DD HH:MM:SS[.f{1,6}](+|-)HH[:MM[:SS]] [BC]; the year may have more than 4 digits.
  const size_t dash = text.find('-');
  if (dash == std::string_view::npos || dash < 4) return Unparsable(text);
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!ParseDigits(text, 0, dash, year) || !ParseDigits(text, dash + 1, 2, month) ||
      text.size() < dash + 15 || text[dash + 3] != '-' || !ParseDigits(text, dash + 4, 2, day) ||
      text[dash + 6] != ' ' || !ParseDigits(text, dash + 7, 2, hour) || text[dash + 9] != ':' ||
      !ParseDigits(text, dash + 10, 2, minute) || text[dash + 12] != ':' ||
      !ParseDigits(text, dash + 13, 2, second)) {
    return Unparsable(text);
  }
  size_t pos = dash + 15;
  long long fraction_us = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (digits < 6) {
        fraction_us = fraction_us * 10 + (text[pos] - '0');
        ++digits;
      }
      ++pos;
    }
    if (digits == 0) return Unparsable(text);
    for (; digits < 6; ++digits) fraction_us *= 10;
  }
  if (pos >= text.size() || (text[pos] != '+' && text[pos] != '-')) return Unparsable(text);
  const int sign = text[pos] == '-' ? -1 : 1;
  int offset_h = 0, offset_m = 0, offset_s = 0;
  if (!ParseDigits(text, pos + 1, 2, offset_h)) return Unparsable(text);
  pos += 3;
  if (pos < text.size() && text[pos] == ':') {
    if (!ParseDigits(text, pos + 1, 2, offset_m)) return Unparsable(text);
    pos += 3;
    if (pos < text.size() && text[pos] == ':') {
      if (!ParseDigits(text, pos + 1, 2, offset_s)) return Unparsable(text);
      pos += 3;
    }
  }
  const bool bc = text.substr(pos) == " BC";
  if (!bc && pos != text.size()) return Unparsable(text);
  if (bc || year < kMinYear) return WallTime::min();
  if (year > kMaxYear) return WallTime::max();

  const std::chrono::year_month_day date{std::chrono::year(year),
                                         std::chrono::month(static_cast<unsigned>(month)),
                                         std::chrono::day(static_cast<unsigned>(day))};
  if (!date.ok()) return Unparsable(text);
  const auto offset = std::chrono::seconds(sign * (offset_h * 3600 + offset_m * 60 + offset_s));
  const auto local = std::chrono::sys_days(date) + std::chrono::hours(hour) +
                     std::chrono::minutes(minute) + std::chrono::seconds(second) +
                     microseconds(fraction_us);
  return std::chrono::time_point_cast<WallTime::duration>(local - offset);
}

}  // namespace stagehand::store_internal
