#include "stagehand/trace/sampler.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

namespace stagehand {
namespace {

struct NamedSampler {
  std::string_view name;
  SamplerKind kind;
};

constexpr NamedSampler kSamplers[] = {
    {"always_on", SamplerKind::kAlwaysOn},
    {"always_off", SamplerKind::kAlwaysOff},
    {"traceidratio", SamplerKind::kTraceIdRatio},
    {"parentbased_always_on", SamplerKind::kParentBasedAlwaysOn},
    {"parentbased_always_off", SamplerKind::kParentBasedAlwaysOff},
    {"parentbased_traceidratio", SamplerKind::kParentBasedTraceIdRatio},
};

bool UnderRatio(double ratio, const TraceId& trace_id) {
  if (ratio >= 1.0) return true;
  if (ratio <= 0.0) return false;
  std::uint64_t value = 0;
  for (std::size_t i = 8; i < 16; ++i) value = value << 8 | trace_id[i];
  return static_cast<double>(value) < std::ldexp(ratio, 64);
}

}  // namespace

Result<SamplerConfig> ParseSampler(std::string_view sampler, std::string_view arg,
                                   std::string_view sampler_name, std::string_view arg_name) {
  SamplerConfig config;
  if (!sampler.empty()) {
    const NamedSampler* found = nullptr;
    for (const NamedSampler& named : kSamplers) {
      if (named.name == sampler) found = &named;
    }
    if (found == nullptr) {
      return InvalidArgumentError(fmt::format(
          "{}: unknown sampler '{}', wanted one of always_on, always_off, traceidratio, "
          "parentbased_always_on, parentbased_always_off, parentbased_traceidratio",
          sampler_name, sampler));
    }
    config.kind = found->kind;
  }
  const bool ratio = config.kind == SamplerKind::kTraceIdRatio ||
                     config.kind == SamplerKind::kParentBasedTraceIdRatio;
  if (ratio && !arg.empty()) {
    double value = 0;
    const auto [end, error] = std::from_chars(arg.data(), arg.data() + arg.size(), value);
    if (error != std::errc() || end != arg.data() + arg.size() || !(value >= 0.0 && value <= 1.0)) {
      return InvalidArgumentError(
          fmt::format("{}: '{}' is not a sampling ratio between 0 and 1", arg_name, arg));
    }
    config.ratio = value;
  }
  return config;
}

bool ShouldSample(const SamplerConfig& sampler, const TraceId& trace_id,
                  const TraceContext* parent) {
  switch (sampler.kind) {
    case SamplerKind::kAlwaysOn:
      return true;
    case SamplerKind::kAlwaysOff:
      return false;
    case SamplerKind::kTraceIdRatio:
      return UnderRatio(sampler.ratio, trace_id);
    case SamplerKind::kParentBasedAlwaysOn:
      return parent == nullptr || parent->sampled();
    case SamplerKind::kParentBasedAlwaysOff:
      return parent != nullptr && parent->sampled();
    case SamplerKind::kParentBasedTraceIdRatio:
      return parent != nullptr ? parent->sampled() : UnderRatio(sampler.ratio, trace_id);
  }
  return false;
}

}  // namespace stagehand
