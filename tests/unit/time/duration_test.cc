// Table tests for durations: the examples of the behaviour reference (§2.2 toISO, §2.3 luxon's
// ISO parser and casual length, §10.2 config duration strings), JavaScript number formatting,
// trimming, rounding and a seeded format/parse round trip.
#include "stagehand/time/duration.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::Not;

using std::chrono::milliseconds;

constexpr const char* kIsoFormatError =
    "Invalid ISO format, expected a value similar to 'P2DT6H' (2 days 6 hours) or 'PT1M' "
    "(1 minute)";
constexpr const char* kIsoNoValuesError = "Invalid ISO format, no values given";
constexpr const char* kPlainNumberError =
    "The value cannot be a plain number; try adding a unit like 'ms' or 'seconds'";
constexpr const char* kNotDurationError =
    "Not a valid duration string, try a number followed by a unit such as '1d' or '2 seconds'";
constexpr const char* kNegativeError = "Negative durations are not allowed";

// Builds a HumanDuration from (unit, value) pairs, e.g. Human({{"days", 2}, {"hours", 6}}).
HumanDuration Human(std::initializer_list<std::pair<std::string_view, double>> fields) {
  using Field = std::optional<double> HumanDuration::*;
  static constexpr std::pair<std::string_view, Field> kFields[] = {
      {"years", &HumanDuration::years},     {"months", &HumanDuration::months},
      {"weeks", &HumanDuration::weeks},     {"days", &HumanDuration::days},
      {"hours", &HumanDuration::hours},     {"minutes", &HumanDuration::minutes},
      {"seconds", &HumanDuration::seconds}, {"milliseconds", &HumanDuration::milliseconds}};
  HumanDuration d;
  for (const auto& [unit, value] : fields) {
    bool known = false;
    for (const auto& [name, field] : kFields) {
      if (name == unit) {
        d.*field = value;
        known = true;
      }
    }
    EXPECT_TRUE(known) << "unknown unit " << unit;
  }
  return d;
}

std::string Describe(const HumanDuration& d) {
  std::string out = "{";
  auto field = [&out](const char* name, const std::optional<double>& v) {
    if (!v) {
      return;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s:%.17g", out.size() > 1 ? "," : "", name, *v);
    out += buf;
  };
  field("years", d.years);
  field("months", d.months);
  field("weeks", d.weeks);
  field("days", d.days);
  field("hours", d.hours);
  field("minutes", d.minutes);
  field("seconds", d.seconds);
  field("milliseconds", d.milliseconds);
  return out + "}";
}

void ExpectParsesTo(const Result<HumanDuration>& got, const HumanDuration& want,
                    std::string_view input) {
  ASSERT_THAT(got, IsOk()) << "'" << input;
  EXPECT_TRUE(*got == want) << "'" << input << "': got " << Describe(*got) << ", want "
                            << Describe(want);
}

void ExpectInvalid(const Result<HumanDuration>& got, std::string_view message,
                   std::string_view input) {
  ASSERT_THAT(got, Not(IsOk())) << "'" << input << "' parsed as " << Describe(*got);
  EXPECT_THAT(got, StatusIs(StatusCode::kInvalidArgument)) << input;
  EXPECT_EQ(got.status().message(), message) << input;
}

// §2.2: luxon's Duration#toISO, as Backstage stores it in settings_json.
TEST(FormatIsoDurationTest, MatchesLuxonToIso) {
  const std::pair<HumanDuration, std::string> cases[] = {
      {Human({{"minutes", 90}}), "PT90M"},
      {Human({{"milliseconds", 5000}}), "PT5S"},
      {Human({{"milliseconds", 5500}}), "PT5.5S"},
      {Human({{"milliseconds", 1}}), "PT0.001S"},
      {Human({{"milliseconds", 100}}), "PT0.1S"},
      {Human({{"hours", 1}, {"minutes", 30}}), "PT1H30M"},
      {Human({{"days", 1}}), "P1D"},
      {Human({{"weeks", 1}, {"days", 2}}), "P1W2D"},
      {Human({{"days", 2}, {"hours", 6}}), "P2DT6H"},
      {Human({{"hours", 0.5}}), "PT0.5H"},
      {Human({{"days", 1.5}}), "P1.5D"},
      {Human({}), "PT0S"},
      {Human({{"seconds", 0}}), "PT0S"},
      {Human({{"seconds", 0.0001}}), "PT0S"},
      {Human({{"minutes", -5}}), "PT-5M"},
      {Human({{"years", 1},
              {"months", 2},
              {"weeks", 3},
              {"days", 4},
              {"hours", 5},
              {"minutes", 6},
              {"seconds", 7},
              {"milliseconds", 800}}),
       "P1Y2M3W4DT5H6M7.8S"},
      {Human({{"years", 0}, {"days", 0}, {"minutes", 0}}), "PT0S"},
      {Human({{"seconds", 25}, {"milliseconds", 8.34}}), "PT25.008S"},
      {Human({{"seconds", 2.37}, {"milliseconds", 8.62}}), "PT2.379S"},
      {Human({{"milliseconds", 1.6}}), "PT0.002S"},
      {Human({{"milliseconds", 0.16}}), "PT0S"},
      {Human({{"hours", 1}, {"milliseconds", 0.42}}), "PT1H0S"},
      {Human({{"seconds", 3}, {"milliseconds", -500}}), "PT2.5S"},
      {Human({{"seconds", -3}, {"milliseconds", -500}}), "PT-3.5S"},
      {Human({{"seconds", 60}, {"milliseconds", 3719}}), "PT63.719S"},
  };
  for (const auto& [duration, iso] : cases) {
    EXPECT_EQ(FormatIsoDuration(duration), iso) << Describe(duration);
  }
}

TEST(FormatIsoDurationTest, RoundsSecondsLikeJavaScriptMathRound) {
  // Exact halves round up; 0.5005 * 1000 is 500.49999999999994 in binary, so it rounds down.
  EXPECT_EQ(FormatIsoDuration(Human({{"seconds", 0.0015}})), "PT0.002S");
  EXPECT_EQ(FormatIsoDuration(Human({{"seconds", 1.0005}})), "PT1.001S");
  EXPECT_EQ(FormatIsoDuration(Human({{"seconds", 0.5005}})), "PT0.5S");
  // Ties go toward +infinity, so negative halves round up (toward zero).
  EXPECT_EQ(FormatIsoDuration(Human({{"milliseconds", -2.5}})), "PT-0.002S");
  EXPECT_EQ(FormatIsoDuration(Human({{"milliseconds", -0.5}})), "PT0S");
  EXPECT_EQ(FormatIsoDuration(Human({{"milliseconds", -0.6}})), "PT-0.001S");
  EXPECT_EQ(FormatIsoDuration(Human({{"seconds", 0.49999999999999994}})), "PT0.5S");
}

TEST(FormatIsoDurationTest, PrintsNumbersLikeJavaScript) {
  const std::pair<HumanDuration, std::string> cases[] = {
      {Human({{"years", 1e21}}), "P1e+21Y"},
      {Human({{"years", 1.5e21}}), "P1.5e+21Y"},
      {Human({{"years", 123456789012345680000.0}}), "P123456789012345680000Y"},
      {Human({{"months", 1e-7}}), "P1e-7M"},
      {Human({{"weeks", 1.5e-7}}), "P1.5e-7W"},
      {Human({{"days", 1e-6}}), "P0.000001D"},
      {Human({{"days", 1.25e-6}}), "P0.00000125D"},
      {Human({{"hours", 0.1 + 0.2}}), "PT0.30000000000000004H"},
      {Human({{"minutes", -2.5e-8}}), "PT-2.5e-8M"},
      {Human({{"hours", 1e300}}), "PT1e+300H"},
      {Human({{"hours", 5e-324}}), "PT5e-324H"},
      {Human({{"hours", -0.0}}), "PT0S"},
      {Human({{"hours", std::numeric_limits<double>::infinity()}}), "PTInfinityH"},
      {Human({{"hours", -std::numeric_limits<double>::infinity()}}), "PT-InfinityH"},
      // 1e20 * 1000 / 1000 is not 1e20 again in binary.
      {Human({{"seconds", 1e20}}), "PT99999999999999980000S"},
      {Human({{"minutes", 1e20}}), "PT100000000000000000000M"},
      // luxon's getters read `value || 0`: NaN counts as absent.
      {Human({{"hours", std::nan("")}, {"minutes", 1}}), "PT1M"},
  };
  for (const auto& [duration, iso] : cases) {
    EXPECT_EQ(FormatIsoDuration(duration), iso) << Describe(duration);
  }
}

// §2.2: Duration.fromMillis(ms).toISO() never carries into larger units.
TEST(FormatIsoDurationTest, FromMillisecondsUsesSecondsOnly) {
  EXPECT_EQ(FormatIsoDuration(milliseconds(3600000)), "PT3600S");
  EXPECT_EQ(FormatIsoDuration(milliseconds(5000)), "PT5S");
  EXPECT_EQ(FormatIsoDuration(milliseconds(100)), "PT0.1S");
  EXPECT_EQ(FormatIsoDuration(milliseconds(1)), "PT0.001S");
  EXPECT_EQ(FormatIsoDuration(milliseconds(0)), "PT0S");
  EXPECT_EQ(FormatIsoDuration(milliseconds(-5500)), "PT-5.5S");
  EXPECT_EQ(FormatIsoDuration(milliseconds(86400000LL * 400)), "PT34560000S");
}

// §2.3: luxon's Duration.fromISO grammar.
TEST(ParseIsoDurationTest, AcceptsLuxonGrammar) {
  const std::pair<std::string_view, HumanDuration> cases[] = {
      {"P", Human({})},
      {"PT", Human({})},
      {"-P", Human({})},
      {"P1DT", Human({{"days", 1}})},
      {"PT0S", Human({{"seconds", 0}})},
      {"PT0.5S", Human({{"seconds", 0}, {"milliseconds", 500}})},
      {"PT1,5S", Human({{"seconds", 1}, {"milliseconds", 500}})},
      {"PT3.1S", Human({{"seconds", 3}, {"milliseconds", 100}})},
      {"P1Y2M3W4DT5H6M7.8S", Human({{"years", 1},
                                    {"months", 2},
                                    {"weeks", 3},
                                    {"days", 4},
                                    {"hours", 5},
                                    {"minutes", 6},
                                    {"seconds", 7},
                                    {"milliseconds", 800}})},
      {"-PT5M", Human({{"minutes", -5}})},
      {"PT-5M", Human({{"minutes", -5}})},
      {"-PT-5M", Human({{"minutes", 5}})},
      {"P1.5D", Human({{"days", 1.5}})},
      {"P1M", Human({{"months", 1}})},
      {"PT1M", Human({{"minutes", 1}})},
      {"P2DT0H30M", Human({{"days", 2}, {"hours", 0}, {"minutes", 30}})},
      {"PT0.5H", Human({{"hours", 0.5}})},
      {"PT1.23456S", Human({{"seconds", 1}, {"milliseconds", 234}})},
      {"PT-3.5S", Human({{"seconds", -3}, {"milliseconds", -500}})},
      {"PT-0.5S", Human({{"seconds", 0}, {"milliseconds", -500}})},
      {"-PT3.5S", Human({{"seconds", -3}, {"milliseconds", -500}})},
      {"-P0D", Human({{"days", 0}})},
      // The seconds fraction may carry its own sign; parseFloat("0.-5") reads 0.
      {"PT1.-5S", Human({{"seconds", 1}, {"milliseconds", 0}})},
      {"P99999999999999999999Y", Human({{"years", 1e20}})},
      {"PT1.99999999999999999999S", Human({{"seconds", 1}, {"milliseconds", 1000}})},
  };
  for (const auto& [text, want] : cases) {
    ExpectParsesTo(ParseIsoDuration(text), want, text);
    EXPECT_TRUE(IsValidIsoDuration(text)) << text;
  }
}

TEST(ParseIsoDurationTest, RejectsEverythingElse) {
  const std::string_view cases[] = {"p1d",
                                    "PT5s",
                                    "P 1D",
                                    "1d",
                                    "",
                                    "manual",
                                    "P1L",
                                    "P 1Y",
                                    "T1H",
                                    "P1H",
                                    "PT1D",
                                    "P1DT1D",
                                    "P1D1Y",
                                    "PT1S1M",
                                    "P1M1M",
                                    "P1Y1Y",
                                    "P1.5",
                                    "P1",
                                    "P1.D",
                                    "P.5D",
                                    "P1,5D",
                                    "PT1,5M",
                                    "P1.-5D",
                                    "PT1.5.5S",
                                    "P--1D",
                                    "--P1D",
                                    "+P1D",
                                    "P+1D",
                                    "PT1S ",
                                    " PT1S",
                                    "PT1S\n",
                                    "P1DTT",
                                    "P1DT1",
                                    "PT1.S",
                                    "P123456789012345678901Y",
                                    "P1.123456789012345678901Y",
                                    "PT1.123456789012345678901S",
                                    "PT-S",
                                    "P-D",
                                    "PTS"};
  for (std::string_view text : cases) {
    ExpectInvalid(ParseIsoDuration(text), kIsoFormatError, text);
    EXPECT_FALSE(IsValidIsoDuration(text)) << text;
  }
}

// §2.3: the casual conversion.
TEST(ToMillisecondsCasualTest, UsesCasualUnits) {
  EXPECT_EQ(ToMillisecondsCasual(Human({{"years", 1}})), 31536000000.0);
  EXPECT_EQ(ToMillisecondsCasual(Human({{"months", 1}})), 2592000000.0);
  EXPECT_EQ(ToMillisecondsCasual(Human({{"weeks", 1}})), 604800000.0);
  EXPECT_EQ(ToMillisecondsCasual(Human({{"days", 1}})), 86400000.0);
  EXPECT_EQ(ToMillisecondsCasual(Human({{"hours", 1}})), 3600000.0);
  EXPECT_EQ(ToMillisecondsCasual(Human({{"minutes", 1}})), 60000.0);
  EXPECT_EQ(ToMillisecondsCasual(Human({{"seconds", 1}})), 1000.0);
  EXPECT_EQ(ToMillisecondsCasual(Human({{"milliseconds", 1}})), 1.0);
  EXPECT_EQ(ToMillisecondsCasual(Human({})), 0.0);
  EXPECT_EQ(ToMillisecondsCasual(Human({{"minutes", -5}})), -300000.0);
  EXPECT_EQ(ToMillisecondsCasual(Human({{"days", 1.5}})), 129600000.0);
  EXPECT_EQ(ToMillisecondsCasual(Human({{"milliseconds", 1.6}})), 1.6);
  EXPECT_EQ(ToMillisecondsCasual(*ParseIsoDuration("P1Y2M3W4DT5H6M7.8S")), 38898367800.0);
}

TEST(ToMillisecondsCasualTest, AddsLargestUnitsFirstLikeLuxonAs) {
  // Summing smallest-first (luxon's toMillis) would give 2432152310.7200003.
  EXPECT_EQ(ToMillisecondsCasual(Human({{"months", 0.21},
                                        {"weeks", 3.11},
                                        {"minutes", 115},
                                        {"seconds", 4.31},
                                        {"milliseconds", 0.72}})),
            2432152310.72);
  EXPECT_EQ(ToMillisecondsCasual(Human({{"days", 8.37}, {"hours", 1.41}})), 728243999.9999999);
}

TEST(ToMillisecondsCasualTest, HugeDurationsStayHuge) {
  EXPECT_EQ(ToMillisecondsCasual(Human({{"days", 1e300}})), 1e300 * 86400000.0);
  EXPECT_TRUE(std::isinf(ToMillisecondsCasual(Human({{"years", 1e300}}))));
}

TEST(ToChronoMillisecondsTest, RoundsHalfAwayFromZeroAndSaturates) {
  EXPECT_EQ(ToChronoMilliseconds(Human({{"milliseconds", 1.5}})), milliseconds(2));
  EXPECT_EQ(ToChronoMilliseconds(Human({{"milliseconds", 1.4}})), milliseconds(1));
  EXPECT_EQ(ToChronoMilliseconds(Human({{"milliseconds", -1.5}})), milliseconds(-2));
  EXPECT_EQ(ToChronoMilliseconds(Human({{"milliseconds", -1.4}})), milliseconds(-1));
  EXPECT_EQ(ToChronoMilliseconds(Human({{"minutes", 90}})), milliseconds(5400000));
  EXPECT_EQ(ToChronoMilliseconds(Human({{"years", 1}})), milliseconds(31536000000));
  EXPECT_EQ(ToChronoMilliseconds(Human({{"years", 1e300}})), milliseconds::max());
  EXPECT_EQ(ToChronoMilliseconds(Human({{"years", -1e300}})), milliseconds::min());
  EXPECT_EQ(ToChronoMilliseconds(Human({{"milliseconds", 9.3e18}})), milliseconds::max());
  EXPECT_EQ(ToChronoMilliseconds(Human({{"milliseconds", 9.2e18}})),
            milliseconds(9200000000000000000));
  EXPECT_EQ(ToChronoMilliseconds(Human({{"hours", std::nan("")}})), milliseconds(0));
}

// §10.2: the ISO form of config duration strings.
TEST(ParseDurationStringTest, IsoFormKeepsNonZeroComponents) {
  const std::pair<std::string_view, HumanDuration> cases[] = {
      {"P2DT6H", Human({{"days", 2}, {"hours", 6}})},
      {"PT0.5S", Human({{"milliseconds", 500}})},
      {"PT3.1S", Human({{"seconds", 3}, {"milliseconds", 100}})},
      {"P1Y2M3W4DT5H6M7.8S", Human({{"years", 1},
                                    {"months", 2},
                                    {"weeks", 3},
                                    {"days", 4},
                                    {"hours", 5},
                                    {"minutes", 6},
                                    {"seconds", 7},
                                    {"milliseconds", 800}})},
      {"P2DT0H30M", Human({{"days", 2}, {"minutes", 30}})},
      {"PT0S", Human({{"milliseconds", 0}})},
      {"P0D", Human({{"milliseconds", 0}})},
      {"PT0H0M0S", Human({{"milliseconds", 0}})},
      {"PT0.0001S", Human({{"milliseconds", 0}})},
      {"  PT1M\t", Human({{"minutes", 1}})},
      {"PT1,5S", Human({{"seconds", 1}, {"milliseconds", 500}})},
      {"PT-5M", Human({{"minutes", -5}})},
  };
  for (const auto& [text, want] : cases) {
    ExpectParsesTo(ParseDurationString(text), want, text);
  }
}

TEST(ParseDurationStringTest, IsoFormErrors) {
  ExpectInvalid(ParseDurationString("P"), kIsoNoValuesError, "P");
  ExpectInvalid(ParseDurationString("PT"), kIsoNoValuesError, "PT");
  ExpectInvalid(ParseDurationString(" P "), kIsoNoValuesError, " P ");
  ExpectInvalid(ParseDurationString("P 1Y"), kIsoFormatError, "P 1Y");
  ExpectInvalid(ParseDurationString("P1L"), kIsoFormatError, "P1L");
  ExpectInvalid(ParseDurationString("PT5s"), kIsoFormatError, "PT5s");
  // Only a leading uppercase P selects the ISO form.
  ExpectInvalid(ParseDurationString("p1d"), kNotDurationError, "p1d");
  ExpectInvalid(ParseDurationString("-PT5M"), kNotDurationError, "-PT5M");
}

// §10.2: the `ms` form.
TEST(ParseDurationStringTest, MsFormDecomposesGreedily) {
  const std::pair<std::string_view, HumanDuration> cases[] = {
      {"10m", Human({{"minutes", 10}})},
      {"2 hours", Human({{"hours", 2}})},
      {"1.5d", Human({{"days", 1}, {"hours", 12}})},
      {"25 ms", Human({{"milliseconds", 25}})},
      {"1850ms", Human({{"seconds", 1}, {"milliseconds", 850}})},
      {"3.5 seconds", Human({{"seconds", 3}, {"milliseconds", 500}})},
      {"1y", Human({{"years", 1}})},
      {"2 years", Human({{"years", 2}})},
      {"4w", Human({{"weeks", 4}})},
      {"5h", Human({{"hours", 5}})},
      {"6 hrs", Human({{"hours", 6}})},
      {"7min", Human({{"minutes", 7}})},
      {"9 minutes", Human({{"minutes", 9}})},
      {"400d", Human({{"years", 1}, {"weeks", 4}, {"days", 6}, {"hours", 18}})},
      {".5h", Human({{"minutes", 30}})},
      {"  5 minutes  ", Human({{"minutes", 5}})},
      {"5   MINUTES", Human({{"minutes", 5}})},
      {"1Sec", Human({{"seconds", 1}})},
      {"2 MsEcS", Human({{"milliseconds", 2}})},
      {"1 millisecond", Human({{"milliseconds", 1}})},
      {"3 yrs", Human({{"years", 3}})},
      {"0.5ms", Human({{"milliseconds", 0.5}})},
      {"1.1s", Human({{"seconds", 1}, {"milliseconds", 100}})},
      {"8 days", Human({{"weeks", 1}, {"days", 1}})},
      {"0ms", Human({{"milliseconds", 0}})},
      {"0 s", Human({{"milliseconds", 0}})},
      {"-0s", Human({{"milliseconds", 0}})},
      {".0d", Human({{"milliseconds", 0}})},
      {"\xC2\xA0"
       "10m\xE2\x80\xA8",
       Human({{"minutes", 10}})},
      {"\xEF\xBB\xBF"
       "1d\xE3\x80\x80",
       Human({{"days", 1}})},
  };
  for (const auto& [text, want] : cases) {
    ExpectParsesTo(ParseDurationString(text), want, text);
  }
}

TEST(ParseDurationStringTest, MsFormErrors) {
  const std::pair<std::string_view, const char*> cases[] = {
      {"10", kPlainNumberError},
      {"0", kPlainNumberError},
      {" 10 ", kPlainNumberError},
      {"123456789012345678901234567890", kPlainNumberError},
      {"1m 3s", kNotDurationError},
      {"abc", kNotDurationError},
      {"1 fortnight", kNotDurationError},
      {"1.", kNotDurationError},
      {".", kNotDurationError},
      {"-", kNotDurationError},
      {"1e3ms", kNotDurationError},
      {"+1s", kNotDurationError},
      {"1\ts", kNotDurationError},
      {"1.5.5s", kNotDurationError},
      {"--1s", kNotDurationError},
      {"5 mins ago", kNotDurationError},
      {"-3s", kNegativeError},
      {"-.5h", kNegativeError},
      {"-1", kNegativeError},
      {"-10", kNegativeError},
      {"", "val is not a non-empty string or a valid number. val=\"\""},
      {" \t\n", "val is not a non-empty string or a valid number. val=\"\""},
  };
  for (const auto& [text, message] : cases) {
    ExpectInvalid(ParseDurationString(text), message, text);
  }
}

TEST(ParseDurationStringTest, MsFormIsLimitedToOneHundredCharacters) {
  std::string ok = "1" + std::string(96, '0') + "ms";  // 99 characters.
  ASSERT_THAT(ParseDurationString(ok), IsOk());
  std::string too_long = "1" + std::string(98, '0') + "ms";  // 101 characters.
  ExpectInvalid(ParseDurationString(too_long), kNotDurationError, too_long);
  // Trimming happens first.
  ASSERT_THAT(ParseDurationString(" " + ok + " "), IsOk());
}

TEST(TrimJsWhitespaceTest, TrimsWhatJavaScriptTrims) {
  EXPECT_EQ(TrimJsWhitespace(" \t\n\v\f\r5m \r\n"), "5m");
  EXPECT_EQ(TrimJsWhitespace("\xC2\xA0\xE1\x9A\x80\xE2\x80\x80\xE2\x80\x8A"
                             "a"
                             "\xE2\x80\xA8\xE2\x80\xA9\xE2\x80\xAF\xE2\x81\x9F\xE3\x80\x80"
                             "\xEF\xBB\xBF"),
            "a");
  EXPECT_EQ(TrimJsWhitespace("a b"), "a b");
  EXPECT_EQ(TrimJsWhitespace("   "), "");
  EXPECT_EQ(TrimJsWhitespace(""), "");
  // U+0085 (NEL) and U+200B (zero width space) are not whitespace in JavaScript.
  EXPECT_EQ(TrimJsWhitespace("\xC2\x85"
                             "a"),
            "\xC2\x85"
            "a");
  EXPECT_EQ(TrimJsWhitespace("a\xE2\x80\x8B"), "a\xE2\x80\x8B");
  // A truncated sequence is left alone.
  EXPECT_EQ(TrimJsWhitespace("a\xE2\x80"), "a\xE2\x80");
}

// A duration printed by FormatIsoDuration reads back to the same text, for values that luxon's
// grammar can express (at most 20 digits, no exponent).
TEST(DurationRoundTripTest, FormatParseFormatIsStable) {
  std::mt19937_64 rng(20240601);
  std::uniform_int_distribution<int> coin(0, 2);
  std::uniform_int_distribution<int> kind(0, 3);
  std::uniform_int_distribution<long long> whole(-100000, 100000);
  std::uniform_int_distribution<long long> cents(-1000000, 1000000);
  std::uniform_real_distribution<double> any(-1e6, 1e6);
  auto value = [&]() -> double {
    switch (kind(rng)) {
      case 0:
        return static_cast<double>(whole(rng));
      case 1:
        return static_cast<double>(cents(rng)) / 100;
      case 2:
        return any(rng);
      default:
        return static_cast<double>(std::abs(whole(rng)));
    }
  };
  for (int i = 0; i < 5000; ++i) {
    HumanDuration d;
    for (std::optional<double>* field : {&d.years, &d.months, &d.weeks, &d.days, &d.hours,
                                         &d.minutes, &d.seconds, &d.milliseconds}) {
      if (coin(rng) == 0) {
        *field = value();
      }
    }
    const std::string first = FormatIsoDuration(d);
    Result<HumanDuration> parsed = ParseIsoDuration(first);
    ASSERT_THAT(parsed, IsOk()) << Describe(d) << " -> " << first;
    EXPECT_EQ(FormatIsoDuration(*parsed), first) << Describe(d);

    Result<HumanDuration> config = ParseDurationString(first);
    ASSERT_THAT(config, IsOk()) << first;
    EXPECT_EQ(FormatIsoDuration(*config), first) << Describe(d);
  }
}

TEST(DurationRoundTripTest, ConfigStringsSurviveFormatting) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"10m", "PT10M"},     {"1850ms", "PT1.85S"},     {"400d", "P1Y4W6DT18H"},
      {"1.5d", "P1DT12H"},  {"0ms", "PT0S"},           {"P2DT0H30M", "P2DT30M"},
      {"PT0.5S", "PT0.5S"}, {"3.5 seconds", "PT3.5S"},
  };
  for (const auto& [text, iso] : cases) {
    Result<HumanDuration> parsed = ParseDurationString(text);
    ASSERT_THAT(parsed, IsOk()) << text;
    EXPECT_EQ(FormatIsoDuration(*parsed), iso) << text;
  }
}

TEST(FormatShortDurationTest, UsesTheLargestExactUnits) {
  using std::chrono::milliseconds;
  EXPECT_EQ(FormatShortDuration(milliseconds(0)), "0ms");
  EXPECT_EQ(FormatShortDuration(milliseconds(250)), "250ms");
  EXPECT_EQ(FormatShortDuration(milliseconds(2000)), "2s");
  EXPECT_EQ(FormatShortDuration(milliseconds(1500)), "1.5s");
  EXPECT_EQ(FormatShortDuration(milliseconds(1005)), "1.005s");
  EXPECT_EQ(FormatShortDuration(milliseconds(90'000)), "1m30s");
  EXPECT_EQ(FormatShortDuration(milliseconds(120'000)), "2m");
  EXPECT_EQ(FormatShortDuration(milliseconds(3'600'000)), "1h");
  EXPECT_EQ(FormatShortDuration(milliseconds(3'605'000)), "1h0m5s");
  EXPECT_EQ(FormatShortDuration(milliseconds(-2000)), "-2s");
}

}  // namespace
}  // namespace stagehand
