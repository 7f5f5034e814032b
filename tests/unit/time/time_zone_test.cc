#include "stagehand/time/time_zone.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

#include "stagehand/testing/status_matchers.h"
#include "time/posix_tz.h"
#include "time/time_zone_internal.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;
using time_internal::LookupSpan;
using time_internal::ParsePosixRule;
using time_internal::PosixDate;
using time_internal::PosixRule;
using time_internal::ResolveProcessZone;

WallTime FromUnixSeconds(std::int64_t s) { return WallTime(seconds(s)); }

TimeZone Zone(const std::string& name) {
  Result<TimeZone> zone = TimeZone::Locate(name);
  EXPECT_THAT(zone, IsOk());
  return zone.ok() ? *zone : TimeZone::Utc();
}

TEST(TimeZoneTest, UtcHasNoOffset) {
  EXPECT_EQ(TimeZone::Utc().name(), "UTC");
  EXPECT_EQ(TimeZone::Utc().OffsetAt(FromUnixSeconds(1'780'000'000)), seconds(0));
  EXPECT_EQ(TimeZone::Utc(), TimeZone::Utc());
}

TEST(TimeZoneTest, LocatesIanaNames) {
  const TimeZone berlin = Zone("Europe/Berlin");
  EXPECT_EQ(berlin.name(), "Europe/Berlin");
  EXPECT_EQ(berlin, Zone("Europe/Berlin"));
  EXPECT_FALSE(berlin == TimeZone::Utc());
}

TEST(TimeZoneTest, LocateRejectsUnknownNames) {
  for (const char* name : {"Mars/Olympus_Mons", "", "europe/berlin", "Europe/Berlin "}) {
    SCOPED_TRACE(name);
    Result<TimeZone> zone = TimeZone::Locate(name);
    ASSERT_THAT(zone, StatusIs(StatusCode::kInvalidArgument, std::string("'") + name + "'"));
  }
}

TEST(TimeZoneTest, OffsetFollowsDaylightSaving) {
  const TimeZone new_york = Zone("America/New_York");
  const WallTime jump = *ParseIsoInstant("2026-03-08T07:00:00Z");
  EXPECT_EQ(new_york.OffsetAt(jump - seconds(1)), seconds(-5 * 3600));
  EXPECT_EQ(new_york.OffsetAt(jump), seconds(-4 * 3600));
  EXPECT_EQ(Zone("Asia/Kolkata").OffsetAt(jump), seconds(5 * 3600 + 1800));
}

TEST(TimeZoneTest, SpansCoverTheInstantAndEndAtTheNextChange) {
  const TimeZone new_york = Zone("America/New_York");
  const std::int64_t jump =
      ParseIsoInstant("2026-03-08T07:00:00Z")->time_since_epoch() / seconds(1);
  const time_internal::ZoneSpan winter = LookupSpan(new_york, jump - 1);
  EXPECT_EQ(winter.end, jump);
  EXPECT_EQ(winter.offset_seconds, -5 * 3600);
  const time_internal::ZoneSpan summer = LookupSpan(new_york, jump);
  EXPECT_EQ(summer.begin, jump);
  EXPECT_EQ(summer.offset_seconds, -4 * 3600);
  const time_internal::ZoneSpan utc = LookupSpan(TimeZone::Utc(), jump);
  EXPECT_LT(utc.begin, 0);
  EXPECT_GT(utc.end, jump + 1000LL * 365 * 86400);
}

std::int64_t UnixSeconds(const char* iso) {
  return ParseIsoInstant(iso)->time_since_epoch() / seconds(1);
}

// The tz files list transitions only up to 2037; later ones come from their POSIX TZ rule.
TEST(TimeZoneTest, DaylightSavingContinuesAfter2037) {
  const TimeZone new_york = Zone("America/New_York");
  EXPECT_EQ(new_york.OffsetAt(*ParseIsoInstant("2050-07-01T12:00:00Z")), seconds(-4 * 3600));
  EXPECT_EQ(new_york.OffsetAt(*ParseIsoInstant("2050-01-01T12:00:00Z")), seconds(-5 * 3600));
  const std::int64_t jump = UnixSeconds("2040-03-11T07:00:00Z");
  const time_internal::ZoneSpan summer = LookupSpan(new_york, jump + std::int64_t{86400} * 100);
  EXPECT_EQ(summer.begin, jump);
  EXPECT_EQ(summer.end, UnixSeconds("2040-11-04T06:00:00Z"));
  EXPECT_EQ(summer.offset_seconds, -4 * 3600);
  EXPECT_EQ(LookupSpan(new_york, jump - 1).end, jump);

  EXPECT_EQ(Zone("Australia/Sydney").OffsetAt(*ParseIsoInstant("2060-01-15T00:00:00Z")),
            seconds(11 * 3600));
  EXPECT_EQ(Zone("Europe/Dublin").OffsetAt(*ParseIsoInstant("2060-07-15T00:00:00Z")),
            seconds(3600));
  EXPECT_EQ(Zone("Europe/Dublin").OffsetAt(*ParseIsoInstant("2060-01-15T00:00:00Z")), seconds(0));
  EXPECT_EQ(FormatIsoInstant(*ParseIsoInstant("2045-10-29T00:59:59Z"), Zone("Europe/Berlin")),
            "2045-10-29T02:59:59.000+02:00");
  EXPECT_EQ(FormatIsoInstant(*ParseIsoInstant("2045-10-29T01:00:00Z"), Zone("Europe/Berlin")),
            "2045-10-29T02:00:00.000+01:00");
}

TEST(PosixRuleTest, ParsesTheFormsTheTzDatabaseUses) {
  const std::optional<PosixRule> new_york = ParsePosixRule("EST5EDT,M3.2.0,M11.1.0");
  ASSERT_TRUE(new_york.has_value());
  EXPECT_EQ(new_york->standard_offset, -5 * 3600);
  EXPECT_EQ(new_york->daylight_offset, -4 * 3600);
  EXPECT_EQ(new_york->start.kind, PosixDate::Kind::kMonthWeekDay);
  EXPECT_EQ(new_york->start.month, 3);
  EXPECT_EQ(new_york->start.week, 2);
  EXPECT_EQ(new_york->start.weekday, 0);
  EXPECT_EQ(new_york->start.time_seconds, 7200);

  const std::optional<PosixRule> lord_howe = ParsePosixRule("<+1030>-10:30<+11>-11,M10.1.0,M4.1.0");
  ASSERT_TRUE(lord_howe.has_value());
  EXPECT_EQ(lord_howe->standard_offset, 10 * 3600 + 1800);
  EXPECT_EQ(lord_howe->daylight_offset, 11 * 3600);

  const std::optional<PosixRule> chatham =
      ParsePosixRule("<+1245>-12:45<+1345>,M9.5.0/2:45,M4.1.0/3:45");
  ASSERT_TRUE(chatham.has_value());
  EXPECT_EQ(chatham->daylight_offset, 13 * 3600 + 45 * 60);
  EXPECT_EQ(chatham->end.time_seconds, 3 * 3600 + 45 * 60);

  const std::optional<PosixRule> nuuk = ParsePosixRule("<-02>2<-01>,M3.5.0/-1,M10.5.0/0");
  ASSERT_TRUE(nuuk.has_value());
  EXPECT_EQ(nuuk->start.time_seconds, -3600);

  const std::optional<PosixRule> gaza = ParsePosixRule("EET-2EEST,M3.4.4/50,M10.4.4/50");
  ASSERT_TRUE(gaza.has_value());
  EXPECT_EQ(gaza->start.time_seconds, 50 * 3600);

  const std::optional<PosixRule> julian = ParsePosixRule("XXX3YYY,J60/0,300/1:30:15");
  ASSERT_TRUE(julian.has_value());
  EXPECT_EQ(julian->start.kind, PosixDate::Kind::kJulianNoLeap);
  EXPECT_EQ(julian->start.day, 60);
  EXPECT_EQ(julian->end.kind, PosixDate::Kind::kZeroBased);
  EXPECT_EQ(julian->end.time_seconds, 5415);
}

TEST(PosixRuleTest, RejectsRulesWithoutDaylightTimeAndMalformedOnes) {
  for (const char* text :
       {"", "JST-9", "UTC0", "<+0545>-5:45", "EST5EDT", "EST5EDT,M3.2.0", "EST5EDT,M13.2.0,M11.1.0",
        "EST5EDT,M3.6.0,M11.1.0", "EST5EDT,M3.2.7,M11.1.0", "EST5EDT,J0,J365",
        "EST5EDT,M3.2.0,M11.1.0x", "<>5EDT,M3.2.0,M11.1.0", "5EDT,M3.2.0,M11.1.0"}) {
    SCOPED_TRACE(text);
    EXPECT_FALSE(ParsePosixRule(text).has_value());
  }
}

TEST(TimeZoneTest, ProcessZoneComesFromTz) {
  EXPECT_EQ(ResolveProcessZone("Europe/Berlin").name(), "Europe/Berlin");
  EXPECT_EQ(ResolveProcessZone(":America/New_York").name(), "America/New_York");
  EXPECT_EQ(ResolveProcessZone(":/usr/share/zoneinfo/Asia/Tokyo").name(), "Asia/Tokyo");
  EXPECT_EQ(ResolveProcessZone("UTC").name(), "UTC");
}

TEST(TimeZoneTest, UnknownOrEmptyTzMeansUtc) {
  EXPECT_EQ(ResolveProcessZone("Not/A_Zone"), TimeZone::Utc());
  EXPECT_EQ(ResolveProcessZone(""), TimeZone::Utc());
  EXPECT_EQ(ResolveProcessZone(":"), TimeZone::Utc());
}

TEST(TimeZoneTest, UnsetTzUsesTheSystemZone) {
  // Whatever /etc/localtime says on this machine, the result is a usable zone.
  const TimeZone zone = ResolveProcessZone(std::nullopt);
  EXPECT_FALSE(zone.name().empty());
  EXPECT_THAT(TimeZone::Locate(zone.name()), IsOk());
}

TEST(TimeZoneTest, ProcessDefaultIsStable) {
  EXPECT_EQ(TimeZone::ProcessDefault(), TimeZone::ProcessDefault());
}

TEST(FormatIsoInstantTest, UsesTheZonesOffsetAndMilliseconds) {
  const WallTime jump = *ParseIsoInstant("2026-03-08T07:00:00Z");
  EXPECT_EQ(FormatIsoInstant(jump, Zone("America/New_York")), "2026-03-08T03:00:00.000-04:00");
  EXPECT_EQ(FormatIsoInstant(jump - milliseconds(1), Zone("America/New_York")),
            "2026-03-08T01:59:59.999-05:00");
  EXPECT_EQ(FormatIsoInstant(jump, TimeZone::Utc()), "2026-03-08T07:00:00.000+00:00");
  EXPECT_EQ(FormatIsoInstant(jump, Zone("Asia/Kolkata")), "2026-03-08T12:30:00.000+05:30");
  EXPECT_EQ(FormatIsoInstant(jump, Zone("America/St_Johns")), "2026-03-08T04:30:00.000-02:30");
  EXPECT_EQ(FormatIsoInstant(jump - hours(24 * 60), Zone("America/St_Johns")),
            "2026-01-07T03:30:00.000-03:30");
}

TEST(FormatIsoInstantTest, TruncatesToMilliseconds) {
  const WallTime instant = FromUnixSeconds(0) + std::chrono::nanoseconds(1'999'999);
  EXPECT_EQ(FormatIsoInstantUtc(instant), "1970-01-01T00:00:00.001Z");
  EXPECT_EQ(FormatIsoInstantUtc(FromUnixSeconds(0) - std::chrono::nanoseconds(1)),
            "1969-12-31T23:59:59.999Z");
}

TEST(FormatIsoInstantTest, UtcFormUsesZ) {
  EXPECT_EQ(FormatIsoInstantUtc(*ParseIsoInstant("2026-03-08T03:00:00.250-04:00")),
            "2026-03-08T07:00:00.250Z");
  EXPECT_EQ(FormatIsoInstantUtc(*ParseIsoInstant("2000-02-29T23:59:59Z")),
            "2000-02-29T23:59:59.000Z");
}

TEST(ParseIsoInstantTest, AcceptsZuluOffsetsFractionsAndASpace) {
  const WallTime expected = FromUnixSeconds(1'772'884'800);  // 2026-03-07T12:00:00Z
  EXPECT_EQ(*ParseIsoInstant("2026-03-07T12:00:00Z"), expected);
  EXPECT_EQ(*ParseIsoInstant("2026-03-07 12:00:00Z"), expected);
  EXPECT_EQ(*ParseIsoInstant("2026-03-07T13:00:00+01:00"), expected);
  EXPECT_EQ(*ParseIsoInstant("2026-03-07T07:00:00-05:00"), expected);
  EXPECT_EQ(*ParseIsoInstant("2026-03-07T07:00:00-0500"), expected);
  EXPECT_EQ(*ParseIsoInstant("2026-03-07T12:00:00.250Z"), expected + milliseconds(250));
  EXPECT_EQ(*ParseIsoInstant("2026-03-07T12:00:00.000000001Z"),
            expected + std::chrono::nanoseconds(1));
  EXPECT_EQ(*ParseIsoInstant("2026-03-07T13:00:00.5+01:00"), expected + milliseconds(500));
}

TEST(ParseIsoInstantTest, RejectsMalformedText) {
  for (const char* text :
       {"", "yesterday", "2026-03-07", "2026-03-07T12:00:00", "2026-03-07T12:00Z",
        "2026-13-07T12:00:00Z", "2026-02-29T12:00:00Z", "2026-03-07T24:00:00Z",
        "2026-03-07T12:60:00Z", "2026-03-07T12:00:60Z", "2026-03-07T12:00:00.Z",
        "2026-03-07T12:00:00.0000000001Z", "2026-03-07T12:00:00+1:00", "2026-03-07T12:00:00+25:00",
        "2026-03-07T12:00:00Z ", " 2026-03-07T12:00:00Z", "2026-3-07T12:00:00Z",
        "2026-03-07X12:00:00Z", "9999-03-07T12:00:00Z"}) {
    SCOPED_TRACE(text);
    Result<WallTime> parsed = ParseIsoInstant(text);
    ASSERT_THAT(parsed, StatusIs(StatusCode::kInvalidArgument));
  }
}

TEST(ParseIsoInstantTest, RoundTripsWithTheFormatters) {
  const WallTime instant = FromUnixSeconds(1'790'000'000) + milliseconds(123);
  const TimeZone berlin = Zone("Europe/Berlin");
  EXPECT_EQ(*ParseIsoInstant(FormatIsoInstant(instant, berlin)), instant);
  EXPECT_EQ(*ParseIsoInstant(FormatIsoInstantUtc(instant)), instant);
}

}  // namespace
}  // namespace stagehand
