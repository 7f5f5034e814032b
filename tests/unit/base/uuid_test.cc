#include "stagehand/base/uuid.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>

namespace stagehand {
namespace {

TEST(UuidTest, IsLowercaseHyphenatedVersion4) {
  const std::regex shape("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(std::regex_match(NewUuidV4(), shape));
}

TEST(UuidTest, DoesNotRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 10000; ++i) EXPECT_TRUE(seen.insert(NewUuidV4()).second);
}

}  // namespace
}  // namespace stagehand
