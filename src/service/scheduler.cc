#include "stagehand/service/scheduler.h"

#include <algorithm>
#include <cctype>

namespace stagehand {

TaskDefinition MakeTaskDefinition(const ScheduleDefinition& schedule, TaskInvocation invocation) {
  TaskDefinition task;
  task.id = std::move(invocation.id);
  task.fn = std::move(invocation.fn);
  task.stop = std::move(invocation.stop);
  task.frequency = schedule.frequency;
  task.timeout = schedule.timeout;
  task.initial_delay = schedule.initial_delay;
  task.catchup_window = schedule.catchup_window;
  task.jitter = schedule.jitter;
  task.retry = schedule.retry;
  task.scope = schedule.scope.value_or(TaskScope::kGlobal);
  return task;
}

ScheduleDefinition ScheduleOf(const TaskDefinition& task) {
  ScheduleDefinition schedule;
  schedule.frequency = task.frequency;
  schedule.timeout = task.timeout;
  schedule.initial_delay = task.initial_delay;
  schedule.catchup_window = task.catchup_window;
  schedule.jitter = task.jitter;
  schedule.retry = task.retry;
  schedule.scope = task.scope;
  return schedule;
}

Status SchedulerService::ScheduleTasks(std::vector<TaskDefinition> tasks) {
  for (TaskDefinition& task : tasks) STAGEHAND_RETURN_IF_ERROR(ScheduleTask(std::move(task)));
  return Status::Ok();
}

Result<RunPage> SchedulerService::GetTaskRuns(std::string_view /*task_id*/, int /*limit*/,
                                              const std::optional<std::string>& /*before*/) const {
  return UnimplementedError("This scheduler keeps no run history");
}

Result<RunDetail> SchedulerService::GetRun(std::string_view /*run_id*/) const {
  return UnimplementedError("This scheduler keeps no run history");
}

Status SchedulerService::TriggerTask(std::string_view id, const TraceContext& /*caller*/) {
  return TriggerTask(id);
}

Status SchedulerService::RescheduleTask(TaskDefinition /*task*/) {
  return UnimplementedError("This scheduler cannot change a registered task");
}

Status SchedulerService::UnscheduleTask(std::string_view /*id*/) {
  return UnimplementedError("This scheduler cannot unschedule tasks");
}

Status SchedulerService::PauseTask(std::string_view /*id*/, const PauseRequest& /*request*/) {
  return UnimplementedError("This scheduler cannot pause tasks");
}

Result<KeyedOutcome> SchedulerService::ApplyOnce(const KeyedRequest& /*request*/,
                                                 const std::function<Result<KeptAnswer>()>& apply) {
  STAGEHAND_ASSIGN_OR_RETURN(KeptAnswer answer, apply());
  return KeyedOutcome{std::move(answer), /*replayed=*/false};
}

Status SchedulerService::ResumeTask(std::string_view /*id*/) {
  return UnimplementedError("This scheduler cannot resume tasks");
}

Status ScheduledTaskRunner::Run(TaskInvocation invocation) {
  return scheduler_->ScheduleTask(MakeTaskDefinition(schedule_, std::move(invocation)));
}

Status ValidateTaskId(std::string_view id) {
  const bool blank = std::all_of(id.begin(), id.end(), [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) != 0;
  });
  if (blank) {
    return InvalidArgumentError(std::string(id) + " is not a valid ID, expected non-empty string");
  }
  return Status::Ok();
}

}  // namespace stagehand
