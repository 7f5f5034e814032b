// The TaskRegistrations contract: the registrations of every TaskStore (memory, SQLite,
// PostgreSQL), checked through the StoreFixture seam. Registrations written by UpsertMany and
// refreshed by heartbeats, the prune rule (which tasks are listed for a cutoff: never one claimed
// now, or registered, claimed, ended or due since the cutoff), and the deletion of a task's row,
// history and registration, checked again as it runs.
//
// Time: cutoffs are read from the database's clock between writes, with a few milliseconds let
// pass on either side (the manual clock for the memory store), and old rows are written raw, as a
// Backstage worker leaves them; nothing waits for days to pass.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "contract/contract_test.h"
#include "contract/store_fixture.h"
#include "stagehand/model/task_run.h"
#include "stagehand/store/run_history.h"
#include "stagehand/store/task_registrations.h"
#include "stagehand/store/task_store.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::contract {
namespace {

using ::stagehand::testing::IsOk;

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;

constexpr hours kDay{24};
// Long enough for every store's clock to tell two writes apart.
constexpr milliseconds kStep{20};

std::vector<std::string> Ids(const std::vector<PruneCandidate>& candidates) {
  std::vector<std::string> ids;
  ids.reserve(candidates.size());
  for (const PruneCandidate& candidate : candidates) ids.push_back(candidate.task_id);
  return ids;
}

class TaskRegistrationsContractTest : public ContractTest {
 protected:
  void SetUp() override {
    ContractTest::SetUp();
    if (HasFatalFailure()) return;
    registrations_ = store_->registrations();
    ASSERT_NE(registrations_, nullptr) << "the store keeps no task registrations";
  }

  // Registers manual tasks (no next start, so only registrations and runs date them) as `host`.
  void Register(const std::vector<std::string>& ids, const std::string& host = "host-a") {
    std::vector<TaskUpsert> upserts;
    for (const std::string& id : ids) upserts.push_back(TaskUpsert{id, Schedule("manual"), host});
    Result<std::vector<UpsertResult>> upserted = store_->UpsertMany(upserts);
    EXPECT_THAT(upserted, IsOk());
  }

  std::size_t Refresh(const std::vector<std::string>& ids, const std::string& host) {
    Result<std::size_t> refreshed = registrations_->RefreshRegistrations(ids, host);
    EXPECT_THAT(refreshed, IsOk());
    return refreshed.ok() ? *refreshed : 0;
  }

  std::vector<PruneCandidate> Candidates(WallTime cutoff) {
    Result<std::vector<PruneCandidate>> candidates = registrations_->ListPruneCandidates(cutoff);
    EXPECT_THAT(candidates, IsOk());
    return candidates.ok() ? std::move(*candidates) : std::vector<PruneCandidate>{};
  }

  std::vector<std::string> Prune(const std::vector<std::string>& ids, WallTime cutoff,
                                 PruneScope scope = PruneScope::kRegistered) {
    Result<std::vector<std::string>> deleted = registrations_->PruneTasks(ids, cutoff, scope);
    EXPECT_THAT(deleted, IsOk());
    return deleted.ok() ? std::move(*deleted) : std::vector<std::string>{};
  }

  // Returns the database's now between two short pauses: writes before it are older, writes
  // after it newer.
  WallTime CutoffBetweenWrites() {
    LetStoredTimePass(kStep);
    const WallTime cutoff = Now();
    LetStoredTimePass(kStep);
    return cutoff;
  }

  // Writes a row no stagehand host registered, as a Backstage worker leaves it.
  void PutBackstageRow(const std::string& id, std::optional<WallTime> last_run_ended_at,
                       std::optional<WallTime> next_run_start_at) {
    TaskRow row;
    row.id = id;
    row.settings_json = R"({"version":2,"cadence":"PT1H","timeoutAfterDuration":"PT1M"})";
    row.next_run_start_at = next_run_start_at;
    row.last_run_ended_at = last_run_ended_at;
    fixture_->PutRawRow(row);
  }

  void RecordRun(const std::string& run_id, const std::string& task_id, WallTime started_at) {
    ASSERT_NE(store_->history(), nullptr);
    const std::vector<RunStart> starts = {RunStart{
        run_id, task_id, RunOrigin{"host-a", 7, RunTrigger::kSchedule, {}, 1}, started_at}};
    const Status recorded = store_->history()->RecordStarts(starts);
    EXPECT_THAT(recorded, IsOk());
  }

  std::vector<std::string> RunsOf(const std::string& task_id) {
    Result<RunPage> page = store_->history()->ListRuns(task_id, kMaxRunPageSize, std::nullopt);
    EXPECT_THAT(page, IsOk());
    std::vector<std::string> ids;
    if (page.ok()) {
      for (const TaskRun& run : page->runs) ids.push_back(run.run_id);
    }
    return ids;
  }

  TaskRegistrations* registrations_ = nullptr;
};

TEST_F(TaskRegistrationsContractTest, CandidatesAreTheRegisteredTasksNotSeenSinceTheCutoff) {
  const WallTime before = Now();
  LetStoredTimePass(kStep);  // so that the registration is stored as newer than `before`
  Register({"gone", "alive"});
  const WallTime between = CutoffBetweenWrites();
  EXPECT_EQ(Refresh({"alive"}, "host-b"), 1u);
  const WallTime after = CutoffBetweenWrites();

  EXPECT_TRUE(Candidates(before).empty()) << "both were registered after that cutoff";
  const std::vector<PruneCandidate> candidates = Candidates(between);
  ASSERT_EQ(Ids(candidates), std::vector<std::string>{"gone"});
  EXPECT_EQ(candidates[0].host, "host-a");
  EXPECT_TRUE(Within(candidates[0].last_seen_at, before, between));
  EXPECT_EQ(candidates[0].last_run_ended_at, std::nullopt);
  EXPECT_EQ(candidates[0].next_run_start_at, std::nullopt);
  EXPECT_TRUE(candidates[0].registered());

  const std::vector<PruneCandidate> later = Candidates(after);
  ASSERT_EQ(Ids(later), (std::vector<std::string>{"alive", "gone"}));
  EXPECT_EQ(later[0].host, "host-b") << "the host that refreshed it last";
  EXPECT_TRUE(Within(later[0].last_seen_at, between, after));
}

TEST_F(TaskRegistrationsContractTest, ARegistrationWithoutAHostRecordsNone) {
  ASSERT_THAT(store_->UpsertMany(std::vector<TaskUpsert>{TaskUpsert{"plain", Schedule("manual")}}),
              IsOk());
  const std::vector<PruneCandidate> candidates = Candidates(CutoffBetweenWrites());
  ASSERT_EQ(Ids(candidates), std::vector<std::string>{"plain"});
  EXPECT_FALSE(candidates[0].registered());
  EXPECT_EQ(candidates[0].last_seen_at, std::nullopt);
}

TEST_F(TaskRegistrationsContractTest, ARefreshRecordsOnlyTasksThatHaveARow) {
  Register({"kept"});
  EXPECT_EQ(Refresh({"never-registered", "kept"}, "host-a"), 1u);
  EXPECT_EQ(Refresh({}, "host-a"), 0u);
  PutBackstageRow("never-registered", std::nullopt, std::nullopt);
  const std::vector<PruneCandidate> candidates = Candidates(CutoffBetweenWrites());
  ASSERT_EQ(Ids(candidates), (std::vector<std::string>{"kept", "never-registered"}));
  EXPECT_TRUE(candidates[0].registered());
  EXPECT_FALSE(candidates[1].registered()) << "a refresh before its row existed recorded nothing";
}

TEST_F(TaskRegistrationsContractTest, ATaskClaimedNowIsNeverACandidate) {
  Register({"idle"});
  ASSERT_TRUE(
      store_->UpsertMany(std::vector<TaskUpsert>{TaskUpsert{"busy", Schedule("PT1H"), "host-a"}})
          .ok());
  ASSERT_TRUE(Claim("busy", "ticket-1", minutes(1), minutes(1)));
  const WallTime far_cutoff = Now() + kDay;
  EXPECT_EQ(Ids(Candidates(far_cutoff)), std::vector<std::string>{"idle"});
  EXPECT_TRUE(Prune({"busy"}, far_cutoff).empty());
  EXPECT_TRUE(fixture_->GetRawRow("busy").has_value());

  // A claim whose expiry has passed (its host died mid-run) shows nothing more.
  TaskRow row = Row("busy");
  row.current_run_started_at = Now() - minutes(2);
  row.current_run_expires_at = Now() - minutes(1);
  fixture_->PutRawRow(row);
  EXPECT_EQ(Ids(Candidates(far_cutoff)), (std::vector<std::string>{"busy", "idle"}));
}

TEST_F(TaskRegistrationsContractTest, ATaskThatRanOrIsDueSinceTheCutoffIsKept) {
  Register({"registered-idle", "registered-ran"});
  const WallTime now = Now();
  PutBackstageRow("stale", now - 40 * kDay, now - 40 * kDay);
  PutBackstageRow("ended-lately", now - minutes(5), now - 40 * kDay);
  PutBackstageRow("due-later", now - 40 * kDay, now + kDay);
  PutBackstageRow("manual-never-ran", std::nullopt, std::nullopt);
  const WallTime cutoff = CutoffBetweenWrites();
  TaskRow ran = Row("registered-ran");
  ran.last_run_ended_at = Now();
  fixture_->PutRawRow(ran);

  const std::vector<PruneCandidate> candidates = Candidates(cutoff);
  EXPECT_EQ(Ids(candidates), (std::vector<std::string>{"ended-lately", "manual-never-ran",
                                                       "registered-idle", "stale"}));
  const std::vector<PruneCandidate> older = Candidates(now - kDay);
  ASSERT_EQ(Ids(older), (std::vector<std::string>{"manual-never-ran", "stale"}));
  EXPECT_FALSE(older[1].registered());
  EXPECT_TRUE(Same(older[1].last_run_ended_at, now - 40 * kDay));
  EXPECT_TRUE(Same(older[1].next_run_start_at, now - 40 * kDay));
}

TEST_F(TaskRegistrationsContractTest, ListingDeletesNothing) {
  Register({"gone"});
  RecordRun("gone-1", "gone", Now() - kDay);
  const WallTime cutoff = CutoffBetweenWrites();
  EXPECT_EQ(Ids(Candidates(cutoff)), std::vector<std::string>{"gone"});
  EXPECT_EQ(Ids(Candidates(cutoff)), std::vector<std::string>{"gone"});
  EXPECT_TRUE(fixture_->GetRawRow("gone").has_value());
  EXPECT_EQ(RunsOf("gone"), std::vector<std::string>{"gone-1"});
}

TEST_F(TaskRegistrationsContractTest, PruneDeletesTheRowTheHistoryAndTheRegistration) {
  Register({"gone", "alive"});
  const WallTime old = Now() - kDay;
  RecordRun("gone-1", "gone", old);
  RecordRun("gone-2", "gone", old + minutes(1));
  RecordRun("alive-1", "alive", old);
  const WallTime cutoff = CutoffBetweenWrites();
  EXPECT_EQ(Refresh({"alive"}, "host-a"), 1u);

  EXPECT_EQ(Prune({"gone", "alive", "no-such-task"}, cutoff), std::vector<std::string>{"gone"});
  EXPECT_FALSE(fixture_->GetRawRow("gone").has_value());
  EXPECT_TRUE(RunsOf("gone").empty());
  EXPECT_TRUE(fixture_->GetRawRow("alive").has_value());
  EXPECT_EQ(RunsOf("alive"), std::vector<std::string>{"alive-1"});
  EXPECT_TRUE(Candidates(cutoff).empty());

  // Its registration went with it: the same id written again by a Backstage worker is one no
  // stagehand host has registered.
  PutBackstageRow("gone", std::nullopt, std::nullopt);
  const WallTime later = CutoffBetweenWrites();
  const std::vector<PruneCandidate> again = Candidates(later);
  ASSERT_EQ(Ids(again), (std::vector<std::string>{"alive", "gone"}));
  EXPECT_TRUE(again[0].registered());
  EXPECT_FALSE(again[1].registered());
  EXPECT_EQ(Prune({"gone"}, later), std::vector<std::string>{}) << "no stagehand host's task";
}

TEST_F(TaskRegistrationsContractTest, TasksNoHostRegisteredGoOnlyWhenIncluded) {
  const WallTime now = Now();
  PutBackstageRow("backstage-only", now - 40 * kDay, now - 40 * kDay);
  Register({"registered"});
  const WallTime cutoff = CutoffBetweenWrites();
  EXPECT_EQ(Prune({"backstage-only", "registered"}, cutoff),
            std::vector<std::string>{"registered"});
  EXPECT_TRUE(fixture_->GetRawRow("backstage-only").has_value());
  EXPECT_EQ(Prune({"backstage-only"}, cutoff, PruneScope::kIncludeUnregistered),
            std::vector<std::string>{"backstage-only"});
  EXPECT_FALSE(fixture_->GetRawRow("backstage-only").has_value());
}

TEST_F(TaskRegistrationsContractTest, PruneChecksEachTaskAgainAsItDeletes) {
  Register({"refreshed", "still-gone"});
  ASSERT_TRUE(
      store_->UpsertMany(std::vector<TaskUpsert>{TaskUpsert{"claimed", Schedule("PT1H"), "host-a"}})
          .ok());
  const WallTime cutoff = CutoffBetweenWrites();
  ASSERT_EQ(Ids(Candidates(cutoff)),
            (std::vector<std::string>{"claimed", "refreshed", "still-gone"}));

  // Since the listing, another host refreshed one and claimed another.
  std::unique_ptr<TaskStore> other = fixture_->OpenStore();
  ASSERT_NE(other, nullptr);
  ASSERT_NE(other->registrations(), nullptr);
  Result<std::size_t> refreshed =
      other->registrations()->RefreshRegistrations(std::vector<std::string>{"refreshed"}, "b");
  ASSERT_THAT(refreshed, IsOk());
  Result<ClaimResult> claimed = other->Claim("claimed", "ticket-b", minutes(1), minutes(1));
  ASSERT_TRUE(claimed.ok() && claimed->claimed) << claimed.status().ToString();
  EXPECT_EQ(Prune({"refreshed", "claimed", "still-gone"}, cutoff),
            std::vector<std::string>{"still-gone"});
  EXPECT_TRUE(fixture_->GetRawRow("refreshed").has_value());
  EXPECT_TRUE(fixture_->GetRawRow("claimed").has_value());
}

}  // namespace
}  // namespace stagehand::contract
