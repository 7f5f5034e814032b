// The scheduler metrics observer, driven directly and through a PluginScheduler on a
// MemoryTaskStore and a ManualClock, and the HTTP request metrics.
#include "stagehand/backend/scheduler_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <utility>

#include "stagehand/service/plugin_scheduler.h"
#include "stagehand/store/memory_task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::Not;

// ManualClock::DefaultStart(), 2026-01-01T00:00:00Z, in epoch seconds.
constexpr std::string_view kStartEpoch = "1767225600";

RunInfo MakeRun(std::string_view task_id, TaskScope scope) {
  RunInfo run;
  run.plugin_id = "myplugin";
  run.task_id = task_id;
  run.scope = scope;
  run.ticket = scope == TaskScope::kGlobal ? "ticket-1" : "";
  return run;
}

TEST(SchedulerMetricsTest, CompletedRunRendersBackstagesInstruments) {
  testing::ManualClock clock;
  MetricsRegistry registry;
  const std::shared_ptr<SchedulerObserver> observer = MakeSchedulerMetricsObserver(registry, clock);

  const RunInfo run = MakeRun("sync", TaskScope::kGlobal);
  observer->OnRunStarted(run, milliseconds(250));
  clock.Advance(milliseconds(1500));
  observer->OnRunCompleted(run, milliseconds(1500));

  const std::string labels = R"(plugin="myplugin",taskId="sync",scope="global")";
  const std::string completed = labels + R"(,result="completed")";
  std::string expected =
      "# HELP backend_tasks_task_runs_count_total Total number of times a task has been run\n"
      "# TYPE backend_tasks_task_runs_count_total counter\n"
      "backend_tasks_task_runs_count_total{" +
      labels + R"(,result="started"} 1)" +
      "\n"
      "backend_tasks_task_runs_count_total{" +
      completed +
      "} 1\n"
      "# HELP backend_tasks_task_runs_duration_seconds Histogram of task run durations\n"
      "# TYPE backend_tasks_task_runs_duration_seconds histogram\n";
  for (const auto& [le, count] : std::vector<std::pair<std::string, int>>{{"0.1", 0},
                                                                          {"0.5", 0},
                                                                          {"1", 0},
                                                                          {"5", 1},
                                                                          {"10", 1},
                                                                          {"30", 1},
                                                                          {"60", 1},
                                                                          {"120", 1},
                                                                          {"300", 1},
                                                                          {"600", 1},
                                                                          {"1800", 1},
                                                                          {"3600", 1},
                                                                          {"+Inf", 1}}) {
    expected += "backend_tasks_task_runs_duration_seconds_bucket{" + completed + ",le=\"" + le +
                "\"} " + std::to_string(count) + "\n";
  }
  expected +=
      "backend_tasks_task_runs_duration_seconds_sum{" + completed +
      "} 1.5\n"
      "backend_tasks_task_runs_duration_seconds_count{" +
      completed +
      "} 1\n"
      "# HELP backend_tasks_task_runs_started_seconds Epoch timestamp seconds when the task was "
      "last started\n"
      "# TYPE backend_tasks_task_runs_started_seconds gauge\n"
      "backend_tasks_task_runs_started_seconds{plugin=\"myplugin\",taskId=\"sync\"} " +
      std::string(kStartEpoch) +
      "\n"
      "# HELP backend_tasks_task_runs_completed_seconds Epoch timestamp seconds when the task was "
      "last completed\n"
      "# TYPE backend_tasks_task_runs_completed_seconds gauge\n"
      "backend_tasks_task_runs_completed_seconds{" +
      completed +
      "} 1767225601.5\n"
      "# HELP stagehand_task_start_lag_seconds How late runs started after their scheduled time, "
      "in seconds\n"
      "# TYPE stagehand_task_start_lag_seconds histogram\n";
  for (const auto& [le, count] : std::vector<std::pair<std::string, int>>{{"0.01", 0},
                                                                          {"0.05", 0},
                                                                          {"0.1", 0},
                                                                          {"0.5", 1},
                                                                          {"1", 1},
                                                                          {"5", 1},
                                                                          {"10", 1},
                                                                          {"30", 1},
                                                                          {"60", 1},
                                                                          {"300", 1},
                                                                          {"+Inf", 1}}) {
    expected += "stagehand_task_start_lag_seconds_bucket{" + labels + ",le=\"" + le + "\"} " +
                std::to_string(count) + "\n";
  }
  expected += "stagehand_task_start_lag_seconds_sum{" + labels +
              "} 0.25\n"
              "stagehand_task_start_lag_seconds_count{" +
              labels +
              "} 1\n"
              "# HELP stagehand_task_claims_lost_total Times another host claimed a task this "
              "host had seen ready\n"
              "# TYPE stagehand_task_claims_lost_total counter\n"
              "# HELP stagehand_task_slots_skipped_total Scheduled slots skipped: missed by more "
              "than the task's catch-up window\n"
              "# TYPE stagehand_task_slots_skipped_total counter\n"
              "# HELP stagehand_task_retries_total Retries scheduled after a failed or timed-out "
              "run\n"
              "# TYPE stagehand_task_retries_total counter\n"
              "# HELP stagehand_task_lease_renewals_total Lease renewals of running tasks, by "
              "outcome\n"
              "# TYPE stagehand_task_lease_renewals_total counter\n"
              "# HELP stagehand_task_leases_lost_total Runs this host stopped treating as its own "
              "(ticket gone or lease not renewed)\n"
              "# TYPE stagehand_task_leases_lost_total counter\n"
              "# HELP stagehand_janitor_reclaims_total Expired runs reset by the janitor\n"
              "# TYPE stagehand_janitor_reclaims_total counter\n"
              "# HELP stagehand_failover_runs_at_risk_total Runs a failover may have done twice or "
              "left unrecorded (the new primary lacked their claim and another host had changed "
              "the task meanwhile)\n"
              "# TYPE stagehand_failover_runs_at_risk_total counter\n"
              "# HELP stagehand_database_writes_replayed_total Writes (run releases) missing on a "
              "new database server after a failover and written again there\n"
              "# TYPE stagehand_database_writes_replayed_total counter\n"
              "# HELP stagehand_task_runs_overdue_total Runs still going a lease after their "
              "timeout (their claim is held until they return)\n"
              "# TYPE stagehand_task_runs_overdue_total counter\n";
  EXPECT_EQ(registry.RenderPrometheusText(), expected);
}

TEST(SchedulerMetricsTest, WithoutPerTaskSeriesEveryTaskOfAPluginSharesOneSeries) {
  testing::ManualClock clock;
  MetricsRegistry registry;
  SchedulerMetricsOptions options;
  options.per_task_series = false;
  const std::shared_ptr<SchedulerObserver> observer =
      MakeSchedulerMetricsObserver(registry, clock, options);
  for (const std::string_view task : {"sync", "report", "cleanup"}) {
    const RunInfo run = MakeRun(task, TaskScope::kGlobal);
    observer->OnRunStarted(run, milliseconds(10));
    observer->OnRunCompleted(run, milliseconds(20));
    observer->OnLeaseRenewed(run);
  }
  const std::string text = registry.RenderPrometheusText();
  EXPECT_THAT(text, HasSubstr(R"(backend_tasks_task_runs_count_total{plugin="myplugin",)"
                              R"(taskId="*",scope="global",result="completed"} 3)"));
  EXPECT_THAT(text, HasSubstr(R"(stagehand_task_lease_renewals_total{plugin="myplugin",)"
                              R"(taskId="*",result="ok"} 3)"));
  EXPECT_THAT(text, Not(HasSubstr(R"(taskId="sync")")));
}

TEST(SchedulerMetricsTest, FailedLocalRunCountsStartedAndFailed) {
  testing::ManualClock clock;
  MetricsRegistry registry;
  const std::shared_ptr<SchedulerObserver> observer = MakeSchedulerMetricsObserver(registry, clock);

  const RunInfo run = MakeRun("cleanup", TaskScope::kLocal);
  observer->OnRunStarted(run, milliseconds(0));
  clock.Advance(milliseconds(20));
  observer->OnRunFailed(run, milliseconds(20), R"({"name":"Error","message":"boom"})");
  observer->OnRunStarted(run, milliseconds(0));
  observer->OnRunCompleted(run, milliseconds(0));

  const std::string text = registry.RenderPrometheusText();
  const std::string labels = R"(plugin="myplugin",taskId="cleanup",scope="local")";
  EXPECT_THAT(text, HasSubstr("backend_tasks_task_runs_count_total{" + labels +
                              ",result=\"started\"} 2\n"));
  EXPECT_THAT(
      text, HasSubstr("backend_tasks_task_runs_count_total{" + labels + ",result=\"failed\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("backend_tasks_task_runs_count_total{" + labels +
                              ",result=\"completed\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("backend_tasks_task_runs_duration_seconds_sum{" + labels +
                              ",result=\"failed\"} 0.02\n"));
  EXPECT_THAT(text, HasSubstr("backend_tasks_task_runs_completed_seconds{" + labels +
                              ",result=\"failed\"} 1767225600.02\n"));
  EXPECT_THAT(text, HasSubstr("backend_tasks_task_runs_completed_seconds{" + labels +
                              ",result=\"completed\"} 1767225600.02\n"));
  // The started gauge has no scope label, as in Backstage.
  EXPECT_THAT(text, HasSubstr("backend_tasks_task_runs_started_seconds{plugin=\"myplugin\","
                              "taskId=\"cleanup\"} 1767225600.02\n"));
  EXPECT_THAT(text, HasSubstr("stagehand_task_start_lag_seconds_count{" + labels + "} 2\n"));
}

TEST(SchedulerMetricsTest, CoordinationEvents) {
  testing::ManualClock clock;
  MetricsRegistry registry;
  const std::shared_ptr<SchedulerObserver> observer = MakeSchedulerMetricsObserver(registry, clock);

  const RunInfo run = MakeRun("sync", TaskScope::kGlobal);
  observer->OnClaimLost("myplugin", "sync");
  observer->OnClaimLost("myplugin", "sync");
  observer->OnLeaseRenewed(run);
  observer->OnLeaseRenewed(run);
  observer->OnLeaseRenewed(run);
  observer->OnLeaseRenewalFailed(run);
  observer->OnLeaseLost(run);
  observer->OnReclaimed("other", "stuck");
  observer->OnRunOverdue(run);
  observer->OnSlotSkipped("myplugin", "sync", WallTime{}, std::chrono::seconds(3));
  observer->OnRetryScheduled(run, 1, std::chrono::seconds(1));
  observer->OnRetryScheduled(run, 2, std::chrono::seconds(2));

  const std::string text = registry.RenderPrometheusText();
  EXPECT_THAT(
      text,
      HasSubstr("stagehand_task_slots_skipped_total{plugin=\"myplugin\",taskId=\"sync\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("stagehand_task_retries_total{plugin=\"myplugin\",taskId=\"sync\"} 2\n"));
  EXPECT_THAT(
      text, HasSubstr("stagehand_task_claims_lost_total{plugin=\"myplugin\",taskId=\"sync\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("stagehand_task_lease_renewals_total{plugin=\"myplugin\","
                              "taskId=\"sync\",result=\"ok\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("stagehand_task_lease_renewals_total{plugin=\"myplugin\","
                              "taskId=\"sync\",result=\"failed\"} 1\n"));
  EXPECT_THAT(
      text, HasSubstr("stagehand_task_leases_lost_total{plugin=\"myplugin\",taskId=\"sync\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("stagehand_janitor_reclaims_total{plugin=\"other\",taskId=\"stuck\"} 1\n"));
  EXPECT_THAT(
      text,
      HasSubstr("stagehand_task_runs_overdue_total{plugin=\"myplugin\",taskId=\"sync\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("backend_tasks_task_runs_count_total{")));
}

TEST(SchedulerMetricsTest, FailoverEventsAreCountedPerTask) {
  testing::ManualClock clock;
  MetricsRegistry registry;
  const std::shared_ptr<SchedulerObserver> observer = MakeSchedulerMetricsObserver(registry, clock);

  observer->OnRunAtRisk("myplugin", "sync", "run-1", WallTime{}, "its claim");
  observer->OnRunAtRisk("myplugin", "sync", "run-2", std::nullopt, "its release");
  observer->OnWriteReplayed("myplugin", "report");

  const std::string text = registry.RenderPrometheusText();
  EXPECT_THAT(text, HasSubstr("stagehand_failover_runs_at_risk_total{plugin=\"myplugin\","
                              "taskId=\"sync\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("stagehand_database_writes_replayed_total{plugin=\"myplugin\","
                              "taskId=\"report\"} 1\n"));
}

TEST(DatabaseMetricsTest, FollowTheHealthOfEachPluginsDatabase) {
  MetricsRegistry registry;
  DatabaseMetrics metrics(registry);
  DatabaseHealth up;
  up.reconnects = 2;
  metrics.Update("jobs", up);
  metrics.Update("other", DatabaseHealth{});
  std::string text = registry.RenderPrometheusText();
  EXPECT_THAT(text, HasSubstr("stagehand_database_up{plugin=\"jobs\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("stagehand_database_up{plugin=\"other\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("stagehand_database_reconnects_total{plugin=\"jobs\"} 2\n"));

  DatabaseHealth down;
  down.reachable = false;
  down.reconnects = 5;
  down.server_changes = 1;
  metrics.Update("jobs", down);
  metrics.Update("jobs", down);  // read twice: the counters take each change once
  text = registry.RenderPrometheusText();
  EXPECT_THAT(text, HasSubstr("stagehand_database_up{plugin=\"jobs\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("stagehand_database_reconnects_total{plugin=\"jobs\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("stagehand_database_server_changes_total{plugin=\"jobs\"} 1\n"));
}

TEST(SchedulerMetricsTest, SeveralObserversShareOneRegistry) {
  testing::ManualClock clock;
  MetricsRegistry registry;
  const auto first = MakeSchedulerMetricsObserver(registry, clock);
  const auto second = MakeSchedulerMetricsObserver(registry, clock);
  first->OnClaimLost("a", "t");
  second->OnClaimLost("a", "t");
  EXPECT_THAT(registry.RenderPrometheusText(),
              HasSubstr("stagehand_task_claims_lost_total{plugin=\"a\",taskId=\"t\"} 2\n"));
}

// Forwards every event to the metrics observer, then lets the test wait for run ends.
class ForwardingObserver final : public SchedulerObserver {
 public:
  explicit ForwardingObserver(std::shared_ptr<SchedulerObserver> inner)
      : inner_(std::move(inner)) {}

  void OnRunStarted(const RunInfo& run, std::chrono::nanoseconds lag) override {
    inner_->OnRunStarted(run, lag);
  }
  void OnRunCompleted(const RunInfo& run, std::chrono::nanoseconds duration) override {
    inner_->OnRunCompleted(run, duration);
    CountEnd();
  }
  void OnRunFailed(const RunInfo& run, std::chrono::nanoseconds duration,
                   std::string_view error_json) override {
    inner_->OnRunFailed(run, duration, error_json);
    CountEnd();
  }

  // Blocks until `n` runs have ended, or 10 s of real time pass.
  bool WaitForEnds(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return ends_ >= n; });
  }

 private:
  void CountEnd() {
    {
      std::lock_guard lock(mu_);
      ++ends_;
    }
    cv_.notify_all();
  }

  std::shared_ptr<SchedulerObserver> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int ends_ = 0;
};

TaskDefinition ManualTask(std::string id, TaskScope scope, TaskFunction fn) {
  TaskDefinition task;
  task.id = std::move(id);
  task.frequency = ManualFrequency{};
  task.timeout = std::chrono::minutes(1);
  task.scope = scope;
  task.fn = std::move(fn);
  return task;
}

TEST(SchedulerMetricsTest, PluginSchedulerRunsAreCounted) {
  testing::ManualClock clock;
  MetricsRegistry registry;
  auto forwarding =
      std::make_shared<ForwardingObserver>(MakeSchedulerMetricsObserver(registry, clock));
  PluginSchedulerOptions options;
  options.plugin_id = "myplugin";
  options.store = std::make_shared<testing::MemoryTaskStore>("myplugin", clock);
  options.clock = &clock;
  options.observer = forwarding;
  options.default_zone = TimeZone::Utc();
  PluginScheduler scheduler(std::move(options));
  ASSERT_THAT(
      scheduler.ScheduleTask(ManualTask("works", TaskScope::kGlobal, [](std::stop_token) {})),
      IsOk());
  ASSERT_TRUE(scheduler
                  .ScheduleTask(ManualTask(
                      "throws", TaskScope::kGlobal,
                      [](std::stop_token) -> Status { throw std::runtime_error("boom"); }))
                  .ok());

  ASSERT_THAT(scheduler.TriggerTask("works"), IsOk());
  ASSERT_THAT(scheduler.TriggerTask("throws"), IsOk());
  ASSERT_TRUE(forwarding->WaitForEnds(2));
  scheduler.Shutdown();

  const std::string text = registry.RenderPrometheusText();
  const std::string works = R"(plugin="myplugin",taskId="works",scope="global")";
  const std::string throws = R"(plugin="myplugin",taskId="throws",scope="global")";
  const std::string counter = "backend_tasks_task_runs_count_total{";
  EXPECT_THAT(text, HasSubstr(counter + works + ",result=\"started\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(counter + works + ",result=\"completed\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr(counter + works + ",result=\"failed\"}")));
  EXPECT_THAT(text, HasSubstr(counter + throws + ",result=\"started\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(counter + throws + ",result=\"failed\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr(counter + throws + ",result=\"completed\"}")));
  EXPECT_THAT(text, HasSubstr("backend_tasks_task_runs_duration_seconds_count{" + throws +
                              ",result=\"failed\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("backend_tasks_task_runs_started_seconds{plugin=\"myplugin\","
                              "taskId=\"works\"} 1767225600\n"));
}

TEST(HttpRequestMetricsTest, CountsByRouteMethodAndStatus) {
  MetricsRegistry registry;
  const std::function<void(const HttpRequestRecord&)> record = MakeHttpRequestMetrics(registry);
  HttpRequestRecord request;
  request.method = "GET";
  request.route = "/api/jobs";
  request.status = 200;
  request.duration = milliseconds(3);
  record(request);
  record(request);
  request.method = "POST";
  request.status = 404;
  request.duration = milliseconds(20);
  record(request);
  request.route = "unmatched";
  request.method = "GET";
  request.duration = std::chrono::seconds(30);
  record(request);

  const std::string text = registry.RenderPrometheusText();
  EXPECT_THAT(text, HasSubstr("# TYPE stagehand_http_requests_total counter\n"
                              "stagehand_http_requests_total{route=\"/api/jobs\",method=\"GET\","
                              "status=\"200\"} 2\n"
                              "stagehand_http_requests_total{route=\"/api/jobs\",method=\"POST\","
                              "status=\"404\"} 1\n"
                              "stagehand_http_requests_total{route=\"unmatched\",method=\"GET\","
                              "status=\"404\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE stagehand_http_request_duration_seconds histogram\n"
                              "stagehand_http_request_duration_seconds_bucket{route=\"/api/jobs\","
                              "le=\"0.001\"} 0\n"
                              "stagehand_http_request_duration_seconds_bucket{route=\"/api/jobs\","
                              "le=\"0.0025\"} 0\n"
                              "stagehand_http_request_duration_seconds_bucket{route=\"/api/jobs\","
                              "le=\"0.005\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("stagehand_http_request_duration_seconds_bucket{route=\"/api/jobs\","
                              "le=\"0.025\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("stagehand_http_request_duration_seconds_bucket{route=\"/api/jobs\","
                              "le=\"10\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("stagehand_http_request_duration_seconds_count{route=\"/api/jobs\"} "
                              "3\n"));
  EXPECT_THAT(text, HasSubstr("stagehand_http_request_duration_seconds_bucket{route=\"unmatched\","
                              "le=\"10\"} 0\n"
                              "stagehand_http_request_duration_seconds_bucket{route=\"unmatched\","
                              "le=\"+Inf\"} 1\n"
                              "stagehand_http_request_duration_seconds_sum{route=\"unmatched\"} "
                              "30\n"));
}

}  // namespace
}  // namespace stagehand
