#include "stagehand/metrics/metrics_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <unordered_map>

#include "stagehand/base/check.h"
#include "stagehand/base/mutex.h"

namespace stagehand {
namespace {

enum class MetricType { kCounter, kGauge, kHistogram };

std::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

bool IsNameStart(char c, bool allow_colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
}

bool IsNameChar(char c, bool allow_colon) {
  return IsNameStart(c, allow_colon) || (c >= '0' && c <= '9');
}

// Metric names may hold colons (reserved for recording rules); label names may not, and names
// starting with "__" are reserved for Prometheus itself.
bool IsValidName(std::string_view name, bool is_label) {
  if (name.empty() || !IsNameStart(name.front(), !is_label)) {
    return false;
  }
  if (is_label && name.substr(0, 2) == "__") {
    return false;
  }
  return std::all_of(name.begin() + 1, name.end(),
                     [is_label](char c) { return IsNameChar(c, !is_label); });
}

void AppendNumber(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
  } else {
    fmt::format_to(std::back_inserter(out), "{}", value);
  }
}

void AppendEscaped(std::string& out, std::string_view text, bool escape_quotes) {
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && escape_quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

// Writes `<name><suffix>{labels...,le="bound"} ` (the braces only when there is a label); the
// caller appends the value and the newline.
void AppendSeriesHead(std::string& out, std::string_view name, std::string_view suffix,
                      const std::vector<std::string>& label_names,
                      const std::vector<std::string>& label_values,
                      std::optional<double> le = std::nullopt) {
  out += name;
  out += suffix;
  if (!label_names.empty() || le) {
    out += '{';
    for (std::size_t i = 0; i < label_names.size(); ++i) {
      if (i > 0) {
        out += ',';
      }
      out += label_names[i];
      out += "=\"";
      AppendEscaped(out, label_values[i], /*escape_quotes=*/true);
      out += '"';
    }
    if (le) {
      if (!label_names.empty()) {
        out += ',';
      }
      out += "le=\"";
      AppendNumber(out, *le);
      out += '"';
    }
    out += '}';
  }
  out += ' ';
}

struct LabelValuesHash {
  std::size_t operator()(const std::vector<std::string>& values) const {
    std::size_t hash = values.size();
    for (const std::string& value : values) {
      hash ^= std::hash<std::string>{}(value) + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2);
    }
    return hash;
  }
};

// The series of one family: found by label values in a hash map, kept in the order they were
// first recorded. Not thread-safe; the family's mutex guards it.
template <typename Value>
class SeriesTable {
 public:
  struct Entry {
    const std::vector<std::string>* label_values;  // the key inside index_ (nodes are stable)
    Value value;
  };

  Value* Find(const std::vector<std::string>& label_values) {
    const auto it = index_.find(label_values);
    return it == index_.end() ? nullptr : &entries_[it->second].value;
  }
  const Value* Find(const std::vector<std::string>& label_values) const {
    const auto it = index_.find(label_values);
    return it == index_.end() ? nullptr : &entries_[it->second].value;
  }

  Value& FindOrInsert(const std::vector<std::string>& label_values, const Value& initial) {
    if (Value* found = Find(label_values)) {
      return *found;
    }
    const auto [it, inserted] = index_.emplace(label_values, entries_.size());
    entries_.push_back(Entry{&it->first, initial});
    return entries_.back().value;
  }

  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::unordered_map<std::vector<std::string>, std::size_t, LabelValuesHash> index_;
  std::vector<Entry> entries_;
};

class FamilyBase {
 public:
  FamilyBase(MetricType type, std::string name, std::string help,
             std::vector<std::string> label_names)
      : type_(type),
        name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)) {}
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  void Render(std::string& out) const {
    out += "# HELP ";
    out += name_;
    out += ' ';
    AppendEscaped(out, help_, /*escape_quotes=*/false);
    out += "\n# TYPE ";
    out += name_;
    out += ' ';
    out += TypeName(type_);
    out += '\n';
    MutexLock lock(mu_);
    RenderSeries(out);
  }

 protected:
  // Aborts unless one value was given per label name: a mismatch is a bug in the caller.
  void CheckLabelCount(const std::vector<std::string>& label_values) const {
    STAGEHAND_CHECK(label_values.size() == label_names_.size());
  }
  // Appends the series lines.
  virtual void RenderSeries(std::string& out) const STAGEHAND_REQUIRES(mu_) = 0;

  const MetricType type_;
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  mutable Mutex mu_;
};

// One double per label set: the storage and rendering counters and gauges share.
class ScalarFamily : public FamilyBase {
 protected:
  using FamilyBase::FamilyBase;

  void AddToSeries(const std::vector<std::string>& label_values, double delta) {
    CheckLabelCount(label_values);
    MutexLock lock(mu_);
    series_.FindOrInsert(label_values, 0.0) += delta;
  }

  void SetSeries(const std::vector<std::string>& label_values, double value) {
    CheckLabelCount(label_values);
    MutexLock lock(mu_);
    series_.FindOrInsert(label_values, 0.0) = value;
  }

  double SeriesValue(const std::vector<std::string>& label_values) const {
    CheckLabelCount(label_values);
    MutexLock lock(mu_);
    const double* value = series_.Find(label_values);
    return value == nullptr ? 0.0 : *value;
  }

 private:
  void RenderSeries(std::string& out) const override STAGEHAND_REQUIRES(mu_) {
    for (const auto& entry : series_.entries()) {
      AppendSeriesHead(out, name_, "", label_names_, *entry.label_values);
      AppendNumber(out, entry.value);
      out += '\n';
    }
  }

  SeriesTable<double> series_ STAGEHAND_GUARDED_BY(mu_);
};

class CounterImpl final : public ScalarFamily, public CounterFamily {
 public:
  CounterImpl(std::string name, std::string help, std::vector<std::string> label_names)
      : ScalarFamily(MetricType::kCounter, std::move(name), std::move(help),
                     std::move(label_names)) {}

  void Add(const std::vector<std::string>& label_values, double amount) override {
    STAGEHAND_CHECK(amount >= 0);
    AddToSeries(label_values, amount);
  }

  double Value(const std::vector<std::string>& label_values) const override {
    return SeriesValue(label_values);
  }
};

class GaugeImpl final : public ScalarFamily, public GaugeFamily {
 public:
  GaugeImpl(std::string name, std::string help, std::vector<std::string> label_names)
      : ScalarFamily(MetricType::kGauge, std::move(name), std::move(help), std::move(label_names)) {
  }

  void Set(const std::vector<std::string>& label_values, double value) override {
    SetSeries(label_values, value);
  }

  void Add(const std::vector<std::string>& label_values, double delta) override {
    AddToSeries(label_values, delta);
  }

  double Value(const std::vector<std::string>& label_values) const override {
    return SeriesValue(label_values);
  }
};

class HistogramImpl final : public FamilyBase, public HistogramFamily {
 public:
  HistogramImpl(std::string name, std::string help, std::vector<std::string> label_names,
                std::vector<double> bounds)
      : FamilyBase(MetricType::kHistogram, std::move(name), std::move(help),
                   std::move(label_names)),
        bounds_(std::move(bounds)) {}

  const std::vector<double>& bounds() const { return bounds_; }

  void Observe(const std::vector<std::string>& label_values, double value) override {
    CheckLabelCount(label_values);
    // The first bucket whose bound is >= value ("le"); NaN and values above every bound land
    // only in +Inf.
    const std::size_t bucket =
        std::isnan(value)
            ? bounds_.size()
            : static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                       bounds_.begin());
    MutexLock lock(mu_);
    Data& data = series_.FindOrInsert(
        label_values, Data{std::vector<unsigned long long>(bounds_.size() + 1, 0ULL)});
    ++data.buckets[bucket];
    data.sum += value;
    ++data.count;
  }

  unsigned long long Count(const std::vector<std::string>& label_values) const override {
    CheckLabelCount(label_values);
    MutexLock lock(mu_);
    const Data* data = series_.Find(label_values);
    return data == nullptr ? 0 : data->count;
  }

 private:
  struct Data {
    std::vector<unsigned long long> buckets;  // per bucket, not cumulative; the last is +Inf
    double sum = 0;
    unsigned long long count = 0;
  };

  void RenderSeries(std::string& out) const override STAGEHAND_REQUIRES(mu_) {
    for (const auto& entry : series_.entries()) {
      const Data& data = entry.value;
      unsigned long long cumulative = 0;
      for (std::size_t i = 0; i <= bounds_.size(); ++i) {
        cumulative += data.buckets[i];
        const double le = i < bounds_.size() ? bounds_[i] : std::numeric_limits<double>::infinity();
        AppendSeriesHead(out, name_, "_bucket", label_names_, *entry.label_values, le);
        fmt::format_to(std::back_inserter(out), "{}\n", cumulative);
      }
      AppendSeriesHead(out, name_, "_sum", label_names_, *entry.label_values);
      AppendNumber(out, data.sum);
      out += '\n';
      AppendSeriesHead(out, name_, "_count", label_names_, *entry.label_values);
      fmt::format_to(std::back_inserter(out), "{}\n", data.count);
    }
  }

  const std::vector<double> bounds_;
  SeriesTable<Data> series_ STAGEHAND_GUARDED_BY(mu_);
};

void CheckNames(std::string_view name, const std::vector<std::string>& label_names) {
  STAGEHAND_CHECK(IsValidName(name, /*is_label=*/false));
  for (std::size_t i = 0; i < label_names.size(); ++i) {
    STAGEHAND_CHECK(IsValidName(label_names[i], /*is_label=*/true));
    for (std::size_t j = 0; j < i; ++j) {
      STAGEHAND_CHECK(label_names[i] != label_names[j]);
    }
  }
}

}  // namespace

struct MetricsRegistry::Impl {
  // Returns the family named `name` after checking it has `type` and `label_names`, or null.
  FamilyBase* Existing(const std::string& name, MetricType type,
                       const std::vector<std::string>& label_names) STAGEHAND_REQUIRES(mu) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      return nullptr;
    }
    STAGEHAND_CHECK(it->second->type() == type);
    STAGEHAND_CHECK(it->second->label_names() == label_names);
    return it->second;
  }

  template <typename Family>
  Family& Add(std::string name, std::unique_ptr<Family> family) STAGEHAND_REQUIRES(mu) {
    Family& result = *family;
    by_name.emplace(std::move(name), family.get());
    families.push_back(std::move(family));
    return result;
  }

  mutable Mutex mu;
  std::vector<std::unique_ptr<FamilyBase>> families STAGEHAND_GUARDED_BY(mu);  // creation order
  std::unordered_map<std::string, FamilyBase*> by_name STAGEHAND_GUARDED_BY(mu);
};

MetricsRegistry::MetricsRegistry() : impl_(std::make_unique<Impl>()) {}

MetricsRegistry::~MetricsRegistry() = default;

CounterFamily& MetricsRegistry::Counter(std::string name, std::string help,
                                        std::vector<std::string> label_names) {
  CheckNames(name, label_names);
  STAGEHAND_CHECK(name.size() > 6 && name.substr(name.size() - 6) == "_total");
  MutexLock lock(impl_->mu);
  if (FamilyBase* existing = impl_->Existing(name, MetricType::kCounter, label_names)) {
    return static_cast<CounterImpl&>(*existing);
  }
  auto family = std::make_unique<CounterImpl>(name, std::move(help), std::move(label_names));
  return impl_->Add(std::move(name), std::move(family));
}

GaugeFamily& MetricsRegistry::Gauge(std::string name, std::string help,
                                    std::vector<std::string> label_names) {
  CheckNames(name, label_names);
  MutexLock lock(impl_->mu);
  if (FamilyBase* existing = impl_->Existing(name, MetricType::kGauge, label_names)) {
    return static_cast<GaugeImpl&>(*existing);
  }
  auto family = std::make_unique<GaugeImpl>(name, std::move(help), std::move(label_names));
  return impl_->Add(std::move(name), std::move(family));
}

HistogramFamily& MetricsRegistry::Histogram(std::string name, std::string help,
                                            std::vector<std::string> label_names,
                                            std::vector<double> bucket_bounds) {
  CheckNames(name, label_names);
  STAGEHAND_CHECK(std::find(label_names.begin(), label_names.end(), "le") == label_names.end());
  for (std::size_t i = 0; i < bucket_bounds.size(); ++i) {
    STAGEHAND_CHECK(std::isfinite(bucket_bounds[i]));
    STAGEHAND_CHECK(i == 0 || bucket_bounds[i - 1] < bucket_bounds[i]);
  }
  MutexLock lock(impl_->mu);
  if (FamilyBase* existing = impl_->Existing(name, MetricType::kHistogram, label_names)) {
    auto& histogram = static_cast<HistogramImpl&>(*existing);
    STAGEHAND_CHECK(histogram.bounds() == bucket_bounds);
    return histogram;
  }
  auto family = std::make_unique<HistogramImpl>(name, std::move(help), std::move(label_names),
                                                std::move(bucket_bounds));
  return impl_->Add(std::move(name), std::move(family));
}

std::string MetricsRegistry::RenderPrometheusText() const {
  std::vector<const FamilyBase*> families;
  {
    MutexLock lock(impl_->mu);
    families.reserve(impl_->families.size());
    for (const auto& family : impl_->families) {
      families.push_back(family.get());
    }
  }
  std::string out;
  for (const FamilyBase* family : families) {
    family->Render(out);
  }
  return out;
}

}  // namespace stagehand
