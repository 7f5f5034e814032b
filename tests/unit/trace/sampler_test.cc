#include "stagehand/trace/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::testing::HasSubstr;
using ::testing::Not;

TraceId IdEndingIn(std::uint8_t high_byte_of_low_half) {
  TraceId id{};
  id[0] = 1;
  id[8] = high_byte_of_low_half;
  return id;
}

TEST(SamplerTest, TheDefaultFollowsTheParentAndSamplesRoots) {
  Result<SamplerConfig> sampler = ParseSampler("", "", "OTEL_TRACES_SAMPLER", "ARG");
  ASSERT_THAT(sampler, IsOk());
  EXPECT_EQ(sampler->kind, SamplerKind::kParentBasedAlwaysOn);
  TraceContext unsampled{IdEndingIn(1), {1}, 0, ""};
  TraceContext sampled{IdEndingIn(1), {1}, 1, ""};
  EXPECT_TRUE(ShouldSample(*sampler, IdEndingIn(1), nullptr));
  EXPECT_FALSE(ShouldSample(*sampler, IdEndingIn(1), &unsampled));
  EXPECT_TRUE(ShouldSample(*sampler, IdEndingIn(1), &sampled));
}

TEST(SamplerTest, TheRatioKeepsTheTraceIdsBelowIt) {
  Result<SamplerConfig> sampler =
      ParseSampler("traceidratio", "0.25", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG");
  ASSERT_THAT(sampler, IsOk());
  EXPECT_TRUE(ShouldSample(*sampler, IdEndingIn(0x3f), nullptr));
  EXPECT_FALSE(ShouldSample(*sampler, IdEndingIn(0x40), nullptr));
  TraceContext sampled{IdEndingIn(0x80), {1}, 1, ""};
  EXPECT_FALSE(ShouldSample(*sampler, IdEndingIn(0x80), &sampled));  // not parent-based

  Result<SamplerConfig> parent_based =
      ParseSampler("parentbased_traceidratio", "0", "OTEL_TRACES_SAMPLER", "ARG");
  ASSERT_THAT(parent_based, IsOk());
  EXPECT_FALSE(ShouldSample(*parent_based, IdEndingIn(0), nullptr));
  EXPECT_TRUE(ShouldSample(*parent_based, IdEndingIn(0x80), &sampled));
}

TEST(SamplerTest, AlwaysOffAndParentBasedAlwaysOff) {
  TraceContext sampled{IdEndingIn(1), {1}, 1, ""};
  EXPECT_FALSE(ShouldSample({SamplerKind::kAlwaysOff}, IdEndingIn(1), &sampled));
  EXPECT_FALSE(ShouldSample({SamplerKind::kParentBasedAlwaysOff}, IdEndingIn(1), nullptr));
  EXPECT_TRUE(ShouldSample({SamplerKind::kParentBasedAlwaysOff}, IdEndingIn(1), &sampled));
}

TEST(SamplerTest, BadSettingsAreNamed) {
  Result<SamplerConfig> unknown =
      ParseSampler("sometimes", "", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG");
  ASSERT_THAT(unknown, Not(IsOk()));
  EXPECT_THAT(unknown.status().message(), HasSubstr("OTEL_TRACES_SAMPLER: unknown sampler"));
  for (const char* arg : {"1.5", "-0.1", "half", "0.5x"}) {
    Result<SamplerConfig> bad =
        ParseSampler("traceidratio", arg, "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG");
    ASSERT_THAT(bad, Not(IsOk())) << arg;
    EXPECT_THAT(bad.status().message(), HasSubstr("OTEL_TRACES_SAMPLER_ARG"));
  }
}

}  // namespace
}  // namespace stagehand
