// RunError: the attempt a row's last_run_error_json records, written as stagehand wrote it before
// the codec existed and read back.
#include "stagehand/model/run_error.h"

#include <gtest/gtest.h>

#include <string>

#include "stagehand/model/schedule.h"
#include "stagehand/model/task_state.h"

namespace stagehand {
namespace {

TEST(RunErrorTest, TheAttemptIsRecordedInTheErrorAndReadBack) {
  const std::string error = R"({"name":"Error","message":"boom"})";
  const RunError retried = RunError::Retried(error, 2);
  EXPECT_EQ(retried.Encode(), R"({"name":"Error","message":"boom","attempt":2})");
  EXPECT_EQ(retried.retried_attempt(), 2);
  EXPECT_EQ(RunError::Decode(retried.Encode()), retried);
}

TEST(RunErrorTest, AnErrorWithoutAnAttemptRecordsNone) {
  EXPECT_EQ(RunError::Decode(ErrorJson("boom")).retried_attempt(), 0);
  EXPECT_EQ(RunError::Decode("not json").retried_attempt(), 0);
  EXPECT_EQ(RunError::Decode("").retried_attempt(), 0);
  EXPECT_EQ(RunError::Decode(R"({"attempt":"2"})").retried_attempt(), 0);
  EXPECT_EQ(RunError::Decode(R"([{"attempt":2}])").retried_attempt(), 0);
  EXPECT_EQ(RunError::Decode(R"({"attempt":2.5})").retried_attempt(), 0);
}

TEST(RunErrorTest, DecodingKeepsTheStoredBytes) {
  for (const std::string& stored : {std::string(R"({"name":"Error","message":"boom","attempt":3})"),
                                    ErrorJson("Task timed out"), std::string("not json"),
                                    std::string(R"({"attempt":-4})"), std::string()}) {
    EXPECT_EQ(RunError::Decode(stored).Encode(), stored);
  }
}

TEST(RunErrorTest, AStoredAttemptIsClampedToTheRetryRange) {
  EXPECT_EQ(RunError::Decode(R"({"attempt":-4})").retried_attempt(), 0);
  EXPECT_EQ(RunError::Decode(R"({"attempt":5000})").retried_attempt(), kMaxRetryAttempts + 1);
}

TEST(RunErrorTest, TextThatIsNotAnObjectIsKeptAsItIs) {
  EXPECT_EQ(RunError::Retried("not json", 2).Encode(), "not json");
  EXPECT_EQ(RunError::Retried("}", 2).Encode(), "}");
  EXPECT_EQ(RunError::Retried("not json", 2).retried_attempt(), 0);
}

}  // namespace
}  // namespace stagehand
