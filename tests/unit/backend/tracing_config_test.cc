// Issue 18: the tracing settings, from the OTEL_* variables every OpenTelemetry SDK reads and from
// stagehand.tracing in app-config, with errors naming the variable or key.
#include "stagehand/backend/tracing_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Pair;

Config Yaml(std::string_view text) {
  Result<Config> config = Config::FromYaml(text, "app-config.yaml");
  EXPECT_THAT(config, IsOk());
  return config.ok() ? *config : Config::Empty();
}

EnvironmentLookup Env(std::map<std::string, std::string> variables) {
  return [variables = std::move(variables)](const std::string& name) -> std::optional<std::string> {
    auto found = variables.find(name);
    if (found == variables.end()) return std::nullopt;
    return found->second;
  };
}

std::string Attribute(const TracingConfig& config, std::string_view key) {
  for (const auto& [name, value] : config.resource.attributes) {
    if (name == key) return std::get<std::string>(value);
  }
  return "<none>";
}

TEST(TracingConfigTest, OffUntilAnEndpointIsGiven) {
  Result<TracingConfig> config = ReadTracingConfig(Config::Empty(), Env({}));
  ASSERT_THAT(config, IsOk());
  EXPECT_FALSE(config->enabled);
  EXPECT_EQ(Attribute(*config, "service.name"), "stagehand");
  EXPECT_EQ(config->sampler.kind, SamplerKind::kParentBasedAlwaysOn);
}

TEST(TracingConfigTest, TheBaseEndpointGetsTheTracesPathAndTheTracesEndpointIsKeptAsGiven) {
  Result<TracingConfig> base =
      ReadTracingConfig(Config::Empty(), Env({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/"}}));
  ASSERT_THAT(base, IsOk());
  EXPECT_TRUE(base->enabled);
  EXPECT_EQ(base->endpoint, "http://c:4318/v1/traces");

  Result<TracingConfig> traces = ReadTracingConfig(
      Config::Empty(), Env({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
                            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9999/custom"}}));
  ASSERT_THAT(traces, IsOk());
  EXPECT_EQ(traces->endpoint, "http://t:9999/custom");

  Result<TracingConfig> from_config = ReadTracingConfig(
      Yaml("stagehand:\n  tracing:\n    endpoint: http://from-config:4318\n"), Env({}));
  ASSERT_THAT(from_config, IsOk());
  EXPECT_TRUE(from_config->enabled);
  EXPECT_EQ(from_config->endpoint, "http://from-config:4318/v1/traces");

  Result<TracingConfig> variable_wins = ReadTracingConfig(
      Yaml("stagehand:\n  tracing:\n    tracesEndpoint: http://from-config:4318/v1/traces\n"),
      Env({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"}}));
  ASSERT_THAT(variable_wins, IsOk());
  EXPECT_EQ(variable_wins->endpoint, "http://env:4318/v1/traces");

  Result<TracingConfig> enabled_default =
      ReadTracingConfig(Yaml("stagehand:\n  tracing:\n    enabled: true\n"), Env({}));
  ASSERT_THAT(enabled_default, IsOk());
  EXPECT_TRUE(enabled_default->enabled);
  EXPECT_EQ(enabled_default->endpoint, "http://localhost:4318/v1/traces");
}

TEST(TracingConfigTest, TheSdkDisabledVariableWinsAndEmptyMeansUnset) {
  Result<TracingConfig> config = ReadTracingConfig(
      Config::Empty(),
      Env({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, {"OTEL_SDK_DISABLED", "TRUE"}}));
  ASSERT_THAT(config, IsOk());
  EXPECT_FALSE(config->enabled);
  Result<TracingConfig> empty =
      ReadTracingConfig(Config::Empty(), Env({{"OTEL_EXPORTER_OTLP_ENDPOINT", " "}}));
  ASSERT_THAT(empty, IsOk());
  EXPECT_FALSE(empty->enabled);
}

TEST(TracingConfigTest, EnabledFalseTurnsTracingOffWhateverElseIsSet) {
  Result<TracingConfig> config = ReadTracingConfig(
      Yaml("stagehand:\n  tracing:\n    enabled: false\n    endpoint: http://c:4318\n"),
      Env({{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://d:4318/v1/traces"}}));
  ASSERT_THAT(config, IsOk());
  EXPECT_FALSE(config->enabled);
}

TEST(TracingConfigTest, HeadersServiceAndResourceAttributes) {
  Result<TracingConfig> config = ReadTracingConfig(
      Config::Empty(),
      Env({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
           {"OTEL_EXPORTER_OTLP_HEADERS", "api-key=secret%20value, x-tenant = acme"},
           {"OTEL_RESOURCE_ATTRIBUTES", "service.name=ignored,deployment.environment=prod"},
           {"OTEL_SERVICE_NAME", "scheduler-eu"},
           {"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"},
           {"OTEL_TRACES_SAMPLER", "traceidratio"},
           {"OTEL_TRACES_SAMPLER_ARG", "0.5"},
           {"OTEL_BSP_SCHEDULE_DELAY", "200"},
           {"OTEL_BSP_MAX_QUEUE_SIZE", "100"},
           {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10"}}));
  ASSERT_THAT(config, IsOk());
  EXPECT_THAT(config->headers,
              ::testing::ElementsAre(Pair("api-key", "secret value"), Pair("x-tenant", "acme")));
  EXPECT_EQ(Attribute(*config, "service.name"), "scheduler-eu");
  EXPECT_EQ(config->resource.attributes.front().first, "service.name");
  EXPECT_EQ(Attribute(*config, "deployment.environment"), "prod");
  EXPECT_EQ(Attribute(*config, "telemetry.sdk.language"), "cpp");
  EXPECT_EQ(config->timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(config->sampler.kind, SamplerKind::kTraceIdRatio);
  EXPECT_EQ(config->sampler.ratio, 0.5);
  EXPECT_EQ(config->batch.schedule_delay, std::chrono::milliseconds(200));
  EXPECT_EQ(config->batch.max_queue_size, 100u);
  EXPECT_EQ(config->batch.max_export_batch_size, 10u);

  Result<TracingConfig> from_config = ReadTracingConfig(Yaml(R"(
stagehand:
  tracing:
    endpoint: http://c:4318
    headers:
      authorization: Bearer abc
    serviceName: from-config
    resourceAttributes:
      team: platform
    timeout: 3s
    sampler: always_off
)"),
                                                        Env({}));
  ASSERT_THAT(from_config, IsOk());
  EXPECT_THAT(from_config->headers, ::testing::ElementsAre(Pair("authorization", "Bearer abc")));
  EXPECT_EQ(Attribute(*from_config, "service.name"), "from-config");
  EXPECT_EQ(Attribute(*from_config, "team"), "platform");
  EXPECT_EQ(from_config->timeout, std::chrono::seconds(3));
  EXPECT_EQ(from_config->sampler.kind, SamplerKind::kAlwaysOff);
}

TEST(TracingConfigTest, EveryProblemIsNamed) {
  Result<TracingConfig> config = ReadTracingConfig(
      Yaml("stagehand:\n  tracing:\n    endpiont: http://c:4318\n    samplerArg: 2\n"),
      Env({{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
           {"OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign"},
           {"OTEL_EXPORTER_OTLP_TIMEOUT", "ten"},
           {"OTEL_TRACES_SAMPLER", "parentbased_traceidratio"},
           {"OTEL_BSP_MAX_QUEUE_SIZE", "-1"}}));
  ASSERT_THAT(config, StatusIs(StatusCode::kInvalidArgument));
  const std::string message(config.status().message());
  EXPECT_THAT(message, HasSubstr("'stagehand.tracing.endpiont'"));
  EXPECT_THAT(message, HasSubstr("did you mean 'endpoint'?"));
  EXPECT_THAT(message, HasSubstr("OTEL_EXPORTER_OTLP_PROTOCOL: protocol 'grpc' is not supported"));
  EXPECT_THAT(message, HasSubstr("OTEL_EXPORTER_OTLP_HEADERS: 'no-equals-sign' is not key=value"));
  EXPECT_THAT(message, HasSubstr("OTEL_EXPORTER_OTLP_TIMEOUT: 'ten' is not a positive"));
  EXPECT_THAT(message, HasSubstr("stagehand.tracing.samplerArg: '2' is not a sampling ratio"));
  EXPECT_THAT(message, HasSubstr("OTEL_BSP_MAX_QUEUE_SIZE: '-1' is not a positive"));
}

}  // namespace
}  // namespace stagehand
