// The RequestKeys contract: the idempotency keys of every TaskStore, checked through the
// StoreFixture seam. A keyed request is applied once and answered the same each time it is sent
// again, from any host; its store writes are committed with its key or rolled back with it; a key
// sent with another request is refused; an expired key is applied anew.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "contract/contract_test.h"
#include "contract/store_fixture.h"
#include "stagehand/store/request_keys.h"
#include "stagehand/store/task_store.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::contract {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

using std::chrono::milliseconds;

class RequestKeysContractTest : public ContractTest {
 protected:
  void SetUp() override {
    ContractTest::SetUp();
    if (HasFatalFailure()) return;
    keys_ = store_->request_keys();
    ASSERT_NE(keys_, nullptr) << "the store keeps no idempotency keys";
  }

  static KeyedRequest Keyed(std::string key, std::string fingerprint = "POST /t/trigger\n") {
    return KeyedRequest{std::move(key), std::move(fingerprint), std::chrono::hours(1)};
  }

  // Applies `request` on `keys`, counting the calls of its apply in `applied`.
  Result<KeyedOutcome> Apply(RequestKeys& keys, const KeyedRequest& request, int& applied,
                             KeptAnswer answer = KeptAnswer{200, ""}) {
    return keys.ApplyOnce(request, [&]() -> Result<KeptAnswer> {
      ++applied;
      return answer;
    });
  }

  RequestKeys* keys_ = nullptr;
};

TEST_F(RequestKeysContractTest, ARequestSentAgainIsAnsweredAsTheFirstWithoutBeingApplied) {
  int applied = 0;
  const KeptAnswer conflict{409, R"({"error":{"name":"ConflictError","message":"Task t ü"}})"};
  Result<KeyedOutcome> first = Apply(*keys_, Keyed("k-1"), applied, conflict);
  ASSERT_THAT(first, IsOk());
  EXPECT_FALSE(first->replayed);
  EXPECT_EQ(first->answer, conflict);

  Result<KeyedOutcome> again = Apply(*keys_, Keyed("k-1"), applied, KeptAnswer{200, ""});
  ASSERT_THAT(again, IsOk());
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(again->answer, conflict);
  EXPECT_EQ(applied, 1);

  // Another host on the same database answers it the same.
  std::unique_ptr<TaskStore> other = fixture_->OpenStore();
  ASSERT_NE(other->request_keys(), nullptr);
  Result<KeyedOutcome> elsewhere = Apply(*other->request_keys(), Keyed("k-1"), applied);
  ASSERT_THAT(elsewhere, IsOk());
  EXPECT_TRUE(elsewhere->replayed);
  EXPECT_EQ(elsewhere->answer, conflict);
  EXPECT_EQ(applied, 1);

  // Another key is another request.
  Result<KeyedOutcome> fresh = Apply(*keys_, Keyed("k-2"), applied);
  ASSERT_THAT(fresh, IsOk());
  EXPECT_FALSE(fresh->replayed);
  EXPECT_EQ(applied, 2);
}

TEST_F(RequestKeysContractTest, AKeySentWithAnotherRequestIsRefused) {
  int applied = 0;
  ASSERT_THAT(Apply(*keys_, Keyed("k", "POST /a/trigger\n"), applied), IsOk());
  Result<KeyedOutcome> other = Apply(*keys_, Keyed("k", "POST /b/trigger\n"), applied);
  ASSERT_THAT(other, StatusIs(StatusCode::kConflict, "k"));
  EXPECT_EQ(applied, 1);
}

TEST_F(RequestKeysContractTest, TheStoresWritesInTheApplyAreCommittedWithTheKey) {
  Upsert("t", Schedule("PT1H", "PT1H"));
  const WallTime before = Now();
  Result<KeyedOutcome> first = keys_->ApplyOnce(Keyed("trigger-1"), [&]() -> Result<KeptAnswer> {
    STAGEHAND_RETURN_IF_ERROR(store_->Trigger("t"));
    return KeptAnswer{200, ""};
  });
  ASSERT_THAT(first, IsOk());
  const TaskRow triggered = Row("t");
  ASSERT_TRUE(triggered.next_run_start_at.has_value());
  EXPECT_LE(*triggered.next_run_start_at, before + std::chrono::seconds(1));
}

TEST_F(RequestKeysContractTest, AnApplyThatFailsKeepsNoKeyAndItsWritesAreRolledBack) {
  const std::optional<WallTime> due = Upsert("t", Schedule("PT1H", "PT1H"));
  int applied = 0;
  Result<KeyedOutcome> failed = keys_->ApplyOnce(Keyed("k"), [&]() -> Result<KeptAnswer> {
    ++applied;
    if (fixture_->rolls_back_keyed_requests()) {
      STAGEHAND_RETURN_IF_ERROR(store_->Trigger("t"));
    }
    return UnavailableError("the commit's outcome is unknown");
  });
  ASSERT_THAT(failed, StatusIs(StatusCode::kUnavailable));
  EXPECT_EQ(Row("t").next_run_start_at, due) << "the trigger outlived its rolled back request";

  // Sent again, it is applied: nothing was kept.
  Result<KeyedOutcome> again = Apply(*keys_, Keyed("k"), applied);
  ASSERT_THAT(again, IsOk());
  EXPECT_FALSE(again->replayed);
  EXPECT_EQ(applied, 2);
}

TEST_F(RequestKeysContractTest, AKeyPastItsRetentionIsAppliedAgain) {
  int applied = 0;
  KeyedRequest brief = Keyed("brief");
  brief.retention = milliseconds(30);
  ASSERT_THAT(Apply(*keys_, brief, applied), IsOk());
  LetStoredTimePass(milliseconds(60));
  Result<KeyedOutcome> later = Apply(*keys_, brief, applied, KeptAnswer{409, "later"});
  ASSERT_THAT(later, IsOk());
  EXPECT_FALSE(later->replayed);
  EXPECT_EQ(applied, 2);
  Result<KeyedOutcome> kept = Apply(*keys_, Keyed("brief"), applied);
  ASSERT_THAT(kept, IsOk());
  EXPECT_TRUE(kept->replayed);
  EXPECT_EQ(kept->answer, (KeptAnswer{409, "later"}));
}

}  // namespace
}  // namespace stagehand::contract
