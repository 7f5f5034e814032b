// The backend's observer fan-out hands every scheduler event to each of its observers: an event it
// forgot (the failover's runs at risk once) never reached /metrics or the event stream.
#include "backend/observer_fan_out.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string_view>

namespace stagehand::backend_internal {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using ::testing::_;

class MockObserver : public SchedulerObserver {
 public:
  MOCK_METHOD(void, OnRunStarted, (const RunInfo&, nanoseconds), (override));
  MOCK_METHOD(void, OnRunCompleted, (const RunInfo&, nanoseconds), (override));
  MOCK_METHOD(void, OnRunFailed, (const RunInfo&, nanoseconds, std::string_view), (override));
  MOCK_METHOD(void, OnRunFinished, (const RunInfo&, const RunFinish&, nanoseconds), (override));
  MOCK_METHOD(void, OnSlotSkipped, (std::string_view, std::string_view, WallTime, nanoseconds),
              (override));
  MOCK_METHOD(void, OnRetryScheduled, (const RunInfo&, int, milliseconds), (override));
  MOCK_METHOD(void, OnClaimLost, (std::string_view, std::string_view), (override));
  MOCK_METHOD(void, OnLeaseRenewed, (const RunInfo&), (override));
  MOCK_METHOD(void, OnLeaseRenewalFailed, (const RunInfo&), (override));
  MOCK_METHOD(void, OnLeaseLost, (const RunInfo&), (override));
  MOCK_METHOD(void, OnRunAtRisk,
              (std::string_view, std::string_view, std::string_view, std::optional<WallTime>,
               std::string_view),
              (override));
  MOCK_METHOD(void, OnWriteReplayed, (std::string_view, std::string_view), (override));
  MOCK_METHOD(void, OnReclaimed, (std::string_view, std::string_view), (override));
  MOCK_METHOD(void, OnRunOverdue, (const RunInfo&), (override));
  MOCK_METHOD(void, OnTaskRegistered, (std::string_view, std::string_view), (override));
  MOCK_METHOD(void, OnTaskTriggerRequested, (std::string_view, std::string_view), (override));
  MOCK_METHOD(void, OnTaskTriggered, (std::string_view, std::string_view), (override));
  MOCK_METHOD(void, OnTaskTriggerRefused, (std::string_view, std::string_view), (override));
  MOCK_METHOD(void, OnTaskCancelled, (std::string_view, std::string_view), (override));
  MOCK_METHOD(void, OnTaskPaused, (std::string_view, std::string_view, const PauseRequest&),
              (override));
  MOCK_METHOD(void, OnTaskResumed, (std::string_view, std::string_view), (override));
};

TEST(ObserverFanOutTest, EveryEventReachesEveryObserver) {
  auto first = std::make_shared<::testing::StrictMock<MockObserver>>();
  auto second = std::make_shared<::testing::StrictMock<MockObserver>>();
  for (MockObserver* observer : {first.get(), second.get()}) {
    EXPECT_CALL(*observer, OnRunStarted(_, _));
    EXPECT_CALL(*observer, OnRunCompleted(_, _));
    EXPECT_CALL(*observer, OnRunFailed(_, _, _));
    EXPECT_CALL(*observer, OnRunFinished(_, _, _));
    EXPECT_CALL(*observer, OnSlotSkipped(_, _, _, _));
    EXPECT_CALL(*observer, OnRetryScheduled(_, _, _));
    EXPECT_CALL(*observer, OnClaimLost(_, _));
    EXPECT_CALL(*observer, OnLeaseRenewed(_));
    EXPECT_CALL(*observer, OnLeaseRenewalFailed(_));
    EXPECT_CALL(*observer, OnLeaseLost(_));
    EXPECT_CALL(*observer, OnRunAtRisk("p", "t", "run-1", _, "why"));
    EXPECT_CALL(*observer, OnWriteReplayed("p", "t"));
    EXPECT_CALL(*observer, OnReclaimed(_, _));
    EXPECT_CALL(*observer, OnRunOverdue(_));
    EXPECT_CALL(*observer, OnTaskRegistered(_, _));
    EXPECT_CALL(*observer, OnTaskTriggerRequested(_, _));
    EXPECT_CALL(*observer, OnTaskTriggered(_, _));
    EXPECT_CALL(*observer, OnTaskTriggerRefused(_, _));
    EXPECT_CALL(*observer, OnTaskCancelled(_, _));
    EXPECT_CALL(*observer, OnTaskPaused(_, _, _));
    EXPECT_CALL(*observer, OnTaskResumed(_, _));
  }
  ObserverFanOut fan_out({first, second});
  SchedulerObserver& observer = fan_out;
  const RunInfo run;
  observer.OnRunStarted(run, nanoseconds(1));
  observer.OnRunCompleted(run, nanoseconds(1));
  observer.OnRunFailed(run, nanoseconds(1), "{}");
  observer.OnRunFinished(run, RunFinish{}, nanoseconds(1));
  observer.OnSlotSkipped("p", "t", WallTime{}, nanoseconds(1));
  observer.OnRetryScheduled(run, 2, milliseconds(1));
  observer.OnClaimLost("p", "t");
  observer.OnLeaseRenewed(run);
  observer.OnLeaseRenewalFailed(run);
  observer.OnLeaseLost(run);
  observer.OnRunAtRisk("p", "t", "run-1", std::nullopt, "why");
  observer.OnWriteReplayed("p", "t");
  observer.OnReclaimed("p", "t");
  observer.OnRunOverdue(run);
  observer.OnTaskRegistered("p", "t");
  observer.OnTaskTriggerRequested("p", "t");
  observer.OnTaskTriggered("p", "t");
  observer.OnTaskTriggerRefused("p", "t");
  observer.OnTaskCancelled("p", "t");
  observer.OnTaskPaused("p", "t", PauseRequest{});
  observer.OnTaskResumed("p", "t");
}

}  // namespace
}  // namespace stagehand::backend_internal
