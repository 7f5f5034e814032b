// Issue 17, item 5: a config reload removes and changes tasks without a restart. A removed task's
// run in progress ends normally; a changed task's run goes on with its old definition and the new
// one applies from its next run.
#include <gtest/gtest.h>

#include "engine_harness.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand::engine_internal {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

using std::chrono::seconds;

TEST_F(EngineTest, RetireLeavesTheRunningRunToFinishThenNoMoreRuns) {
  TaskEngine& engine = StartEngine(nullptr, Options());
  Probe& probe = MakeProbe();
  probe.Hold();
  ASSERT_THAT(engine.Register(Task("l", Schedule("PT10S", "PT1H"), probe.Fn(), TaskScope::kLocal)),
              IsOk());
  ASSERT_TRUE(probe.WaitCalls(1));
  ASSERT_THAT(engine.Retire("l"), IsOk());
  Settle();
  EXPECT_EQ(probe.stopped_by_token(), 0);
  probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 1)) << "the run ends as a success";
  AdvanceBy(seconds(30));
  EXPECT_EQ(probe.calls(), 1);
  EXPECT_THAT(engine.Retire("l"), StatusIs(StatusCode::kNotFound));
}

TEST_F(EngineTest, RedefineWhileRunningAppliesFromTheNextRun) {
  TaskEngine& engine = StartEngine(nullptr, Options());
  Probe& old_probe = MakeProbe();
  Probe& new_probe = MakeProbe();
  old_probe.Hold();
  ASSERT_TRUE(
      engine.Register(Task("l", Schedule("PT10S", "PT1H"), old_probe.Fn(), TaskScope::kLocal))
          .ok());
  ASSERT_TRUE(old_probe.WaitCalls(1));
  ASSERT_THAT(
      engine.Redefine(Task("l", Schedule("PT2S", "PT1H"), new_probe.Fn(), TaskScope::kLocal)),
      IsOk());
  Settle();
  EXPECT_EQ(old_probe.stopped_by_token(), 0) << "the run in progress is not interrupted";
  old_probe.Release();
  ASSERT_TRUE(recorder_->WaitFor("completed", "l", 1));
  AdvanceBy(seconds(2));
  ASSERT_TRUE(new_probe.WaitCalls(1)) << "the next run uses the new function and cadence";
  EXPECT_EQ(old_probe.calls(), 1);
}

TEST_F(EngineTest, RedefineOfAnIdleGlobalTaskRewritesItsRow) {
  TaskEngine& engine = StartEngine();
  Probe& probe = MakeProbe();
  ASSERT_THAT(engine.Register(Task("g", Schedule("PT1H"), probe.Fn())), IsOk());
  // Idle: its run released (Settle may return while the run is still inside its function).
  ASSERT_TRUE(recorder_->WaitFor("completed", "g", 1));
  Settle();
  ASSERT_THAT(engine.Redefine(Task("g", Schedule("PT5S", "PT30S"), probe.Fn())), IsOk());
  Settle();
  ASSERT_TRUE(Row("g").has_value());
  EXPECT_NE(Row("g")->settings_json.find("PT5S"), std::string::npos) << Row("g")->settings_json;
  AdvanceBy(seconds(5));
  EXPECT_TRUE(probe.WaitCalls(2)) << "the new cadence applies without a restart";
  EXPECT_THAT(engine.Redefine(Task("g", Schedule("PT5S"), probe.Fn(), TaskScope::kLocal)),
              StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(engine.Redefine(Task("other", Schedule("PT5S"), probe.Fn())),
              StatusIs(StatusCode::kNotFound));
}

}  // namespace
}  // namespace stagehand::engine_internal
