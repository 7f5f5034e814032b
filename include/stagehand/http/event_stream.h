// The live event stream of a process (GET /.stagehand/v1/events): server-sent events for live
// views, fed by the schedulers' observer hooks. Every plugin scheduler given this observer reports
// into it, and every client receives every event:
//   run.started      {pluginId, taskId, runId, host, trigger, attempt, scope, startedAt}
//   run.ended        the same, and endedAt, outcome, durationMs, error, exitCode, signal,
//                    httpStatus
//   task.triggered   {pluginId, taskId}
//   task.cancelled   {pluginId, taskId}
//   task.registered  {pluginId, taskId}
// Each event is `id: <stream>-<n>` (a random name for this stream, then a count from 1),
// `event: <name>` and one `data:` line of JSON. A stream opens with the comment `: connected`, and
// a `: keepalive` comment is sent every keepalive interval, so that proxies keep idle streams open.
// Times are UTC with milliseconds, as in the REST API.
//
// A client that reconnects names the last event it got (the `Last-Event-ID` header, or the
// `lastEventId` query parameter for clients that cannot set headers; the header wins) and is sent
// the events it missed, from a ring of the latest events (recorded from the stream's first client
// on), then the live ones. When the missed events are no longer all in the ring, or the id is not
// this stream's (the daemon restarted), it is sent instead
//   reset            {reason: "expired" | "unknown", lastEventId}
// with the id of the latest event, and must read the state again (the REST routes).
//
// A trigger's task.triggered comes before the events of the run it starts: while a TriggerTask
// call of a task is under way, that task's other events wait for it to end.
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
  // The ring of events a reconnecting client can be sent: at most this many, none older than
  // replay_window (monotonic). Positive.
  std::size_t replay_events = 1000;
  std::chrono::milliseconds replay_window{std::chrono::minutes(5)};
  // The first part of every event id; 8 random hex digits when empty. Must not contain '-'.
  std::string stream_name;
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
  // answers 200 `text/event-stream` and subscribes the client, after sending it what it missed
  // (or a reset) when it names a last event; anything else is nullopt. Safe to call after the
  // stream is destroyed (it then answers a stream that ends at once).
  HttpHandler AsHandler() const;

  // Returns this stream's name, the first part of its event ids.
  const std::string& stream_name() const;

  // Returns how many clients are subscribed now.
  std::size_t client_count() const;

  void OnRunStarted(const RunInfo& run, std::chrono::nanoseconds lag) override;
  void OnRunFinished(const RunInfo& run, const RunFinish& finish,
                     std::chrono::nanoseconds duration) override;
  void OnTaskRegistered(std::string_view plugin_id, std::string_view task_id) override;
  void OnTaskTriggerRequested(std::string_view plugin_id, std::string_view task_id) override;
  void OnTaskTriggered(std::string_view plugin_id, std::string_view task_id) override;
  void OnTaskTriggerRefused(std::string_view plugin_id, std::string_view task_id) override;
  void OnTaskCancelled(std::string_view plugin_id, std::string_view task_id) override;
  void OnTaskPaused(std::string_view plugin_id, std::string_view task_id,
                    const PauseRequest& pause) override;
  void OnTaskResumed(std::string_view plugin_id, std::string_view task_id) override;
  void OnRetryScheduled(const RunInfo& run, int attempt, std::chrono::milliseconds delay) override;

 private:
  struct Hub;
  std::shared_ptr<Hub> hub_;
};

}  // namespace stagehand
