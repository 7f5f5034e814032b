// The engine's queue of history writes: kept while the database does not answer, written in
// order once it does, bounded, and not kept at all without a history.
#include "engine/history_queue.h"

#include <gtest/gtest.h>

#include <string>

#include "stagehand/store/memory_task_store.h"
#include "stagehand/time/manual_clock.h"

namespace stagehand::engine_internal {
namespace {

class HistoryQueueTest : public ::testing::Test {
 protected:
  static RunStart Start(const std::string& run_id) { return RunStart{run_id, "job", {}, {}}; }
  static RunEnd End(const std::string& run_id) {
    RunEnd end{run_id, {}, {}};
    end.finish.outcome = RunOutcome::kSucceeded;
    return end;
  }
  std::vector<TaskRun> Runs() {
    Result<RunPage> page = store_.ListRuns("job", 100, std::nullopt);
    STAGEHAND_CHECK(page.ok());
    return page->runs;
  }

  testing::ManualClock clock_;
  testing::MemoryTaskStore store_{"plugin", clock_};
  HistoryQueue queue_{&store_, NullLogger()};
};

TEST_F(HistoryQueueTest, WritesAStartThenItsEndInOneFlush) {
  ASSERT_TRUE(queue_.Queue(Start("r1"), std::nullopt));
  ASSERT_TRUE(queue_.Queue(std::nullopt, End("r1")));
  EXPECT_TRUE(queue_.Flush(/*prune=*/false));
  EXPECT_FALSE(queue_.HasQueued());
  const std::vector<TaskRun> runs = Runs();
  ASSERT_EQ(runs.size(), 1U);
  EXPECT_EQ(runs[0].finish.outcome, RunOutcome::kSucceeded);
}

TEST_F(HistoryQueueTest, KeepsTheRecordsWhileTheDatabaseDoesNotAnswer) {
  ASSERT_TRUE(queue_.Queue(Start("r1"), End("r1")));
  store_.SetUnavailable(true);
  EXPECT_FALSE(queue_.Flush(/*prune=*/false));
  EXPECT_TRUE(queue_.HasQueued());
  store_.SetUnavailable(false);
  EXPECT_TRUE(queue_.Flush(/*prune=*/false));
  ASSERT_EQ(Runs().size(), 1U);
  EXPECT_EQ(Runs()[0].finish.outcome, RunOutcome::kSucceeded);
  EXPECT_EQ(queue_.dropped(), 0);
}

TEST_F(HistoryQueueTest, DropsTheOldestRecordsPastItsBound) {
  store_.SetUnavailable(true);
  for (std::size_t i = 0; i < HistoryQueue::kMaxQueued + 5; ++i) {
    ASSERT_TRUE(queue_.Queue(Start("r" + std::to_string(i)), std::nullopt));
  }
  EXPECT_FALSE(queue_.Flush(/*prune=*/false));
  EXPECT_EQ(queue_.dropped(), 5);
  store_.SetUnavailable(false);
  EXPECT_TRUE(queue_.Flush(/*prune=*/false));
  const std::vector<TaskRun> runs = Runs();
  EXPECT_EQ(runs.size(), 100U);  // one page
  for (const TaskRun& run : runs) EXPECT_NE(run.run_id, "r0");
}

TEST_F(HistoryQueueTest, DropQueuedCountsWhatIsLeftAtExit) {
  ASSERT_TRUE(queue_.Queue(Start("r1"), End("r1")));
  EXPECT_EQ(queue_.DropQueued(), 2);
  EXPECT_FALSE(queue_.HasQueued());
}

TEST(HistoryQueueWithoutHistoryTest, KeepsNothing) {
  HistoryQueue queue(nullptr, NullLogger());
  EXPECT_FALSE(queue.enabled());
  EXPECT_FALSE(queue.Queue(RunStart{"r1", "job", {}, {}}, std::nullopt));
  EXPECT_FALSE(queue.HasQueued());
  EXPECT_TRUE(queue.Flush(/*prune=*/true));
}

}  // namespace
}  // namespace stagehand::engine_internal
