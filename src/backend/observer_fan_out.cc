#include "backend/observer_fan_out.h"

namespace stagehand::backend_internal {

void ObserverFanOut::OnRunStarted(const RunInfo& run, std::chrono::nanoseconds lag) {
  for (const auto& observer : observers_) {
    observer->OnRunStarted(run, lag);
  }
}

void ObserverFanOut::OnRunCompleted(const RunInfo& run, std::chrono::nanoseconds duration) {
  for (const auto& observer : observers_) {
    observer->OnRunCompleted(run, duration);
  }
}

void ObserverFanOut::OnRunFailed(const RunInfo& run, std::chrono::nanoseconds duration,
                                 std::string_view error_json) {
  for (const auto& observer : observers_) {
    observer->OnRunFailed(run, duration, error_json);
  }
}

void ObserverFanOut::OnRunFinished(const RunInfo& run, const RunFinish& finish,
                                   std::chrono::nanoseconds duration) {
  for (const auto& observer : observers_) {
    observer->OnRunFinished(run, finish, duration);
  }
}

void ObserverFanOut::OnSlotSkipped(std::string_view plugin_id, std::string_view task_id,
                                   WallTime slot, std::chrono::nanoseconds late) {
  for (const auto& observer : observers_) {
    observer->OnSlotSkipped(plugin_id, task_id, slot, late);
  }
}

void ObserverFanOut::OnRetryScheduled(const RunInfo& run, int attempt,
                                      std::chrono::milliseconds delay) {
  for (const auto& observer : observers_) {
    observer->OnRetryScheduled(run, attempt, delay);
  }
}

void ObserverFanOut::OnClaimLost(std::string_view plugin_id, std::string_view task_id) {
  for (const auto& observer : observers_) {
    observer->OnClaimLost(plugin_id, task_id);
  }
}

void ObserverFanOut::OnLeaseRenewed(const RunInfo& run) {
  for (const auto& observer : observers_) {
    observer->OnLeaseRenewed(run);
  }
}

void ObserverFanOut::OnLeaseRenewalFailed(const RunInfo& run) {
  for (const auto& observer : observers_) {
    observer->OnLeaseRenewalFailed(run);
  }
}

void ObserverFanOut::OnLeaseLost(const RunInfo& run) {
  for (const auto& observer : observers_) {
    observer->OnLeaseLost(run);
  }
}

void ObserverFanOut::OnReclaimed(std::string_view plugin_id, std::string_view task_id) {
  for (const auto& observer : observers_) {
    observer->OnReclaimed(plugin_id, task_id);
  }
}

void ObserverFanOut::OnRunAtRisk(std::string_view plugin_id, std::string_view task_id,
                                 std::string_view run_id, std::optional<WallTime> slot,
                                 std::string_view why) {
  for (const auto& observer : observers_) {
    observer->OnRunAtRisk(plugin_id, task_id, run_id, slot, why);
  }
}

void ObserverFanOut::OnWriteReplayed(std::string_view plugin_id, std::string_view task_id) {
  for (const auto& observer : observers_) {
    observer->OnWriteReplayed(plugin_id, task_id);
  }
}

void ObserverFanOut::OnRunOverdue(const RunInfo& run) {
  for (const auto& observer : observers_) {
    observer->OnRunOverdue(run);
  }
}

void ObserverFanOut::OnTaskRegistered(std::string_view plugin_id, std::string_view task_id) {
  for (const auto& observer : observers_) {
    observer->OnTaskRegistered(plugin_id, task_id);
  }
}

void ObserverFanOut::OnTaskTriggerRequested(std::string_view plugin_id, std::string_view task_id) {
  for (const auto& observer : observers_) {
    observer->OnTaskTriggerRequested(plugin_id, task_id);
  }
}

void ObserverFanOut::OnTaskTriggerRefused(std::string_view plugin_id, std::string_view task_id) {
  for (const auto& observer : observers_) {
    observer->OnTaskTriggerRefused(plugin_id, task_id);
  }
}

void ObserverFanOut::OnTaskTriggered(std::string_view plugin_id, std::string_view task_id) {
  for (const auto& observer : observers_) {
    observer->OnTaskTriggered(plugin_id, task_id);
  }
}

void ObserverFanOut::OnTaskCancelled(std::string_view plugin_id, std::string_view task_id) {
  for (const auto& observer : observers_) {
    observer->OnTaskCancelled(plugin_id, task_id);
  }
}

void ObserverFanOut::OnTaskPaused(std::string_view plugin_id, std::string_view task_id,
                                  const PauseRequest& pause) {
  for (const auto& observer : observers_) {
    observer->OnTaskPaused(plugin_id, task_id, pause);
  }
}

void ObserverFanOut::OnTaskResumed(std::string_view plugin_id, std::string_view task_id) {
  for (const auto& observer : observers_) {
    observer->OnTaskResumed(plugin_id, task_id);
  }
}

}  // namespace stagehand::backend_internal
