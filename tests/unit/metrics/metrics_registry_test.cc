#include "stagehand/metrics/metrics_registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace stagehand {
namespace {

TEST(MetricsRegistryTest, EmptyRegistryRendersNothing) {
  MetricsRegistry registry;
  EXPECT_EQ(registry.RenderPrometheusText(), "");
}

TEST(MetricsRegistryTest, FamilyWithoutSeriesHasHelpAndType) {
  MetricsRegistry registry;
  registry.Counter("jobs_total", "Jobs done", {"kind"});
  EXPECT_EQ(registry.RenderPrometheusText(),
            "# HELP jobs_total Jobs done\n"
            "# TYPE jobs_total counter\n");
}

TEST(MetricsRegistryTest, CounterSeriesInFirstRecordedOrder) {
  MetricsRegistry registry;
  CounterFamily& counter = registry.Counter("jobs_total", "Jobs done", {"kind", "result"});
  counter.Add({"b", "ok"});
  counter.Add({"a", "ok"}, 2);
  counter.Add({"b", "ok"}, 0.5);
  EXPECT_EQ(registry.RenderPrometheusText(),
            "# HELP jobs_total Jobs done\n"
            "# TYPE jobs_total counter\n"
            "jobs_total{kind=\"b\",result=\"ok\"} 1.5\n"
            "jobs_total{kind=\"a\",result=\"ok\"} 2\n");
  EXPECT_EQ(counter.Value({"b", "ok"}), 1.5);
  EXPECT_EQ(counter.Value({"a", "ok"}), 2);
  EXPECT_EQ(counter.Value({"c", "ok"}), 0);
}

TEST(MetricsRegistryTest, SeriesWithoutLabelsHasNoBraces) {
  MetricsRegistry registry;
  registry.Counter("up_total", "Ups", {}).Add({});
  registry.Gauge("temperature", "Degrees", {}).Set({}, -3.25);
  EXPECT_EQ(registry.RenderPrometheusText(),
            "# HELP up_total Ups\n"
            "# TYPE up_total counter\n"
            "up_total 1\n"
            "# HELP temperature Degrees\n"
            "# TYPE temperature gauge\n"
            "temperature -3.25\n");
}

TEST(MetricsRegistryTest, GaugeSetAndAdd) {
  MetricsRegistry registry;
  GaugeFamily& gauge = registry.Gauge("queue_depth", "Items waiting", {"queue"});
  gauge.Set({"q"}, 10);
  gauge.Add({"q"}, -4);
  gauge.Add({"r"}, 1767225600.5);
  EXPECT_EQ(gauge.Value({"q"}), 6);
  EXPECT_EQ(gauge.Value({"missing"}), 0);
  EXPECT_EQ(registry.RenderPrometheusText(),
            "# HELP queue_depth Items waiting\n"
            "# TYPE queue_depth gauge\n"
            "queue_depth{queue=\"q\"} 6\n"
            "queue_depth{queue=\"r\"} 1767225600.5\n");
}

TEST(MetricsRegistryTest, NumbersInShortestRoundTripForm) {
  MetricsRegistry registry;
  GaugeFamily& gauge = registry.Gauge("g", "", {"v"});
  gauge.Set({"a"}, 0.1);
  gauge.Set({"b"}, 1e-5);
  gauge.Set({"c"}, 1e20);
  gauge.Set({"d"}, std::numeric_limits<double>::infinity());
  gauge.Set({"e"}, -std::numeric_limits<double>::infinity());
  gauge.Set({"f"}, std::nan(""));
  gauge.Set({"g"}, 0);
  EXPECT_EQ(registry.RenderPrometheusText(),
            "# HELP g \n"
            "# TYPE g gauge\n"
            "g{v=\"a\"} 0.1\n"
            "g{v=\"b\"} 1e-05\n"
            "g{v=\"c\"} 1e+20\n"
            "g{v=\"d\"} +Inf\n"
            "g{v=\"e\"} -Inf\n"
            "g{v=\"f\"} NaN\n"
            "g{v=\"g\"} 0\n");
}

TEST(MetricsRegistryTest, EscapesLabelValuesAndHelp) {
  MetricsRegistry registry;
  CounterFamily& counter =
      registry.Counter("escaped_total", "Back\\slash and\nnewline \"quoted\"", {"path"});
  counter.Add({"C:\\dir\n\"x\""});
  EXPECT_EQ(registry.RenderPrometheusText(),
            "# HELP escaped_total Back\\\\slash and\\nnewline \"quoted\"\n"
            "# TYPE escaped_total counter\n"
            "escaped_total{path=\"C:\\\\dir\\n\\\"x\\\"\"} 1\n");
}

TEST(MetricsRegistryTest, HistogramBucketsAreCumulative) {
  MetricsRegistry registry;
  HistogramFamily& histogram =
      registry.Histogram("latency_seconds", "Latency", {"route"}, {0.1, 0.5, 1});
  histogram.Observe({"/a"}, 0.05);
  histogram.Observe({"/a"}, 0.1);  // a bound is inclusive
  histogram.Observe({"/a"}, 0.7);
  histogram.Observe({"/a"}, 30);
  EXPECT_EQ(histogram.Count({"/a"}), 4u);
  EXPECT_EQ(histogram.Count({"/b"}), 0u);
  EXPECT_EQ(registry.RenderPrometheusText(),
            "# HELP latency_seconds Latency\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{route=\"/a\",le=\"0.1\"} 2\n"
            "latency_seconds_bucket{route=\"/a\",le=\"0.5\"} 2\n"
            "latency_seconds_bucket{route=\"/a\",le=\"1\"} 3\n"
            "latency_seconds_bucket{route=\"/a\",le=\"+Inf\"} 4\n"
            "latency_seconds_sum{route=\"/a\"} 30.85\n"
            "latency_seconds_count{route=\"/a\"} 4\n");
}

TEST(MetricsRegistryTest, HistogramWithoutLabels) {
  MetricsRegistry registry;
  HistogramFamily& histogram = registry.Histogram("size_bytes", "Sizes", {}, {1024});
  histogram.Observe({}, 2048);
  histogram.Observe({}, std::nan(""));
  EXPECT_EQ(registry.RenderPrometheusText(),
            "# HELP size_bytes Sizes\n"
            "# TYPE size_bytes histogram\n"
            "size_bytes_bucket{le=\"1024\"} 0\n"
            "size_bytes_bucket{le=\"+Inf\"} 2\n"
            "size_bytes_sum NaN\n"
            "size_bytes_count 2\n");
}

TEST(MetricsRegistryTest, FamiliesInCreationOrder) {
  MetricsRegistry registry;
  registry.Gauge("zeta", "z", {});
  registry.Counter("alpha_total", "a", {});
  registry.Histogram("mid", "m", {}, {});
  EXPECT_EQ(registry.RenderPrometheusText(),
            "# HELP zeta z\n# TYPE zeta gauge\n"
            "# HELP alpha_total a\n# TYPE alpha_total counter\n"
            "# HELP mid m\n# TYPE mid histogram\n");
}

TEST(MetricsRegistryTest, SameNameReturnsSameFamily) {
  MetricsRegistry registry;
  CounterFamily& first = registry.Counter("runs_total", "Runs", {"task"});
  CounterFamily& second = registry.Counter("runs_total", "Other help", {"task"});
  EXPECT_EQ(&first, &second);
  first.Add({"t"});
  second.Add({"t"});
  EXPECT_EQ(first.Value({"t"}), 2);
  GaugeFamily& gauge = registry.Gauge("g", "", {});
  EXPECT_EQ(&gauge, &registry.Gauge("g", "", {}));
  HistogramFamily& histogram = registry.Histogram("h", "", {}, {1, 2});
  EXPECT_EQ(&histogram, &registry.Histogram("h", "", {}, {1, 2}));
  EXPECT_EQ(registry.RenderPrometheusText(),
            "# HELP runs_total Runs\n# TYPE runs_total counter\nruns_total{task=\"t\"} 2\n"
            "# HELP g \n# TYPE g gauge\n"
            "# HELP h \n# TYPE h histogram\n");
}

TEST(MetricsRegistryTest, ConcurrentRecordingLosesNothing) {
  MetricsRegistry registry;
  CounterFamily& counter = registry.Counter("hits_total", "", {"shard"});
  HistogramFamily& histogram = registry.Histogram("work_seconds", "", {"shard"}, {0.5});
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const std::string own = "s" + std::to_string(t);
        for (int i = 0; i < kPerThread; ++i) {
          counter.Add({"shared"});
          counter.Add({own});
          histogram.Observe({"shared"}, i % 2 == 0 ? 0.25 : 1.0);
          if (i % 1000 == 0) {
            (void)registry.RenderPrometheusText();
          }
        }
      });
    }
  }
  EXPECT_EQ(counter.Value({"shared"}), kThreads * kPerThread);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(counter.Value({"s" + std::to_string(t)}), kPerThread);
  }
  EXPECT_EQ(histogram.Count({"shared"}), static_cast<unsigned long long>(kThreads * kPerThread));
  const std::string text = registry.RenderPrometheusText();
  EXPECT_NE(text.find("work_seconds_bucket{shard=\"shared\",le=\"0.5\"} 40000\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("work_seconds_sum{shard=\"shared\"} 50000\n"), std::string::npos) << text;
}

TEST(MetricsRegistryDeathTest, WrongLabelCountIsABug) {
  MetricsRegistry registry;
  CounterFamily& counter = registry.Counter("c_total", "", {"a", "b"});
  EXPECT_DEATH(counter.Add({"x"}), "check failed");
  GaugeFamily& gauge = registry.Gauge("g", "", {});
  EXPECT_DEATH(gauge.Set({"x"}, 1), "check failed");
  HistogramFamily& histogram = registry.Histogram("h", "", {"a"}, {1});
  EXPECT_DEATH(histogram.Observe({}, 1), "check failed");
}

TEST(MetricsRegistryDeathTest, ReusingANameWithAnotherShapeIsABug) {
  MetricsRegistry registry;
  registry.Gauge("thing", "", {"a"});
  EXPECT_DEATH(registry.Histogram("thing", "", {"a"}, {1}), "check failed");
  EXPECT_DEATH(registry.Gauge("thing", "", {"b"}), "check failed");
  registry.Histogram("h", "", {}, {1, 2});
  EXPECT_DEATH(registry.Histogram("h", "", {}, {1, 3}), "check failed");
}

TEST(MetricsRegistryDeathTest, InvalidNamesAreABug) {
  MetricsRegistry registry;
  EXPECT_DEATH(registry.Counter("no_suffix", "", {}), "check failed");
  EXPECT_DEATH(registry.Gauge("9lives", "", {}), "check failed");
  EXPECT_DEATH(registry.Gauge("has-dash", "", {}), "check failed");
  EXPECT_DEATH(registry.Gauge("g", "", {"a:b"}), "check failed");
  EXPECT_DEATH(registry.Gauge("g", "", {"__reserved"}), "check failed");
  EXPECT_DEATH(registry.Gauge("g", "", {"a", "a"}), "check failed");
  EXPECT_DEATH(registry.Histogram("h", "", {"le"}, {1}), "check failed");
  EXPECT_DEATH(registry.Histogram("h", "", {}, {2, 1}), "check failed");
  EXPECT_DEATH(registry.Counter("c_total", "", {}).Add({}, -1), "check failed");
}

}  // namespace
}  // namespace stagehand
