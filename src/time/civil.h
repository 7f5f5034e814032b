// Proleptic Gregorian calendar arithmetic on plain integers, shared by the time-zone formatting
// and the cron search. Days are counted from 1970-01-01; weekdays run from Sunday = 0.
#pragma once

#include <cstdint>

namespace stagehand::time_internal {

inline constexpr std::int64_t kSecondsPerDay = 86400;

struct CivilDate {
  std::int64_t year;
  unsigned month;  // 1-12
  unsigned day;    // 1-31
};

// Returns floor(a / b) for b > 0.
constexpr std::int64_t FloorDiv(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

constexpr bool IsLeapYear(std::int64_t year) {
  return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
}

constexpr unsigned DaysInMonth(std::int64_t year, unsigned month) {
  constexpr unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && IsLeapYear(year) ? 29 : kDays[month - 1];
}

// Days from 1970-01-01 to the given date. The year is shifted to start in March so that the leap
// day falls at the end of a (shifted) year, and years are grouped in 400-year cycles of 146097
// days.
constexpr std::int64_t DaysFromCivil(std::int64_t year, unsigned month, unsigned day) {
  const std::int64_t y = month <= 2 ? year - 1 : year;
  const std::int64_t cycle = FloorDiv(y, 400);
  const std::int64_t year_of_cycle = y - cycle * 400;                        // [0, 399]
  const std::int64_t shifted_month = month > 2 ? month - 3 : month + 9;      // March = 0
  const std::int64_t day_of_year = (153 * shifted_month + 2) / 5 + day - 1;  // [0, 365]
  const std::int64_t day_of_cycle =
      year_of_cycle * 365 + year_of_cycle / 4 - year_of_cycle / 100 + day_of_year;
  return cycle * 146097 + day_of_cycle - 719468;  // 719468 = days from 0000-03-01 to 1970-01-01
}

constexpr CivilDate CivilFromDays(std::int64_t days) {
  const std::int64_t z = days + 719468;
  const std::int64_t cycle = FloorDiv(z, 146097);
  const std::int64_t day_of_cycle = z - cycle * 146097;  // [0, 146096]
  const std::int64_t year_of_cycle =
      (day_of_cycle - day_of_cycle / 1460 + day_of_cycle / 36524 - day_of_cycle / 146096) / 365;
  const std::int64_t day_of_year =
      day_of_cycle - (365 * year_of_cycle + year_of_cycle / 4 - year_of_cycle / 100);
  const std::int64_t shifted_month = (5 * day_of_year + 2) / 153;  // March = 0
  const auto day = static_cast<unsigned>(day_of_year - (153 * shifted_month + 2) / 5 + 1);
  const auto month =
      static_cast<unsigned>(shifted_month < 10 ? shifted_month + 3 : shifted_month - 9);
  const std::int64_t year = year_of_cycle + cycle * 400 + (month <= 2 ? 1 : 0);
  return {year, month, day};
}

// Returns the weekday of a day count, Sunday = 0 (1970-01-01 was a Thursday).
constexpr unsigned WeekdayFromDays(std::int64_t days) {
  const std::int64_t w = (days + 4) % 7;
  return static_cast<unsigned>(w < 0 ? w + 7 : w);
}

static_assert(DaysFromCivil(1970, 1, 1) == 0);
static_assert(DaysFromCivil(2000, 3, 1) == 11017);
static_assert(CivilFromDays(11017).year == 2000 && CivilFromDays(11017).month == 3);
static_assert(CivilFromDays(-1).year == 1969 && CivilFromDays(-1).day == 31);
static_assert(WeekdayFromDays(DaysFromCivil(2026, 3, 8)) == 0);

}  // namespace stagehand::time_internal
