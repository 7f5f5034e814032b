#include "store/sqlite/sqlite_time.h"

#include <fmt/format.h>

#include <chrono>

namespace stagehand::store_internal {

namespace {

using std::chrono::days;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

// Reads exactly `count` digits at `pos`, advancing it. Returns -1 if they are not all digits.
int ReadDigits(std::string_view text, std::size_t& pos, std::size_t count) {
  if (pos + count > text.size()) return -1;
  int value = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const char c = text[pos + i];
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  pos += count;
  return value;
}

bool Expect(std::string_view text, std::size_t& pos, char c) {
  if (pos >= text.size() || text[pos] != c) return false;
  ++pos;
  return true;
}

}  // namespace

std::string FormatSqliteTime(WallTime instant) {
  const auto ms = std::chrono::floor<milliseconds>(instant);
  const auto day = std::chrono::floor<days>(ms);
  const std::chrono::year_month_day ymd(day);
  const std::chrono::hh_mm_ss<milliseconds> time(ms - day);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                     time.hours().count(), time.minutes().count(), time.seconds().count(),
                     time.subseconds().count());
}

Result<WallTime> ParseSqliteTime(std::string_view text) {
  std::size_t pos = 0;
  const int year = ReadDigits(text, pos, 4);
  const bool date_ok = year >= 0 && Expect(text, pos, '-');
  const int month = date_ok ? ReadDigits(text, pos, 2) : -1;
  const int day = month >= 0 && Expect(text, pos, '-') ? ReadDigits(text, pos, 2) : -1;
  const bool separator_ok = day >= 0 && pos < text.size() && (text[pos] == ' ' || text[pos] == 'T');
  if (separator_ok) ++pos;
  const int hour = separator_ok ? ReadDigits(text, pos, 2) : -1;
  const int minute = hour >= 0 && Expect(text, pos, ':') ? ReadDigits(text, pos, 2) : -1;
  const int second = minute >= 0 && Expect(text, pos, ':') ? ReadDigits(text, pos, 2) : -1;
  nanoseconds fraction{0};
  bool ok = second >= 0;
  if (ok && pos < text.size() && text[pos] == '.') {
    ++pos;
    std::int64_t scale = 100'000'000;
    std::size_t digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && digits < 9) {
      fraction += nanoseconds((text[pos] - '0') * scale);
      scale /= 10;
      ++pos;
      ++digits;
    }
    ok = digits > 0;
  }
  if (ok && pos < text.size() && text[pos] == 'Z') ++pos;
  ok = ok && pos == text.size();
  const std::chrono::year_month_day ymd{std::chrono::year(year),
                                        std::chrono::month(static_cast<unsigned>(month)),
                                        std::chrono::day(static_cast<unsigned>(day))};
  if (!ok || !ymd.ok() || hour > 23 || minute > 59 || second > 59) {
    return InvalidArgumentError(fmt::format("unreadable timestamp '{}'", text));
  }
  return WallTime(std::chrono::sys_days(ymd)) + std::chrono::hours(hour) +
         std::chrono::minutes(minute) + std::chrono::seconds(second) +
         std::chrono::duration_cast<WallTime::duration>(fraction);
}

WallTime FromEpochMilliseconds(std::int64_t epoch_ms) {
  return WallTime(std::chrono::duration_cast<WallTime::duration>(milliseconds(epoch_ms)));
}

std::string SecondsModifier(double seconds) {
  return fmt::format("{}{} seconds", seconds < 0 ? "" : "+", seconds);
}

}  // namespace stagehand::store_internal
