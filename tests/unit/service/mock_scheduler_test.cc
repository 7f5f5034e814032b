#include "stagehand/service/mock_scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"
#include "unit/service/task_probe.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MockScheduler;
using testing::MockSchedulerOptions;
using ::testing::Not;

using service_testing::kRealTimeout;
using service_testing::TaskProbe;

// Runs `body` on a thread of its own. Destruction first releases `probe`, so that a test that
// failed half-way does not hang on a task that is still blocked, then joins.
class Background {
 public:
  Background(std::shared_ptr<TaskProbe> probe, std::function<void()> body)
      : probe_(std::move(probe)), thread_(std::move(body)) {}
  ~Background() { Join(); }

  void Join() {
    if (!thread_.joinable()) return;
    probe_->ReleaseAll();
    thread_.join();
  }

 private:
  std::shared_ptr<TaskProbe> probe_;
  std::thread thread_;
};

TaskDefinition Task(std::string id, TaskFunction fn,
                    Frequency frequency = std::chrono::minutes(5)) {
  TaskDefinition task;
  task.id = std::move(id);
  task.frequency = std::move(frequency);
  task.timeout = std::chrono::minutes(1);
  task.fn = std::move(fn);
  return task;
}

std::vector<std::string> IdsOf(const std::vector<TaskDescriptor>& descriptors) {
  std::vector<std::string> ids;
  for (const TaskDescriptor& descriptor : descriptors) ids.push_back(descriptor.id);
  return ids;
}

bool IsReady(const std::shared_future<Status>& future) {
  return future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

TEST(MockSchedulerTest, RunsATaskOnlyWhenTriggered) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Returning())), IsOk());
  EXPECT_EQ(probe->starts(), 0U);

  ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());
  EXPECT_EQ(probe->starts(), 1U);
  ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());
  EXPECT_EQ(probe->starts(), 2U);
  EXPECT_THAT(probe->stopped_at_start(), ElementsAre(false, false));
}

TEST(MockSchedulerTest, ScheduleTasksRegistersEachTaskInOrder) {
  MockScheduler scheduler;
  auto a = std::make_shared<TaskProbe>();
  auto b = std::make_shared<TaskProbe>();
  std::vector<TaskDefinition> tasks;
  tasks.push_back(Task("a", a->Returning()));
  tasks.push_back(Task("b", b->Returning()));
  ASSERT_THAT(scheduler.ScheduleTasks(std::move(tasks)), IsOk());
  ASSERT_EQ(scheduler.GetScheduledTasks().size(), 2U);
  EXPECT_EQ(scheduler.GetScheduledTasks()[0].id, "a");
  EXPECT_EQ(scheduler.GetScheduledTasks()[1].id, "b");
  ASSERT_THAT(scheduler.TriggerTask("b"), IsOk());
  EXPECT_EQ(b->starts(), 1U);
  EXPECT_EQ(a->starts(), 0U);
}

TEST(MockSchedulerTest, RunStartupRunsPlainAndLocalTasksButNotDelayedOrManualOnes) {
  MockScheduler scheduler;
  auto plain = std::make_shared<TaskProbe>();
  auto local = std::make_shared<TaskProbe>();
  auto delayed = std::make_shared<TaskProbe>();
  auto manual = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("plain", plain->Returning())), IsOk());
  TaskDefinition local_task = Task("local", local->Returning());
  local_task.scope = TaskScope::kLocal;
  ASSERT_THAT(scheduler.ScheduleTask(std::move(local_task)), IsOk());
  TaskDefinition delayed_task = Task("delayed", delayed->Returning());
  delayed_task.initial_delay = std::chrono::minutes(1);
  ASSERT_THAT(scheduler.ScheduleTask(std::move(delayed_task)), IsOk());
  ASSERT_THAT(scheduler.ScheduleTask(Task("manual", manual->Returning(), ManualFrequency{})),
              IsOk());

  scheduler.RunStartup();

  EXPECT_EQ(plain->starts(), 1U);
  EXPECT_EQ(local->starts(), 1U);
  EXPECT_EQ(delayed->starts(), 0U);
  EXPECT_EQ(manual->starts(), 0U);
}

// Issue 17: plugin authors test their pause handling against the mock, with the real rules.
TEST(MockSchedulerTest, APausedTaskIsNotTriggeredNorRunAtStartupUntilResumed) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Returning())), IsOk());
  TaskDefinition local = Task("local", probe->Returning());
  local.scope = TaskScope::kLocal;
  ASSERT_THAT(scheduler.ScheduleTask(std::move(local)), IsOk());
  const PauseRequest pause{"alice", "maintenance", std::nullopt};

  ASSERT_THAT(scheduler.PauseTask("a", pause), IsOk());
  EXPECT_EQ(scheduler.TriggerTask("a"), ConflictError("Task a is paused"));
  Result<std::vector<TaskListing>> listed = scheduler.ListTasks();
  ASSERT_THAT(listed, IsOk());
  ASSERT_TRUE((*listed)[0].pause.has_value());
  EXPECT_EQ((*listed)[0].pause->reason, "maintenance");
  EXPECT_THAT(scheduler.PauseTask("local", pause), StatusIs(StatusCode::kConflict));
  EXPECT_EQ(scheduler.PauseTask("nope", pause), NotFoundError("Task nope not found"));

  scheduler.RunStartup();
  EXPECT_EQ(probe->starts(), 1U) << "only the local task ran";

  ASSERT_THAT(scheduler.ResumeTask("a"), IsOk());
  EXPECT_EQ(scheduler.ResumeTask("a"), ConflictError("Task a is not paused"));
  ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());
  EXPECT_EQ(probe->starts(), 2U);
}

TEST(MockSchedulerTest, RunStartupDoesNothingWhenSkipped) {
  MockScheduler scheduler(MockSchedulerOptions{.skip_task_run_on_startup = true});
  auto plain = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("plain", plain->Returning())), IsOk());

  scheduler.RunStartup();

  EXPECT_EQ(plain->starts(), 0U);
}

TEST(MockSchedulerTest, RunStartupRunsEveryTaskWhenConfigured) {
  MockScheduler scheduler(MockSchedulerOptions{.include_manual_tasks_on_startup = true,
                                               .include_initial_delayed_tasks_on_startup = true});
  auto plain = std::make_shared<TaskProbe>();
  auto delayed = std::make_shared<TaskProbe>();
  auto manual = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("plain", plain->Returning())), IsOk());
  TaskDefinition delayed_task = Task("delayed", delayed->Returning());
  delayed_task.initial_delay = std::chrono::minutes(1);
  ASSERT_THAT(scheduler.ScheduleTask(std::move(delayed_task)), IsOk());
  ASSERT_THAT(scheduler.ScheduleTask(Task("manual", manual->Returning(), ManualFrequency{})),
              IsOk());

  scheduler.RunStartup();

  EXPECT_EQ(plain->starts(), 1U);
  EXPECT_EQ(delayed->starts(), 1U);
  EXPECT_EQ(manual->starts(), 1U);
}

TEST(MockSchedulerTest, RunStartupIncludesOnlyTheKindItIsToldTo) {
  MockScheduler scheduler(MockSchedulerOptions{.include_manual_tasks_on_startup = true});
  auto delayed = std::make_shared<TaskProbe>();
  auto manual = std::make_shared<TaskProbe>();
  TaskDefinition delayed_task = Task("delayed", delayed->Returning());
  delayed_task.initial_delay = std::chrono::minutes(1);
  ASSERT_THAT(scheduler.ScheduleTask(std::move(delayed_task)), IsOk());
  ASSERT_THAT(scheduler.ScheduleTask(Task("manual", manual->Returning(), ManualFrequency{})),
              IsOk());

  scheduler.RunStartup();

  EXPECT_EQ(delayed->starts(), 0U);
  EXPECT_EQ(manual->starts(), 1U);
}

// Each task waits for the other to have started, so the startup run only finishes if the two run
// at the same time (a sequential run makes the first one give up after kRealTimeout).
TEST(MockSchedulerTest, RunStartupRunsTasksInParallelAndWaitsForAll) {
  MockScheduler scheduler;
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  int finished = 0;
  bool met = true;
  auto rendezvous = [&](std::stop_token) {
    std::unique_lock lock(mu);
    ++started;
    cv.notify_all();
    if (!cv.wait_for(lock, kRealTimeout, [&] { return started == 2; })) met = false;
    ++finished;
  };
  ASSERT_THAT(scheduler.ScheduleTask(Task("one", rendezvous)), IsOk());
  ASSERT_THAT(scheduler.ScheduleTask(Task("two", rendezvous)), IsOk());

  scheduler.RunStartup();

  std::lock_guard lock(mu);
  EXPECT_EQ(finished, 2);
  EXPECT_TRUE(met);
}

TEST(MockSchedulerTest, WaitForTaskResolvesWithTheNextCompletedRun) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Returning())), IsOk());

  std::shared_future<Status> done = scheduler.WaitForTask("a");
  EXPECT_FALSE(IsReady(done));
  EXPECT_FALSE(IsReady(scheduler.WaitForTask("a")));

  ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());
  ASSERT_TRUE(IsReady(done));
  EXPECT_THAT(done.get(), IsOk());

  std::shared_future<Status> next = scheduler.WaitForTask("a");
  EXPECT_FALSE(IsReady(next));
  ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());
  EXPECT_TRUE(IsReady(next));
}

TEST(MockSchedulerTest, WaitForTaskResolvesWhenARunInProgressCompletes) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Blocking())), IsOk());
  Background trigger(probe, [&] { EXPECT_THAT(scheduler.TriggerTask("a"), IsOk()); });
  ASSERT_TRUE(probe->WaitForStarts(1));

  std::shared_future<Status> done = scheduler.WaitForTask("a");
  EXPECT_FALSE(IsReady(done));
  probe->ReleaseAll();

  ASSERT_EQ(done.wait_for(kRealTimeout), std::future_status::ready);
  EXPECT_THAT(done.get(), IsOk());
}

TEST(MockSchedulerTest, WaitForTaskHoldsTheErrorOfAFailingRun) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Returning(UnavailableError("no upstream")))),
              IsOk());
  std::shared_future<Status> done = scheduler.WaitForTask("a");

  EXPECT_THAT(scheduler.TriggerTask("a"), IsOk());

  ASSERT_TRUE(IsReady(done));
  EXPECT_EQ(done.get(), UnavailableError("no upstream"));
}

TEST(MockSchedulerTest, WaitForTaskHoldsTheErrorOfAThrowingRun) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Throwing("it broke"))), IsOk());
  std::shared_future<Status> done = scheduler.WaitForTask("a");

  EXPECT_THAT(scheduler.TriggerTask("a"), IsOk());

  ASSERT_TRUE(IsReady(done));
  EXPECT_THAT(done.get(), Not(IsOk()));
  EXPECT_EQ(done.get().message(), "it broke");
}

TEST(MockSchedulerTest, WaitForTaskOfAnUnknownTaskIsNotFound) {
  MockScheduler scheduler;
  std::shared_future<Status> done = scheduler.WaitForTask("x");
  ASSERT_TRUE(IsReady(done));
  EXPECT_EQ(done.get(), NotFoundError("Task x not found"));
}

TEST(MockSchedulerTest, CancelStopsARunningTaskAndTheNextTriggerGetsAFreshToken) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Blocking())), IsOk());
  Background trigger(probe, [&] { EXPECT_THAT(scheduler.TriggerTask("a"), IsOk()); });
  ASSERT_TRUE(probe->WaitForStarts(1));

  ASSERT_THAT(scheduler.CancelTask("a"), IsOk());
  ASSERT_TRUE(probe->WaitForReturns(1));
  trigger.Join();
  EXPECT_THAT(probe->stopped_at_return(), ElementsAre(true));

  probe->ReleaseAll();
  ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());
  EXPECT_THAT(probe->stopped_at_start(), ElementsAre(false, false));
  EXPECT_THAT(probe->stopped_at_return(), ElementsAre(true, false));
}

TEST(MockSchedulerTest, APauseOfARunningTaskIsPendingUntilItsRunEndsAndCanCancelIt) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Blocking())), IsOk());
  Background trigger(probe, [&] { EXPECT_THAT(scheduler.TriggerTask("a"), IsOk()); });
  ASSERT_TRUE(probe->WaitForStarts(1));
  ASSERT_THAT(scheduler.PauseTask("a", PauseRequest{"alice", "", std::nullopt}), IsOk());
  Result<std::vector<TaskListing>> listed = scheduler.ListTasks();
  ASSERT_THAT(listed, IsOk());
  ASSERT_TRUE((*listed)[0].pause.has_value());
  EXPECT_TRUE((*listed)[0].pause->pending);
  EXPECT_THAT(probe->stopped_at_start(), ElementsAre(false)) << "the run goes on";

  PauseRequest cancelling{"alice", "", std::nullopt};
  cancelling.cancel_run = true;
  ASSERT_THAT(scheduler.PauseTask("a", cancelling), IsOk());
  ASSERT_TRUE(probe->WaitForReturns(1));
  trigger.Join();
  EXPECT_THAT(probe->stopped_at_return(), ElementsAre(true));
  listed = scheduler.ListTasks();
  ASSERT_THAT(listed, IsOk());
  ASSERT_TRUE((*listed)[0].pause.has_value());
  EXPECT_FALSE((*listed)[0].pause->pending);
  EXPECT_EQ(scheduler.TriggerTask("a"), ConflictError("Task a is paused"));
}

TEST(MockSchedulerTest, TriggerWhileRunningReturnsAtOnceWithoutASecondRun) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Blocking())), IsOk());
  Background trigger(probe, [&] { EXPECT_THAT(scheduler.TriggerTask("a"), IsOk()); });
  ASSERT_TRUE(probe->WaitForStarts(1));

  EXPECT_THAT(scheduler.TriggerTask("a"), IsOk());
  EXPECT_EQ(probe->starts(), 1U);

  probe->ReleaseAll();
  trigger.Join();
  EXPECT_EQ(probe->starts(), 1U);
}

TEST(MockSchedulerTest, ListTasksShowsRunningAndIdleWorkers) {
  MockScheduler scheduler;
  auto busy = std::make_shared<TaskProbe>();
  auto idle = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("busy", busy->Blocking())), IsOk());
  ASSERT_THAT(scheduler.ScheduleTask(Task("idle", idle->Returning())), IsOk());
  Background trigger(busy, [&] { EXPECT_THAT(scheduler.TriggerTask("busy"), IsOk()); });
  ASSERT_TRUE(busy->WaitForStarts(1));

  Result<std::vector<TaskListing>> listing = scheduler.ListTasks();
  ASSERT_THAT(listing, IsOk());
  ASSERT_EQ(listing->size(), 2U);
  EXPECT_EQ((*listing)[0].descriptor.id, "busy");
  EXPECT_EQ((*listing)[0].worker_state, WorkerStatus::kRunning);
  EXPECT_FALSE((*listing)[0].task_state.has_value());
  EXPECT_EQ((*listing)[1].descriptor.id, "idle");
  EXPECT_EQ((*listing)[1].worker_state, WorkerStatus::kIdle);

  busy->ReleaseAll();
}

TEST(MockSchedulerTest, ShutdownSignalsRunningTasks) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Blocking())), IsOk());
  Background trigger(probe, [&] { EXPECT_THAT(scheduler.TriggerTask("a"), IsOk()); });
  ASSERT_TRUE(probe->WaitForStarts(1));

  scheduler.Shutdown();

  ASSERT_TRUE(probe->WaitForReturns(1));
  EXPECT_THAT(probe->stopped_at_return(), ElementsAre(true));
}

// As in Backstage's mock, the shutdown hook aborts each task's controller without replacing it.
TEST(MockSchedulerTest, ShutdownSignalsTheTokensOfIdleTasks) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Returning())), IsOk());

  scheduler.Shutdown();
  ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());

  EXPECT_THAT(probe->stopped_at_start(), ElementsAre(true));
}

TEST(MockSchedulerTest, UnknownTasksAreNotFound) {
  MockScheduler scheduler;
  EXPECT_EQ(scheduler.TriggerTask("x"), NotFoundError("Task x not found"));
  EXPECT_EQ(scheduler.CancelTask("x"), NotFoundError("Task x not found"));
}

TEST(MockSchedulerTest, CancellingAnIdleTaskIsAConflict) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("x", probe->Returning())), IsOk());
  EXPECT_EQ(scheduler.CancelTask("x"), ConflictError("Task x is not running"));
  ASSERT_THAT(scheduler.TriggerTask("x"), IsOk());
  EXPECT_EQ(scheduler.CancelTask("x"), ConflictError("Task x is not running"));
}

TEST(MockSchedulerTest, GetScheduledTasksListsEachIdOnceInRegistrationOrder) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("b", probe->Returning())), IsOk());
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Returning())), IsOk());
  TaskDefinition again = Task("b", probe->Returning(), std::chrono::seconds(5));
  again.scope = TaskScope::kLocal;
  ASSERT_THAT(scheduler.ScheduleTask(std::move(again)), IsOk());
  ASSERT_THAT(scheduler.ScheduleTask(Task("c", probe->Returning())), IsOk());

  const std::vector<TaskDescriptor> tasks = scheduler.GetScheduledTasks();
  EXPECT_THAT(IdsOf(tasks), ElementsAre("b", "a", "c"));
  EXPECT_EQ(tasks[0].scope, TaskScope::kLocal);
  EXPECT_EQ(tasks[0].settings.cadence.text(), "PT5S");
  EXPECT_EQ(tasks[1].scope, TaskScope::kGlobal);
  EXPECT_EQ(tasks[1].settings.cadence.text(), "PT300S");
}

TEST(MockSchedulerTest, ReRegistrationReplacesTheFunction) {
  MockScheduler scheduler;
  auto first = std::make_shared<TaskProbe>();
  auto second = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", first->Returning())), IsOk());
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", second->Returning())), IsOk());

  ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());

  EXPECT_EQ(first->starts(), 0U);
  EXPECT_EQ(second->starts(), 1U);
}

TEST(MockSchedulerTest, ScheduledTaskRunnerRegistersWithTheRunnersSchedule) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ScheduleDefinition schedule;
  schedule.frequency = CronFrequency{"*/5 * * * *", ""};
  schedule.timeout = std::chrono::seconds(30);
  schedule.scope = TaskScope::kLocal;
  ScheduledTaskRunner runner = scheduler.CreateScheduledTaskRunner(schedule);

  ASSERT_THAT(runner.Run(TaskInvocation{"a", probe->Returning(), {}}), IsOk());

  const std::vector<TaskDescriptor> tasks = scheduler.GetScheduledTasks();
  ASSERT_EQ(tasks.size(), 1U);
  EXPECT_EQ(tasks[0].id, "a");
  EXPECT_EQ(tasks[0].scope, TaskScope::kLocal);
  EXPECT_EQ(tasks[0].settings.cadence.text(), "*/5 * * * *");
  EXPECT_EQ(tasks[0].settings.timeout_after_duration, "PT30S");
  ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());
  EXPECT_EQ(probe->starts(), 1U);
}

// --- Run history --------------------------------------------------------------------------------

// Returns the outcomes of `page`'s runs, newest first.
std::vector<RunOutcome> OutcomesOf(const RunPage& page) {
  std::vector<RunOutcome> outcomes;
  for (const TaskRun& run : page.runs) outcomes.push_back(run.finish.outcome);
  return outcomes;
}

TEST(MockSchedulerRunsTest, RecordsEachRunWithItsTriggerOutcomeErrorAndDuration) {
  testing::ManualClock clock;
  MockSchedulerOptions options;
  options.clock = &clock;
  MockScheduler scheduler(options);
  ASSERT_TRUE(
      scheduler
          .ScheduleTask(Task("a", [&](std::stop_token) { clock.Advance(std::chrono::seconds(3)); }))
          .ok());
  ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());
  auto failing = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", failing->Returning(InternalError("it broke")))),
              IsOk());
  ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());
  auto throwing = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", throwing->Throwing("it threw"))), IsOk());
  scheduler.RunStartup();

  Result<RunPage> page = scheduler.GetTaskRuns("a", 10, std::nullopt);
  ASSERT_THAT(page, IsOk());
  ASSERT_EQ(page->runs.size(), 3U);
  EXPECT_FALSE(page->next_cursor.has_value());
  EXPECT_THAT(OutcomesOf(*page),
              ElementsAre(RunOutcome::kFailed, RunOutcome::kFailed, RunOutcome::kSucceeded));
  const TaskRun& thrown = page->runs[0];
  EXPECT_EQ(thrown.origin.trigger, RunTrigger::kSchedule);
  EXPECT_EQ(thrown.finish.error_json, R"({"name":"Error","message":"it threw"})");
  const TaskRun& failed = page->runs[1];
  EXPECT_EQ(failed.origin.trigger, RunTrigger::kManual);
  EXPECT_EQ(failed.finish.error_json, R"({"name":"Error","message":"it broke"})");
  const TaskRun& succeeded = page->runs[2];
  EXPECT_EQ(succeeded.task_id, "a");
  EXPECT_EQ(succeeded.origin.attempt, 1);
  EXPECT_EQ(succeeded.started_at, testing::ManualClock::DefaultStart());
  EXPECT_EQ(succeeded.duration(), std::chrono::milliseconds(3000));
  EXPECT_FALSE(succeeded.finish.error_json.has_value());
  EXPECT_NE(succeeded.run_id, failed.run_id);
}

TEST(MockSchedulerRunsTest, ARunStoppedByCancelOrShutdownThatFailsIsCancelled) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  probe->SetOutcome(InternalError("stopped early"));
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Blocking())), IsOk());
  Background trigger(probe, [&] { EXPECT_THAT(scheduler.TriggerTask("a"), IsOk()); });
  ASSERT_TRUE(probe->WaitForStarts(1));
  ASSERT_THAT(scheduler.CancelTask("a"), IsOk());
  trigger.Join();
  scheduler.Shutdown();
  ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());

  Result<RunPage> page = scheduler.GetTaskRuns("a", 10, std::nullopt);
  ASSERT_THAT(page, IsOk());
  ASSERT_EQ(page->runs.size(), 2U);
  EXPECT_EQ(page->runs[0].finish.outcome, RunOutcome::kCancelled);
  EXPECT_EQ(page->runs[0].finish.error_json,
            R"({"name":"Error","message":"interrupted by shutdown: stopped early"})");
  EXPECT_EQ(page->runs[1].finish.outcome, RunOutcome::kCancelled);
  EXPECT_EQ(page->runs[1].finish.error_json,
            R"({"name":"Error","message":"cancelled: stopped early"})");
}

TEST(MockSchedulerRunsTest, GetRunShowsARunningRunLiveAndKeepsItsOutput) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->BlockingWithOutput("half way\n"))), IsOk());
  Background trigger(probe, [&] { EXPECT_THAT(scheduler.TriggerTask("a"), IsOk()); });
  ASSERT_TRUE(probe->WaitForStarts(1));

  Result<RunPage> page = scheduler.GetTaskRuns("a", 1, std::nullopt);
  ASSERT_THAT(page, IsOk());
  ASSERT_EQ(page->runs.size(), 1U);
  EXPECT_EQ(page->runs[0].finish.outcome, RunOutcome::kRunning);
  EXPECT_FALSE(page->runs[0].ended_at.has_value());
  const std::string run_id = page->runs[0].run_id;
  Result<RunDetail> live = scheduler.GetRun(run_id);
  ASSERT_THAT(live, IsOk());
  EXPECT_TRUE(live->live);
  EXPECT_EQ(live->run.finish.outcome, RunOutcome::kRunning);
  EXPECT_EQ(live->run.finish.output_tail, "half way\n");
  EXPECT_EQ(live->output_bytes, 9U);

  probe->ReleaseAll();
  trigger.Join();
  Result<RunDetail> ended = scheduler.GetRun(run_id);
  ASSERT_THAT(ended, IsOk());
  EXPECT_FALSE(ended->live);
  EXPECT_EQ(ended->run.finish.outcome, RunOutcome::kSucceeded);
  EXPECT_EQ(ended->run.finish.output_tail, "half way\n");
  EXPECT_EQ(ended->output_bytes, 9U);
  Result<RunPage> listed = scheduler.GetTaskRuns("a", 1, std::nullopt);
  ASSERT_THAT(listed, IsOk());
  EXPECT_EQ(listed->runs[0].finish.output_tail, "");
}

TEST(MockSchedulerRunsTest, PagesNewestFirstWithRunIdsAsCursors) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Returning())), IsOk());
  ASSERT_THAT(scheduler.ScheduleTask(Task("b", probe->Returning())), IsOk());
  std::vector<std::string> ids;  // of task a, oldest first
  for (int i = 0; i < 3; ++i) {
    ASSERT_THAT(scheduler.TriggerTask("a"), IsOk());
    ASSERT_THAT(scheduler.TriggerTask("b"), IsOk());
    Result<RunPage> newest = scheduler.GetTaskRuns("a", 1, std::nullopt);
    ASSERT_THAT(newest, IsOk());
    ids.push_back(newest->runs[0].run_id);
  }

  Result<RunPage> first = scheduler.GetTaskRuns("a", 2, std::nullopt);
  ASSERT_THAT(first, IsOk());
  ASSERT_EQ(first->runs.size(), 2U);
  EXPECT_EQ(first->runs[0].run_id, ids[2]);
  EXPECT_EQ(first->runs[1].run_id, ids[1]);
  ASSERT_EQ(first->next_cursor, ids[1]);
  Result<RunPage> second = scheduler.GetTaskRuns("a", 2, first->next_cursor);
  ASSERT_THAT(second, IsOk());
  ASSERT_EQ(second->runs.size(), 1U);
  EXPECT_EQ(second->runs[0].run_id, ids[0]);
  EXPECT_FALSE(second->next_cursor.has_value());
}

TEST(MockSchedulerRunsTest, ErrorsNameTheParameterOrTheUnknownTaskOrRun) {
  MockScheduler scheduler;
  auto probe = std::make_shared<TaskProbe>();
  ASSERT_THAT(scheduler.ScheduleTask(Task("a", probe->Returning())), IsOk());

  Result<RunPage> none = scheduler.GetTaskRuns("a", 20, std::nullopt);
  ASSERT_THAT(none, IsOk());
  EXPECT_TRUE(none->runs.empty());
  EXPECT_EQ(scheduler.GetTaskRuns("a", 0, std::nullopt).status(),
            InvalidArgumentError("limit must be between 1 and 1000, got 0"));
  EXPECT_THAT(scheduler.GetTaskRuns("a", 1001, std::nullopt),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(scheduler.GetTaskRuns("a", 1, "nope").status().message(), HasSubstr("before"));
  EXPECT_EQ(scheduler.GetTaskRuns("x", 1, std::nullopt).status(),
            NotFoundError("Task x not found"));
  EXPECT_EQ(scheduler.GetRun("nope").status(), NotFoundError("Run nope does not exist"));
}

}  // namespace
}  // namespace stagehand
