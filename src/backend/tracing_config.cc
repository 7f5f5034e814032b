#include "stagehand/backend/tracing_config.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <utility>

#include "stagehand/backend/schedule_config.h"
#include "stagehand/base/text.h"
#include "stagehand/config/config_problems.h"
#include "stagehand/http/http_message.h"
#include "stagehand/time/duration.h"

namespace stagehand {
namespace {

constexpr std::string_view kBlock = "stagehand.tracing";
constexpr std::array<std::string_view, 11> kTracingKeys = {
    "enabled",     "endpoint", "tracesEndpoint",     "headers",    "timeout",   "protocol",
    "serviceName", "sampler",  "resourceAttributes", "samplerArg", "batchDelay"};
constexpr std::string_view kTracesPath = "/v1/traces";
constexpr std::string_view kSdkVersion = "0.1.0";

// One setting, from the first of its variables that is set, else from its config key.
struct Setting {
  std::optional<std::string> value;
  std::string source;  // the variable or the full config key, for messages
};

// Decodes %XX escapes (W3C Baggage's encoding of OTEL_*_HEADERS and OTEL_RESOURCE_ATTRIBUTES);
// nullopt when one is malformed or the result is not UTF-8.
std::optional<std::string> PercentDecoded(std::string_view text) {
  Result<std::string> decoded = DecodeUriComponent(text);
  if (!decoded.ok()) return std::nullopt;
  return *std::move(decoded);
}

class Reader {
 public:
  Reader(const Config& root, const EnvironmentLookup& environment)
      : root_(root), environment_(environment) {}

  ConfigProblems& problems() { return problems_; }

  std::optional<std::string> Env(std::string_view name) const {
    std::optional<std::string> value = environment_(std::string(name));
    if (value && TrimSpacesAndTabs(*value).empty())
      return std::nullopt;  // empty means unset (OTel spec)
    return value;
  }

  // The first set variable of `names`, else the string at `key` under stagehand.tracing.
  Setting Read(std::initializer_list<std::string_view> names, std::string_view key) {
    for (std::string_view name : names) {
      if (std::optional<std::string> value = Env(name)) {
        return {std::string(TrimSpacesAndTabs(*value)), std::string(name)};
      }
    }
    const std::string full = fmt::format("{}.{}", kBlock, key);
    Result<std::optional<std::string>> value = root_.GetOptionalString(full);
    if (!value.ok()) {
      // A number is a string here too (samplerArg: 0.5).
      if (Result<std::optional<double>> number = root_.GetOptionalNumber(full);
          number.ok() && *number) {
        return {fmt::format("{}", **number), full};
      }
      problems_.Add(value.status());
      return {std::nullopt, full};
    }
    return {*value, full};
  }

  // A "k=v,k2=v2" list from the first set variable of `names`, else the map at `key`.
  std::optional<std::vector<std::pair<std::string, std::string>>> ReadPairs(
      std::initializer_list<std::string_view> names, std::string_view key) {
    for (std::string_view name : names) {
      if (std::optional<std::string> value = Env(name)) return ParsePairs(*value, name);
    }
    const std::string full = fmt::format("{}.{}", kBlock, key);
    Result<std::optional<Config>> block = root_.GetOptionalConfig(full);
    if (!block.ok()) {
      problems_.Add(block.status());
      return std::nullopt;
    }
    if (!*block) return std::nullopt;
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const std::string& entry : (*block)->Keys()) {
      Result<std::string> value = (*block)->GetString(entry);
      if (!value.ok()) {
        problems_.Add(value.status());
        continue;
      }
      pairs.emplace_back(entry, *value);
    }
    return pairs;
  }

  // A positive whole number from `setting` (a variable's text or a config string).
  std::optional<long> Positive(const Setting& setting) {
    if (!setting.value) return std::nullopt;
    long value = 0;
    const std::string_view text = *setting.value;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || value <= 0) {
      problems_.Add(InvalidArgumentError(
          fmt::format("{}: '{}' is not a positive whole number", setting.source, text)));
      return std::nullopt;
    }
    return value;
  }

 private:
  std::vector<std::pair<std::string, std::string>> ParsePairs(std::string_view text,
                                                              std::string_view name) {
    std::vector<std::pair<std::string, std::string>> pairs;
    while (!text.empty()) {
      const std::size_t comma = text.find(',');
      const std::string_view item = TrimSpacesAndTabs(text.substr(0, comma));
      text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
      if (item.empty()) continue;
      const std::size_t equals = item.find('=');
      std::optional<std::string> key =
          equals == std::string_view::npos
              ? std::nullopt
              : PercentDecoded(TrimSpacesAndTabs(item.substr(0, equals)));
      std::optional<std::string> value =
          equals == std::string_view::npos
              ? std::nullopt
              : PercentDecoded(TrimSpacesAndTabs(item.substr(equals + 1)));
      if (!key || key->empty() || !value) {
        problems_.Add(InvalidArgumentError(
            fmt::format("{}: '{}' is not key=value (values percent-encoded)", name, item)));
        continue;
      }
      pairs.emplace_back(*std::move(key), *std::move(value));
    }
    return pairs;
  }

  const Config& root_;
  const EnvironmentLookup& environment_;
  ConfigProblems problems_;
};

// `base` + "/v1/traces", without a doubled slash.
std::string TracesUrl(std::string_view base) {
  while (base.ends_with('/')) base.remove_suffix(1);
  return fmt::format("{}{}", base, kTracesPath);
}

}  // namespace

Result<TracingConfig> ReadTracingConfig(const Config& root, const EnvironmentLookup& environment) {
  Reader reader(root, environment);
  TracingConfig config;
  if (Result<std::optional<Config>> block = root.GetOptionalConfig(kBlock); !block.ok()) {
    reader.problems().Add(block.status());
  } else if (*block) {
    AddUnknownKeys(**block, kTracingKeys, reader.problems());
  }

  std::optional<bool> wanted;
  if (Result<std::optional<bool>> enabled = root.GetOptionalBoolean("stagehand.tracing.enabled");
      !enabled.ok()) {
    reader.problems().Add(enabled.status());
  } else {
    wanted = *enabled;
  }
  const Setting traces = reader.Read({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}, "tracesEndpoint");
  const Setting base = reader.Read({"OTEL_EXPORTER_OTLP_ENDPOINT"}, "endpoint");
  if (traces.value && !traces.source.starts_with(kBlock)) {
    config.endpoint = *traces.value;
  } else if (base.value && !base.source.starts_with(kBlock)) {
    config.endpoint = TracesUrl(*base.value);
  } else if (traces.value) {
    config.endpoint = *traces.value;
  } else if (base.value) {
    config.endpoint = TracesUrl(*base.value);
  }
  // An explicit `enabled: false` is the config's OTEL_SDK_DISABLED: off whatever else is set.
  config.enabled = wanted.value_or(false) || (wanted != false && (traces.value || base.value));
  if (std::optional<std::string> disabled = reader.Env("OTEL_SDK_DISABLED")) {
    std::string lower(TrimSpacesAndTabs(*disabled));
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "true") config.enabled = false;
  }

  const Setting protocol = reader.Read(
      {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"}, "protocol");
  if (protocol.value && *protocol.value != "http/json") {
    reader.problems().Add(InvalidArgumentError(fmt::format(
        "{}: protocol '{}' is not supported; stagehand exports OTLP over HTTP with the JSON "
        "encoding, which every collector's OTLP/HTTP receiver accepts: set it to http/json",
        protocol.source, *protocol.value)));
  }

  if (auto headers = reader.ReadPairs(
          {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"}, "headers")) {
    config.headers = *std::move(headers);
  }

  const Setting timeout =
      reader.Read({"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"}, "timeout");
  if (timeout.value && !timeout.source.starts_with(kBlock)) {
    if (std::optional<long> ms = reader.Positive(timeout)) {
      config.timeout = std::chrono::milliseconds(*ms);
    }
  } else if (root.Has("stagehand.tracing.timeout")) {
    Result<HumanDuration> duration = ReadDurationFromConfig(root, "stagehand.tracing.timeout");
    if (!duration.ok()) {
      reader.problems().Add(duration.status());
    } else {
      config.timeout =
          std::chrono::milliseconds(static_cast<long>(ToMillisecondsCasual(*duration)));
    }
  }

  std::vector<std::pair<std::string, std::string>> resource;
  if (auto attributes = reader.ReadPairs({"OTEL_RESOURCE_ATTRIBUTES"}, "resourceAttributes")) {
    resource = *std::move(attributes);
  }
  std::string service_name = "stagehand";
  for (const auto& [key, value] : resource) {
    if (key == "service.name") service_name = value;
  }
  if (const Setting name = reader.Read({"OTEL_SERVICE_NAME"}, "serviceName"); name.value) {
    service_name = *name.value;
  }
  config.resource.attributes.emplace_back("service.name", service_name);
  for (auto& [key, value] : resource) {
    if (key != "service.name") config.resource.attributes.emplace_back(key, std::move(value));
  }
  config.resource.attributes.emplace_back("telemetry.sdk.name", std::string("stagehand"));
  config.resource.attributes.emplace_back("telemetry.sdk.language", std::string("cpp"));
  config.resource.attributes.emplace_back("telemetry.sdk.version", std::string(kSdkVersion));

  const Setting sampler = reader.Read({"OTEL_TRACES_SAMPLER"}, "sampler");
  const Setting sampler_arg = reader.Read({"OTEL_TRACES_SAMPLER_ARG"}, "samplerArg");
  Result<SamplerConfig> parsed =
      ParseSampler(sampler.value.value_or(""), sampler_arg.value.value_or(""), sampler.source,
                   sampler_arg.source);
  if (!parsed.ok()) {
    reader.problems().Add(parsed.status());
  } else {
    config.sampler = *parsed;
  }

  const Setting delay = reader.Read({"OTEL_BSP_SCHEDULE_DELAY"}, "batchDelay");
  if (delay.value && !delay.source.starts_with(kBlock)) {
    if (std::optional<long> ms = reader.Positive(delay)) {
      config.batch.schedule_delay = std::chrono::milliseconds(*ms);
    }
  } else if (root.Has("stagehand.tracing.batchDelay")) {
    Result<HumanDuration> duration = ReadDurationFromConfig(root, "stagehand.tracing.batchDelay");
    if (!duration.ok()) {
      reader.problems().Add(duration.status());
    } else {
      config.batch.schedule_delay =
          std::chrono::milliseconds(static_cast<long>(ToMillisecondsCasual(*duration)));
    }
  }
  if (std::optional<std::string> queue = reader.Env("OTEL_BSP_MAX_QUEUE_SIZE")) {
    if (std::optional<long> n = reader.Positive({queue, "OTEL_BSP_MAX_QUEUE_SIZE"})) {
      config.batch.max_queue_size = static_cast<std::size_t>(*n);
    }
  }
  if (std::optional<std::string> batch = reader.Env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")) {
    if (std::optional<long> n = reader.Positive({batch, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"})) {
      config.batch.max_export_batch_size = static_cast<std::size_t>(*n);
    }
  }
  if (!reader.problems().empty()) return reader.problems().ToStatus();
  return config;
}

}  // namespace stagehand
