#include "stagehand/config/config_diff.h"

#include <gtest/gtest.h>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;

Config Yaml(const char* text, const char* file) {
  Result<Config> config = Config::FromYaml(text, file);
  EXPECT_THAT(config, IsOk());
  return *config;
}

TEST(ChangedConfigKeysTest, NamesEveryChangedAddedAndRemovedKeyButNotTheSourceFile) {
  const Config before =
      Yaml("backend: { listen: { port: 7007, host: a }, list: [1, 2] }\nx: 1\n", "one.yaml");
  EXPECT_TRUE(ChangedConfigKeys(before, Yaml("backend: { listen: { host: a, port: 7007 }, "
                                             "list: [1, 2] }\nx: 1\n",
                                             "two.yaml"))
                  .empty());
  EXPECT_EQ(ChangedConfigKeys(before, Yaml("backend: { listen: { port: 7008 }, list: [1] }\n"
                                           "y: { z: true }\n",
                                           "two.yaml")),
            (std::vector<std::string>{"backend.listen.port", "backend.listen.host", "backend.list",
                                      "x", "y"}));
}

}  // namespace
}  // namespace stagehand
