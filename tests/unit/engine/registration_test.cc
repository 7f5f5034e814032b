// Issue 16, item 4: the engine records which host registered its global tasks, and refreshes those
// registrations about once an hour, so that `stagehand db prune` never takes a long-running host's
// tasks for gone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "engine_harness.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;

// The registration of `task` as the prune listing shows it, or nullopt when it has none.
std::optional<PruneCandidate> RegistrationOf(TaskStore& store, const std::string& task,
                                             WallTime now) {
  Result<std::vector<PruneCandidate>> candidates =
      store.registrations()->ListPruneCandidates(now + milliseconds(1));
  EXPECT_THAT(candidates, IsOk());
  if (!candidates.ok()) return std::nullopt;
  for (const PruneCandidate& candidate : *candidates) {
    if (candidate.task_id == task && candidate.registered()) return candidate;
  }
  return std::nullopt;
}

TaskFunction Nothing() {
  return [](std::stop_token) { return Status::Ok(); };
}

TEST_F(EngineTest, ARegistrationRecordsTheHostAndTheHourlyRefreshKeepsItFresh) {
  EngineContext context{"plugin", store_.get(), &clock_, nullptr, recorder_, Options()};
  context.host = "host-a";
  engines_.push_back(std::make_unique<TaskEngine>(std::move(context)));
  TaskEngine& engine = *engines_.back();
  const WallTime registered = clock_.Now();
  ASSERT_THAT(engine.Register(Task("report", Schedule("manual"), Nothing())), IsOk());
  ASSERT_THAT(engine.Register(Task("local", Schedule("manual"), Nothing(), TaskScope::kLocal)),
              IsOk());
  Settle();
  std::optional<PruneCandidate> first = RegistrationOf(*store_, "report", clock_.Now());
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->host, "host-a");
  EXPECT_EQ(first->last_seen_at, registered);
  EXPECT_FALSE(RegistrationOf(*store_, "local", clock_.Now()).has_value())
      << "a local task has no row to prune";

  AdvanceBy(minutes(59));
  EXPECT_EQ(RegistrationOf(*store_, "report", clock_.Now())->last_seen_at, registered)
      << "not refreshed before the hour";
  AdvanceBy(minutes(1));
  EXPECT_EQ(RegistrationOf(*store_, "report", clock_.Now())->last_seen_at, clock_.Now());
  const WallTime refreshed = clock_.Now();
  AdvanceBy(hours(1));
  EXPECT_EQ(RegistrationOf(*store_, "report", clock_.Now())->last_seen_at, refreshed + hours(1));
}

}  // namespace
}  // namespace stagehand::engine_internal
