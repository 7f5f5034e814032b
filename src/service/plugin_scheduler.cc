#include "stagehand/service/plugin_scheduler.h"

#include <map>
#include <memory>
#include <utility>

#include "engine/task_engine.h"
#include "stagehand/base/host_name.h"
#include "stagehand/base/mutex.h"
#include "stagehand/service/task_row_state.h"
#include "stagehand/time/cron.h"
#include "stagehand/time/duration.h"

namespace stagehand {

namespace {

// Resolves the zone a task's cron cadence is evaluated in.
Result<TimeZone> ZoneOf(const TaskDefinition& task, const TimeZone& fallback) {
  const auto* cron = std::get_if<CronFrequency>(&task.frequency);
  if (cron == nullptr || cron->time_zone.empty()) return fallback;
  Result<TimeZone> zone = TimeZone::Locate(cron->time_zone);
  if (!zone.ok()) {
    return InvalidArgumentError("Invalid time zone for task " + task.id + ": " +
                                zone.status().message());
  }
  return zone;
}

}  // namespace

struct PluginScheduler::Impl {
  explicit Impl(PluginSchedulerOptions opts)
      : options(std::move(opts)),
        clock(options.clock != nullptr ? options.clock : &SystemClock::Instance()),
        engine(engine_internal::EngineContext{
            options.plugin_id, options.store.get(), clock,
            options.logger ? options.logger : NullLogger(), options.observer, options.engine,
            options.default_zone, options.threads ? options.threads->runtime_ : nullptr,
            LocalHostName()}) {}

  // Returns the store's run history. Errors: kFailedPrecondition naming the plugin when there is
  // none.
  Result<RunHistory*> History() const;
  // Returns whether `task_id` is registered here or has a row in the task table.
  Result<bool> TaskExists(const std::string& task_id) const;

  PluginSchedulerOptions options;
  Clock* clock;
  mutable Mutex mu;
  std::vector<TaskDescriptor> descriptors STAGEHAND_GUARDED_BY(mu);
  engine_internal::TaskEngine engine;
};

SchedulerThreads::SchedulerThreads(Clock& clock, int dispatcher_threads, int max_running_tasks)
    : runtime_(std::make_shared<engine_internal::EngineRuntime>(clock, dispatcher_threads,
                                                                max_running_tasks)) {}

SchedulerThreads::~SchedulerThreads() = default;

PluginScheduler::PluginScheduler(PluginSchedulerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

PluginScheduler::~PluginScheduler() { Shutdown(); }

const std::string& PluginScheduler::plugin_id() const { return impl_->options.plugin_id; }

namespace {

// Validates `task` and turns it into the engine's form. Errors: kInvalidArgument naming the task.
Result<engine_internal::EngineTask> ToEngineTask(TaskDefinition task,
                                                 const TimeZone& default_zone) {
  STAGEHAND_RETURN_IF_ERROR(ValidateTaskId(task.id));
  if (!task.fn) return InvalidArgumentError("Task " + task.id + " has no function to run");
  const ScheduleDefinition schedule = ScheduleOf(task);
  // The one parse of a cron cadence, unless a config reader has parsed it: the engine and the
  // store use this program.
  Result<TaskSettingsV2> settings = BuildTaskSettings(schedule);
  if (!settings.ok()) {
    return InvalidArgumentError("Invalid cron expression '" +
                                std::get<CronFrequency>(task.frequency).expression + "' for task " +
                                task.id + ": " + settings.status().message());
  }
  TaskSchedule task_schedule{*std::move(settings)};
  if (Status valid = task_schedule.settings.Validate(); !valid.ok()) {
    return valid.WithPrefix("Invalid schedule for task " + task.id + ": ");
  }
  if (Status valid = ValidateScheduleDurations(schedule); !valid.ok()) {
    return valid.WithPrefix("Invalid schedule for task " + task.id + ": ");
  }
  STAGEHAND_ASSIGN_OR_RETURN(task_schedule.zone, ZoneOf(task, default_zone));
  if (task.jitter)
    task_schedule.jitter_offset = JitterOffset(task.id, ToMilliseconds(*task.jitter));

  engine_internal::EngineTask engine_task;
  engine_task.id = task.id;
  engine_task.scope = task.scope;
  engine_task.schedule = std::move(task_schedule);
  engine_task.timeout = ToMilliseconds(task.timeout);
  if (task.initial_delay) {
    engine_task.has_initial_delay = true;
    engine_task.initial_delay = ToMilliseconds(*task.initial_delay);
  }
  if (task.catchup_window) engine_task.catchup_window = ToMilliseconds(*task.catchup_window);
  engine_task.retry = task.retry;
  engine_task.fn = std::move(task.fn);
  engine_task.stop = std::move(task.stop);
  return engine_task;
}

TaskDescriptor DescriptorOf(const engine_internal::EngineTask& task) {
  const TaskSchedule& schedule = task.schedule;
  return TaskDescriptor{task.id, task.scope, schedule.settings,
                        schedule.settings.cadence.is_cron() ? schedule.zone.name() : ""};
}

}  // namespace

Status PluginScheduler::ScheduleTask(TaskDefinition task) {
  std::vector<TaskDefinition> one;
  one.push_back(std::move(task));
  return ScheduleTasks(std::move(one));
}

Status PluginScheduler::ScheduleTasks(std::vector<TaskDefinition> tasks) {
  std::vector<engine_internal::EngineTask> engine_tasks;
  std::vector<TaskDescriptor> descriptors;
  engine_tasks.reserve(tasks.size());
  descriptors.reserve(tasks.size());
  for (TaskDefinition& task : tasks) {
    STAGEHAND_ASSIGN_OR_RETURN(engine_internal::EngineTask engine_task,
                               ToEngineTask(std::move(task), impl_->options.default_zone));
    descriptors.push_back(DescriptorOf(engine_task));
    engine_tasks.push_back(std::move(engine_task));
  }
  STAGEHAND_RETURN_IF_ERROR(impl_->engine.RegisterMany(std::move(engine_tasks)));

  std::vector<std::string> ids;
  ids.reserve(descriptors.size());
  {
    MutexLock lock(impl_->mu);
    impl_->descriptors.reserve(impl_->descriptors.size() + descriptors.size());
    for (TaskDescriptor& descriptor : descriptors) {
      ids.push_back(descriptor.id);
      impl_->descriptors.push_back(std::move(descriptor));
    }
  }
  if (impl_->options.observer) {
    for (const std::string& id : ids) {
      impl_->options.observer->OnTaskRegistered(impl_->options.plugin_id, id);
    }
  }
  return Status::Ok();
}

Status PluginScheduler::RescheduleTask(TaskDefinition task) {
  STAGEHAND_ASSIGN_OR_RETURN(engine_internal::EngineTask engine_task,
                             ToEngineTask(task, impl_->options.default_zone));
  TaskDescriptor descriptor = DescriptorOf(engine_task);
  Status redefined = impl_->engine.Redefine(std::move(engine_task));
  if (redefined.code() == StatusCode::kNotFound) return ScheduleTask(std::move(task));
  STAGEHAND_RETURN_IF_ERROR(redefined);
  MutexLock lock(impl_->mu);
  for (TaskDescriptor& known : impl_->descriptors) {
    if (known.id == descriptor.id) {
      known = std::move(descriptor);
      return Status::Ok();
    }
  }
  impl_->descriptors.push_back(std::move(descriptor));
  return Status::Ok();
}

Status PluginScheduler::UnscheduleTask(std::string_view id) {
  const std::string task_id(id);
  STAGEHAND_RETURN_IF_ERROR(impl_->engine.Retire(task_id));
  MutexLock lock(impl_->mu);
  std::erase_if(impl_->descriptors,
                [&](const TaskDescriptor& descriptor) { return descriptor.id == task_id; });
  return Status::Ok();
}

Status PluginScheduler::TriggerTask(std::string_view id) { return TriggerTask(id, TraceContext{}); }

Status PluginScheduler::TriggerTask(std::string_view id, const TraceContext& caller) {
  SchedulerObserver* observer = impl_->options.observer.get();
  const std::string& plugin_id = impl_->options.plugin_id;
  if (observer != nullptr) observer->OnTaskTriggerRequested(plugin_id, id);
  Status triggered = impl_->engine.Trigger(std::string(id), caller);
  if (observer != nullptr) {
    if (triggered.ok()) {
      observer->OnTaskTriggered(plugin_id, id);
    } else {
      observer->OnTaskTriggerRefused(plugin_id, id);
    }
  }
  return triggered;
}

Status PluginScheduler::CancelTask(std::string_view id) {
  STAGEHAND_RETURN_IF_ERROR(impl_->engine.Cancel(std::string(id)));
  if (impl_->options.observer)
    impl_->options.observer->OnTaskCancelled(impl_->options.plugin_id, id);
  return Status::Ok();
}

Status PluginScheduler::PauseTask(std::string_view id, const PauseRequest& request) {
  STAGEHAND_RETURN_IF_ERROR(ValidateTaskId(id));
  STAGEHAND_RETURN_IF_ERROR(impl_->engine.Pause(std::string(id), request));
  if (impl_->options.observer) {
    impl_->options.observer->OnTaskPaused(impl_->options.plugin_id, id, request);
  }
  return Status::Ok();
}

Status PluginScheduler::ResumeTask(std::string_view id) {
  STAGEHAND_RETURN_IF_ERROR(ValidateTaskId(id));
  STAGEHAND_RETURN_IF_ERROR(impl_->engine.Resume(std::string(id)));
  if (impl_->options.observer) {
    impl_->options.observer->OnTaskResumed(impl_->options.plugin_id, id);
  }
  return Status::Ok();
}

Result<KeyedOutcome> PluginScheduler::ApplyOnce(const KeyedRequest& request,
                                                const std::function<Result<KeptAnswer>()>& apply) {
  RequestKeys* keys = impl_->options.store ? impl_->options.store->request_keys() : nullptr;
  if (keys == nullptr) return SchedulerService::ApplyOnce(request, apply);
  KeyedRequest kept = request;
  kept.retention = impl_->options.idempotency_key_retention;
  return keys->ApplyOnce(kept, apply);
}

std::vector<TaskDescriptor> PluginScheduler::GetScheduledTasks() const {
  MutexLock lock(impl_->mu);
  return impl_->descriptors;
}

Result<std::vector<TaskListing>> PluginScheduler::ListTasks() const {
  const std::vector<TaskDescriptor> descriptors = GetScheduledTasks();
  std::map<std::string, TaskRow> rows;
  if (impl_->options.store) {
    STAGEHAND_ASSIGN_OR_RETURN(std::vector<TaskRow> states, impl_->options.store->States());
    for (TaskRow& row : states) {
      std::string id = row.id;
      rows.emplace(std::move(id), std::move(row));
    }
  }
  std::vector<TaskListing> listing;
  listing.reserve(descriptors.size());
  for (const TaskDescriptor& descriptor : descriptors) {
    TaskListing item;
    item.descriptor = descriptor;
    if (impl_->engine.HasLocalTask(descriptor.id)) {
      item.task_state = impl_->engine.LocalTaskState(descriptor.id);
    } else if (auto row = rows.find(descriptor.id); row != rows.end()) {
      item.task_state = ToTaskState(row->second, impl_->options.default_zone);
      item.pause = PauseOf(row->second);
    }
    item.worker_state = impl_->engine.WorkerState(descriptor.id);
    listing.push_back(std::move(item));
  }
  return listing;
}

Result<RunHistory*> PluginScheduler::Impl::History() const {
  const std::string& id = options.plugin_id;
  if (!options.engine.record_history) {
    return UnimplementedError(
        "The run history of plugin '" + id +
        "' is disabled: its runs are not recorded. Turn it on with stagehand.history.enabled: "
        "true in the app config (EngineOptions::record_history when embedding) and restart");
  }
  if (options.store == nullptr) {
    return UnimplementedError("Plugin '" + id +
                              "' keeps no run history: it has no database to keep it in");
  }
  RunHistory* history = options.store->history();
  if (history == nullptr) {
    return UnimplementedError("Plugin '" + id +
                              "' keeps no run history: its kind of database does not keep one "
                              "yet");
  }
  STAGEHAND_ASSIGN_OR_RETURN(bool tables, history->TablesExist());
  if (!tables) {
    return UnimplementedError(
        "The run history of plugin '" + id +
        "' is missing: its database has no history tables. Create them by migrating the "
        "database (stagehand db migrate, or stagehand serve, without "
        "backend.database.skipMigrations), then restart");
  }
  return history;
}

Result<bool> PluginScheduler::Impl::TaskExists(const std::string& task_id) const {
  {
    MutexLock lock(mu);
    for (const TaskDescriptor& descriptor : descriptors) {
      if (descriptor.id == task_id) return true;
    }
  }
  const std::string ids[] = {task_id};
  STAGEHAND_ASSIGN_OR_RETURN(PollResult polled, options.store->Poll(ids, /*sweep_expired=*/false));
  return polled.entries.size() == 1 && polled.entries[0].readiness != Readiness::kMissing;
}

Result<RunPage> PluginScheduler::GetTaskRuns(std::string_view task_id, int limit,
                                             const std::optional<std::string>& before) const {
  STAGEHAND_ASSIGN_OR_RETURN(RunHistory * history, impl_->History());
  const std::string id(task_id);
  STAGEHAND_RETURN_IF_ERROR(ValidateTaskId(id));
  Result<RunPage> page = history->ListRuns(id, limit, before);
  if (!page.ok() || !page->runs.empty()) return page;
  STAGEHAND_ASSIGN_OR_RETURN(bool exists, impl_->TaskExists(id));
  if (!exists) return NotFoundError("Task " + id + " does not exist");
  return page;
}

Result<RunDetail> PluginScheduler::GetRun(std::string_view run_id) const {
  STAGEHAND_ASSIGN_OR_RETURN(RunHistory * history, impl_->History());
  const std::string id(run_id);
  STAGEHAND_ASSIGN_OR_RETURN(TaskRun run, history->GetRun(id));
  RunDetail detail;
  detail.run = std::move(run);
  if (detail.run.finish.outcome == RunOutcome::kRunning) {
    if (std::optional<RunReport::Snapshot> live = impl_->engine.LiveRunReport(id)) {
      detail.live = true;
      detail.output_bytes = live->output_bytes;
      detail.run.finish.exit_code = live->exit_code;
      detail.run.finish.signal = live->signal;
      detail.run.finish.http_status = live->http_status;
      detail.run.finish.output_tail = std::move(live->output_tail);
      return detail;
    }
  }
  detail.output_bytes = detail.run.finish.output_tail.size();
  return detail;
}

void PluginScheduler::Shutdown() { impl_->engine.Shutdown(); }

int PluginScheduler::UndeliveredWrites() const { return impl_->engine.UndeliveredWrites(); }

std::optional<std::string> PluginScheduler::DatabaseUnreadyReason(std::chrono::milliseconds grace) {
  engine_internal::TaskEngine::DatabaseStatus status = impl_->engine.Readiness(grace);
  if (status.ready) return std::nullopt;
  return std::move(status.reason);
}

DatabaseHealth PluginScheduler::Database() const { return impl_->engine.Database(); }

}  // namespace stagehand
