#include "stagehand/config/config_problems.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

TEST(ConfigProblemsTest, EmptyIsOk) {
  ConfigProblems problems;
  problems.Add(Status::Ok());
  EXPECT_TRUE(problems.empty());
  EXPECT_THAT(problems.ToStatus(), IsOk());
}

TEST(ConfigProblemsTest, EachLineOfAStatusIsOneProblem) {
  ConfigProblems problems;
  problems.Add(InvalidArgumentError("first\nsecond\n"));
  problems.Add("third");
  EXPECT_EQ(problems.lines(), (std::vector<std::string>{"first", "second", "third"}));
  const Status status = problems.ToStatus();
  EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(status.message(), "first\nsecond\nthird");
}

TEST(ConfigProblemsTest, InvalidConfigValueNamesKeyAndFile) {
  Result<Config> config = Config::FromYaml("backend:\n  listen:\n    port: 99999\n", "app.yaml");
  ASSERT_THAT(config, IsOk());
  Result<Config> backend = config->GetConfig("backend");
  ASSERT_THAT(backend, IsOk());
  EXPECT_EQ(InvalidConfigValue(*backend, "listen.port", "too large"),
            "Invalid config value for key 'backend.listen.port' in 'app.yaml': too large");
}

}  // namespace
}  // namespace stagehand
