// Turns scheduler engine events into metrics: Backstage's task instruments under their Prometheus
// names, with a `plugin` label added, and stagehand's own coordination metrics.
//   backend_tasks_task_runs_count_total{plugin,taskId,scope,result}
//       result = started|completed|failed (two increments per run: at start and at end)
//   backend_tasks_task_runs_duration_seconds{plugin,taskId,scope,result}
//       histogram, buckets 0.1 0.5 1 5 10 30 60 120 300 600 1800 3600
//   backend_tasks_task_runs_started_seconds{plugin,taskId}
//       epoch seconds of the last start
//   backend_tasks_task_runs_completed_seconds{plugin,taskId,scope,result}
//       epoch seconds of the last end
//   stagehand_task_start_lag_seconds{plugin,taskId,scope}   histogram, buckets 0.01 … 300
//   stagehand_task_claims_lost_total{plugin,taskId}
//   stagehand_task_slots_skipped_total{plugin,taskId}   slots missed beyond a catch-up window
//   stagehand_task_lease_renewals_total{plugin,taskId,result}   result = ok|failed
//   stagehand_task_leases_lost_total{plugin,taskId}
//   stagehand_janitor_reclaims_total{plugin,taskId}
//   stagehand_failover_runs_at_risk_total{plugin,taskId}   runs a failover may have doubled or
//       left unrecorded (asynchronous replication)
//   stagehand_database_writes_replayed_total{plugin,taskId}   releases written again on a new
//       primary that lacked them
// With per-task series off (SchedulerMetricsOptions), every series above has taskId="*": one
// series per plugin instead of one per task, under the same names and labels.
// The database of each plugin (DatabaseMetrics, refreshed as /metrics is read):
//   stagehand_database_up{plugin}   1 while it answers, else 0
//   stagehand_database_reconnects_total{plugin}
//   stagehand_database_server_changes_total{plugin}   reconnects to another server (failovers)
// And the HTTP server's requests:
//   stagehand_http_requests_total{route,method,status}
//   stagehand_http_request_duration_seconds{route}   histogram, buckets 0.001 … 10
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "stagehand/base/mutex.h"
#include "stagehand/engine/observer.h"
#include "stagehand/http/http_server.h"
#include "stagehand/metrics/metrics_registry.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand {

// The label value that stands for every task when per-task series are off.
inline constexpr std::string_view kAllTasksLabel = "*";

struct SchedulerMetricsOptions {
  // One series per task (Backstage's shape) or, when false, per plugin with taskId="*", so that
  // /metrics stays small with many thousands of tasks (about 3.5 KB per task that has run).
  bool per_task_series = true;
};

// Returns an observer for every plugin's scheduler that records into `registry`; `clock` gives
// the wall time of the started/completed gauges. Both must outlive the observer. Thread-safe.
std::shared_ptr<SchedulerObserver> MakeSchedulerMetricsObserver(
    MetricsRegistry& registry, const Clock& clock, SchedulerMetricsOptions options = {});

// The database series above, set from each plugin's DatabaseHealth. Thread-safe.
class DatabaseMetrics {
 public:
  // `registry` must outlive this object.
  explicit DatabaseMetrics(MetricsRegistry& registry);
  DatabaseMetrics(const DatabaseMetrics&) = delete;
  DatabaseMetrics& operator=(const DatabaseMetrics&) = delete;

  // Sets `plugin_id`'s series from `health` (its counts only ever grow the counters).
  void Update(std::string_view plugin_id, const DatabaseHealth& health);

 private:
  struct Seen {
    std::int64_t reconnects = 0;
    std::int64_t server_changes = 0;
  };
  GaugeFamily& up_;
  CounterFamily& reconnects_;
  CounterFamily& server_changes_;
  Mutex mu_;
  std::map<std::string, Seen> seen_ STAGEHAND_GUARDED_BY(mu_);
};

// Returns a request observer for HttpServerOptions::on_request that records each answered request
// into `registry`, which must outlive it. Thread-safe.
std::function<void(const HttpRequestRecord&)> MakeHttpRequestMetrics(MetricsRegistry& registry);

}  // namespace stagehand
