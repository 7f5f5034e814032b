#include "stagehand/backend/scheduler_metrics.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "stagehand/model/schedule.h"

namespace stagehand {
namespace {

using Seconds = std::chrono::duration<double>;

double ToSeconds(std::chrono::nanoseconds duration) { return Seconds(duration).count(); }

// Backstage's gauges hold Date.now() / 1000: epoch seconds with millisecond resolution.
double EpochSeconds(WallTime now) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  return static_cast<double>(ms) / 1000.0;
}

class SchedulerMetricsObserver final : public SchedulerObserver {
 public:
  SchedulerMetricsObserver(MetricsRegistry& registry, const Clock& clock,
                           SchedulerMetricsOptions options)
      : clock_(clock),
        options_(options),
        runs_(registry.Counter("backend_tasks_task_runs_count_total",
                               "Total number of times a task has been run",
                               {"plugin", "taskId", "scope", "result"})),
        durations_(registry.Histogram("backend_tasks_task_runs_duration_seconds",
                                      "Histogram of task run durations",
                                      {"plugin", "taskId", "scope", "result"},
                                      {0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600})),
        started_(registry.Gauge("backend_tasks_task_runs_started_seconds",
                                "Epoch timestamp seconds when the task was last started",
                                {"plugin", "taskId"})),
        completed_(registry.Gauge("backend_tasks_task_runs_completed_seconds",
                                  "Epoch timestamp seconds when the task was last completed",
                                  {"plugin", "taskId", "scope", "result"})),
        start_lag_(registry.Histogram(
            "stagehand_task_start_lag_seconds",
            "How late runs started after their scheduled time, in seconds",
            {"plugin", "taskId", "scope"}, {0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300})),
        claims_lost_(registry.Counter("stagehand_task_claims_lost_total",
                                      "Times another host claimed a task this host had seen ready",
                                      {"plugin", "taskId"})),
        slots_skipped_(registry.Counter("stagehand_task_slots_skipped_total",
                                        "Scheduled slots skipped: missed by more than the task's "
                                        "catch-up window",
                                        {"plugin", "taskId"})),
        retries_(registry.Counter("stagehand_task_retries_total",
                                  "Retries scheduled after a failed or timed-out run",
                                  {"plugin", "taskId"})),
        lease_renewals_(registry.Counter("stagehand_task_lease_renewals_total",
                                         "Lease renewals of running tasks, by outcome",
                                         {"plugin", "taskId", "result"})),
        leases_lost_(registry.Counter(
            "stagehand_task_leases_lost_total",
            "Runs this host stopped treating as its own (ticket gone or lease not renewed)",
            {"plugin", "taskId"})),
        reclaims_(registry.Counter("stagehand_janitor_reclaims_total",
                                   "Expired runs reset by the janitor", {"plugin", "taskId"})),
        at_risk_(registry.Counter(
            "stagehand_failover_runs_at_risk_total",
            "Runs a failover may have done twice or left unrecorded (the new primary lacked their "
            "claim and another host had changed the task meanwhile)",
            {"plugin", "taskId"})),
        replayed_(registry.Counter("stagehand_database_writes_replayed_total",
                                   "Writes (run releases) missing on a new database server after "
                                   "a failover and written again there",
                                   {"plugin", "taskId"})),
        overdue_(registry.Counter(
            "stagehand_task_runs_overdue_total",
            "Runs still going a lease after their timeout (their claim is held until they return)",
            {"plugin", "taskId"})) {}

  void OnRunStarted(const RunInfo& run, std::chrono::nanoseconds lag) override {
    const std::string scope(TaskScopeName(run.scope));
    runs_.Add({std::string(run.plugin_id), Task(run.task_id), scope, "started"});
    started_.Set({std::string(run.plugin_id), Task(run.task_id)}, EpochSeconds(clock_.Now()));
    start_lag_.Observe({std::string(run.plugin_id), Task(run.task_id), scope}, ToSeconds(lag));
  }

  void OnRunCompleted(const RunInfo& run, std::chrono::nanoseconds duration) override {
    RecordEnd(run, duration, "completed");
  }

  void OnRunFailed(const RunInfo& run, std::chrono::nanoseconds duration,
                   std::string_view /*error_json*/) override {
    RecordEnd(run, duration, "failed");
  }

  void OnClaimLost(std::string_view plugin_id, std::string_view task_id) override {
    claims_lost_.Add({std::string(plugin_id), Task(task_id)});
  }

  void OnSlotSkipped(std::string_view plugin_id, std::string_view task_id, WallTime /*slot*/,
                     std::chrono::nanoseconds /*late*/) override {
    slots_skipped_.Add({std::string(plugin_id), Task(task_id)});
  }

  void OnRetryScheduled(const RunInfo& run, int /*attempt*/,
                        std::chrono::milliseconds /*delay*/) override {
    retries_.Add({std::string(run.plugin_id), Task(run.task_id)});
  }

  void OnLeaseRenewed(const RunInfo& run) override {
    lease_renewals_.Add({std::string(run.plugin_id), Task(run.task_id), "ok"});
  }

  void OnLeaseRenewalFailed(const RunInfo& run) override {
    lease_renewals_.Add({std::string(run.plugin_id), Task(run.task_id), "failed"});
  }

  void OnLeaseLost(const RunInfo& run) override {
    leases_lost_.Add({std::string(run.plugin_id), Task(run.task_id)});
  }

  void OnReclaimed(std::string_view plugin_id, std::string_view task_id) override {
    reclaims_.Add({std::string(plugin_id), Task(task_id)});
  }

  void OnRunOverdue(const RunInfo& run) override {
    overdue_.Add({std::string(run.plugin_id), Task(run.task_id)});
  }

  void OnRunAtRisk(std::string_view plugin_id, std::string_view task_id,
                   std::string_view /*run_id*/, std::optional<WallTime> /*slot*/,
                   std::string_view /*why*/) override {
    at_risk_.Add({std::string(plugin_id), Task(task_id)});
  }

  void OnWriteReplayed(std::string_view plugin_id, std::string_view task_id) override {
    replayed_.Add({std::string(plugin_id), Task(task_id)});
  }

 private:
  // The taskId label value of `task_id`'s series.
  std::string Task(std::string_view task_id) const {
    return std::string(options_.per_task_series ? task_id : kAllTasksLabel);
  }

  void RecordEnd(const RunInfo& run, std::chrono::nanoseconds duration, std::string_view result) {
    const std::vector<std::string> labels = {std::string(run.plugin_id), Task(run.task_id),
                                             std::string(TaskScopeName(run.scope)),
                                             std::string(result)};
    runs_.Add(labels);
    durations_.Observe(labels, ToSeconds(duration));
    completed_.Set(labels, EpochSeconds(clock_.Now()));
  }

  const Clock& clock_;
  const SchedulerMetricsOptions options_;
  CounterFamily& runs_;
  HistogramFamily& durations_;
  GaugeFamily& started_;
  GaugeFamily& completed_;
  HistogramFamily& start_lag_;
  CounterFamily& claims_lost_;
  CounterFamily& slots_skipped_;
  CounterFamily& retries_;
  CounterFamily& lease_renewals_;
  CounterFamily& leases_lost_;
  CounterFamily& reclaims_;
  CounterFamily& at_risk_;
  CounterFamily& replayed_;
  CounterFamily& overdue_;
};

}  // namespace

std::shared_ptr<SchedulerObserver> MakeSchedulerMetricsObserver(MetricsRegistry& registry,
                                                                const Clock& clock,
                                                                SchedulerMetricsOptions options) {
  return std::make_shared<SchedulerMetricsObserver>(registry, clock, options);
}

DatabaseMetrics::DatabaseMetrics(MetricsRegistry& registry)
    : up_(registry.Gauge("stagehand_database_up",
                         "1 while the plugin's database answers (its statements and its LISTEN "
                         "session), else 0",
                         {"plugin"})),
      reconnects_(registry.Counter("stagehand_database_reconnects_total",
                                   "Database sessions opened again after a failure", {"plugin"})),
      server_changes_(registry.Counter(
          "stagehand_database_server_changes_total",
          "Reconnects that reached another database server (a failover to a standby)",
          {"plugin"})) {}

void DatabaseMetrics::Update(std::string_view plugin_id, const DatabaseHealth& health) {
  const std::vector<std::string> labels = {std::string(plugin_id)};
  MutexLock lock(mu_);
  up_.Set(labels, health.reachable ? 1 : 0);
  Seen& seen = seen_[labels.front()];
  if (health.reconnects > seen.reconnects) {
    reconnects_.Add(labels, static_cast<double>(health.reconnects - seen.reconnects));
    seen.reconnects = health.reconnects;
  }
  if (health.server_changes > seen.server_changes) {
    server_changes_.Add(labels, static_cast<double>(health.server_changes - seen.server_changes));
    seen.server_changes = health.server_changes;
  }
}

std::function<void(const HttpRequestRecord&)> MakeHttpRequestMetrics(MetricsRegistry& registry) {
  CounterFamily& requests =
      registry.Counter("stagehand_http_requests_total", "HTTP requests answered, by route",
                       {"route", "method", "status"});
  HistogramFamily& durations = registry.Histogram(
      "stagehand_http_request_duration_seconds", "Time to answer HTTP requests, in seconds",
      {"route"}, {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
  return [&requests, &durations](const HttpRequestRecord& record) {
    std::string route(record.route);
    requests.Add({route, std::string(record.method), std::to_string(record.status)});
    durations.Observe({std::move(route)}, ToSeconds(record.duration));
  };
}

}  // namespace stagehand
