// Costs of the duration conversions on the registration path: formatting settings_json values
// and parsing config duration strings.
#include <benchmark/benchmark.h>

#include <string>
#include <string_view>

#include "stagehand/time/duration.h"

namespace stagehand {
namespace {

void BM_FormatIsoDurationSimple(benchmark::State& state) {
  HumanDuration d;
  d.minutes = 90;
  for (auto _ : state) {
    benchmark::DoNotOptimize(FormatIsoDuration(d));
  }
}
BENCHMARK(BM_FormatIsoDurationSimple);

void BM_FormatIsoDurationFull(benchmark::State& state) {
  HumanDuration d;
  d.years = 1;
  d.months = 2;
  d.weeks = 3;
  d.days = 4.5;
  d.hours = 5;
  d.minutes = 6;
  d.seconds = 7;
  d.milliseconds = 800.25;
  for (auto _ : state) {
    benchmark::DoNotOptimize(FormatIsoDuration(d));
  }
}
BENCHMARK(BM_FormatIsoDurationFull);

void BM_FormatIsoDurationMilliseconds(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(FormatIsoDuration(std::chrono::milliseconds(3600123)));
  }
}
BENCHMARK(BM_FormatIsoDurationMilliseconds);

void ParseString(benchmark::State& state, std::string_view text) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(ParseDurationString(text));
  }
}
BENCHMARK_CAPTURE(ParseString, ms_form, std::string_view("2 hours"));
BENCHMARK_CAPTURE(ParseString, ms_form_decomposed, std::string_view("400d"));
BENCHMARK_CAPTURE(ParseString, iso_form, std::string_view("P1Y2M3W4DT5H6M7.8S"));
BENCHMARK_CAPTURE(ParseString, invalid, std::string_view("1 fortnight"));

void BM_ParseIsoDuration(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(ParseIsoDuration("P2DT6H30M"));
  }
}
BENCHMARK(BM_ParseIsoDuration);

}  // namespace
}  // namespace stagehand

BENCHMARK_MAIN();
