// PluginScheduler over a MemoryTaskStore and a ManualClock. The engine's dispatcher and timer
// threads wait on the ManualClock, and so does the store's "database clock": tests move time with
// Advance and wait for engine events (observer hooks, task function calls) with a bounded real
// timeout. Nothing sleeps.
#include "stagehand/service/plugin_scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

#include "fixtures/task_schedules.h"
#include "stagehand/base/host_name.h"
#include "stagehand/store/memory_task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"
#include "stagehand/time/time_zone.h"
#include "unit/service/task_probe.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// How long a test waits for something an engine thread does before it gives up and fails.
using service_testing::kRealTimeout;
using service_testing::TaskProbe;

enum class EventKind {
  kStarted,
  kCompleted,
  kFailed,
  kClaimLost,
  kLeaseRenewed,
  kLeaseRenewalFailed,
  kLeaseLost,
  kReclaimed,
  kRegistered,
  kTriggerRequested,
  kTriggered,
  kTriggerRefused,
  kCancelled,
};

struct Event {
  EventKind kind;
  std::string task_id;
  std::string ticket;
  std::string error_json;
};

// Records the engine's observer hooks so tests can wait for them. Thread-safe.
class EventRecorder final : public SchedulerObserver {
 public:
  void OnRunStarted(const RunInfo& run, std::chrono::nanoseconds /*lag*/) override {
    Add({EventKind::kStarted, std::string(run.task_id), std::string(run.ticket), {}});
  }
  void OnRunCompleted(const RunInfo& run, std::chrono::nanoseconds /*duration*/) override {
    Add({EventKind::kCompleted, std::string(run.task_id), std::string(run.ticket), {}});
  }
  void OnRunFailed(const RunInfo& run, std::chrono::nanoseconds /*duration*/,
                   std::string_view error_json) override {
    Add({EventKind::kFailed, std::string(run.task_id), std::string(run.ticket),
         std::string(error_json)});
  }
  void OnClaimLost(std::string_view /*plugin_id*/, std::string_view task_id) override {
    Add({EventKind::kClaimLost, std::string(task_id), {}, {}});
  }
  void OnLeaseRenewed(const RunInfo& run) override {
    Add({EventKind::kLeaseRenewed, std::string(run.task_id), std::string(run.ticket), {}});
  }
  void OnLeaseRenewalFailed(const RunInfo& run) override {
    Add({EventKind::kLeaseRenewalFailed, std::string(run.task_id), std::string(run.ticket), {}});
  }
  void OnLeaseLost(const RunInfo& run) override {
    Add({EventKind::kLeaseLost, std::string(run.task_id), std::string(run.ticket), {}});
  }
  void OnReclaimed(std::string_view /*plugin_id*/, std::string_view task_id) override {
    Add({EventKind::kReclaimed, std::string(task_id), {}, {}});
  }
  void OnTaskRegistered(std::string_view /*plugin_id*/, std::string_view task_id) override {
    Add({EventKind::kRegistered, std::string(task_id), {}, {}});
  }
  void OnTaskTriggerRequested(std::string_view /*plugin_id*/, std::string_view task_id) override {
    Add({EventKind::kTriggerRequested, std::string(task_id), {}, {}});
  }
  void OnTaskTriggered(std::string_view /*plugin_id*/, std::string_view task_id) override {
    Add({EventKind::kTriggered, std::string(task_id), {}, {}});
  }
  void OnTaskTriggerRefused(std::string_view /*plugin_id*/, std::string_view task_id) override {
    Add({EventKind::kTriggerRefused, std::string(task_id), {}, {}});
  }
  void OnTaskCancelled(std::string_view /*plugin_id*/, std::string_view task_id) override {
    Add({EventKind::kCancelled, std::string(task_id), {}, {}});
  }

  // Blocks until `n` events of `kind` for `task_id` were recorded, or kRealTimeout passes.
  bool WaitFor(EventKind kind, const std::string& task_id, std::size_t n = 1) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kRealTimeout, [&] { return CountLocked(kind, task_id) >= n; });
  }

  std::size_t Count(EventKind kind, const std::string& task_id) const {
    std::lock_guard lock(mu_);
    return CountLocked(kind, task_id);
  }

  // Returns the kinds of the events for `task_id`, oldest first.
  std::vector<EventKind> KindsOf(const std::string& task_id) const {
    std::lock_guard lock(mu_);
    std::vector<EventKind> out;
    for (const Event& event : events_) {
      if (event.task_id == task_id) out.push_back(event.kind);
    }
    return out;
  }

  // Returns the events of `kind` for `task_id`, oldest first.
  std::vector<Event> Of(EventKind kind, const std::string& task_id) const {
    std::lock_guard lock(mu_);
    std::vector<Event> out;
    for (const Event& event : events_) {
      if (event.kind == kind && event.task_id == task_id) out.push_back(event);
    }
    return out;
  }

 private:
  void Add(Event event) {
    {
      std::lock_guard lock(mu_);
      events_.push_back(std::move(event));
    }
    cv_.notify_all();
  }
  std::size_t CountLocked(EventKind kind, const std::string& task_id) const {
    std::size_t n = 0;
    for (const Event& event : events_) {
      if (event.kind == kind && event.task_id == task_id) ++n;
    }
    return n;
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Event> events_;
};

TaskDefinition Global(std::string id, Frequency frequency, TaskFunction fn) {
  TaskDefinition task;
  task.id = std::move(id);
  task.frequency = std::move(frequency);
  HumanDuration minute;
  minute.minutes = 1;
  task.timeout = minute;
  task.scope = TaskScope::kGlobal;
  task.fn = std::move(fn);
  return task;
}

TaskDefinition Local(std::string id, Frequency frequency, TaskFunction fn) {
  TaskDefinition task = Global(std::move(id), std::move(frequency), std::move(fn));
  task.scope = TaskScope::kLocal;
  return task;
}

HumanDuration Seconds(double n) {
  HumanDuration duration;
  duration.seconds = n;
  return duration;
}

std::vector<std::string> IdsOf(const std::vector<TaskDescriptor>& descriptors) {
  std::vector<std::string> ids;
  for (const TaskDescriptor& descriptor : descriptors) ids.push_back(descriptor.id);
  return ids;
}

// A TaskStore that forwards to a MemoryTaskStore and can let time pass while a Poll is in flight,
// after the statement read the database clock and before the caller sees the answer, as a slow
// round trip does. Counts the registration statements. Thread-safe.
class SlowPollStore final : public TaskStore {
 public:
  SlowPollStore(std::shared_ptr<testing::MemoryTaskStore> inner, testing::ManualClock& clock)
      : inner_(std::move(inner)), clock_(clock) {}

  // Makes the first later Poll that reports `id` waiting for `next` advance the clock by `delta`
  // before it returns.
  void AdvanceDuringPollSeeing(std::string id, WallTime next, std::chrono::nanoseconds delta) {
    std::lock_guard lock(mu_);
    armed_ = Arm{std::move(id), next, delta};
  }

  const std::string& plugin_id() const override { return inner_->plugin_id(); }
  Status Migrate() override { return inner_->Migrate(); }
  Result<UpsertResult> Upsert(const std::string& id, const TaskSchedule& schedule) override {
    ++registration_statements;
    return inner_->Upsert(id, schedule);
  }
  Result<std::vector<UpsertResult>> UpsertMany(std::span<const TaskUpsert> tasks) override {
    ++registration_statements;
    return inner_->UpsertMany(tasks);
  }
  Result<PollResult> Poll(std::span<const std::string> ids, bool sweep_expired) override {
    Result<PollResult> result = inner_->Poll(ids, sweep_expired);
    if (!result.ok()) return result;
    std::optional<std::chrono::nanoseconds> delta;
    {
      std::lock_guard lock(mu_);
      for (const PollEntry& entry : result->entries) {
        if (armed_ && entry.id == armed_->id && entry.readiness == Readiness::kNotReady &&
            entry.next_run_start_at == armed_->next) {
          delta = armed_->delta;
          armed_.reset();
        }
      }
    }
    if (delta) clock_.Advance(*delta);
    return result;
  }
  Result<ClaimResult> Claim(const std::string& id, const std::string& ticket,
                            std::chrono::milliseconds timeout,
                            std::chrono::milliseconds lease) override {
    return inner_->Claim(id, ticket, timeout, lease);
  }
  Result<LeaseStatus> RenewLease(const std::string& id, const std::string& ticket,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds lease) override {
    return inner_->RenewLease(id, ticket, timeout, lease);
  }
  Result<bool> Release(const std::string& id, const std::string& ticket,
                       const TaskSchedule& schedule,
                       const std::optional<std::string>& error_json) override {
    return inner_->Release(id, ticket, schedule, error_json);
  }
  Status Trigger(const std::string& id) override { return inner_->Trigger(id); }
  Status Trigger(const std::string& id, const TraceContext& caller) override {
    return inner_->Trigger(id, caller);
  }
  Status Cancel(const std::string& id, std::chrono::milliseconds hold) override {
    return inner_->Cancel(id, hold);
  }
  Result<std::vector<std::string>> SweepExpired() override { return inner_->SweepExpired(); }
  Result<std::vector<TaskRow>> States() override { return inner_->States(); }
  Status Delete(const std::string& id) override { return inner_->Delete(id); }
  Result<WallTime> DatabaseNow() override { return inner_->DatabaseNow(); }
  std::unique_ptr<Notifications> Listen(std::function<void(const StoreEvent&)> handler) override {
    return inner_->Listen(std::move(handler));
  }

  // The run history it reports (none by default, as a store of a kind that keeps none).
  void SetHistory(RunHistory* history) { history_ = history; }
  RunHistory* history() override { return history_; }

 private:
  struct Arm {
    std::string id;
    WallTime next;
    std::chrono::nanoseconds delta;
  };

  std::shared_ptr<testing::MemoryTaskStore> inner_;
  testing::ManualClock& clock_;

 public:
  std::atomic<int> registration_statements{0};

 private:
  std::mutex mu_;
  std::optional<Arm> armed_;
  RunHistory* history_ = nullptr;
};

// A run history whose tables were never created (a database migrated by an older stagehand):
// TablesExist() is false; everything else is the memory store's.
class MissingTablesHistory final : public RunHistory {
 public:
  explicit MissingTablesHistory(RunHistory& inner) : inner_(inner) {}
  void SetLimits(const RunHistoryLimits& limits) override { inner_.SetLimits(limits); }
  RunHistoryLimits limits() const override { return inner_.limits(); }
  Status RecordStarts(std::span<const RunStart> starts) override {
    return inner_.RecordStarts(starts);
  }
  Result<std::size_t> RecordEnds(std::span<const RunEnd> ends) override {
    return inner_.RecordEnds(ends);
  }
  Result<RunPage> ListRuns(const std::string& task_id, int limit,
                           const std::optional<std::string>& before) override {
    return inner_.ListRuns(task_id, limit, before);
  }
  Result<TaskRun> GetRun(const std::string& run_id) override { return inner_.GetRun(run_id); }
  Result<std::size_t> MarkLost(std::span<const std::string> run_ids,
                               const std::string& error_json) override {
    return inner_.MarkLost(run_ids, error_json);
  }
  Result<bool> TablesExist() override { return false; }
  Result<std::size_t> PruneExpired(std::size_t max_rows) override {
    return inner_.PruneExpired(max_rows);
  }

 private:
  RunHistory& inner_;
};

class PluginSchedulerTest : public ::testing::Test {
 protected:
  PluginSchedulerTest() { Start(); }

  // (Re)creates the scheduler under test.
  void Start(std::shared_ptr<TaskStore> store) {
    scheduler_.reset();
    PluginSchedulerOptions options;
    options.plugin_id = "myplugin";
    options.store = std::move(store);
    options.clock = &clock_;
    options.observer = events_;
    options.default_zone = TimeZone::Utc();
    scheduler_ = std::make_unique<PluginScheduler>(std::move(options));
  }
  void Start() { Start(store_); }

  // Returns the store's row for `id`, if there is one.
  std::optional<TaskRow> Row(const std::string& id) {
    Result<std::vector<TaskRow>> rows = store_->States();
    if (!rows.ok()) return std::nullopt;
    for (const TaskRow& row : *rows) {
      if (row.id == id) return row;
    }
    return std::nullopt;
  }

  // The wall time `offset` after the clock's start.
  static WallTime At(milliseconds offset) { return testing::ManualClock::DefaultStart() + offset; }

  Result<TaskListing> Listing(const std::string& id) {
    Result<std::vector<TaskListing>> listing = scheduler_->ListTasks();
    if (!listing.ok()) return listing.status();
    for (const TaskListing& item : *listing) {
      if (item.descriptor.id == id) return item;
    }
    return NotFoundError("no listing for " + id);
  }

  // Declared first so that it outlives every thread waiting on it.
  testing::ManualClock clock_;
  std::shared_ptr<testing::MemoryTaskStore> store_ =
      std::make_shared<testing::MemoryTaskStore>("myplugin", clock_);
  std::shared_ptr<EventRecorder> events_ = std::make_shared<EventRecorder>();
  std::unique_ptr<PluginScheduler> scheduler_;
};

// --- Registration -------------------------------------------------------------------------------

TEST(ValidateTaskIdTest, AcceptsBackstagesValidIds) {
  for (const char* id : {"a", "a_b", "ab123c_2", "a!", "A", "a-b", "a.b", "_a", "a_", "a/b c"}) {
    EXPECT_THAT(ValidateTaskId(id), IsOk()) << id;
  }
}

TEST(ValidateTaskIdTest, RejectsEmptyAndBlankIds) {
  EXPECT_EQ(ValidateTaskId(""),
            InvalidArgumentError(" is not a valid ID, expected non-empty string"));
  EXPECT_EQ(ValidateTaskId("  "),
            InvalidArgumentError("   is not a valid ID, expected non-empty string"));
  EXPECT_THAT(ValidateTaskId("\t\n"), StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(PluginSchedulerTest, RejectsAnInvalidIdBeforeAnythingElse) {
  auto probe = std::make_shared<TaskProbe>();
  TaskDefinition task = Global("", CronFrequency{"not a cron", "Nowhere/Land"}, probe->Returning());
  task.timeout = HumanDuration{};

  EXPECT_EQ(scheduler_->ScheduleTask(std::move(task)),
            InvalidArgumentError(" is not a valid ID, expected non-empty string"));
  EXPECT_EQ(scheduler_->ScheduleTask(Local("  ", minutes(1), probe->Returning())),
            InvalidArgumentError("   is not a valid ID, expected non-empty string"));
  EXPECT_TRUE(scheduler_->GetScheduledTasks().empty());
  EXPECT_FALSE(Row("").has_value());
}

TEST_F(PluginSchedulerTest, RejectsAnInvalidCronNamingTheExpression) {
  auto probe = std::make_shared<TaskProbe>();
  for (TaskScope scope : {TaskScope::kGlobal, TaskScope::kLocal}) {
    TaskDefinition task = Global("t", CronFrequency{"61 * * * *", ""}, probe->Returning());
    task.scope = scope;
    const Status status = scheduler_->ScheduleTask(std::move(task));
    EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument, "61 * * * *"));
  }
  EXPECT_TRUE(scheduler_->GetScheduledTasks().empty());
  EXPECT_FALSE(Row("t").has_value());
}

TEST_F(PluginSchedulerTest, RejectsACronThatNeverFires) {
  auto probe = std::make_shared<TaskProbe>();
  for (TaskScope scope : {TaskScope::kGlobal, TaskScope::kLocal}) {
    TaskDefinition task = Global("t", CronFrequency{"0 0 30 2 *", ""}, probe->Returning());
    task.scope = scope;
    const Status status = scheduler_->ScheduleTask(std::move(task));
    EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument));
  }
  EXPECT_TRUE(scheduler_->GetScheduledTasks().empty());
  EXPECT_EQ(probe->starts(), 0U);
}

TEST_F(PluginSchedulerTest, RejectsAnUnknownTimeZone) {
  auto probe = std::make_shared<TaskProbe>();
  const Status status = scheduler_->ScheduleTask(
      Global("t", CronFrequency{"* * * * *", "Mars/Olympus_Mons"}, probe->Returning()));
  EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument, "Mars/Olympus_Mons"));
  EXPECT_TRUE(scheduler_->GetScheduledTasks().empty());
  EXPECT_FALSE(Row("t").has_value());
}

TEST_F(PluginSchedulerTest, AcceptsACronWithAKnownTimeZone) {
  auto probe = std::make_shared<TaskProbe>();
  EXPECT_TRUE(scheduler_
                  ->ScheduleTask(
                      Global("t", CronFrequency{"0 9 * * *", "Europe/Berlin"}, probe->Returning()))
                  .ok());
  // The first start is 09:00 in Berlin (08:00Z in winter).
  ASSERT_TRUE(Row("t").has_value());
  EXPECT_EQ(Row("t")->next_run_start_at, At(std::chrono::hours(8)));
}

TEST_F(PluginSchedulerTest, RejectsATaskWithoutAFunction) {
  const Status status = scheduler_->ScheduleTask(Global("t", minutes(1), TaskFunction()));
  EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_TRUE(scheduler_->GetScheduledTasks().empty());
}

TEST_F(PluginSchedulerTest, RejectsASecondActiveRegistrationOfTheSameId) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", minutes(10), probe->Returning())), IsOk());
  ASSERT_THAT(scheduler_->ScheduleTask(Local("l", ManualFrequency{}, probe->Returning())), IsOk());

  EXPECT_THAT(scheduler_->ScheduleTask(Global("g", minutes(5), probe->Returning())),
              StatusIs(StatusCode::kConflict));
  EXPECT_THAT(scheduler_->ScheduleTask(Local("g", minutes(5), probe->Returning())),
              StatusIs(StatusCode::kConflict));
  EXPECT_THAT(scheduler_->ScheduleTask(Local("l", minutes(5), probe->Returning())),
              StatusIs(StatusCode::kConflict));
  EXPECT_THAT(IdsOf(scheduler_->GetScheduledTasks()), ElementsAre("g", "l"));
  ASSERT_TRUE(Row("g").has_value());
  EXPECT_THAT(Row("g")->settings_json, HasSubstr("\"PT600S\""));
}

TEST_F(PluginSchedulerTest, AllowsReRegistrationOnceTheCallerStoppedTheTask) {
  auto probe = std::make_shared<TaskProbe>();
  std::stop_source stop;
  TaskDefinition task = Global("g", ManualFrequency{}, probe->Returning());
  task.stop = stop.get_token();
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", ManualFrequency{}, probe->Returning())),
              StatusIs(StatusCode::kConflict));

  stop.request_stop();

  EXPECT_THAT(scheduler_->ScheduleTask(Global("g", ManualFrequency{}, probe->Returning())), IsOk());
  EXPECT_THAT(IdsOf(scheduler_->GetScheduledTasks()), ElementsAre("g", "g"));
}

TEST_F(PluginSchedulerTest, StoreUnavailableAtRegistrationRegistersNothing) {
  auto probe = std::make_shared<TaskProbe>();
  store_->SetUnavailable(true);

  const Status status = scheduler_->ScheduleTask(Global("g", minutes(1), probe->Returning()));

  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable, "Failed to persist task"));
  EXPECT_TRUE(scheduler_->GetScheduledTasks().empty());
  store_->SetUnavailable(false);
  EXPECT_FALSE(Row("g").has_value());
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", minutes(1), probe->Returning())), IsOk());
  EXPECT_TRUE(events_->WaitFor(EventKind::kCompleted, "g"));
}

TEST_F(PluginSchedulerTest, GlobalTasksNeedAStoreButLocalTasksDoNot) {
  Start(nullptr);
  auto probe = std::make_shared<TaskProbe>();

  EXPECT_THAT(scheduler_->ScheduleTask(Global("g", minutes(1), probe->Returning())),
              StatusIs(StatusCode::kUnavailable));
  ASSERT_THAT(scheduler_->ScheduleTask(Local("l", minutes(1), probe->Returning())), IsOk());

  EXPECT_TRUE(probe->WaitForStarts(1));
  EXPECT_THAT(IdsOf(scheduler_->GetScheduledTasks()), ElementsAre("l"));
  EXPECT_EQ(scheduler_->TriggerTask("nope"), NotFoundError("Task nope does not exist"));
  EXPECT_EQ(scheduler_->CancelTask("nope"), NotFoundError("Task nope does not exist"));
}

TEST_F(PluginSchedulerTest, ScheduleTaskAfterShutdownIsUnavailable) {
  auto probe = std::make_shared<TaskProbe>();
  scheduler_->Shutdown();
  EXPECT_THAT(scheduler_->ScheduleTask(Global("g", minutes(1), probe->Returning())),
              StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(scheduler_->ScheduleTask(Local("l", minutes(1), probe->Returning())),
              StatusIs(StatusCode::kUnavailable));
  EXPECT_TRUE(scheduler_->GetScheduledTasks().empty());
  scheduler_->Shutdown();
}

TEST_F(PluginSchedulerTest, ScheduleTasksWritesEveryGlobalTaskInOneStatement) {
  auto probe = std::make_shared<TaskProbe>();
  std::vector<TaskDefinition> tasks;
  tasks.push_back(Global("g1", minutes(10), probe->Returning()));
  tasks.push_back(Local("l1", ManualFrequency{}, probe->Returning()));
  tasks.push_back(Global("g2", ManualFrequency{}, probe->Returning()));
  tasks.push_back(Global("g3", minutes(5), probe->Returning()));
  auto counting = std::make_shared<SlowPollStore>(store_, clock_);
  Start(counting);

  ASSERT_THAT(scheduler_->ScheduleTasks(std::move(tasks)), IsOk());

  EXPECT_EQ(counting->registration_statements.load(), 1);
  EXPECT_THAT(IdsOf(scheduler_->GetScheduledTasks()), ElementsAre("g1", "l1", "g2", "g3"));
  ASSERT_TRUE(Row("g1").has_value());
  ASSERT_TRUE(Row("g2").has_value());
  ASSERT_TRUE(Row("g3").has_value());
  EXPECT_FALSE(Row("l1").has_value());
  EXPECT_FALSE(Row("g2")->next_run_start_at.has_value());
  EXPECT_TRUE(events_->WaitFor(EventKind::kCompleted, "g1"));
  EXPECT_TRUE(events_->WaitFor(EventKind::kCompleted, "g3"));
  ASSERT_THAT(scheduler_->TriggerTask("g2"), IsOk());
  EXPECT_TRUE(events_->WaitFor(EventKind::kCompleted, "g2"));
}

TEST_F(PluginSchedulerTest, ScheduleTasksRegistersNothingWhenOneTaskIsBad) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("taken", minutes(10), probe->Returning())), IsOk());
  const auto batch = [&](TaskDefinition odd_one) {
    std::vector<TaskDefinition> tasks;
    tasks.push_back(Global("a", minutes(10), probe->Returning()));
    tasks.push_back(Local("b", minutes(10), probe->Returning()));
    tasks.push_back(std::move(odd_one));
    return tasks;
  };
  CronFrequency bad_cron;
  bad_cron.expression = "not a cron";

  const Status invalid =
      scheduler_->ScheduleTasks(batch(Global("c", bad_cron, probe->Returning())));
  EXPECT_THAT(invalid, StatusIs(StatusCode::kInvalidArgument, "task c"));
  const Status duplicate =
      scheduler_->ScheduleTasks(batch(Global("a", minutes(1), probe->Returning())));
  EXPECT_THAT(duplicate, StatusIs(StatusCode::kConflict, "Task a "));
  const Status conflict =
      scheduler_->ScheduleTasks(batch(Local("taken", minutes(1), probe->Returning())));
  EXPECT_THAT(conflict, StatusIs(StatusCode::kConflict, "Task taken "));
  store_->SetUnavailable(true);
  const Status down = scheduler_->ScheduleTasks(batch(Global("c", minutes(1), probe->Returning())));
  EXPECT_THAT(down, StatusIs(StatusCode::kUnavailable));
  store_->SetUnavailable(false);

  EXPECT_THAT(IdsOf(scheduler_->GetScheduledTasks()), ElementsAre("taken"));
  EXPECT_FALSE(Row("a").has_value());
  EXPECT_FALSE(Row("c").has_value());
  ASSERT_THAT(scheduler_->ScheduleTasks(batch(Global("c", minutes(1), probe->Returning()))),
              IsOk());
  EXPECT_THAT(IdsOf(scheduler_->GetScheduledTasks()), ElementsAre("taken", "a", "b", "c"));
}

TEST(MakeTaskDefinitionTest, TakesEveryScheduleFieldFromTheSchedule) {
  ScheduleDefinition schedule;
  schedule.frequency = CronFrequency{"0 * * * *", "Europe/Paris"};
  schedule.timeout = seconds(30);
  schedule.initial_delay = Seconds(5);
  schedule.scope = TaskScope::kLocal;
  std::stop_source stop;

  TaskDefinition task =
      MakeTaskDefinition(schedule, TaskInvocation{"t", [](std::stop_token) {}, stop.get_token()});

  EXPECT_EQ(task.id, "t");
  EXPECT_TRUE(static_cast<bool>(task.fn));
  EXPECT_EQ(task.frequency, schedule.frequency);
  EXPECT_EQ(task.timeout, schedule.timeout);
  EXPECT_EQ(task.initial_delay, schedule.initial_delay);
  EXPECT_EQ(task.scope, TaskScope::kLocal);
  stop.request_stop();
  EXPECT_TRUE(task.stop.stop_requested());

  schedule.scope.reset();
  EXPECT_EQ(MakeTaskDefinition(schedule, TaskInvocation{"t", {}, {}}).scope, TaskScope::kGlobal);
}

TEST_F(PluginSchedulerTest, ScheduledTaskRunnerRunsTheHappyPath) {
  auto probe = std::make_shared<TaskProbe>();
  ScheduleDefinition schedule;
  schedule.frequency = Seconds(5);
  HumanDuration minute;
  minute.minutes = 1;
  schedule.timeout = minute;
  ScheduledTaskRunner runner = scheduler_->CreateScheduledTaskRunner(schedule);

  ASSERT_THAT(runner.Run(TaskInvocation{"r", probe->Returning(), {}}), IsOk());

  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "r"));
  EXPECT_EQ(probe->starts(), 1U);
  const std::vector<TaskDescriptor> tasks = scheduler_->GetScheduledTasks();
  ASSERT_EQ(tasks.size(), 1U);
  EXPECT_EQ(tasks[0].scope, TaskScope::kGlobal);
  EXPECT_EQ(tasks[0].settings, testing::Settings("PT5S", std::nullopt, "PT1M"));
}

// --- Global tasks -------------------------------------------------------------------------------

TEST_F(PluginSchedulerTest, GlobalDurationTaskRunsAtOnceThenEveryCadence) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", Seconds(5), probe->Returning())), IsOk());

  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "g"));
  std::optional<TaskRow> row = Row("g");
  ASSERT_TRUE(row.has_value());
  EXPECT_EQ(row->next_run_start_at, At(seconds(5)));
  EXPECT_EQ(row->last_run_ended_at, At(seconds(0)));
  EXPECT_FALSE(row->current_run_ticket.has_value());
  EXPECT_FALSE(row->last_run_error_json.has_value());

  clock_.Advance(seconds(5));
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "g", 2));
  EXPECT_EQ(Row("g")->next_run_start_at, At(seconds(10)));
  EXPECT_EQ(probe->starts(), 2U);
  EXPECT_THAT(probe->stopped_at_start(), ElementsAre(false, false));

  const std::vector<Event> started = events_->Of(EventKind::kStarted, "g");
  ASSERT_EQ(started.size(), 2U);
  EXPECT_FALSE(started[0].ticket.empty());
  EXPECT_NE(started[0].ticket, started[1].ticket);
}

TEST_F(PluginSchedulerTest, GlobalCronTaskRunsAtEverySlot) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_TRUE(
      scheduler_->ScheduleTask(Global("c", CronFrequency{"* * * * * *", ""}, probe->Returning()))
          .ok());

  // The first start is the next slot (not Backstage's "slot - 1 s", which would be due at once).
  EXPECT_EQ(Row("c")->next_run_start_at, At(seconds(1)));
  clock_.Advance(seconds(1));
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "c"));
  EXPECT_EQ(Row("c")->next_run_start_at, At(seconds(2)));
  for (int run = 2; run <= 4; ++run) {
    clock_.Advance(seconds(1));
    ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "c", static_cast<std::size_t>(run)))
        << "run " << run;
    EXPECT_EQ(Row("c")->next_run_start_at, At(seconds(run + 1)));
  }
  EXPECT_EQ(probe->starts(), 4U);
}

// Regression: the dispatcher mapped a polled next_run_start_at to its monotonic clock from a
// reading taken after the statement returned, so time that passed during the round trip delayed
// the wake-up by as much (here: a due task waited for the next safety poll).
TEST_F(PluginSchedulerTest, TimePassingDuringAPollDoesNotDelayTheNextRun) {
  auto slow = std::make_shared<SlowPollStore>(store_, clock_);
  Start(slow);
  auto probe = std::make_shared<TaskProbe>();
  slow->AdvanceDuringPollSeeing("g", At(seconds(5)), seconds(5));
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", Seconds(5), probe->Returning())), IsOk());

  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "g", 2));
  EXPECT_EQ(Row("g")->next_run_start_at, At(seconds(10)));
}

TEST_F(PluginSchedulerTest, FailingGlobalRunIsRecordedWithBackstagesErrorJson) {
  auto returning = std::make_shared<TaskProbe>();
  auto throwing = std::make_shared<TaskProbe>();
  ASSERT_TRUE(scheduler_
                  ->ScheduleTask(Global("returns", ManualFrequency{},
                                        returning->Returning(InternalError("it broke"))))
                  .ok());
  ASSERT_TRUE(scheduler_
                  ->ScheduleTask(Global("throws", ManualFrequency{},
                                        throwing->Throwing("it \"really\" broke")))
                  .ok());

  ASSERT_THAT(scheduler_->TriggerTask("returns"), IsOk());
  ASSERT_THAT(scheduler_->TriggerTask("throws"), IsOk());

  ASSERT_TRUE(events_->WaitFor(EventKind::kFailed, "returns"));
  ASSERT_TRUE(events_->WaitFor(EventKind::kFailed, "throws"));
  EXPECT_EQ(Row("returns")->last_run_error_json, R"({"name":"Error","message":"it broke"})");
  EXPECT_EQ(Row("throws")->last_run_error_json,
            R"({"name":"Error","message":"it \"really\" broke"})");
  EXPECT_EQ(events_->Of(EventKind::kFailed, "throws")[0].error_json,
            R"({"name":"Error","message":"it \"really\" broke"})");
  EXPECT_EQ(events_->Count(EventKind::kCompleted, "returns"), 0U);
}

TEST_F(PluginSchedulerTest, TriggerRunsAManualGlobalTask) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("m", ManualFrequency{}, probe->Returning())), IsOk());
  ASSERT_TRUE(Row("m").has_value());
  EXPECT_FALSE(Row("m")->next_run_start_at.has_value());
  EXPECT_EQ(probe->starts(), 0U);

  ASSERT_THAT(scheduler_->TriggerTask("m"), IsOk());

  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "m"));
  EXPECT_EQ(probe->starts(), 1U);
  EXPECT_FALSE(Row("m")->next_run_start_at.has_value());
}

TEST_F(PluginSchedulerTest, TriggerRunsAGlobalTaskLongBeforeItsNextTime) {
  auto probe = std::make_shared<TaskProbe>();
  HumanDuration year;
  year.years = 1;
  ASSERT_THAT(scheduler_->ScheduleTask(Global("y", year, probe->Returning())), IsOk());
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "y"));

  ASSERT_THAT(scheduler_->TriggerTask("y"), IsOk());

  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "y", 2));
  EXPECT_EQ(probe->starts(), 2U);
}

TEST_F(PluginSchedulerTest, TriggerOfAMissingTaskIsNotFound) {
  EXPECT_EQ(scheduler_->TriggerTask("x"), NotFoundError("Task x does not exist"));
  EXPECT_THAT(events_->KindsOf("x"),
              ElementsAre(EventKind::kTriggerRequested, EventKind::kTriggerRefused));
}

// Issue 16: the event stream could tell of a trigger after the run it started; observers are now
// told of the trigger before the engine can start the run, and of its outcome after.
TEST_F(PluginSchedulerTest, ATriggerIsAnnouncedBeforeTheEngineCanStartItsRun) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("m", ManualFrequency{}, probe->Returning())), IsOk());
  ASSERT_THAT(scheduler_->TriggerTask("m"), IsOk());
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "m"));
  std::vector<EventKind> kinds = events_->KindsOf("m");
  ASSERT_GE(kinds.size(), 5U);
  EXPECT_EQ(kinds[0], EventKind::kRegistered);
  EXPECT_EQ(kinds[1], EventKind::kTriggerRequested);
  kinds.erase(kinds.begin(), kinds.begin() + 2);
  // The run may start before TriggerTask returns: only the request is sure to come first.
  EXPECT_THAT(kinds, ::testing::UnorderedElementsAre(EventKind::kTriggered, EventKind::kStarted,
                                                     EventKind::kCompleted));
}

TEST_F(PluginSchedulerTest, TriggerOfARunningGlobalTaskIsAConflict) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", minutes(10), probe->Blocking())), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));

  EXPECT_EQ(scheduler_->TriggerTask("g"), ConflictError("Task g is currently running"));

  probe->ReleaseAll();
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "g"));
  EXPECT_EQ(probe->starts(), 1U);
}

TEST_F(PluginSchedulerTest, TriggerWithTheStoreDownIsUnavailable) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("m", ManualFrequency{}, probe->Returning())), IsOk());
  store_->SetUnavailable(true);
  EXPECT_THAT(scheduler_->TriggerTask("m"), StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(scheduler_->CancelTask("m"), StatusIs(StatusCode::kUnavailable));
  store_->SetUnavailable(false);
}

// --- Local tasks --------------------------------------------------------------------------------

TEST_F(PluginSchedulerTest, LocalDurationTaskRunsAtOnceThenEveryCadence) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Local("l", Seconds(5), probe->Returning())), IsOk());

  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "l"));
  clock_.Advance(seconds(5));
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "l", 2));

  EXPECT_EQ(probe->starts(), 2U);
  EXPECT_FALSE(Row("l").has_value());
  const std::vector<Event> started = events_->Of(EventKind::kStarted, "l");
  ASSERT_EQ(started.size(), 2U);
  EXPECT_EQ(started[0].ticket, "");
}

TEST_F(PluginSchedulerTest, LocalCronTaskRunsAtOnceThenAtTheNextSlot) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_TRUE(
      scheduler_->ScheduleTask(Local("c", CronFrequency{"*/10 * * * * *", ""}, probe->Returning()))
          .ok());

  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "c"));
  Result<TaskListing> listing = Listing("c");
  ASSERT_THAT(listing, IsOk());
  ASSERT_TRUE(listing->task_state.has_value());
  EXPECT_EQ(listing->task_state->starts_at,
            FormatIsoInstant(At(seconds(10)), TimeZone::ProcessDefault()));

  clock_.Advance(seconds(10));
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "c", 2));
  EXPECT_EQ(probe->starts(), 2U);
}

TEST_F(PluginSchedulerTest, TriggerRunsAManualLocalTask) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Local("m", ManualFrequency{}, probe->Returning())), IsOk());
  EXPECT_EQ(probe->starts(), 0U);

  ASSERT_THAT(scheduler_->TriggerTask("m"), IsOk());
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "m"));
  ASSERT_THAT(scheduler_->TriggerTask("m"), IsOk());
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "m", 2));

  EXPECT_EQ(probe->starts(), 2U);
}

TEST_F(PluginSchedulerTest, TriggerEndsTheInitialWaitOfALocalTask) {
  auto probe = std::make_shared<TaskProbe>();
  TaskDefinition task = Local("l", Seconds(5), probe->Returning());
  HumanDuration year;
  year.years = 1;
  task.initial_delay = year;
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());

  ASSERT_THAT(scheduler_->TriggerTask("l"), IsOk());

  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "l"));
  EXPECT_EQ(probe->starts(), 1U);
}

TEST_F(PluginSchedulerTest, TriggerOfAMissingLocalIdFallsThroughToTheStore) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Local("l", ManualFrequency{}, probe->Returning())), IsOk());
  EXPECT_EQ(scheduler_->TriggerTask("x"), NotFoundError("Task x does not exist"));
}

TEST_F(PluginSchedulerTest, TriggerOfARunningLocalTaskIsAConflict) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Local("l", minutes(10), probe->Blocking())), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));

  EXPECT_EQ(scheduler_->TriggerTask("l"), ConflictError("Task l is currently running"));

  probe->ReleaseAll();
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "l"));
  EXPECT_EQ(probe->starts(), 1U);
}

TEST_F(PluginSchedulerTest, LocalRunIsStoppedAtItsTimeout) {
  auto probe = std::make_shared<TaskProbe>();
  TaskDefinition task = Local("l", minutes(10), probe->Blocking());
  task.timeout = seconds(30);
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));

  clock_.Advance(seconds(30));

  ASSERT_TRUE(probe->WaitForReturns(1));
  EXPECT_THAT(probe->stopped_at_return(), ElementsAre(true));
}

// --- Descriptors --------------------------------------------------------------------------------

TEST_F(PluginSchedulerTest, GetScheduledTasksReturnsGlobalAndLocalTasksInOrder) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Local("task2", Seconds(5), probe->Returning())), IsOk());
  ASSERT_THAT(scheduler_->ScheduleTask(Global("task1", Seconds(5), probe->Returning())), IsOk());

  const std::vector<TaskDescriptor> tasks = scheduler_->GetScheduledTasks();

  ASSERT_EQ(tasks.size(), 2U);
  EXPECT_EQ(tasks[0].id, "task2");
  EXPECT_EQ(tasks[0].scope, TaskScope::kLocal);
  EXPECT_EQ(tasks[0].settings, testing::Settings("PT5S", std::nullopt, "PT1M"));
  EXPECT_EQ(tasks[1].id, "task1");
  EXPECT_EQ(tasks[1].scope, TaskScope::kGlobal);
  EXPECT_EQ(tasks[1].settings, testing::Settings("PT5S", std::nullopt, "PT1M"));
}

// --- Cancel -------------------------------------------------------------------------------------

TEST_F(PluginSchedulerTest, CancelStopsARunningLocalTask) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Local("l", minutes(10), probe->Blocking())), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));

  EXPECT_THAT(scheduler_->CancelTask("l"), IsOk());

  ASSERT_TRUE(probe->WaitForReturns(1));
  EXPECT_THAT(probe->stopped_at_return(), ElementsAre(true));
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "l"));
  EXPECT_EQ(scheduler_->CancelTask("l"), ConflictError("Task l is not running"));
}

TEST_F(PluginSchedulerTest, CancelOfAnIdleLocalTaskIsAConflict) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Local("l", ManualFrequency{}, probe->Returning())), IsOk());
  EXPECT_EQ(scheduler_->CancelTask("l"), ConflictError("Task l is not running"));
}

TEST_F(PluginSchedulerTest, CancelStopsARunningGlobalTaskAndRecordsIt) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", minutes(10), probe->Blocking())), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));
  ASSERT_TRUE(Row("g")->current_run_ticket.has_value());

  EXPECT_THAT(scheduler_->CancelTask("g"), IsOk());

  ASSERT_TRUE(probe->WaitForReturns(1));
  EXPECT_THAT(probe->stopped_at_return(), ElementsAre(true));
  // The run releases the row itself (recording the cancel) once its function has returned.
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "g"));
  std::optional<TaskRow> row = Row("g");
  ASSERT_TRUE(row.has_value());
  EXPECT_FALSE(row->current_run_ticket.has_value());
  EXPECT_EQ(row->last_run_error_json, R"({"name":"Error","message":"Task was cancelled"})");
  EXPECT_EQ(row->next_run_start_at, At(minutes(10)));
  EXPECT_EQ(scheduler_->CancelTask("g"), ConflictError("Task g is not running"));
}

TEST_F(PluginSchedulerTest, CancelOfAMissingGlobalTaskIsNotFound) {
  EXPECT_EQ(scheduler_->CancelTask("x"), NotFoundError("Task x does not exist"));
}

TEST_F(PluginSchedulerTest, CancelOfAnIdleGlobalTaskIsAConflict) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", ManualFrequency{}, probe->Returning())), IsOk());
  EXPECT_EQ(scheduler_->CancelTask("g"), ConflictError("Task g is not running"));
}

// --- Shutdown -----------------------------------------------------------------------------------

TEST_F(PluginSchedulerTest, ShutdownSignalsRunningTasksAndReleasesTheirTickets) {
  auto global = std::make_shared<TaskProbe>();
  auto local = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", minutes(10), global->Blocking())), IsOk());
  ASSERT_THAT(scheduler_->ScheduleTask(Local("l", minutes(10), local->Blocking())), IsOk());
  ASSERT_TRUE(global->WaitForStarts(1));
  ASSERT_TRUE(local->WaitForStarts(1));

  scheduler_->Shutdown();

  EXPECT_THAT(global->stopped_at_return(), ElementsAre(true));
  EXPECT_THAT(local->stopped_at_return(), ElementsAre(true));
  std::optional<TaskRow> row = Row("g");
  ASSERT_TRUE(row.has_value());
  EXPECT_FALSE(row->current_run_ticket.has_value());
  EXPECT_EQ(row->last_run_ended_at, At(seconds(0)));
}

TEST_F(PluginSchedulerTest, CallerStopTokenEndsTheRecurrenceAndStopsTheRun) {
  auto probe = std::make_shared<TaskProbe>();
  std::stop_source stop;
  TaskDefinition task = Global("g", Seconds(5), probe->Blocking());
  task.stop = stop.get_token();
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));

  stop.request_stop();

  ASSERT_TRUE(probe->WaitForReturns(1));
  EXPECT_THAT(probe->stopped_at_return(), ElementsAre(true));
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "g"));
  // The recurrence ended, so the id is free again.
  auto again = std::make_shared<TaskProbe>();
  EXPECT_THAT(scheduler_->ScheduleTask(Global("g", Seconds(5), again->Returning())), IsOk());
}

// --- REST listing -------------------------------------------------------------------------------

TEST_F(PluginSchedulerTest, ListTasksShowsSettingsAndWaitingStates) {
  auto probe = std::make_shared<TaskProbe>();
  HumanDuration ten_minutes;
  ten_minutes.minutes = 10;
  HumanDuration hour;
  hour.hours = 1;
  TaskDefinition delayed = Global("g1", ten_minutes, probe->Returning());
  delayed.initial_delay = hour;
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(delayed)), IsOk());
  TaskDefinition local = Local("l1", ten_minutes, probe->Returning());
  local.initial_delay = hour;
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(local)), IsOk());
  ASSERT_THAT(scheduler_->ScheduleTask(Global("man", ManualFrequency{}, probe->Returning())),
              IsOk());

  Result<std::vector<TaskListing>> listing = scheduler_->ListTasks();

  ASSERT_THAT(listing, IsOk());
  ASSERT_EQ(listing->size(), 3U);
  const TaskListing& g1 = (*listing)[0];
  EXPECT_EQ(g1.descriptor.id, "g1");
  EXPECT_EQ(g1.descriptor.settings, testing::Settings("PT10M", "PT1H", "PT1M"));
  ASSERT_TRUE(g1.task_state.has_value());
  EXPECT_EQ(g1.task_state->ToJson(),
            R"({"status":"idle","startsAt":"2026-01-01T01:00:00.000+00:00"})");
  EXPECT_EQ(g1.worker_state, WorkerStatus::kInitialWait);

  const TaskListing& l1 = (*listing)[1];
  EXPECT_EQ(l1.descriptor.id, "l1");
  EXPECT_EQ(l1.descriptor.scope, TaskScope::kLocal);
  ASSERT_TRUE(l1.task_state.has_value());
  EXPECT_EQ(l1.task_state->ToJson(), R"({"status":"idle","startsAt":"2026-01-01T01:00:00.000Z"})");
  EXPECT_EQ(l1.worker_state, WorkerStatus::kInitialWait);

  const TaskListing& man = (*listing)[2];
  EXPECT_EQ(man.descriptor.settings, testing::Settings("manual", std::nullopt, "PT1M"));
  ASSERT_TRUE(man.task_state.has_value());
  EXPECT_EQ(man.task_state->ToJson(), R"({"status":"idle"})");
  EXPECT_EQ(man.worker_state, WorkerStatus::kIdle);
}

TEST_F(PluginSchedulerTest, ListTasksShowsARunningGlobalTaskFromItsRow) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", minutes(10), probe->Blocking())), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));

  Result<TaskListing> running = Listing("g");

  ASSERT_THAT(running, IsOk());
  ASSERT_TRUE(running->task_state.has_value());
  // The row's expiry is the lease (10 s by default), renewed while the run lasts, not the timeout.
  EXPECT_EQ(running->task_state->ToJson(),
            R"({"status":"running","startedAt":"2026-01-01T00:00:00.000+00:00",)"
            R"("timesOutAt":"2026-01-01T00:00:10.000+00:00"})");
  EXPECT_EQ(running->worker_state, WorkerStatus::kRunning);

  probe->SetOutcome(InternalError("boom"));
  probe->ReleaseAll();
  ASSERT_TRUE(events_->WaitFor(EventKind::kFailed, "g"));
  Result<TaskListing> idle = Listing("g");
  ASSERT_THAT(idle, IsOk());
  EXPECT_EQ(idle->task_state->ToJson(),
            R"({"status":"idle","startsAt":"2026-01-01T00:10:00.000+00:00",)"
            R"("lastRunEndedAt":"2026-01-01T00:00:00.000+00:00",)"
            R"("lastRunError":"{\"name\":\"Error\",\"message\":\"boom\"}"})");
  EXPECT_EQ(idle->worker_state, WorkerStatus::kIdle);
}

TEST_F(PluginSchedulerTest, ListTasksFollowsALocalTaskThroughItsRuns) {
  auto probe = std::make_shared<TaskProbe>();
  TaskDefinition task = Local("l", minutes(1), probe->Blocking());
  task.timeout = seconds(30);
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));

  Result<TaskListing> running = Listing("l");
  ASSERT_THAT(running, IsOk());
  ASSERT_TRUE(running->task_state.has_value());
  EXPECT_EQ(running->task_state->ToJson(),
            R"({"status":"running","startedAt":"2026-01-01T00:00:00.000Z",)"
            R"("timesOutAt":"2026-01-01T00:00:30.000Z"})");
  EXPECT_EQ(running->worker_state, WorkerStatus::kRunning);

  probe->SetOutcome(InternalError("boom"));
  probe->ReleaseAll();
  ASSERT_TRUE(events_->WaitFor(EventKind::kFailed, "l"));
  Result<TaskListing> failed = Listing("l");
  ASSERT_THAT(failed, IsOk());
  TaskState expected;
  expected.starts_at = FormatIsoInstant(At(minutes(1)), TimeZone::ProcessDefault());
  expected.last_run_ended_at = "2026-01-01T00:00:00.000Z";
  expected.last_run_error = R"({"name":"Error","message":"boom"})";
  EXPECT_EQ(failed->task_state, expected);
  EXPECT_EQ(failed->worker_state, WorkerStatus::kIdle);

  probe->SetOutcome(Status::Ok());
  clock_.Advance(minutes(1));
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "l"));
  Result<TaskListing> succeeded = Listing("l");
  ASSERT_THAT(succeeded, IsOk());
  expected.starts_at = FormatIsoInstant(At(minutes(2)), TimeZone::ProcessDefault());
  expected.last_run_ended_at = "2026-01-01T00:01:00.000Z";
  expected.last_run_error.reset();
  EXPECT_EQ(succeeded->task_state, expected);
}

TEST_F(PluginSchedulerTest, ListTasksShowsNoStateForAGlobalTaskWithoutARow) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", ManualFrequency{}, probe->Returning())), IsOk());
  ASSERT_THAT(store_->Delete("g"), IsOk());

  Result<TaskListing> listing = Listing("g");

  ASSERT_THAT(listing, IsOk());
  EXPECT_FALSE(listing->task_state.has_value());
  EXPECT_TRUE(listing->worker_state.has_value());
}

TEST_F(PluginSchedulerTest, ListTasksWithTheStoreDownIsUnavailable) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", ManualFrequency{}, probe->Returning())), IsOk());
  store_->SetUnavailable(true);
  EXPECT_THAT(scheduler_->ListTasks(), StatusIs(StatusCode::kUnavailable));
  store_->SetUnavailable(false);
}

// --- Tasks of other hosts -----------------------------------------------------------------------

TEST_F(PluginSchedulerTest, TaskRegisteredOnlyInTheStoreCanBeTriggeredAndCancelled) {
  TaskRow row;
  row.id = "elsewhere";
  row.settings_json = R"({"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"})";
  store_->PutRow(row);

  ASSERT_THAT(scheduler_->TriggerTask("elsewhere"), IsOk());
  EXPECT_EQ(Row("elsewhere")->next_run_start_at, At(seconds(0)));
  EXPECT_EQ(scheduler_->CancelTask("elsewhere"), ConflictError("Task elsewhere is not running"));

  row.next_run_start_at = At(seconds(0));
  row.current_run_ticket = "ticket-of-another-host";
  row.current_run_started_at = At(seconds(0));
  row.current_run_expires_at = At(minutes(1));
  store_->PutRow(row);
  EXPECT_EQ(scheduler_->TriggerTask("elsewhere"),
            ConflictError("Task elsewhere is currently running"));

  // The other host's run is asked to stop; its row stays held until that host releases it.
  ASSERT_THAT(scheduler_->CancelTask("elsewhere"), IsOk());
  std::optional<TaskRow> cancelled = Row("elsewhere");
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_EQ(cancelled->current_run_ticket, CancelRequestedTicket("ticket-of-another-host"));
  EXPECT_EQ(scheduler_->TriggerTask("elsewhere"),
            ConflictError("Task elsewhere is currently running"));
  Result<bool> released = store_->Release(
      "elsewhere", "ticket-of-another-host",
      TaskSchedule{*TaskSettingsV2::FromJson(row.settings_json), TimeZone::Utc()}, std::nullopt);
  ASSERT_THAT(released, IsOk());
  EXPECT_TRUE(*released);
  cancelled = Row("elsewhere");
  EXPECT_FALSE(cancelled->current_run_ticket.has_value());
  EXPECT_EQ(cancelled->last_run_error_json, R"({"name":"Error","message":"Task was cancelled"})");
  EXPECT_TRUE(scheduler_->GetScheduledTasks().empty());
}

TEST_F(PluginSchedulerTest, TriggerOnAnotherHostStartsTheTaskHere) {
  testing::MemoryTaskStore other_host("myplugin", clock_, store_->table());
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("m", ManualFrequency{}, probe->Returning())), IsOk());

  ASSERT_THAT(other_host.Trigger("m"), IsOk());

  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "m"));
  EXPECT_EQ(probe->starts(), 1U);
}

TEST_F(PluginSchedulerTest, CancelOnAnotherHostStopsTheRunHere) {
  testing::MemoryTaskStore other_host("myplugin", clock_, store_->table());
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("g", minutes(10), probe->Blocking())), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));

  ASSERT_THAT(other_host.Cancel("g", minutes(1)), IsOk());

  ASSERT_TRUE(probe->WaitForReturns(1));
  EXPECT_THAT(probe->stopped_at_return(), ElementsAre(true));
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "g"));
  EXPECT_EQ(Row("g")->last_run_error_json, R"({"name":"Error","message":"Task was cancelled"})");
}

// Issue 13: zero and negative cadences were accepted and ran without pause.
TEST_F(PluginSchedulerTest, RejectsZeroAndNegativeDurationsNamingTheField) {
  auto probe = std::make_shared<TaskProbe>();
  HumanDuration minus_one_minute;
  minus_one_minute.minutes = -1;
  const auto rejected = [&](TaskDefinition task, const std::string& why) {
    for (TaskScope scope : {TaskScope::kGlobal, TaskScope::kLocal}) {
      task.scope = scope;
      EXPECT_EQ(scheduler_->ScheduleTask(task),
                InvalidArgumentError("Invalid schedule for task t: " + why));
    }
  };
  rejected(Global("t", milliseconds(0), probe->Returning()),
           "frequency must be longer than zero, got PT0S");
  rejected(Global("t", Seconds(0), probe->Returning()),
           "frequency must be longer than zero, got PT0S");
  rejected(Global("t", minus_one_minute, probe->Returning()),
           "frequency must be longer than zero, got PT-1M");
  TaskDefinition no_timeout = Global("t", ManualFrequency{}, probe->Returning());
  no_timeout.timeout = milliseconds(0);
  rejected(no_timeout, "timeout must be longer than zero, got PT0S");
  TaskDefinition negative_timeout = Global("t", CronFrequency{"* * * * *", ""}, probe->Returning());
  negative_timeout.timeout = minus_one_minute;
  rejected(negative_timeout, "timeout must be longer than zero, got PT-1M");
  TaskDefinition early = Global("t", minutes(1), probe->Returning());
  early.initial_delay = Seconds(-5);
  rejected(early, "initialDelay cannot be negative, got PT-5S");
  TaskDefinition everything = Global("t", milliseconds(-1), probe->Returning());
  everything.timeout = milliseconds(0);
  everything.initial_delay = milliseconds(-1000);
  rejected(everything,
           "frequency must be longer than zero, got PT-0.001S; timeout must be longer than zero, "
           "got PT0S; initialDelay cannot be negative, got PT-1S");

  EXPECT_TRUE(scheduler_->GetScheduledTasks().empty());
  EXPECT_FALSE(Row("t").has_value());
  EXPECT_EQ(probe->starts(), 0U);
}

TEST_F(PluginSchedulerTest, AZeroInitialDelayMeansNoDelay) {
  auto probe = std::make_shared<TaskProbe>();
  TaskDefinition task = Global("t", minutes(1), probe->Returning());
  task.initial_delay = milliseconds(0);
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));
}

// --- Run history --------------------------------------------------------------------------------

TEST_F(PluginSchedulerTest, ObserverHearsTheRegistrationsTriggersAndCancelsThatSucceed) {
  auto probe = std::make_shared<TaskProbe>();
  std::vector<TaskDefinition> tasks;
  tasks.push_back(Global("a", ManualFrequency{}, probe->Blocking()));
  tasks.push_back(Local("b", ManualFrequency{}, probe->Returning()));
  ASSERT_THAT(scheduler_->ScheduleTasks(std::move(tasks)), IsOk());
  EXPECT_EQ(events_->Count(EventKind::kRegistered, "a"), 1U);
  EXPECT_EQ(events_->Count(EventKind::kRegistered, "b"), 1U);
  EXPECT_THAT(scheduler_->ScheduleTask(Global("a", ManualFrequency{}, probe->Returning())),
              Not(IsOk()));
  EXPECT_EQ(events_->Count(EventKind::kRegistered, "a"), 1U);

  EXPECT_THAT(scheduler_->TriggerTask("x"), Not(IsOk()));
  EXPECT_THAT(scheduler_->CancelTask("a"), Not(IsOk()));
  ASSERT_THAT(scheduler_->TriggerTask("a"), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));
  ASSERT_THAT(scheduler_->CancelTask("a"), IsOk());
  ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "a"));

  EXPECT_EQ(events_->Count(EventKind::kTriggered, "x"), 0U);
  EXPECT_EQ(events_->Count(EventKind::kTriggered, "a"), 1U);
  EXPECT_EQ(events_->Count(EventKind::kCancelled, "a"), 1U);
}

TEST_F(PluginSchedulerTest, GetTaskRunsPagesTheRunsOfATaskNewestFirst) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("m", ManualFrequency{}, probe->Returning())), IsOk());
  for (std::size_t i = 1; i <= 3; ++i) {
    ASSERT_THAT(scheduler_->TriggerTask("m"), IsOk());
    ASSERT_TRUE(events_->WaitFor(EventKind::kCompleted, "m", i));
    clock_.Advance(seconds(1));
  }

  Result<RunPage> first = scheduler_->GetTaskRuns("m", 2, std::nullopt);
  ASSERT_THAT(first, IsOk());
  ASSERT_EQ(first->runs.size(), 2U);
  EXPECT_EQ(first->runs[0].started_at, At(seconds(2)));
  EXPECT_EQ(first->runs[1].started_at, At(seconds(1)));
  ASSERT_TRUE(first->next_cursor.has_value());
  const TaskRun& newest = first->runs[0];
  EXPECT_EQ(newest.task_id, "m");
  EXPECT_EQ(newest.origin.trigger, RunTrigger::kManual);
  EXPECT_EQ(newest.origin.host, LocalHostName());
  EXPECT_EQ(newest.finish.outcome, RunOutcome::kSucceeded);
  EXPECT_EQ(newest.run_id, events_->Of(EventKind::kCompleted, "m")[2].ticket);

  Result<RunPage> second = scheduler_->GetTaskRuns("m", 2, first->next_cursor);
  ASSERT_THAT(second, IsOk());
  ASSERT_EQ(second->runs.size(), 1U);
  EXPECT_EQ(second->runs[0].started_at, At(seconds(0)));
  EXPECT_FALSE(second->next_cursor.has_value());
  Result<RunPage> before_run = scheduler_->GetTaskRuns("m", 20, newest.run_id);
  ASSERT_THAT(before_run, IsOk());
  EXPECT_EQ(before_run->runs.size(), 2U);
}

TEST_F(PluginSchedulerTest, GetTaskRunsNamesABadLimitOrCursor) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Global("m", ManualFrequency{}, probe->Returning())), IsOk());
  for (const int limit : {0, -1, kMaxRunPageSize + 1}) {
    const Status status = scheduler_->GetTaskRuns("m", limit, std::nullopt).status();
    EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument)) << limit;
    EXPECT_THAT(status.message(), HasSubstr("limit")) << limit;
  }
  const Status status = scheduler_->GetTaskRuns("m", 20, "not-a-cursor").status();
  EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument, "before"));
  EXPECT_THAT(scheduler_->GetTaskRuns("m", kMaxRunPageSize, std::nullopt), IsOk());
}

TEST_F(PluginSchedulerTest, GetTaskRunsOfATaskKnownNowhereIsNotFound) {
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler_->ScheduleTask(Local("here", ManualFrequency{}, probe->Returning())),
              IsOk());
  TaskRow row;
  row.id = "elsewhere";
  row.settings_json = R"({"version":2,"cadence":"manual","timeoutAfterDuration":"PT1M"})";
  store_->PutRow(row);
  RunStart start{"run-1", "gone", RunOrigin{}, At(seconds(0))};
  ASSERT_THAT(store_->RecordStarts({&start, 1}), IsOk());

  EXPECT_EQ(scheduler_->GetTaskRuns("nope", 20, std::nullopt).status(),
            NotFoundError("Task nope does not exist"));
  for (const char* known : {"here", "elsewhere"}) {
    Result<RunPage> page = scheduler_->GetTaskRuns(known, 20, std::nullopt);
    ASSERT_THAT(page, IsOk()) << known;
    EXPECT_TRUE(page->runs.empty());
  }
  Result<RunPage> gone = scheduler_->GetTaskRuns("gone", 20, std::nullopt);
  ASSERT_THAT(gone, IsOk());
  EXPECT_EQ(gone->runs.size(), 1U);
}

// Issue 16: without a run history the history calls failed as an internal error (REST 500).
TEST_F(PluginSchedulerTest, RunHistoryOffOrMissingIsUnimplementedSayingHowToTurnItOn) {
  Start(nullptr);
  Status status = scheduler_->GetTaskRuns("m", 20, std::nullopt).status();
  EXPECT_THAT(status, StatusIs(StatusCode::kUnimplemented,
                               "Plugin 'myplugin' keeps no run history: it has no database"));
  EXPECT_THAT(scheduler_->GetRun("r"), StatusIs(StatusCode::kUnimplemented));

  auto history_less = std::make_shared<SlowPollStore>(store_, clock_);
  Start(history_less);
  status = scheduler_->GetRun("r").status();
  EXPECT_THAT(status,
              StatusIs(StatusCode::kUnimplemented,
                       "Plugin 'myplugin' keeps no run history: its kind of database does not "
                       "keep one yet"));

  MissingTablesHistory missing(*store_);
  history_less->SetHistory(&missing);
  status = scheduler_->GetRun("r").status();
  EXPECT_THAT(status,
              StatusIs(StatusCode::kUnimplemented,
                       "The run history of plugin 'myplugin' is missing: its database has no "
                       "history tables. Create them by migrating the database"));

  scheduler_.reset();
  PluginSchedulerOptions options;
  options.plugin_id = "myplugin";
  options.store = store_;
  options.clock = &clock_;
  options.engine.record_history = false;
  scheduler_ = std::make_unique<PluginScheduler>(std::move(options));
  status = scheduler_->GetTaskRuns("m", 20, std::nullopt).status();
  EXPECT_THAT(status, StatusIs(StatusCode::kUnimplemented,
                               "The run history of plugin 'myplugin' is disabled: its runs are not "
                               "recorded. Turn it on with stagehand.history.enabled: true"));
  EXPECT_THAT(scheduler_->GetRun("r"), StatusIs(StatusCode::kUnimplemented));
}

TEST_F(PluginSchedulerTest, GetRunOfARunningRunShowsWhatItReportedSoFar) {
  auto probe = std::make_shared<TaskProbe>();
  const std::string output = std::string(70 * 1024, 'x') + "tail";
  ASSERT_TRUE(
      scheduler_->ScheduleTask(Global("r", ManualFrequency{}, probe->BlockingWithOutput(output)))
          .ok());
  probe->SetOutcome(InternalError("it broke"));
  ASSERT_THAT(scheduler_->TriggerTask("r"), IsOk());
  ASSERT_TRUE(probe->WaitForStarts(1));
  Result<RunPage> page = scheduler_->GetTaskRuns("r", 1, std::nullopt);
  ASSERT_THAT(page, IsOk());
  ASSERT_EQ(page->runs.size(), 1U);
  const std::string run_id = page->runs[0].run_id;

  Result<RunDetail> live = scheduler_->GetRun(run_id);
  ASSERT_THAT(live, IsOk());
  EXPECT_TRUE(live->live);
  EXPECT_EQ(live->run.task_id, "r");
  EXPECT_EQ(live->run.finish.outcome, RunOutcome::kRunning);
  EXPECT_EQ(live->output_bytes, output.size());
  EXPECT_EQ(live->run.finish.output_tail,
            output.substr(output.size() - kDefaultRunOutputTailBytes));

  probe->ReleaseAll();
  ASSERT_TRUE(events_->WaitFor(EventKind::kFailed, "r"));
  Result<RunDetail> ended = scheduler_->GetRun(run_id);
  ASSERT_THAT(ended, IsOk());
  EXPECT_FALSE(ended->live);
  EXPECT_EQ(ended->run.finish.outcome, RunOutcome::kFailed);
  EXPECT_EQ(ended->run.finish.error_json, R"({"name":"Error","message":"it broke"})");
  EXPECT_EQ(ended->run.finish.output_tail, live->run.finish.output_tail);
  EXPECT_EQ(ended->output_bytes, kDefaultRunOutputTailBytes);
}

TEST_F(PluginSchedulerTest, GetRunOfAnUnknownRunIsNotFound) {
  EXPECT_EQ(scheduler_->GetRun("nope").status(), NotFoundError("Run nope does not exist"));
}

}  // namespace
}  // namespace stagehand
