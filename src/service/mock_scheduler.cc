#include "stagehand/service/mock_scheduler.h"

#include <exception>
#include <thread>

namespace stagehand::testing {

struct MockScheduler::Entry {
  TaskDefinition task;
  TaskSettingsV2 settings;
  std::stop_source stop;
  bool running = false;
  std::shared_ptr<std::promise<Status>> waiter;
  std::shared_future<Status> waiter_future;
};

MockScheduler::MockScheduler(MockSchedulerOptions options) : options_(options) {}

MockScheduler::~MockScheduler() = default;

Status MockScheduler::ScheduleTask(TaskDefinition task) {
  auto entry = std::make_shared<Entry>();
  ScheduleDefinition schedule;
  schedule.frequency = task.frequency;
  schedule.timeout = task.timeout;
  schedule.initial_delay = task.initial_delay;
  schedule.scope = task.scope;
  entry->settings = BuildTaskSettings(schedule);
  entry->task = std::move(task);
  std::lock_guard lock(mu_);
  const std::string id = entry->task.id;
  if (tasks_.find(id) == tasks_.end()) order_.push_back(id);
  tasks_[id] = std::move(entry);
  return Status::Ok();
}

Status MockScheduler::TriggerTask(std::string_view id) {
  std::shared_ptr<Entry> entry;
  std::stop_token token;
  {
    std::lock_guard lock(mu_);
    auto it = tasks_.find(id);
    if (it == tasks_.end()) return NotFoundError("Task " + std::string(id) + " not found");
    entry = it->second;
    if (entry->running) return Status::Ok();
    entry->running = true;
    token = entry->stop.get_token();
  }
  Status outcome;
  try {
    outcome = entry->task.fn(token);
  } catch (const std::exception& error) {
    outcome = InternalError(error.what());
  } catch (...) {
    outcome = InternalError("<no reason given>");
  }
  std::shared_ptr<std::promise<Status>> waiter;
  {
    std::lock_guard lock(mu_);
    entry->running = false;
    waiter = std::move(entry->waiter);
    entry->waiter.reset();
  }
  if (waiter) waiter->set_value(outcome);
  return Status::Ok();
}

Status MockScheduler::CancelTask(std::string_view id) {
  std::stop_source to_signal;
  {
    std::lock_guard lock(mu_);
    auto it = tasks_.find(id);
    if (it == tasks_.end()) return NotFoundError("Task " + std::string(id) + " not found");
    if (!it->second->running) return ConflictError("Task " + std::string(id) + " is not running");
    to_signal = std::exchange(it->second->stop, std::stop_source());
  }
  to_signal.request_stop();
  return Status::Ok();
}

std::vector<TaskDescriptor> MockScheduler::GetScheduledTasks() const {
  std::lock_guard lock(mu_);
  std::vector<TaskDescriptor> descriptors;
  for (const std::string& id : order_) {
    const Entry& entry = *tasks_.at(id);
    descriptors.push_back(TaskDescriptor{id, entry.task.scope, entry.settings});
  }
  return descriptors;
}

Result<std::vector<TaskListing>> MockScheduler::ListTasks() const {
  std::lock_guard lock(mu_);
  std::vector<TaskListing> listing;
  for (const std::string& id : order_) {
    const Entry& entry = *tasks_.at(id);
    TaskListing item;
    item.descriptor = TaskDescriptor{id, entry.task.scope, entry.settings};
    item.worker_state = entry.running ? WorkerStatus::kRunning : WorkerStatus::kIdle;
    listing.push_back(std::move(item));
  }
  return listing;
}

std::shared_future<Status> MockScheduler::WaitForTask(std::string_view id) {
  std::lock_guard lock(mu_);
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
    std::lock_guard lock(mu_);
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
    runs.emplace_back([this, id] { (void)TriggerTask(id); });
  }
}

void MockScheduler::Shutdown() {
  std::vector<std::stop_source> to_signal;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, entry] : tasks_) to_signal.push_back(entry->stop);
  }
  for (std::stop_source& source : to_signal) source.request_stop();
}

}  // namespace stagehand::testing
