// Property tests for CronExpression against an independent oracle. Expressions are generated
// from a seeded PRNG together with the sets of values they select; the oracle decides, one second
// at a time and only through the public TimeZone API, whether a second is a fire time:
//   - a local time that exists once fires when it matches every field (day of month OR day of
//     week when both are restricted);
//   - the second occurrence of a repeated local time never fires;
//   - the instant of a spring-forward jump fires when a skipped local second matches the time
//     fields and the day after the jump matches both day fields and the month fields hold both
//     that month and the next (the cron 3.5 rule; see cron.cc).

#include <date/date.h>
#include <gtest/gtest.h>

#include <array>
#include <bitset>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/cron.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::testing::Not;

using std::chrono::seconds;

enum Field { kSecond, kMinute, kHour, kDayOfMonth, kMonth, kDayOfWeek };
constexpr std::array<int, 6> kLow = {0, 0, 0, 1, 1, 0};
constexpr std::array<int, 6> kHigh = {59, 59, 23, 31, 12, 7};
constexpr std::array<const char*, 12> kMonthNames = {"jan", "FEB", "Mar", "apr", "MAY", "jun",
                                                     "Jul", "aug", "SEP", "oct", "Nov", "dec"};
// 7 is Sunday too, but "sun" means 0, so 7 is always spelled as a number.
constexpr std::array<const char*, 7> kDayNames = {"sun", "MON", "Tue", "wed", "THU", "fri", "Sat"};

struct Generated {
  std::string text;
  std::array<std::bitset<64>, 6> sets;
};

class Generator {
 public:
  explicit Generator(std::uint64_t seed) : rng_(seed) {}

  int Uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }
  bool Chance(int percent) { return Uniform(1, 100) <= percent; }

  // Returns one item of a field and adds the values it selects to `set`.
  std::string Item(Field field, std::bitset<64>& set) {
    const int low = kLow[field];
    const int high = kHigh[field];
    const auto mark = [&](int from, int to, int step) {
      for (int v = from; v <= to; v += step) {
        set.set(static_cast<std::size_t>(v));
      }
    };
    const auto spell = [&](int value) -> std::string {
      if (field == kMonth && Chance(30)) {
        return kMonthNames[static_cast<std::size_t>(value - 1)];
      }
      if (field == kDayOfWeek && value < 7 && Chance(30)) {
        return kDayNames[static_cast<std::size_t>(value)];
      }
      return std::to_string(value);
    };
    switch (Uniform(0, 5)) {
      case 0:
        mark(low, high, 1);
        return "*";
      case 1: {
        const int value = Uniform(low, high);
        mark(value, value, 1);
        return spell(value);
      }
      case 2: {
        const int from = Uniform(low, high);
        const int to = Uniform(from, high);
        mark(from, to, 1);
        return spell(from) + "-" + spell(to);
      }
      case 3: {
        const int step = Uniform(1, high - low + 1);
        mark(low, high, step);
        return "*/" + std::to_string(step);
      }
      case 4: {
        const int from = Uniform(low, high);
        const int step = Uniform(1, high - low + 1);
        mark(from, high, step);
        return spell(from) + "/" + std::to_string(step);
      }
      default: {
        const int from = Uniform(low, high);
        const int to = Uniform(from, high);
        const int step = Uniform(1, 10);
        mark(from, to, step);
        return spell(from) + "-" + spell(to) + "/" + std::to_string(step);
      }
    }
  }

  std::string FieldText(Field field, std::bitset<64>& set) {
    std::string text = Item(field, set);
    while (Chance(25)) {
      text += "," + Item(field, set);
    }
    return text;
  }

  // Any valid expression, 5 or 6 fields.
  Generated Any() {
    Generated g;
    const bool six = Chance(50);
    for (int f = six ? kSecond : kMinute; f <= kDayOfWeek; ++f) {
      if (!g.text.empty()) {
        g.text += Chance(10) ? "\t" : " ";
      }
      g.text += FieldText(static_cast<Field>(f), g.sets[static_cast<std::size_t>(f)]);
    }
    if (!six) {
      g.sets[kSecond].set(0);
    }
    Fold(g);
    return g;
  }

  // An expression that fires at least every few minutes on most days, so that a window of
  // seconds holds many fire times. Times around 01:00-03:00 are favoured (the DST changes).
  Generated Frequent() {
    Generated g;
    std::array<std::string, 6> text;
    const auto pick = [&](Field field, std::initializer_list<const char*> options) {
      std::vector<const char*> choices(options);
      const char* chosen =
          choices[static_cast<std::size_t>(Uniform(0, static_cast<int>(choices.size()) - 1))];
      text[field] = chosen;
    };
    pick(kSecond, {"0", "*/7", "0,30", "15-20", "*", "59", "*/20"});
    pick(kMinute, {"*", "*/5", "0-10", "30", "*/13", "0,59", "45-59/2"});
    pick(kHour, {"*", "1-3", "2", "0-4", "*/2", "1,2,3,22", "2-23"});
    pick(kDayOfMonth, {"*", "*", "1-31/2", "8,25", "20-31"});
    pick(kMonth, {"*", "*", "3,4", "3", "10-11", "mar,oct,nov,dec"});
    pick(kDayOfWeek, {"*", "*", "0", "sun,sat", "1-5", "0-7/3"});
    const bool six = Chance(70);
    for (int f = six ? kSecond : kMinute; f <= kDayOfWeek; ++f) {
      if (!g.text.empty()) {
        g.text += " ";
      }
      g.text += text[static_cast<std::size_t>(f)];
    }
    // Parse the chosen texts into sets with the same rules as Item(); they are simple enough to
    // spell out here.
    for (int f = kSecond; f <= kDayOfWeek; ++f) {
      g.sets[static_cast<std::size_t>(f)] = SetOf(
          static_cast<Field>(f), f == kSecond && !six ? "0" : text[static_cast<std::size_t>(f)]);
    }
    Fold(g);
    return g;
  }

 private:
  static void Fold(Generated& g) {
    if (g.sets[kDayOfWeek].test(7)) {
      g.sets[kDayOfWeek].set(0);
    }
    g.sets[kDayOfWeek].reset(7);
  }

  static int Value(const std::string& token) {
    constexpr std::array<const char*, 12> kMonths = {"jan", "feb", "mar", "apr", "may", "jun",
                                                     "jul", "aug", "sep", "oct", "nov", "dec"};
    for (std::size_t i = 0; i < kMonths.size(); ++i) {
      if (token == kMonths[i]) {
        return static_cast<int>(i) + 1;
      }
    }
    if (token == "sun") {
      return 0;
    }
    if (token == "sat") {
      return 6;
    }
    return std::stoi(token);
  }

  // Interprets the small vocabulary used by Frequent(): lists of *, N, N-M, */S, N-M/S.
  static std::bitset<64> SetOf(Field field, const std::string& text) {
    std::bitset<64> set;
    std::size_t start = 0;
    while (start <= text.size()) {
      const std::size_t comma = std::min(text.find(',', start), text.size());
      std::string item = text.substr(start, comma - start);
      int step = 1;
      if (const std::size_t slash = item.find('/'); slash != std::string::npos) {
        step = std::stoi(item.substr(slash + 1));
        item = item.substr(0, slash);
      }
      int from = kLow[field];
      int to = kHigh[field];
      if (item != "*") {
        const std::size_t dash = item.find('-');
        from = Value(item.substr(0, dash));
        to = dash == std::string::npos ? (step > 1 ? kHigh[field] : from)
                                       : Value(item.substr(dash + 1));
      }
      for (int v = from; v <= to; v += step) {
        set.set(static_cast<std::size_t>(v));
      }
      start = comma + 1;
    }
    return set;
  }

  std::mt19937_64 rng_;
};

// Decides fire times from the generated sets, one second at a time.
class Oracle {
 public:
  Oracle(const Generated& g, const TimeZone& zone) : sets_(g.sets), zone_(zone) {
    day_of_month_restricted_ = sets_[kDayOfMonth].count() != 31;
    day_of_week_restricted_ = sets_[kDayOfWeek].count() != 7;
  }

  static std::int64_t Seconds(WallTime t) {
    return std::chrono::floor<seconds>(t).time_since_epoch().count();
  }
  std::int64_t Offset(std::int64_t t) const { return zone_.OffsetAt(WallTime(seconds(t))).count(); }

  bool LocalMatches(std::int64_t local) const {
    const date::sys_days day = date::floor<date::days>(date::sys_seconds(seconds(local)));
    const date::year_month_day ymd(day);
    const std::int64_t second_of_day = local - std::int64_t{day.time_since_epoch().count()} * 86400;
    const auto weekday = date::weekday(day).c_encoding();
    const bool dom = sets_[kDayOfMonth].test(static_cast<unsigned>(ymd.day()));
    const bool dow = sets_[kDayOfWeek].test(weekday);
    const bool day_ok =
        day_of_month_restricted_ && day_of_week_restricted_ ? (dom || dow) : (dom && dow);
    return sets_[kMonth].test(static_cast<unsigned>(ymd.month())) && day_ok &&
           sets_[kHour].test(static_cast<std::size_t>(second_of_day / 3600)) &&
           sets_[kMinute].test(static_cast<std::size_t>(second_of_day / 60 % 60)) &&
           sets_[kSecond].test(static_cast<std::size_t>(second_of_day % 60));
  }

  bool Fires(std::int64_t t) const {
    const std::int64_t offset = Offset(t);
    const std::int64_t before = Offset(t - 1);
    if (before < offset && JumpFires(t, before, offset)) {
      return true;
    }
    if (Offset(t - 7200) != offset) {  // The offset changed within the last two hours.
      for (const std::int64_t shift : {1800, 3600, 7200}) {
        if (Offset(t - shift) == offset + shift) {
          return false;  // t - shift had the same local time
        }
      }
    }
    return LocalMatches(t + offset);
  }

 private:
  bool JumpFires(std::int64_t t, std::int64_t before, std::int64_t after) const {
    const date::sys_days day = date::floor<date::days>(date::sys_seconds(seconds(t + after)));
    const date::year_month_day ymd(day);
    const auto month = static_cast<unsigned>(ymd.month());
    if (!sets_[kMonth].test(month) || !sets_[kMonth].test(month + 1) ||
        !sets_[kDayOfMonth].test(static_cast<unsigned>(ymd.day())) ||
        !sets_[kDayOfWeek].test(date::weekday(day).c_encoding())) {
      return false;
    }
    for (std::int64_t local = t + before; local < t + after; ++local) {
      const std::int64_t second_of_day = ((local % 86400) + 86400) % 86400;
      if (sets_[kHour].test(static_cast<std::size_t>(second_of_day / 3600)) &&
          sets_[kMinute].test(static_cast<std::size_t>(second_of_day / 60 % 60)) &&
          sets_[kSecond].test(static_cast<std::size_t>(second_of_day % 60))) {
        return true;
      }
    }
    return false;
  }

  std::array<std::bitset<64>, 6> sets_;
  TimeZone zone_;
  bool day_of_month_restricted_ = false;
  bool day_of_week_restricted_ = false;
};

TimeZone Zone(const char* name) {
  Result<TimeZone> zone = TimeZone::Locate(name);
  EXPECT_THAT(zone, IsOk());
  return zone.ok() ? *zone : TimeZone::Utc();
}

WallTime At(const char* iso) { return *ParseIsoInstant(iso); }

bool NeverFires(const Generated& g) {
  if (g.sets[kDayOfMonth].count() == 31 || g.sets[kDayOfWeek].count() != 7) {
    return false;
  }
  constexpr std::array<int, 13> kLongest = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  for (int month = 1; month <= 12; ++month) {
    if (!g.sets[kMonth].test(static_cast<std::size_t>(month))) {
      continue;
    }
    for (int day = 1; day <= kLongest[static_cast<std::size_t>(month)]; ++day) {
      if (g.sets[kDayOfMonth].test(static_cast<std::size_t>(day))) {
        return false;
      }
    }
  }
  return true;
}

TEST(CronPropertyTest, RandomExpressionsParseUnlessTheyNeverFire) {
  Generator gen(20260307);
  int never = 0;
  for (int i = 0; i < 5000; ++i) {
    const Generated g = gen.Any();
    SCOPED_TRACE(g.text);
    Result<CronExpression> cron = CronExpression::Parse(g.text);
    if (NeverFires(g)) {
      ++never;
      ASSERT_THAT(cron, Not(IsOk()));
      EXPECT_EQ(cron.status().message(),
                "Something went wrong. No execution date was found in the next 8 years.");
    } else {
      ASSERT_THAT(cron, IsOk());
    }
  }
  EXPECT_GT(never, 0);
}

// For thousands of random expressions: successive fire times strictly increase, each is a fire
// time for Matches and for the oracle, and sampled seconds in between are not.
TEST(CronPropertyTest, FireTimesIncreaseAndMatch) {
  Generator gen(42);
  const std::array<TimeZone, 3> zones = {TimeZone::Utc(), Zone("America/New_York"),
                                         Zone("Europe/Berlin")};
  const std::array<WallTime, 4> starts = {At("2026-03-07T12:00:00Z"), At("2026-03-28T22:30:00Z"),
                                          At("2026-10-24T12:00:00.250Z"),
                                          At("2026-10-31T23:59:59Z")};
  int checked = 0;
  for (int i = 0; i < 3000; ++i) {
    const Generated g = gen.Any();
    if (NeverFires(g)) {
      continue;
    }
    SCOPED_TRACE(g.text);
    Result<CronExpression> cron = CronExpression::Parse(g.text);
    ASSERT_THAT(cron, IsOk());
    const TimeZone& zone = zones[static_cast<std::size_t>(i) % zones.size()];
    const Oracle oracle(g, zone);
    WallTime previous = starts[static_cast<std::size_t>(i / 3) % starts.size()];
    for (int n = 0; n < 8; ++n) {
      Result<WallTime> next = cron->NextAfter(previous, zone);
      ASSERT_THAT(next, IsOk());
      ASSERT_GT(*next, previous);
      ASSERT_EQ(*next, std::chrono::floor<seconds>(*next));
      ASSERT_TRUE(cron->Matches(*next, zone)) << FormatIsoInstantUtc(*next) << " " << zone.name();
      ASSERT_TRUE(oracle.Fires(Oracle::Seconds(*next)))
          << FormatIsoInstantUtc(*next) << " " << zone.name();
      // The second just before, and one in the middle, are not fire times.
      const std::int64_t from = Oracle::Seconds(previous);
      const std::int64_t to = Oracle::Seconds(*next);
      for (const std::int64_t between : {to - 1, from + (to - from) / 2}) {
        if (between > from && between < to) {
          ASSERT_FALSE(oracle.Fires(between)) << between << " " << zone.name();
        }
      }
      previous = *next;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20000);
}

// At the spring-forward jumps of 2026, for thousands of random expressions: the jump is a fire
// time exactly when the oracle says so, and NextAfter from the second before agrees.
TEST(CronPropertyTest, JumpInstantsFollowTheOracle) {
  Generator gen(99);
  const std::array<TimeZone, 2> zones = {Zone("America/New_York"), Zone("Europe/Berlin")};
  const std::array<std::int64_t, 2> jumps = {Oracle::Seconds(At("2026-03-08T07:00:00Z")),
                                             Oracle::Seconds(At("2026-03-29T01:00:00Z"))};
  int firing = 0;
  for (int i = 0; i < 4000; ++i) {
    const Generated g = gen.Any();
    if (NeverFires(g)) {
      continue;
    }
    SCOPED_TRACE(g.text);
    Result<CronExpression> cron = CronExpression::Parse(g.text);
    ASSERT_THAT(cron, IsOk());
    for (std::size_t z = 0; z < zones.size(); ++z) {
      const Oracle oracle(g, zones[z]);
      const WallTime jump{seconds(jumps[z])};
      const bool fires = oracle.Fires(jumps[z]);
      firing += fires ? 1 : 0;
      ASSERT_EQ(cron->Matches(jump, zones[z]), fires) << zones[z].name();
      Result<WallTime> next = cron->NextAfter(jump - seconds(1), zones[z]);
      ASSERT_THAT(next, IsOk());
      ASSERT_EQ(*next == jump, fires) << zones[z].name() << " " << FormatIsoInstantUtc(*next);
    }
  }
  EXPECT_GT(firing, 100);
}

// Walks windows second by second around the 2026 DST changes of New York and Berlin (and the
// same instants in UTC): the fire times NextAfter yields are exactly the seconds the oracle and
// Matches accept.
TEST(CronPropertyTest, NoFireTimeIsSkippedAroundDstChanges) {
  struct Window {
    const char* zone;
    const char* start;
    int length_seconds;
  };
  const Window windows[] = {
      {"America/New_York", "2026-03-08T04:00:00Z", 6 * 3600},
      {"America/New_York", "2026-11-01T03:00:00Z", 6 * 3600},
      {"Europe/Berlin", "2026-03-28T22:00:00Z", 6 * 3600},
      {"Europe/Berlin", "2026-10-24T22:00:00Z", 6 * 3600},
      {"UTC", "2026-03-08T04:00:00Z", 6 * 3600},
      {"UTC", "2026-10-24T22:00:00Z", 6 * 3600},
  };
  // One expression per window walks two whole days; the others walk the six hours around the
  // change.
  constexpr int kLongWindowSeconds = 2 * 86400;
  Generator gen(7);
  int fire_times = 0;
  for (const Window& window : windows) {
    const TimeZone zone = Zone(window.zone);
    for (int e = 0; e < 8; ++e) {
      const Generated g = gen.Frequent();
      if (NeverFires(g)) {
        continue;
      }
      SCOPED_TRACE(g.text + " in " + window.zone + " from " + window.start);
      Result<CronExpression> cron = CronExpression::Parse(g.text);
      ASSERT_THAT(cron, IsOk());
      const Oracle oracle(g, zone);
      const std::int64_t begin = Oracle::Seconds(At(window.start)) - (e == 0 ? 86400 : 0);
      const std::int64_t end = begin + (e == 0 ? kLongWindowSeconds : window.length_seconds);

      std::vector<std::int64_t> expected;
      for (std::int64_t t = begin; t < end; ++t) {
        const bool fires = oracle.Fires(t);
        if (fires) {
          expected.push_back(t);
        }
        ASSERT_EQ(cron->Matches(WallTime(seconds(t)), zone), fires)
            << FormatIsoInstantUtc(WallTime(seconds(t)));
      }
      std::vector<std::int64_t> actual;
      WallTime instant(seconds(begin - 1));
      for (;;) {
        Result<WallTime> next = cron->NextAfter(instant, zone);
        ASSERT_THAT(next, IsOk());
        if (Oracle::Seconds(*next) >= end) {
          break;
        }
        actual.push_back(Oracle::Seconds(*next));
        instant = *next;
      }
      ASSERT_EQ(actual, expected);
      fire_times += static_cast<int>(actual.size());
    }
  }
  EXPECT_GT(fire_times, 3000);
}

}  // namespace
}  // namespace stagehand
