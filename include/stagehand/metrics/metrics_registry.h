// Process metrics in the Prometheus data model: counters, gauges and histograms, each a family of
// series told apart by label values, rendered in the Prometheus text exposition format (0.0.4) for
// GET /metrics. The backend maps Backstage's OpenTelemetry instrument names onto it
// (`backend_tasks.task.runs.count` → `backend_tasks_task_runs_count_total`).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stagehand {

// Label name/value pairs of one series, in the order the family declared its label names.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing value per label set. Thread-safe.
class CounterFamily {
 public:
  virtual ~CounterFamily() = default;
  // Adds `amount` (≥ 0) to the series with `label_values`, given in the family's label order.
  // Aborts when the number of values differs from the number of label names (a bug).
  virtual void Add(const std::vector<std::string>& label_values, double amount = 1) = 0;
  // Returns the current value of the series, 0 when it does not exist yet.
  virtual double Value(const std::vector<std::string>& label_values) const = 0;
};

// A value that may go up and down per label set. Thread-safe.
class GaugeFamily {
 public:
  virtual ~GaugeFamily() = default;
  // Sets the series to `value`. Label rules as CounterFamily::Add.
  virtual void Set(const std::vector<std::string>& label_values, double value) = 0;
  // Adds `delta` (may be negative) to the series.
  virtual void Add(const std::vector<std::string>& label_values, double delta) = 0;
  // Returns the current value of the series, 0 when it does not exist yet.
  virtual double Value(const std::vector<std::string>& label_values) const = 0;
};

// Observations counted into cumulative buckets per label set, rendered as `<name>_bucket{le=...}`,
// `<name>_sum` and `<name>_count`. Thread-safe.
class HistogramFamily {
 public:
  virtual ~HistogramFamily() = default;
  // Records `value` in the series. Label rules as CounterFamily::Add.
  virtual void Observe(const std::vector<std::string>& label_values, double value) = 0;
  // Returns how many observations the series holds, 0 when it does not exist yet.
  virtual unsigned long long Count(const std::vector<std::string>& label_values) const = 0;
};

// Owns every metric family of a process. Families are created at wiring time and then shared by
// reference with the code that records into them. Thread-safe; the returned references stay valid
// for the registry's lifetime.
class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Each returns the family named `name`, creating it on first use; a later call with the same
  // name returns the same family. Names and label names must be valid Prometheus names
  // ([a-zA-Z_:][a-zA-Z0-9_:]*; a counter's name ends in `_total`); asking for an existing name
  // with another type or other label names is a bug and aborts. `help` is written as # HELP.
  CounterFamily& Counter(std::string name, std::string help, std::vector<std::string> label_names);
  GaugeFamily& Gauge(std::string name, std::string help, std::vector<std::string> label_names);
  // `bucket_bounds` are the upper bounds, strictly increasing; `+Inf` is implied.
  HistogramFamily& Histogram(std::string name, std::string help,
                             std::vector<std::string> label_names,
                             std::vector<double> bucket_bounds);

  // Returns every family in the text exposition format: families in creation order, series in
  // the order they were first recorded, label values escaped (\\, \", \n), numbers in shortest
  // round-trip form (`+Inf`, `NaN`). Families without any series still get # HELP and # TYPE.
  std::string RenderPrometheusText() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagehand
