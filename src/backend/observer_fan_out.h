// One observer for every plugin scheduler of the host that hands each event to several: the
// metrics and the live event stream. Private to the backend.
#pragma once

#include <memory>
#include <vector>

#include "stagehand/engine/observer.h"

namespace stagehand::backend_internal {

// Calls each of its observers in order. Thread-safe when they are.
class ObserverFanOut final : public SchedulerObserver {
 public:
  explicit ObserverFanOut(std::vector<std::shared_ptr<SchedulerObserver>> observers)
      : observers_(std::move(observers)) {}

  void OnRunStarted(const RunInfo& run, std::chrono::nanoseconds lag) override;
  void OnRunCompleted(const RunInfo& run, std::chrono::nanoseconds duration) override;
  void OnRunFailed(const RunInfo& run, std::chrono::nanoseconds duration,
                   std::string_view error_json) override;
  void OnRunFinished(const RunInfo& run, const RunFinish& finish,
                     std::chrono::nanoseconds duration) override;
  void OnSlotSkipped(std::string_view plugin_id, std::string_view task_id, WallTime slot,
                     std::chrono::nanoseconds late) override;
  void OnRetryScheduled(const RunInfo& run, int attempt, std::chrono::milliseconds delay) override;
  void OnClaimLost(std::string_view plugin_id, std::string_view task_id) override;
  void OnLeaseRenewed(const RunInfo& run) override;
  void OnLeaseRenewalFailed(const RunInfo& run) override;
  void OnLeaseLost(const RunInfo& run) override;
  void OnRunAtRisk(std::string_view plugin_id, std::string_view task_id, std::string_view run_id,
                   std::optional<WallTime> slot, std::string_view why) override;
  void OnWriteReplayed(std::string_view plugin_id, std::string_view task_id) override;
  void OnReclaimed(std::string_view plugin_id, std::string_view task_id) override;
  void OnRunOverdue(const RunInfo& run) override;
  void OnTaskRegistered(std::string_view plugin_id, std::string_view task_id) override;
  void OnTaskTriggerRequested(std::string_view plugin_id, std::string_view task_id) override;
  void OnTaskTriggered(std::string_view plugin_id, std::string_view task_id) override;
  void OnTaskTriggerRefused(std::string_view plugin_id, std::string_view task_id) override;
  void OnTaskCancelled(std::string_view plugin_id, std::string_view task_id) override;
  void OnTaskPaused(std::string_view plugin_id, std::string_view task_id,
                    const PauseRequest& pause) override;
  void OnTaskResumed(std::string_view plugin_id, std::string_view task_id) override;

 private:
  const std::vector<std::shared_ptr<SchedulerObserver>> observers_;
};

}  // namespace stagehand::backend_internal
