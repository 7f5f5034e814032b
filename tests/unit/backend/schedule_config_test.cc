#include "stagehand/backend/schedule_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using std::chrono::milliseconds;
using ::testing::Not;
using ::testing::StartsWith;

constexpr const char* kUnitList =
    "'years', 'months', 'weeks', 'days', 'hours', 'minutes', 'seconds', 'milliseconds'";

Config Json(std::string_view text, std::string context = "mock-config") {
  auto config = Config::FromJson(text, std::move(context));
  EXPECT_THAT(config, IsOk());
  return config.ok() ? *config : Config::Empty();
}

Config Yaml(std::string_view text, std::string context = "app-config.yaml") {
  auto config = Config::FromYaml(text, std::move(context));
  EXPECT_THAT(config, IsOk());
  return config.ok() ? *config : Config::Empty();
}

template <typename T>
std::string ErrorOf(const Result<T>& result) {
  EXPECT_THAT(result, Not(IsOk()));
  if (result.ok()) {
    return "<ok>";
  }
  EXPECT_THAT(result, StatusIs(StatusCode::kInvalidArgument));
  return result.status().message();
}

HumanDuration Minutes(double m) {
  HumanDuration d;
  d.minutes = m;
  return d;
}

// Builds the HumanDuration that a vector's `result` object describes, keeping exactly its keys.
HumanDuration FromVector(const nlohmann::json& object) {
  HumanDuration d;
  for (const auto& [key, value] : object.items()) {
    const double number = value.get<double>();
    if (key == "years") {
      d.years = number;
    } else if (key == "months") {
      d.months = number;
    } else if (key == "weeks") {
      d.weeks = number;
    } else if (key == "days") {
      d.days = number;
    } else if (key == "hours") {
      d.hours = number;
    } else if (key == "minutes") {
      d.minutes = number;
    } else if (key == "seconds") {
      d.seconds = number;
    } else if (key == "milliseconds") {
      d.milliseconds = number;
    } else {
      ADD_FAILURE() << "unexpected unit " << key;
    }
  }
  return d;
}

TEST(ReadDurationFromConfigTest, MatchesEveryReferenceVector) {
  std::ifstream in(std::string(STAGEHAND_VECTORS_DIR) + "/config-durations.jsonl");
  ASSERT_TRUE(in) << "missing config-durations.jsonl";
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty()) {
      continue;
    }
    const auto vector = nlohmann::json::parse(line);
    const std::string input = vector.at("input").dump();
    const Config config = Json(R"({"frequency":)" + input + "}");
    const auto result = ReadDurationFromConfig(config, "frequency");
    if (vector.contains("error")) {
      ASSERT_THAT(result, Not(IsOk())) << input;
      EXPECT_THAT(result, StatusIs(StatusCode::kInvalidArgument)) << input;
      EXPECT_EQ(result.status().message(), vector.at("error").get<std::string>()) << input;
    } else {
      ASSERT_THAT(result, IsOk()) << input;
      EXPECT_EQ(*result, FromVector(vector.at("result"))) << input;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 36);
}

TEST(ReadDurationFromConfigTest, ObjectFormKeepsZerosAndConvertsNumericStrings) {
  const Config config = Json(R"({"d":{"days":0,"hours":"1.5","seconds":"  2 "}})");
  HumanDuration expected;
  expected.days = 0;
  expected.hours = 1.5;
  expected.seconds = 2;
  EXPECT_EQ(*ReadDurationFromConfig(config, "d"), expected);
}

TEST(ReadDurationFromConfigTest, WithoutKeyReadsTheViewItself) {
  const Config config = Json(R"({"sub":{"key":{"minutes":3}},"bad":{"extra":1,"hours":1}})");
  EXPECT_EQ(*ReadDurationFromConfig(*config.GetConfig("sub.key")), Minutes(3));
  EXPECT_EQ(ErrorOf(ReadDurationFromConfig(*config.GetConfig("bad"))),
            std::string("Failed to read duration from config, Error: Unknown property 'extra'; "
                        "expected one or more of ") +
                kUnitList);
  EXPECT_EQ(
      ErrorOf(ReadDurationFromConfig(Json("{}"))),
      std::string("Failed to read duration from config, Error: Needs one or more of ") + kUnitList);
}

TEST(ReadDurationFromConfigTest, ReaderErrorsAreWrapped) {
  const Config config = Json(R"({"sub":{"key":7,"obj":{"minutes":{}},"s":""},"n":null})");
  EXPECT_EQ(ErrorOf(ReadDurationFromConfig(*config.GetConfig("sub"), "key")),
            "Failed to read duration from config, TypeError: Invalid type in config for key "
            "'sub.key' in 'mock-config', got number, wanted object");
  EXPECT_EQ(ErrorOf(ReadDurationFromConfig(config, "sub.obj")),
            "Failed to read duration from config, TypeError: Invalid type in config for key "
            "'sub.obj.minutes' in 'mock-config', got object, wanted number");
  EXPECT_EQ(ErrorOf(ReadDurationFromConfig(config, "n")),
            "Failed to read duration from config, TypeError: Invalid type in config for key 'n' "
            "in 'mock-config', got null, wanted object");
  EXPECT_EQ(ErrorOf(ReadDurationFromConfig(config, "missing")),
            "Failed to read duration from config, Error: Missing required config value at "
            "'missing' in 'mock-config'");
  // The config reader rejects an empty string before any duration parsing, unwrapped.
  EXPECT_EQ(ErrorOf(ReadDurationFromConfig(config, "sub.s")),
            "Invalid type in config for key 'sub.s' in 'mock-config', got empty-string, wanted "
            "string");
}

TEST(ReadDurationFromConfigTest, ListsSeveralUnknownProperties) {
  const Config config = Json(R"({"f":{"hours":1,"b":2,"a":3,"c":4}})");
  EXPECT_EQ(ErrorOf(ReadDurationFromConfig(config, "f")),
            std::string("Failed to read duration from config at 'f', Error: Unknown properties "
                        "'b', 'a', 'c'; expected one or more of ") +
                kUnitList);
}

TEST(ReadDurationFromConfigTest, ReadsYamlStrings) {
  const Config config = Yaml("a: 10m\nb: ' PT30S '\nc: 2 hours\n");
  EXPECT_EQ(*ReadDurationFromConfig(config, "a"), Minutes(10));
  HumanDuration seconds;
  seconds.seconds = 30;
  EXPECT_EQ(*ReadDurationFromConfig(config, "b"), seconds);
  HumanDuration hours;
  hours.hours = 2;
  EXPECT_EQ(*ReadDurationFromConfig(config, "c"), hours);
}

// The cases of Backstage's SchedulerService.test.ts, then stagehand's additions.
TEST(ReadScheduleDefinitionTest, AllValidValues) {
  const Config config = Json(R"({
    "frequency": {"cron": "0 30 * * * *"},
    "timeout": {"minutes": 3},
    "initialDelay": {"seconds": 20},
    "scope": "global"
  })");
  auto schedule = ReadScheduleDefinitionFromConfig(config);
  ASSERT_THAT(schedule, IsOk());
  EXPECT_EQ(std::get<CronFrequency>(schedule->frequency), (CronFrequency{"0 30 * * * *", ""}));
  EXPECT_EQ(std::get<HumanDuration>(schedule->timeout), Minutes(3));
  ASSERT_TRUE(schedule->initial_delay.has_value());
  HumanDuration twenty_seconds;
  twenty_seconds.seconds = 20;
  EXPECT_EQ(std::get<HumanDuration>(*schedule->initial_delay), twenty_seconds);
  EXPECT_EQ(schedule->scope, TaskScope::kGlobal);
}

TEST(ReadScheduleDefinitionTest, AllValidRequiredValues) {
  const Config config = Json(R"({"frequency": {"minutes": 15}, "timeout": "PT3M"})");
  auto schedule = ReadScheduleDefinitionFromConfig(config);
  ASSERT_THAT(schedule, IsOk());
  EXPECT_EQ(std::get<HumanDuration>(schedule->frequency), Minutes(15));
  HumanDuration three_minutes;
  three_minutes.minutes = 3;
  EXPECT_EQ(std::get<HumanDuration>(schedule->timeout), three_minutes);
  EXPECT_FALSE(schedule->initial_delay.has_value());
  EXPECT_FALSE(schedule->scope.has_value());
}

TEST(ReadScheduleDefinitionTest, FailsWithoutRequiredFrequency) {
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(Json(R"({"timeout": {"minutes": 3}})"))),
            "Missing required config value at 'frequency' in 'mock-config'");
}

TEST(ReadScheduleDefinitionTest, FailsWithoutRequiredTimeout) {
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(Json(R"({"frequency": {"minutes": 3}})"))),
            "Failed to read duration from config, Error: Missing required config value at "
            "'timeout' in 'mock-config'");
}

TEST(ReadScheduleDefinitionTest, FailsOnInvalidFrequencyKey) {
  const Config config = Json(R"({"frequency": {"invalid": "value"}, "timeout": "PT3M"})");
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(config)),
            std::string("Failed to read duration from config at 'frequency', Error: Needs one or "
                        "more of ") +
                kUnitList);
}

TEST(ReadScheduleDefinitionTest, FailsOnInvalidFrequencyValue) {
  const Config config = Json(R"({"frequency": {"minutes": "invalid"}, "timeout": "PT3M"})");
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(config)),
            "Failed to read duration from config, Error: Unable to convert config value for key "
            "'frequency.minutes' in 'mock-config' to a number");
}

TEST(ReadScheduleDefinitionTest, FailsOnFrequencyWithAdditionalInvalidProp) {
  const Config config =
      Json(R"({"frequency": {"minutes": 1, "invalid": "value"}, "timeout": "PT3M"})");
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(config)),
            std::string("Failed to read duration from config at 'frequency', Error: Unknown "
                        "property 'invalid'; expected one or more of ") +
                kUnitList);
}

TEST(ReadScheduleDefinitionTest, FailsOnInvalidScope) {
  const Config config =
      Json(R"({"frequency": {"minutes": 1}, "timeout": "PT3M", "scope": "invalid"})");
  EXPECT_EQ(
      ErrorOf(ReadScheduleDefinitionFromConfig(config)),
      R"(Only "global" or "local" are allowed for TaskScheduleDefinition.scope, but got: invalid)");
}

TEST(ReadScheduleDefinitionTest, ReadsLocalScopeAndStringDurations) {
  const Config config = Json(
      R"({"frequency": "10m", "timeout": "PT1M", "initialDelay": "30 seconds", "scope": "local"})");
  auto schedule = ReadScheduleDefinitionFromConfig(config);
  ASSERT_THAT(schedule, IsOk());
  EXPECT_EQ(std::get<HumanDuration>(schedule->frequency), Minutes(10));
  HumanDuration thirty_seconds;
  thirty_seconds.seconds = 30;
  EXPECT_EQ(std::get<HumanDuration>(*schedule->initial_delay), thirty_seconds);
  EXPECT_EQ(schedule->scope, TaskScope::kLocal);
}

TEST(ReadScheduleDefinitionTest, ReadsManualTrigger) {
  auto schedule = ReadScheduleDefinitionFromConfig(
      Json(R"({"frequency": {"trigger": "manual"}, "timeout": {"hours": 1}})"));
  ASSERT_THAT(schedule, IsOk());
  EXPECT_TRUE(std::holds_alternative<ManualFrequency>(schedule->frequency));
}

TEST(ReadScheduleDefinitionTest, OtherTriggersAndFalsyCronsAreDurationObjects) {
  const std::string needs =
      std::string(
          "Failed to read duration from config at 'frequency', Error: Needs one or more "
          "of ") +
      kUnitList;
  for (const char* frequency :
       {R"({"trigger": "auto"})", R"({"trigger": "MANUAL"})", R"({"cron": ""})",
        R"({"cron": null})", R"({"cron": false})", R"({"cron": 0})", R"({})"}) {
    const Config config =
        Json(std::string(R"({"timeout": "PT1M", "frequency": )") + frequency + "}");
    EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(config)), needs) << frequency;
  }
}

TEST(ReadScheduleDefinitionTest, PlainStringsMustBeDurations) {
  const Config manual = Json(R"({"frequency": "manual", "timeout": "PT1M"})");
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(manual)),
            "Invalid duration 'manual' in config at 'frequency', Error: Not a valid duration "
            "string, try a number followed by a unit such as '1d' or '2 seconds'");
  const Config cron = Json(R"({"frequency": "*/5 * * * *", "timeout": "PT1M"})");
  EXPECT_THAT(ErrorOf(ReadScheduleDefinitionFromConfig(cron)),
              StartsWith("Invalid duration '*/5 * * * *' in config at 'frequency', Error: "));
}

TEST(ReadScheduleDefinitionTest, WrongTypedFrequencies) {
  EXPECT_EQ(
      ErrorOf(ReadScheduleDefinitionFromConfig(Json(R"({"frequency": 5, "timeout": "PT1M"})"))),
      "Failed to read duration from config, TypeError: Invalid type in config for key "
      "'frequency' in 'mock-config', got number, wanted object");
  EXPECT_EQ(
      ErrorOf(ReadScheduleDefinitionFromConfig(Json(R"({"frequency": null, "timeout": "PT1M"})"))),
      "Failed to read duration from config, TypeError: Invalid type in config for key "
      "'frequency' in 'mock-config', got null, wanted object");
  EXPECT_EQ(
      ErrorOf(ReadScheduleDefinitionFromConfig(Json(R"({"frequency": "", "timeout": "PT1M"})"))),
      "Invalid type in config for key 'frequency' in 'mock-config', got empty-string, "
      "wanted string");
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(
                Json(R"({"frequency": {"cron": 5}, "timeout": "PT1M"})"))),
            "Invalid type in config for key 'frequency.cron' in 'mock-config', got number, wanted "
            "string");
}

TEST(ReadScheduleDefinitionTest, InvalidTimeoutAndInitialDelay) {
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(
                Json(R"({"frequency": "1h", "timeout": "forever"})"))),
            "Invalid duration 'forever' in config at 'timeout', Error: Not a valid duration "
            "string, try a number followed by a unit such as '1d' or '2 seconds'");
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(
                Json(R"({"frequency": "1h", "timeout": "1m", "initialDelay": {}})"))),
            std::string("Failed to read duration from config at 'initialDelay', Error: Needs one "
                        "or more of ") +
                kUnitList);
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(
                Json(R"({"frequency": "1h", "timeout": "1m", "scope": ""})"))),
            "Invalid type in config for key 'scope' in 'mock-config', got empty-string, wanted "
            "string");
}

TEST(ReadScheduleDefinitionTest, ReadsCatchUpWindowAndJitterOutsideTheStoredSettings) {
  auto schedule = ReadScheduleDefinitionFromConfig(Json(
      R"({"frequency": "10m", "timeout": "1m", "catchupWindow": "0s", "jitter": {"seconds": 30}})"));
  ASSERT_THAT(schedule, IsOk());
  ASSERT_TRUE(schedule->catchup_window.has_value());
  EXPECT_EQ(ToMilliseconds(*schedule->catchup_window), std::chrono::milliseconds(0));
  ASSERT_TRUE(schedule->jitter.has_value());
  EXPECT_EQ(ToMilliseconds(*schedule->jitter), std::chrono::seconds(30));
  // Backstage's settings_json is byte-identical with or without them.
  auto plain = ReadScheduleDefinitionFromConfig(Json(R"({"frequency": "10m", "timeout": "1m"})"));
  ASSERT_THAT(plain, IsOk());
  EXPECT_EQ(BuildTaskSettings(*schedule)->ToJson(), BuildTaskSettings(*plain)->ToJson());
}

TEST(ReadScheduleDefinitionTest, BadCatchUpWindowOrJitterNamesTheKey) {
  EXPECT_THAT(ErrorOf(ReadScheduleDefinitionFromConfig(
                  Json(R"({"frequency": "1h", "timeout": "1m", "catchupWindow": "soon"})"))),
              ::testing::HasSubstr("'catchupWindow'"));
  EXPECT_THAT(ErrorOf(ReadScheduleDefinitionFromConfig(
                  Json(R"({"frequency": "1h", "timeout": "1m", "jitter": {"sconds": 3}})"))),
              ::testing::HasSubstr("'jitter'"));
  const std::string too_long = ErrorOf(ReadScheduleDefinitionFromConfig(
      Json(R"({"frequency": "10m", "timeout": "1m", "jitter": "10m"})")));
  EXPECT_THAT(too_long, ::testing::HasSubstr("jitter"));
  EXPECT_THAT(too_long, ::testing::HasSubstr("must be shorter than the frequency PT10M"));
}

TEST(ReadScheduleDefinitionTest, ReadsARetryPolicyOutsideTheStoredSettings) {
  auto schedule = ReadScheduleDefinitionFromConfig(Yaml(R"(
frequency: { minutes: 10 }
timeout: 1m
retry: { attempts: 2, backoff: 1s, maxBackoff: { minutes: 5 } }
)"));
  ASSERT_THAT(schedule, IsOk());
  ASSERT_TRUE(schedule->retry.has_value());
  EXPECT_EQ(schedule->retry->attempts, 2);
  EXPECT_EQ(ToMilliseconds(schedule->retry->backoff), std::chrono::seconds(1));
  ASSERT_TRUE(schedule->retry->max_backoff.has_value());
  EXPECT_EQ(ToMilliseconds(*schedule->retry->max_backoff), std::chrono::minutes(5));
  auto plain = ReadScheduleDefinitionFromConfig(Json(R"({"frequency": "10m", "timeout": "1m"})"));
  ASSERT_THAT(plain, IsOk());
  EXPECT_EQ(BuildTaskSettings(*schedule)->ToJson(), BuildTaskSettings(*plain)->ToJson());

  auto defaults = ReadScheduleDefinitionFromConfig(
      Json(R"({"frequency": "10m", "timeout": "1m", "retry": {"attempts": 3}})"));
  ASSERT_THAT(defaults, IsOk());
  EXPECT_EQ(ToMilliseconds(defaults->retry->backoff), std::chrono::seconds(1));
  EXPECT_FALSE(defaults->retry->max_backoff.has_value());
}

TEST(ReadScheduleDefinitionTest, BadRetryPolicyNamesTheKey) {
  const auto error = [](const std::string& retry) {
    return ErrorOf(ReadScheduleDefinitionFromConfig(
        Json(R"({"frequency": "10m", "timeout": "1m", "retry": )" + retry + "}")));
  };
  EXPECT_THAT(error(R"({"backoff": "1s"})"), ::testing::HasSubstr("'retry.attempts'"));
  EXPECT_THAT(error(R"({"attempts": 1.5})"),
              ::testing::HasSubstr("must be a whole number from 0 to 100"));
  EXPECT_THAT(error(R"({"attempts": 101})"), ::testing::HasSubstr("'retry.attempts'"));
  EXPECT_THAT(error(R"({"attempts": 2, "backoff": "soon"})"),
              ::testing::HasSubstr("'retry.backoff'"));
  EXPECT_THAT(error(R"({"attempts": 2, "backoff": "0s"})"),
              ::testing::HasSubstr("must be longer than zero"));
  EXPECT_THAT(error(R"({"attempts": 2, "backoff": "1m", "maxBackoff": "1s"})"),
              ::testing::HasSubstr("'retry.maxBackoff'"));
  EXPECT_THAT(error("true"), ::testing::HasSubstr("'retry'"));
}

TEST(ReadScheduleDefinitionTest, ReadsCronWithTimeZone) {
  const Config config = Yaml(R"(
frequency:
  cron: '0 9 * * 1-5'
  timeZone: Europe/Berlin
timeout: { minutes: 10 }
)");
  auto schedule = ReadScheduleDefinitionFromConfig(config);
  ASSERT_THAT(schedule, IsOk());
  EXPECT_EQ(std::get<CronFrequency>(schedule->frequency),
            (CronFrequency{"0 9 * * 1-5", "Europe/Berlin"}));
  // The expression comes parsed, so the scheduler does not parse it again.
  const auto& program = std::get<CronFrequency>(schedule->frequency).program;
  ASSERT_NE(program, nullptr);
  EXPECT_EQ(program->source(), "0 9 * * 1-5");
}

TEST(ReadScheduleDefinitionTest, RejectsBadCronAtLoad) {
  const Config config = Yaml(R"(
frequency: { cron: '61 * * * *' }
timeout: 1m
)",
                             "app-config.yaml");
  EXPECT_THAT(ErrorOf(ReadScheduleDefinitionFromConfig(config)),
              StartsWith("Invalid cron expression at 'frequency.cron' in 'app-config.yaml': "));
  const Config never = Json(R"({"frequency": {"cron": "0 0 30 2 *"}, "timeout": "1m"})");
  EXPECT_THAT(ErrorOf(ReadScheduleDefinitionFromConfig(never)),
              StartsWith("Invalid cron expression at 'frequency.cron' in 'mock-config': "));
}

TEST(ReadScheduleDefinitionTest, RejectsUnknownTimeZone) {
  const Config config =
      Json(R"({"frequency": {"cron": "* * * * *", "timeZone": "Mars/Olympus"}, "timeout": "1m"})");
  EXPECT_THAT(ErrorOf(ReadScheduleDefinitionFromConfig(config)),
              StartsWith("Invalid time zone at 'frequency.timeZone' in 'mock-config': "));
  const Config empty =
      Json(R"({"frequency": {"cron": "* * * * *", "timeZone": ""}, "timeout": "1m"})");
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(empty)),
            "Invalid type in config for key 'frequency.timeZone' in 'mock-config', got "
            "empty-string, wanted string");
}

TEST(ReadScheduleDefinitionTest, NestedViewsReportFullKeys) {
  const Config config = Yaml(R"(
catalog:
  providers:
    github:
      schedule:
        frequency: { minutes: soon }
        timeout: 3m
    gitlab:
      schedule:
        timeout: 3m
    ldap:
      schedule:
        frequency: { cron: 'bad' }
        timeout: 3m
)",
                             "app-config.production.yaml");
  auto github = config.GetConfig("catalog.providers.github.schedule");
  ASSERT_THAT(github, IsOk());
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(*github)),
            "Failed to read duration from config, Error: Unable to convert config value for key "
            "'catalog.providers.github.schedule.frequency.minutes' in "
            "'app-config.production.yaml' to a number");
  auto gitlab = config.GetConfig("catalog.providers.gitlab.schedule");
  ASSERT_THAT(gitlab, IsOk());
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(*gitlab)),
            "Missing required config value at 'catalog.providers.gitlab.schedule.frequency' in "
            "'app-config.production.yaml'");
  auto ldap = config.GetConfig("catalog.providers.ldap.schedule");
  ASSERT_THAT(ldap, IsOk());
  EXPECT_THAT(ErrorOf(ReadScheduleDefinitionFromConfig(*ldap)),
              StartsWith("Invalid cron expression at "
                         "'catalog.providers.ldap.schedule.frequency.cron' in "
                         "'app-config.production.yaml': "));
}

TEST(BuildTaskSettingsTest, ConfigSchedulesBuildValidSettings) {
  const Config config = Yaml(R"(
frequency: { cron: '*/5 * * * *' }
timeout: { minutes: 3 }
initialDelay: 10s
)");
  auto schedule = ReadScheduleDefinitionFromConfig(config);
  ASSERT_THAT(schedule, IsOk());
  const Result<TaskSettingsV2> built = BuildTaskSettings(*schedule);
  ASSERT_THAT(built, IsOk());
  const TaskSettingsV2& settings = *built;
  EXPECT_THAT(settings.Validate(), IsOk());
  EXPECT_EQ(
      settings.ToJson(),
      R"({"version":2,"cadence":"*/5 * * * *","initialDelayDuration":"PT10S","timeoutAfterDuration":"PT3M"})");
}

// Schedules Backstage reads but whose workers would run without pause (issue 13): rejected after
// parsing, one line per field, naming the full key and the file.
TEST(ReadScheduleDefinitionTest, RejectsZeroAndNegativeFrequenciesInEveryForm) {
  const std::string key = "Invalid config value for key 'frequency' in 'mock-config': ";
  for (const auto& [frequency, got] : std::vector<std::pair<std::string, std::string>>{
           {R"("0s")", "PT0S"},
           {R"("0 ms")", "PT0S"},
           {R"("PT0S")", "PT0S"},
           {R"("P0D")", "PT0S"},
           {R"("PT-1M")", "PT-1M"},
           {R"({"seconds": 0})", "PT0S"},
           {R"({"minutes": -1})", "PT-1M"},
           {R"({"hours": 1, "minutes": -60})", "PT1H-60M"},
           {R"({"milliseconds": 0.4})", "PT0S"}}) {
    const Config config = Json(R"({"frequency": )" + frequency + R"(, "timeout": "1m"})");
    EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(config)),
              key + "must be longer than zero, got " + got)
        << frequency;
  }
}

TEST(ReadScheduleDefinitionTest, NegativeStringsFailInBackstagesOwnParser) {
  EXPECT_EQ(
      ErrorOf(ReadScheduleDefinitionFromConfig(Json(R"({"frequency": "-1m", "timeout": "1m"})"))),
      "Invalid duration '-1m' in config at 'frequency', Error: Negative durations are not "
      "allowed");
  // A leading '-' is not ISO to Backstage's reader (only "PT-1M" is), so the `ms` form refuses it.
  EXPECT_EQ(
      ErrorOf(ReadScheduleDefinitionFromConfig(Json(R"({"frequency": "-PT1M", "timeout": "1m"})"))),
      "Invalid duration '-PT1M' in config at 'frequency', Error: Not a valid duration "
      "string, try a number followed by a unit such as '1d' or '2 seconds'");
}

TEST(ReadScheduleDefinitionTest, RejectsZeroAndNegativeTimeoutsInEveryForm) {
  const std::string key = "Invalid config value for key 'timeout' in 'mock-config': ";
  for (const auto& [timeout, got] :
       std::vector<std::pair<std::string, std::string>>{{R"("0s")", "PT0S"},
                                                        {R"("PT0S")", "PT0S"},
                                                        {R"("PT-5S")", "PT-5S"},
                                                        {R"({"seconds": 0})", "PT0S"},
                                                        {R"({"minutes": -1})", "PT-1M"}}) {
    const Config config =
        Json(R"({"frequency": {"trigger": "manual"}, "timeout": )" + timeout + "}");
    EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(config)),
              key + "must be longer than zero, got " + got)
        << timeout;
  }
}

TEST(ReadScheduleDefinitionTest, RejectsNegativeInitialDelaysAndAcceptsZero) {
  const std::string key = "Invalid config value for key 'initialDelay' in 'mock-config': ";
  for (const auto& [delay, got] : std::vector<std::pair<std::string, std::string>>{
           {R"("PT-1M")", "PT-1M"}, {R"({"seconds": -1})", "PT-1S"}}) {
    const Config config =
        Json(R"({"frequency": "1h", "timeout": "1m", "initialDelay": )" + delay + "}");
    EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(config)),
              key + "cannot be negative, got " + got)
        << delay;
  }
  for (const char* zero : {R"("0s")", R"("PT0S")", R"({"seconds": 0})"}) {
    const Config config =
        Json(std::string(R"({"frequency": "1h", "timeout": "1m", "initialDelay": )") + zero + "}");
    auto schedule = ReadScheduleDefinitionFromConfig(config);
    ASSERT_THAT(schedule, IsOk()) << zero;
    EXPECT_EQ(ToMilliseconds(*schedule->initial_delay), milliseconds(0)) << zero;
  }
}

TEST(ReadScheduleDefinitionTest, ReportsEveryDurationThatCannotWorkWithItsFullKey) {
  const Config config = Yaml(R"(
jobs:
  schedule:
    frequency: { minutes: -1 }
    timeout: 0s
    initialDelay: PT-1S
)",
                             "app.yaml");
  auto schedule = config.GetConfig("jobs.schedule");
  ASSERT_THAT(schedule, IsOk());
  EXPECT_EQ(ErrorOf(ReadScheduleDefinitionFromConfig(*schedule)),
            "Invalid config value for key 'jobs.schedule.frequency' in 'app.yaml': must be longer "
            "than zero, got PT-1M\n"
            "Invalid config value for key 'jobs.schedule.timeout' in 'app.yaml': must be longer "
            "than zero, got PT0S\n"
            "Invalid config value for key 'jobs.schedule.initialDelay' in 'app.yaml': cannot be "
            "negative, got PT-1S");
}

TEST(ReadScheduleDefinitionTest, RejectsCronsThatNeverFire) {
  for (const char* cron : {"0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 0 30 2 *"}) {
    const Config config =
        Json(std::string(R"({"frequency": {"cron": ")") + cron + R"("}, "timeout": "1m"})");
    EXPECT_THAT(ErrorOf(ReadScheduleDefinitionFromConfig(config)),
                StartsWith("Invalid cron expression at 'frequency.cron' in 'mock-config': "))
        << cron;
  }
}

// Returns the problems CheckScheduleKeys finds in the schedule at `stagehand.plugins.jobs.tasks.t.
// schedule` of `yaml` (the schedule block's body, indented by 10 spaces).
std::vector<std::string> ScheduleKeyProblems(const std::string& yaml, bool expect_known = false) {
  const Config config = Yaml(
      "stagehand:\n  plugins:\n    jobs:\n      tasks:\n        t:\n          schedule:\n" + yaml,
      "app.yaml");
  auto schedule = config.GetConfig("stagehand.plugins.jobs.tasks.t.schedule");
  EXPECT_THAT(schedule, IsOk());
  ConfigProblems problems;
  EXPECT_EQ(CheckScheduleKeys(*schedule, problems), expect_known);
  return problems.lines();
}

constexpr const char* kScheduleKey =
    "Invalid config value for key 'stagehand.plugins.jobs.tasks.t.schedule.";

TEST(CheckScheduleKeysTest, SuggestsTheKeyMeantInsideTheSchedule) {
  EXPECT_THAT(ScheduleKeyProblems("            frequency: { minutes: 5 }\n"
                                  "            timeout: 1m\n"
                                  "            intialDelay: 10s\n"
                                  "            Scope: local\n"),
              ::testing::ElementsAre(
                  std::string(kScheduleKey) +
                      "intialDelay' in 'app.yaml': unknown key 'intialDelay'; did you mean "
                      "'initialDelay'?",
                  std::string(kScheduleKey) +
                      "Scope' in 'app.yaml': unknown key 'Scope'; did you mean 'scope'?"));
}

TEST(CheckScheduleKeysTest, SuggestsFrequencyKeysPlacedBesideIt) {
  EXPECT_THAT(ScheduleKeyProblems("            frequency: { cron: '0 3 * * *' }\n"
                                  "            timeZone: Europe/Berlin\n"
                                  "            timeout: 1m\n"),
              ::testing::ElementsAre(std::string(kScheduleKey) +
                                     "timeZone' in 'app.yaml': unknown key 'timeZone'; did you "
                                     "mean 'frequency.timeZone'?"));
}

TEST(CheckScheduleKeysTest, ChecksEachFormOfFrequency) {
  EXPECT_THAT(ScheduleKeyProblems("            frequency: { cron: '0 3 * * *', timezone: UTC }\n"
                                  "            timeout: 1m\n"),
              ::testing::ElementsAre(std::string(kScheduleKey) +
                                     "frequency.timezone' in 'app.yaml': unknown key 'timezone'; "
                                     "did you mean 'timeZone'?"));
  EXPECT_THAT(
      ScheduleKeyProblems("            frequency: { trigger: manual, minutes: 1 }\n"
                          "            timeout: 1m\n"),
      ::testing::ElementsAre(std::string(kScheduleKey) +
                             "frequency.minutes' in 'app.yaml': unknown key 'minutes'; expected "
                             "trigger"));
  EXPECT_THAT(ScheduleKeyProblems("            frequency: { minuts: 5 }\n"
                                  "            timeout: 1m\n"),
              ::testing::ElementsAre(std::string(kScheduleKey) +
                                     "frequency.minuts' in 'app.yaml': unknown key 'minuts'; did "
                                     "you mean 'minutes'?"));
  EXPECT_THAT(ScheduleKeyProblems("            frequency: { crn: '* * * * *' }\n"
                                  "            timeout: 1m\n"),
              ::testing::ElementsAre(std::string(kScheduleKey) +
                                     "frequency.crn' in 'app.yaml': unknown key 'crn'; did you "
                                     "mean 'cron'?"));
}

TEST(CheckScheduleKeysTest, ChecksTimeoutAndInitialDelayObjects) {
  EXPECT_THAT(ScheduleKeyProblems("            frequency: 1h\n"
                                  "            timeout: { secnds: 30 }\n"
                                  "            initialDelay: { minutes: 1, hrs: 1 }\n"),
              ::testing::ElementsAre(
                  std::string(kScheduleKey) +
                      "timeout.secnds' in 'app.yaml': unknown key 'secnds'; did you mean "
                      "'seconds'?",
                  std::string(kScheduleKey) +
                      "initialDelay.hrs' in 'app.yaml': unknown key 'hrs'; expected years, "
                      "months, weeks, days, hours, minutes, seconds, milliseconds"));
}

TEST(CheckScheduleKeysTest, AcceptsEveryKnownKey) {
  EXPECT_THAT(ScheduleKeyProblems("            frequency: { cron: '0 3 * * *', timeZone: UTC }\n"
                                  "            timeout: { minutes: 1, seconds: 30 }\n"
                                  "            initialDelay: 10s\n"
                                  "            scope: local\n",
                                  true),
              ::testing::IsEmpty());
  EXPECT_THAT(ScheduleKeyProblems("            frequency: { trigger: manual }\n"
                                  "            timeout: PT1M\n",
                                  true),
              ::testing::IsEmpty());
}

}  // namespace
}  // namespace stagehand
