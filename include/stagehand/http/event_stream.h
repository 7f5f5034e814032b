// The live event stream of a process (GET /.stagehand/v1/events): server-sent events for live
// views, fed by the schedulers' observer hooks. Every plugin scheduler given this observer reports
// into it, and every client receives every event:
//   run.started      {pluginId, taskId, runId, host, trigger, attempt, scope, startedAt}
//   run.ended        the same, and endedAt, outcome, durationMs, error, exitCode, signal,
//                    httpStatus
//   task.triggered   {pluginId, taskId}
//   task.cancelled   {pluginId, taskId}
//   task.registered  {pluginId, taskId}
// Each event is `id: <n>` (increasing from 1 in each process), `event: <name>` and one `data:`
// line of JSON. A stream opens with the comment `: connected`, and a `: keepalive` comment is sent
// every keepalive interval, so that proxies keep idle streams open. Times are UTC with
// milliseconds, as in the REST API.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "stagehand/engine/observer.h"
#include "stagehand/http/http_message.h"
#include "stagehand/time/clock.h"

namespace stagehand {

struct EventStreamOptions {
  // Gives the events' times and paces the keepalive comments (monotonic). The system clock when
  // null; must outlive the stream.
  Clock* clock = nullptr;
  std::chrono::milliseconds keepalive_interval{15000};
  // The host named in run events; LocalHostName() when empty.
  std::string host;
};

// Fans scheduler events out to the clients of its handler. Observer hooks may be called from any
// thread and never block: an event is queued on each client's stream (HttpBodyWriter::Write), and
// a client that falls behind by more than the server's stream backlog
// (HttpServerOptions::max_stream_backlog_bytes) is cut off, never waited for. Thread-safe.
class SchedulerEventStream final : public SchedulerObserver {
 public:
  explicit SchedulerEventStream(EventStreamOptions options = {});
  // Runs Stop().
  ~SchedulerEventStream() override;
  SchedulerEventStream(const SchedulerEventStream&) = delete;
  SchedulerEventStream& operator=(const SchedulerEventStream&) = delete;

  // Starts the thread that sends the keepalive comments. Idempotent.
  void Start();
  // Ends every client's stream and stops the keepalive thread; clients that connect later get a
  // stream that ends at once. Idempotent.
  void Stop();

  // Returns the handler to mount (e.g. at /.stagehand/v1/events): GET or HEAD of the mount itself
  // answers 200 `text/event-stream` and subscribes the client; anything else is nullopt. Safe to
  // call after the stream is destroyed (it then answers a stream that ends at once).
  HttpHandler AsHandler() const;

  // Returns how many clients are subscribed now.
  std::size_t client_count() const;

  void OnRunStarted(const RunInfo& run, std::chrono::nanoseconds lag) override;
  void OnRunFinished(const RunInfo& run, const RunFinish& finish,
                     std::chrono::nanoseconds duration) override;
  void OnTaskRegistered(std::string_view plugin_id, std::string_view task_id) override;
  void OnTaskTriggered(std::string_view plugin_id, std::string_view task_id) override;
  void OnTaskCancelled(std::string_view plugin_id, std::string_view task_id) override;

 private:
  struct Hub;
  std::shared_ptr<Hub> hub_;
};

}  // namespace stagehand
