// Conformance with tests/vectors/cron-next.jsonl, computed by npm cron@3.5.0 (see the README
// there): every valid expression yields the same five fire times from the same start in the same
// zone, and every invalid one is rejected with the same message.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/cron.h"
#include "stagehand/time/time_zone.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::StartsWith;

struct Vector {
  int line = 0;
  std::string zone;
  std::string from;
  std::string expression;
  bool valid = false;
  std::vector<std::string> next;
  std::string error;
};

std::vector<Vector> LoadVectors() {
  std::ifstream in(STAGEHAND_VECTORS_DIR "/cron-next.jsonl");
  EXPECT_TRUE(in.is_open());
  std::vector<Vector> vectors;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (text.empty()) {
      continue;
    }
    const nlohmann::json json = nlohmann::json::parse(text);
    Vector v;
    v.line = line;
    v.zone = json.at("zone").get<std::string>();
    v.from = json.at("from").get<std::string>();
    v.expression = json.at("expr").get<std::string>();
    v.valid = json.at("valid").get<bool>();
    if (v.valid) {
      v.next = json.at("next").get<std::vector<std::string>>();
    } else {
      v.error = json.at("error").get<std::string>();
    }
    vectors.push_back(std::move(v));
  }
  return vectors;
}

const std::vector<Vector>& Vectors() {
  static const std::vector<Vector> kVectors = LoadVectors();
  return kVectors;
}

std::string Describe(const Vector& v) {
  return "line " + std::to_string(v.line) + ": '" + v.expression + "' in " + v.zone + " from " +
         v.from;
}

TEST(CronVectorsTest, CoverFiveZoneAndStartPairs) {
  std::map<std::pair<std::string, std::string>, int> pairs;
  int valid = 0;
  for (const Vector& v : Vectors()) {
    ++pairs[{v.zone, v.from}];
    valid += v.valid ? 1 : 0;
  }
  EXPECT_EQ(Vectors().size(), 2570U);
  EXPECT_EQ(pairs.size(), 5U);
  EXPECT_GT(valid, 2000);
}

TEST(CronVectorsTest, ValidExpressionsFireAtTheSameFiveTimes) {
  int checked = 0;
  for (const Vector& v : Vectors()) {
    if (!v.valid) {
      continue;
    }
    SCOPED_TRACE(Describe(v));
    Result<TimeZone> zone = TimeZone::Locate(v.zone);
    ASSERT_THAT(zone, IsOk());
    Result<WallTime> from = ParseIsoInstant(v.from);
    ASSERT_THAT(from, IsOk());
    Result<CronExpression> cron = CronExpression::Parse(v.expression);
    ASSERT_THAT(cron, IsOk());

    std::vector<std::string> actual;
    WallTime instant = *from;
    for (std::size_t i = 0; i < v.next.size(); ++i) {
      Result<WallTime> next = cron->NextAfter(instant, *zone);
      ASSERT_THAT(next, IsOk());
      instant = *next;
      actual.push_back(FormatIsoInstantUtc(instant));
    }
    EXPECT_EQ(actual, v.next);
    ++checked;
  }
  EXPECT_GT(checked, 2000);
}

TEST(CronVectorsTest, InvalidExpressionsFailWithTheSameMessage) {
  // The cron package appends debugging details (the current date, the offset) to this one.
  const std::string never_fires =
      "Something went wrong. No execution date was found in the next 8 years.";
  int checked = 0;
  for (const Vector& v : Vectors()) {
    if (v.valid) {
      continue;
    }
    SCOPED_TRACE(Describe(v));
    Result<CronExpression> cron = CronExpression::Parse(v.expression);
    ASSERT_THAT(cron, StatusIs(StatusCode::kInvalidArgument));
    if (v.error.rfind(never_fires, 0) == 0) {
      EXPECT_THAT(v.error, StartsWith(cron.status().message()));
      EXPECT_EQ(cron.status().message(), never_fires);
    } else {
      EXPECT_EQ(cron.status().message(), v.error);
    }
    ++checked;
  }
  EXPECT_GT(checked, 200);
}

}  // namespace
}  // namespace stagehand
