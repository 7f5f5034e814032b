// libFuzzer target for cron expressions: Parse must never crash and must explain every
// rejection, and what it accepts must yield strictly increasing fire times that Matches accepts,
// in UTC and in zones with daylight saving time, from starts next to their DST changes.
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "stagehand/time/cron.h"
#include "stagehand/time/time_zone.h"

namespace {

using stagehand::CronExpression;
using stagehand::Result;
using stagehand::TimeZone;
using stagehand::WallTime;

void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "cron_fuzz: %s\n", what);
    std::abort();
  }
}

TimeZone ZoneNamed(const char* name) {
  Result<TimeZone> zone = TimeZone::Locate(name);
  Require(zone.ok(), "zone not found");
  return *zone;
}

WallTime Instant(const char* iso) {
  Result<WallTime> instant = stagehand::ParseIsoInstant(iso);
  Require(instant.ok(), "bad start instant");
  return *instant;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::array<TimeZone, 3> kZones = {TimeZone::Utc(), ZoneNamed("America/New_York"),
                                                 ZoneNamed("Europe/Berlin")};
  // Just before the 2026 DST changes of New York and Berlin, and an ordinary instant with
  // milliseconds. None lies inside a repeated hour.
  static const std::array<WallTime, 5> kStarts = {
      Instant("2026-03-08T06:30:00Z"), Instant("2026-11-01T04:59:59.500Z"),
      Instant("2026-03-29T00:30:00Z"), Instant("2026-10-25T00:00:00Z"),
      Instant("2026-06-15T12:34:56.789Z")};
  constexpr std::size_t kMaxInput = 256;
  if (size > kMaxInput) {
    return 0;
  }

  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<CronExpression> cron = CronExpression::Parse(text);
  if (!cron.ok()) {
    Require(!cron.status().message().empty(), "rejection without a message");
    return 0;
  }
  Require(cron->source() == text, "source() differs from the input");

  for (const TimeZone& zone : kZones) {
    for (const WallTime start : kStarts) {
      WallTime previous = start;
      for (int i = 0; i < 4; ++i) {
        Result<WallTime> next = cron->NextAfter(previous, zone);
        Require(next.ok(), "a valid expression found no fire time");
        Require(*next > previous, "fire times do not increase");
        Require(*next == std::chrono::floor<std::chrono::seconds>(*next),
                "fire time is not a whole second");
        Require(cron->Matches(*next, zone), "Matches rejects a fire time");
        previous = *next;
      }
    }
  }
  return 0;
}
