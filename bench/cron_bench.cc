// Cron parsing and next-fire-time evaluation. The target is at most 2 µs (median) for a parse plus
// one NextAfter of a typical expression, in UTC and in a zone with daylight saving time.
//
//   build/<dir>/bench/cron_bench --benchmark_repetitions=10 --benchmark_report_aggregates_only

#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <string>

#include "stagehand/time/cron.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {
namespace {

// Start instants spread over a year (including both DST changes in New York), at odd seconds and
// milliseconds so that no start is aligned with a fire time.
std::array<WallTime, 64> Starts() {
  std::array<WallTime, 64> starts{};
  const WallTime base = *ParseIsoInstant("2026-01-01T00:00:00Z");
  for (std::size_t i = 0; i < starts.size(); ++i) {
    starts[i] = base + std::chrono::seconds(i * 493'217 + 37) + std::chrono::milliseconds(i * 7);
  }
  return starts;
}

TimeZone ZoneNamed(const char* name) {
  Result<TimeZone> zone = TimeZone::Locate(name);
  if (!zone.ok()) {
    std::abort();
  }
  return *zone;
}

// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark naming.
void BM_CronParse(benchmark::State& state, const char* expression) {
  for (auto _ : state) {
    Result<CronExpression> cron = CronExpression::Parse(expression);
    benchmark::DoNotOptimize(cron);
  }
}

// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark naming.
void BM_CronParseAndNext(benchmark::State& state, const char* expression, const char* zone_name) {
  const TimeZone zone = ZoneNamed(zone_name);
  const std::array<WallTime, 64> starts = Starts();
  std::size_t i = 0;
  for (auto _ : state) {
    Result<CronExpression> cron = CronExpression::Parse(expression);
    Result<WallTime> next = cron->NextAfter(starts[i++ % starts.size()], zone);
    benchmark::DoNotOptimize(next);
  }
}

// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark naming.
void BM_CronNext(benchmark::State& state, const char* expression, const char* zone_name) {
  const TimeZone zone = ZoneNamed(zone_name);
  const std::array<WallTime, 64> starts = Starts();
  const CronExpression cron = *CronExpression::Parse(expression);
  std::size_t i = 0;
  for (auto _ : state) {
    Result<WallTime> next = cron.NextAfter(starts[i++ % starts.size()], zone);
    benchmark::DoNotOptimize(next);
  }
}

// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark naming.
void BM_CronMatches(benchmark::State& state, const char* expression, const char* zone_name) {
  const TimeZone zone = ZoneNamed(zone_name);
  const std::array<WallTime, 64> starts = Starts();
  const CronExpression cron = *CronExpression::Parse(expression);
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(cron.Matches(starts[i++ % starts.size()], zone));
  }
}

BENCHMARK_CAPTURE(BM_CronParse, every_5_minutes, "*/5 * * * *");
BENCHMARK_CAPTURE(BM_CronParse, weekdays_at_9, "0 9 * * MON-FRI");
BENCHMARK_CAPTURE(BM_CronParse, monthly, "0 0 1 * *");
BENCHMARK_CAPTURE(BM_CronParse, every_15_seconds, "*/15 * * * * *");

BENCHMARK_CAPTURE(BM_CronParseAndNext, every_5_minutes_utc, "*/5 * * * *", "UTC");
BENCHMARK_CAPTURE(BM_CronParseAndNext, weekdays_at_9_utc, "0 9 * * MON-FRI", "UTC");
BENCHMARK_CAPTURE(BM_CronParseAndNext, monthly_utc, "0 0 1 * *", "UTC");
BENCHMARK_CAPTURE(BM_CronParseAndNext, every_15_seconds_utc, "*/15 * * * * *", "UTC");
BENCHMARK_CAPTURE(BM_CronParseAndNext, every_5_minutes_new_york, "*/5 * * * *", "America/New_York");
BENCHMARK_CAPTURE(BM_CronParseAndNext, weekdays_at_9_new_york, "0 9 * * MON-FRI",
                  "America/New_York");
BENCHMARK_CAPTURE(BM_CronParseAndNext, monthly_new_york, "0 0 1 * *", "America/New_York");
BENCHMARK_CAPTURE(BM_CronParseAndNext, every_15_seconds_new_york, "*/15 * * * * *",
                  "America/New_York");

BENCHMARK_CAPTURE(BM_CronNext, weekdays_at_9_utc, "0 9 * * MON-FRI", "UTC");
BENCHMARK_CAPTURE(BM_CronNext, weekdays_at_9_new_york, "0 9 * * MON-FRI", "America/New_York");
BENCHMARK_CAPTURE(BM_CronMatches, weekdays_at_9_new_york, "0 9 * * MON-FRI", "America/New_York");

}  // namespace
}  // namespace stagehand

BENCHMARK_MAIN();
