// Conformance with the reference vectors computed by luxon and Backstage's readDurationFromConfig:
// every line of durations.jsonl and every string line of config-durations.jsonl. (Object lines of
// config-durations.jsonl belong to the config reader's tests.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/duration.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::Not;

using nlohmann::json;

constexpr const char* kUnits[] = {"years", "months",  "weeks",   "days",
                                  "hours", "minutes", "seconds", "milliseconds"};

std::optional<double>& Field(HumanDuration& d, int index) {
  std::optional<double>* fields[] = {&d.years, &d.months,  &d.weeks,   &d.days,
                                     &d.hours, &d.minutes, &d.seconds, &d.milliseconds};
  return *fields[index];
}

std::vector<json> ReadJsonLines(const std::string& name) {
  std::ifstream in(std::string(STAGEHAND_VECTORS_DIR) + "/" + name);
  EXPECT_TRUE(in.good()) << "cannot open " << name;
  std::vector<json> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) {
      lines.push_back(json::parse(line));
    }
  }
  return lines;
}

HumanDuration FromJson(const json& object) {
  HumanDuration d;
  for (int i = 0; i < 8; ++i) {
    if (object.contains(kUnits[i])) {
      Field(d, i) = object[kUnits[i]].get<double>();
    }
  }
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (const char* unit : kUnits) {
      known = known || key == unit;
    }
    EXPECT_TRUE(known) << "unexpected key " << key;
  }
  return d;
}

std::string Describe(const HumanDuration& d) {
  HumanDuration copy = d;
  std::string out = "{";
  for (int i = 0; i < 8; ++i) {
    const std::optional<double>& v = Field(copy, i);
    if (!v) {
      continue;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s:%.17g", out.size() > 1 ? "," : "", kUnits[i], *v);
    out += buf;
  }
  return out + "}";
}

// Returns `iso` without a "0S" component, which toISO writes when milliseconds round to zero
// but which reads back as an absent (zero) second: "P1YT2H0S" -> "P1YT2H", "P1DT0S" -> "P1D".
std::string WithoutZeroSeconds(const std::string& iso) {
  if (iso == "PT0S" || iso.size() < 3 || iso.compare(iso.size() - 2, 2, "0S") != 0) {
    return iso;
  }
  const char before = iso[iso.size() - 3];
  if (before != 'T' && before != 'H' && before != 'M') {
    return iso;
  }
  std::string out = iso.substr(0, iso.size() - 2);
  if (out.back() == 'T') {
    out.pop_back();
  }
  return out == "P" ? "PT0S" : out;
}

TEST(DurationVectorsTest, HumanDurationsFormatAndMeasureLikeLuxon) {
  int checked = 0;
  for (const json& v : ReadJsonLines("durations.jsonl")) {
    if (!v.contains("human")) {
      continue;
    }
    const HumanDuration d = FromJson(v["human"]);
    const std::string iso = v["iso"].get<std::string>();
    const double ms = v["milliseconds"].get<double>();
    EXPECT_EQ(FormatIsoDuration(d), iso) << v.dump();
    EXPECT_EQ(ToMillisecondsCasual(d), ms) << v.dump();
    EXPECT_EQ(ToChronoMilliseconds(d).count(), static_cast<long long>(std::round(ms))) << v.dump();

    // The stored text reads back: the same text again, and the same length up to the
    // whole milliseconds that toISO rounds to.
    Result<HumanDuration> parsed = ParseIsoDuration(iso);
    ASSERT_THAT(parsed, IsOk()) << v.dump();
    EXPECT_EQ(FormatIsoDuration(*parsed), WithoutZeroSeconds(iso)) << v.dump();
    EXPECT_NEAR(ToMillisecondsCasual(*parsed), ms, 1.0) << v.dump();
    ++checked;
  }
  EXPECT_EQ(checked, 400);
}

TEST(DurationVectorsTest, IsoStringsParseLikeLuxon) {
  int checked = 0;
  for (const json& v : ReadJsonLines("durations.jsonl")) {
    if (!v.contains("parse")) {
      continue;
    }
    const std::string text = v["parse"].get<std::string>();
    const bool valid = v["valid"].get<bool>();
    EXPECT_EQ(IsValidIsoDuration(text), valid) << v.dump();
    Result<HumanDuration> parsed = ParseIsoDuration(text);
    ASSERT_EQ(parsed.ok(), valid) << v.dump();
    if (valid) {
      EXPECT_EQ(ToMillisecondsCasual(*parsed), v["milliseconds"].get<double>()) << v.dump();
    } else {
      EXPECT_THAT(parsed, StatusIs(StatusCode::kInvalidArgument));
      EXPECT_EQ(parsed.status().message(),
                "Invalid ISO format, expected a value similar to 'P2DT6H' (2 days 6 hours) or "
                "'PT1M' (1 minute)");
    }
    ++checked;
  }
  EXPECT_EQ(checked, 14);
}

TEST(DurationVectorsTest, ConfigStringsParseLikeReadDurationFromConfig) {
  // The config reader prefixes "Invalid duration '{value}' in config at '{key}', Error: ".
  constexpr std::string_view kErrorMarker = ", Error: ";
  int checked = 0;
  for (const json& v : ReadJsonLines("config-durations.jsonl")) {
    if (!v["input"].is_string()) {
      continue;
    }
    const std::string input = v["input"].get<std::string>();
    Result<HumanDuration> parsed = ParseDurationString(input);
    if (v.contains("error")) {
      const std::string error = v["error"].get<std::string>();
      const std::size_t at = error.find(kErrorMarker);
      ASSERT_NE(at, std::string::npos) << v.dump();
      const std::string quoted = "Invalid duration '" + std::string(TrimJsWhitespace(input)) +
                                 "' in config at 'frequency'";
      EXPECT_EQ(error.substr(0, at), quoted) << v.dump();
      ASSERT_THAT(parsed, Not(IsOk())) << v.dump() << " parsed as " << Describe(*parsed);
      EXPECT_THAT(parsed, StatusIs(StatusCode::kInvalidArgument)) << v.dump();
      EXPECT_EQ(parsed.status().message(), error.substr(at + kErrorMarker.size())) << v.dump();
    } else {
      ASSERT_THAT(parsed, IsOk()) << v.dump();
      const HumanDuration want = FromJson(v["result"]);
      EXPECT_TRUE(*parsed == want) << v.dump() << ": got " << Describe(*parsed);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 28);
}

}  // namespace
}  // namespace stagehand
