#include "stagehand/service/mock_scheduler.h"

#include <exception>
#include <thread>

#include "stagehand/base/uuid.h"

namespace stagehand::testing {

struct MockScheduler::Entry {
  TaskDefinition task;
  TaskSettingsV2 settings;
  std::stop_source stop;
  bool running = false;
  std::shared_ptr<std::promise<Status>> waiter;
  std::shared_future<Status> waiter_future;
  // The current run, while running.
  std::string run_id;
  std::shared_ptr<RunReport> report;
  bool cancelled = false;          // CancelTask signalled the current run
  std::optional<TaskPause> pause;  // PauseTask's, until ResumeTask
};

MockScheduler::MockScheduler(MockSchedulerOptions options)
    : options_(options),
      clock_(options.clock != nullptr ? *options.clock : SystemClock::Instance()) {}

MockScheduler::~MockScheduler() = default;

Status MockScheduler::ScheduleTask(TaskDefinition task) {
  auto entry = std::make_shared<Entry>();
  STAGEHAND_ASSIGN_OR_RETURN(entry->settings, BuildTaskSettings(ScheduleOf(task)));
  entry->task = std::move(task);
  MutexLock lock(mu_);
  const std::string id = entry->task.id;
  if (tasks_.find(id) == tasks_.end()) order_.push_back(id);
  tasks_[id] = std::move(entry);
  return Status::Ok();
}

Status MockScheduler::TriggerTask(std::string_view id) { return Run(id, RunTrigger::kManual); }

Status MockScheduler::Run(std::string_view id, RunTrigger trigger) {
  std::shared_ptr<Entry> entry;
  std::stop_token token;
  std::shared_ptr<RunReport> report;
  std::string run_id;
  {
    MutexLock lock(mu_);
    auto it = tasks_.find(id);
    if (it == tasks_.end()) return NotFoundError("Task " + std::string(id) + " not found");
    entry = it->second;
    if (entry->pause) {
      if (trigger == RunTrigger::kManual) {
        return ConflictError("Task " + std::string(id) + " is paused");
      }
      return Status::Ok();
    }
    if (entry->running) return Status::Ok();
    entry->running = true;
    token = entry->stop.get_token();
    run_id = NewUuidV4();
    report = std::make_shared<RunReport>(kDefaultRunOutputTailBytes);
    entry->run_id = run_id;
    entry->report = report;
    entry->cancelled = false;
    TaskRun& run = runs_.emplace_back();
    run.run_id = run_id;
    run.task_id = std::string(id);
    run.origin.trigger = trigger;
    run.started_at = clock_.Now();
    run.finish.outcome = RunOutcome::kRunning;
  }
  Status outcome;
  std::string error_name = "Error";
  try {
    outcome = entry->task.fn(RunControl{token, {}, report});
  } catch (const std::exception& error) {
    outcome = InternalError(error.what());
  } catch (...) {
    outcome = InternalError("<no reason given>");
    error_name = "Unknown";
  }
  const WallTime ended_at = clock_.Now();
  RunReport::Snapshot reported = report->Read();
  std::shared_ptr<std::promise<Status>> waiter;
  {
    MutexLock lock(mu_);
    entry->running = false;
    if (entry->pause && entry->pause->pending) {
      entry->pause->pending = false;
      entry->pause->since = ended_at;
    }
    waiter = std::move(entry->waiter);
    entry->waiter.reset();
    entry->report.reset();
    if (std::optional<std::size_t> index = FindRunLocked(run_id)) {
      TaskRun& run = runs_[*index];
      run.ended_at = ended_at;
      RunFinish& finish = run.finish;
      finish.outcome = RunOutcome::kSucceeded;
      if (!outcome.ok()) {
        // Named as the engine names a run that was stopped, then failed.
        std::string why;
        if (entry->cancelled) {
          why = "cancelled: ";
        } else if (shut_down_ && token.stop_requested()) {
          why = "interrupted by shutdown: ";
        }
        finish.outcome = why.empty() ? RunOutcome::kFailed : RunOutcome::kCancelled;
        finish.error_json = ErrorJson(why + outcome.message(), error_name);
      }
      finish.exit_code = reported.exit_code;
      finish.signal = reported.signal;
      finish.http_status = reported.http_status;
      finish.output_tail = std::move(reported.output_tail);
    }
  }
  if (waiter) waiter->set_value(outcome);
  return Status::Ok();
}

Status MockScheduler::CancelTask(std::string_view id) {
  std::stop_source to_signal;
  {
    MutexLock lock(mu_);
    auto it = tasks_.find(id);
    if (it == tasks_.end()) return NotFoundError("Task " + std::string(id) + " not found");
    if (!it->second->running) return ConflictError("Task " + std::string(id) + " is not running");
    it->second->cancelled = true;
    to_signal = std::exchange(it->second->stop, std::stop_source());
  }
  to_signal.request_stop();
  return Status::Ok();
}

std::vector<TaskDescriptor> MockScheduler::GetScheduledTasks() const {
  MutexLock lock(mu_);
  std::vector<TaskDescriptor> descriptors;
  for (const std::string& id : order_) {
    const Entry& entry = *tasks_.at(id);
    descriptors.push_back(TaskDescriptor{id, entry.task.scope, entry.settings});
  }
  return descriptors;
}

Result<std::vector<TaskListing>> MockScheduler::ListTasks() const {
  MutexLock lock(mu_);
  std::vector<TaskListing> listing;
  for (const std::string& id : order_) {
    const Entry& entry = *tasks_.at(id);
    TaskListing item;
    item.descriptor = TaskDescriptor{id, entry.task.scope, entry.settings};
    item.worker_state = entry.running ? WorkerStatus::kRunning : WorkerStatus::kIdle;
    item.pause = entry.pause;
    listing.push_back(std::move(item));
  }
  return listing;
}

Status MockScheduler::PauseTask(std::string_view id, const PauseRequest& request) {
  MutexLock lock(mu_);
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return NotFoundError("Task " + std::string(id) + " not found");
  Entry& entry = *it->second;
  if (entry.task.scope == TaskScope::kLocal) {
    return ConflictError("Task " + std::string(id) +
                         " is local: it runs on every host by itself, so only global tasks can be "
                         "paused and resumed");
  }
  const bool running = entry.running;
  entry.pause = TaskPause{request.by, request.reason, clock_.Now(), request.until, running};
  if (!running || !request.cancel_run) return Status::Ok();
  entry.cancelled = true;
  std::stop_source to_signal = std::exchange(entry.stop, std::stop_source());
  lock.Unlock();
  to_signal.request_stop();
  return Status::Ok();
}

Status MockScheduler::ResumeTask(std::string_view id) {
  MutexLock lock(mu_);
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return NotFoundError("Task " + std::string(id) + " not found");
  if (!it->second->pause) return ConflictError("Task " + std::string(id) + " is not paused");
  it->second->pause.reset();
  return Status::Ok();
}

std::shared_future<Status> MockScheduler::WaitForTask(std::string_view id) {
  MutexLock lock(mu_);
  auto it = tasks_.find(id);
  if (it == tasks_.end()) {
    std::promise<Status> missing;
    missing.set_value(NotFoundError("Task " + std::string(id) + " not found"));
    return missing.get_future().share();
  }
  Entry& entry = *it->second;
  if (!entry.waiter) {
    entry.waiter = std::make_shared<std::promise<Status>>();
    entry.waiter_future = entry.waiter->get_future().share();
  }
  return entry.waiter_future;
}

void MockScheduler::RunStartup() {
  if (options_.skip_task_run_on_startup) return;
  std::vector<std::string> ids;
  {
    MutexLock lock(mu_);
    for (const std::string& id : order_) {
      const TaskDefinition& task = tasks_.at(id)->task;
      if (task.initial_delay && !options_.include_initial_delayed_tasks_on_startup) continue;
      if (std::holds_alternative<ManualFrequency>(task.frequency) &&
          !options_.include_manual_tasks_on_startup) {
        continue;
      }
      ids.push_back(id);
    }
  }
  std::vector<std::jthread> runs;
  runs.reserve(ids.size());
  for (const std::string& id : ids) {
    runs.emplace_back([this, id] { (void)Run(id, RunTrigger::kSchedule); });
  }
}

void MockScheduler::Shutdown() {
  std::vector<std::stop_source> to_signal;
  {
    MutexLock lock(mu_);
    shut_down_ = true;
    for (auto& [id, entry] : tasks_) to_signal.push_back(entry->stop);
  }
  for (std::stop_source& source : to_signal) source.request_stop();
}

std::optional<std::size_t> MockScheduler::FindRunLocked(std::string_view run_id) const {
  for (std::size_t i = runs_.size(); i-- > 0;) {
    if (runs_[i].run_id == run_id) return i;
  }
  return std::nullopt;
}

Result<RunPage> MockScheduler::GetTaskRuns(std::string_view task_id, int limit,
                                           const std::optional<std::string>& before) const {
  if (limit < 1 || limit > kMaxRunPageSize) {
    return InvalidArgumentError("limit must be between 1 and " + std::to_string(kMaxRunPageSize) +
                                ", got " + std::to_string(limit));
  }
  MutexLock lock(mu_);
  std::size_t end = runs_.size();  // runs_[end - 1] is the newest candidate
  if (before) {
    std::optional<std::size_t> anchor = FindRunLocked(*before);
    if (!anchor) {
      return InvalidArgumentError("before: '" + *before +
                                  "' is neither a page cursor nor a run id");
    }
    end = *anchor;
  }
  RunPage page;
  bool any = false;
  for (const TaskRun& run : runs_) any = any || run.task_id == task_id;
  for (std::size_t i = end; i-- > 0;) {
    if (runs_[i].task_id != task_id) continue;
    if (page.runs.size() == static_cast<std::size_t>(limit)) {
      page.next_cursor = page.runs.back().run_id;
      break;
    }
    TaskRun& run = page.runs.emplace_back(runs_[i]);
    run.finish.output_tail.clear();
  }
  if (!any && tasks_.find(task_id) == tasks_.end()) {
    return NotFoundError("Task " + std::string(task_id) + " not found");
  }
  return page;
}

Result<RunDetail> MockScheduler::GetRun(std::string_view run_id) const {
  std::shared_ptr<RunReport> report;
  RunDetail detail;
  {
    MutexLock lock(mu_);
    std::optional<std::size_t> index = FindRunLocked(run_id);
    if (!index) return NotFoundError("Run " + std::string(run_id) + " does not exist");
    detail.run = runs_[*index];
    if (auto it = tasks_.find(detail.run.task_id);
        it != tasks_.end() && it->second->running && it->second->run_id == run_id) {
      report = it->second->report;
    }
  }
  if (report == nullptr || detail.run.finish.outcome != RunOutcome::kRunning) {
    detail.output_bytes = detail.run.finish.output_tail.size();
    return detail;
  }
  RunReport::Snapshot live = report->Read();
  detail.live = true;
  detail.output_bytes = live.output_bytes;
  detail.run.finish.exit_code = live.exit_code;
  detail.run.finish.signal = live.signal;
  detail.run.finish.http_status = live.http_status;
  detail.run.finish.output_tail = std::move(live.output_tail);
  return detail;
}

}  // namespace stagehand::testing
