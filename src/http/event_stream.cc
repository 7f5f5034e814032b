#include "stagehand/http/event_stream.h"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <stop_token>
#include <thread>
#include <utility>
#include <vector>

#include "http/path_match.h"
#include "http/run_json.h"
#include "stagehand/base/host_name.h"
#include "stagehand/base/mutex.h"
#include "stagehand/base/uuid.h"
#include "stagehand/model/schedule.h"

namespace stagehand {
namespace {

using Writers = std::vector<std::shared_ptr<HttpBodyWriter>>;
// A task, by plugin id and task id.
using TaskKey = std::pair<std::string, std::string>;

// Returns the last event id the client names: the Last-Event-ID header, else the lastEventId
// query parameter (as given, when it is not valid encoding); nullopt when it names none.
std::optional<std::string> LastEventIdOf(const HttpRequest& request) {
  if (std::optional<std::string_view> header = FindHeader(request.headers, "Last-Event-ID");
      header && !header->empty()) {
    return std::string(*header);
  }
  Result<std::vector<std::string>> values = QueryParameterValues(request.query, "lastEventId");
  if (!values.ok()) {
    return "";
  }
  if (values->empty() || values->front().empty()) {
    return std::nullopt;
  }
  return values->front();
}

}  // namespace

// The state shared by the stream, its handler and its writers' close callbacks, any of which may
// outlive the others.
struct SchedulerEventStream::Hub {
  // One event as sent, kept for the clients that reconnect.
  struct Recorded {
    std::uint64_t number;
    MonoTime at;
    std::string message;
  };
  // An event of a task that waits for a trigger of the task to end.
  struct Held {
    std::string name;
    std::string data;
  };

  explicit Hub(EventStreamOptions opts)
      : options(std::move(opts)),
        clock(options.clock != nullptr ? *options.clock : SystemClock::Instance()),
        host(options.host.empty() ? LocalHostName() : options.host),
        stream_name(options.stream_name.empty() ? NewUuidV4().substr(0, 8) : options.stream_name) {
    STAGEHAND_CHECK(options.replay_events > 0 && options.replay_window.count() > 0);
    STAGEHAND_CHECK(stream_name.find('-') == std::string::npos);
  }

  // Returns the subscribed writers as they are now.
  std::shared_ptr<const Writers> Snapshot() const {
    MutexLock lock(clients_mu);
    return clients;
  }

  // Sends what a client that last got event `last_event_id` missed, or a reset, then subscribes
  // `writer`; or ends it at once after Stop. I/O thread: quick.
  static void Subscribe(const std::shared_ptr<Hub>& hub,
                        const std::shared_ptr<HttpBodyWriter>& writer,
                        const std::optional<std::string>& last_event_id) {
    if (!writer->Write(": connected\n\n")) {
      return;
    }
    {
      // Under publish_mu, so that no event falls between the catch-up and the live ones.
      MutexLock publish_lock(hub->publish_mu);
      hub->recording.store(true, std::memory_order_release);
      if (last_event_id) {
        std::string missed = hub->CatchUpLocked(*last_event_id);
        if (!missed.empty() && !writer->Write(std::move(missed))) {
          return;
        }
      }
      MutexLock lock(hub->clients_mu);
      if (!hub->stopped) {
        auto next = std::make_shared<Writers>(*hub->clients);
        next->push_back(writer);
        hub->clients = std::move(next);
      }
    }
    // Registered once the writer is listed, so that a stream already closed (by its client, or
    // by Stop) is unlisted at once.
    writer->OnClose([weak = std::weak_ptr<Hub>(hub), raw = writer.get()] {
      if (const std::shared_ptr<Hub> alive = weak.lock()) {
        alive->Unsubscribe(raw);
      }
    });
    bool stopped = false;
    {
      MutexLock lock(hub->clients_mu);
      stopped = hub->stopped;
    }
    if (stopped) {
      writer->Close();
    }
  }

  void Unsubscribe(const HttpBodyWriter* writer) {
    MutexLock lock(clients_mu);
    auto next = std::make_shared<Writers>();
    next->reserve(clients->size());
    for (const auto& client : *clients) {
      if (client.get() != writer) {
        next->push_back(client);
      }
    }
    clients = std::move(next);
  }

  // Sends event `name` of task `plugin_id`/`task_id` with the data `make_data()` returns, or holds
  // it while a trigger of the task is under way; builds nothing before the first client.
  template <typename MakeData>
  void Publish(std::string_view plugin_id, std::string_view task_id, std::string_view name,
               MakeData make_data) {
    if (!recording.load(std::memory_order_acquire)) {
      return;
    }
    std::string data = http_internal::DumpJson(make_data());
    MutexLock lock(publish_mu);
    if (!triggers_in_flight.empty()) {
      TaskKey key(plugin_id, task_id);
      if (triggers_in_flight.count(key) != 0) {
        held[std::move(key)].push_back(Held{std::string(name), std::move(data)});
        return;
      }
    }
    SendLocked(name, data);
  }

  // Numbers, records and sends one event, with publish_mu held, so that every client sees the
  // events in the order of their ids. Never with clients_mu held: a failing Write unsubscribes its
  // client on this thread.
  void SendLocked(std::string_view name, std::string_view data) STAGEHAND_REQUIRES(publish_mu) {
    const std::uint64_t number = next_number++;
    std::string message =
        fmt::format("id: {}-{}\nevent: {}\ndata: {}\n\n", stream_name, number, name, data);
    const MonoTime now = clock.MonoNow();
    ring.push_back(Recorded{number, now, message});
    while (ring.size() > options.replay_events) {
      ring.pop_front();
    }
    DropExpiredLocked(now);
    const std::shared_ptr<const Writers> writers = Snapshot();
    for (const auto& writer : *writers) {
      writer->Write(message);
    }
  }

  void DropExpiredLocked(MonoTime now) STAGEHAND_REQUIRES(publish_mu) {
    while (!ring.empty() && now - ring.front().at > options.replay_window) {
      ring.pop_front();
    }
  }

  // Returns the events after `last_event_id`, or a reset when some of them are gone or the id is
  // not one of this stream's; with publish_mu held.
  std::string CatchUpLocked(const std::string& last_event_id) STAGEHAND_REQUIRES(publish_mu) {
    DropExpiredLocked(clock.MonoNow());
    const std::uint64_t latest = next_number - 1;
    std::optional<std::uint64_t> number;
    const std::string prefix = stream_name + "-";
    if (last_event_id.size() > prefix.size() && last_event_id.size() <= prefix.size() + 19 &&
        last_event_id.compare(0, prefix.size(), prefix) == 0) {
      std::uint64_t value = 0;
      bool digits = true;
      for (std::size_t i = prefix.size(); i < last_event_id.size(); ++i) {
        const char c = last_event_id[i];
        digits = digits && c >= '0' && c <= '9';
        value = value * 10 + static_cast<std::uint64_t>(c - '0');
      }
      if (digits && value <= latest) {
        number = value;
      }
    }
    const std::uint64_t first_kept = ring.empty() ? next_number : ring.front().number;
    std::string_view reason;
    if (!number) {
      reason = "unknown";
    } else if (*number + 1 < first_kept) {
      reason = "expired";
    }
    if (!reason.empty()) {
      nlohmann::ordered_json data;
      data["reason"] = reason;
      data["lastEventId"] = last_event_id;
      return fmt::format("id: {}-{}\nevent: reset\ndata: {}\n\n", stream_name, latest,
                         http_internal::DumpJson(data));
    }
    std::string missed;
    for (const Recorded& event : ring) {
      if (event.number > *number) {
        missed += event.message;
      }
    }
    return missed;
  }

  void BeginTrigger(std::string_view plugin_id, std::string_view task_id) {
    MutexLock lock(publish_mu);
    ++triggers_in_flight[TaskKey(plugin_id, task_id)];
  }

  // Ends a trigger of the task that BeginTrigger announced, first sending its task.triggered when
  // it succeeded, then the task's events that waited for it. A trigger that was not announced
  // (a scheduler that calls only OnTaskTriggered) is sent as it comes.
  void EndTrigger(std::string_view plugin_id, std::string_view task_id, bool triggered) {
    std::string data;
    if (triggered && recording.load(std::memory_order_acquire)) {
      data = http_internal::DumpJson(TaskEvent(plugin_id, task_id));
    }
    MutexLock lock(publish_mu);
    if (!data.empty()) {
      SendLocked("task.triggered", data);
    }
    const TaskKey key(plugin_id, task_id);
    auto in_flight = triggers_in_flight.find(key);
    if (in_flight == triggers_in_flight.end() || --in_flight->second > 0) {
      return;
    }
    triggers_in_flight.erase(in_flight);
    auto waiting = held.find(key);
    if (waiting == held.end()) {
      return;
    }
    const std::vector<Held> events = std::move(waiting->second);
    held.erase(waiting);
    for (const Held& event : events) {
      SendLocked(event.name, event.data);
    }
  }

  static nlohmann::ordered_json TaskEvent(std::string_view plugin_id, std::string_view task_id) {
    nlohmann::ordered_json data;
    data["pluginId"] = plugin_id;
    data["taskId"] = task_id;
    return data;
  }

  nlohmann::ordered_json RunEvent(const RunInfo& run, WallTime started_at) const {
    nlohmann::ordered_json data = TaskEvent(run.plugin_id, run.task_id);
    data["runId"] = run.run_id;
    data["host"] = host;
    data["trigger"] = RunTriggerName(run.trigger);
    data["attempt"] = run.attempt;
    data["scope"] = TaskScopeName(run.scope);
    data["startedAt"] = http_internal::RunTimeText(started_at);
    return data;
  }

  void KeepAlive(const std::stop_token& stop) {
    MutexLock lock(wait_mu);
    while (!stop.stop_requested()) {
      const MonoTime next = clock.MonoNow() + options.keepalive_interval;
      if (clock.WaitUntil(lock.unique_lock(), wait_cv, next, stop, [] { return false; }) ||
          stop.stop_requested()) {
        continue;
      }
      lock.Unlock();
      const std::shared_ptr<const Writers> writers = Snapshot();
      for (const auto& writer : *writers) {
        writer->Write(": keepalive\n\n");
      }
      lock.Lock();
    }
  }

  const EventStreamOptions options;
  Clock& clock;
  const std::string host;
  const std::string stream_name;

  mutable Mutex clients_mu;
  std::shared_ptr<const Writers> clients STAGEHAND_GUARDED_BY(clients_mu) =
      std::make_shared<Writers>();
  bool stopped STAGEHAND_GUARDED_BY(clients_mu) = false;

  // Taken before clients_mu when both are held.
  Mutex publish_mu;
  // Events are numbered, recorded and built only from the first client on: a process nobody
  // watches pays nothing for its stream.
  std::atomic<bool> recording{false};  // set with publish_mu held, read without it
  std::uint64_t next_number STAGEHAND_GUARDED_BY(publish_mu) = 1;
  std::deque<Recorded> ring STAGEHAND_GUARDED_BY(publish_mu);  // oldest first
  std::map<TaskKey, int> triggers_in_flight STAGEHAND_GUARDED_BY(publish_mu);
  std::map<TaskKey, std::vector<Held>> held STAGEHAND_GUARDED_BY(publish_mu);

  // When each run still going started, by run id, so that its run.ended names the same start as
  // its run.started.
  Mutex starts_mu;
  std::map<std::string, WallTime, std::less<>> starts STAGEHAND_GUARDED_BY(starts_mu);

  Mutex lifecycle_mu;
  std::jthread keepalive STAGEHAND_GUARDED_BY(lifecycle_mu);
  Mutex wait_mu;
  std::condition_variable_any wait_cv;
};

SchedulerEventStream::SchedulerEventStream(EventStreamOptions options)
    : hub_(std::make_shared<Hub>(std::move(options))) {}

SchedulerEventStream::~SchedulerEventStream() { Stop(); }

void SchedulerEventStream::Start() {
  MutexLock lock(hub_->lifecycle_mu);
  if (hub_->keepalive.joinable()) {
    return;
  }
  {
    MutexLock clients_lock(hub_->clients_mu);
    if (hub_->stopped) {
      return;
    }
  }
  hub_->keepalive =
      std::jthread([hub = hub_.get()](const std::stop_token& stop) { hub->KeepAlive(stop); });
}

void SchedulerEventStream::Stop() {
  std::shared_ptr<const Writers> clients;
  {
    MutexLock lock(hub_->clients_mu);
    hub_->stopped = true;
    clients = std::exchange(hub_->clients, std::make_shared<Writers>());
  }
  for (const auto& writer : *clients) {
    writer->Close();
  }
  std::jthread keepalive;  // requested to stop and joined as it goes out of scope
  MutexLock lock(hub_->lifecycle_mu);
  keepalive = std::move(hub_->keepalive);
}

HttpHandler SchedulerEventStream::AsHandler() const {
  return [hub = hub_](const HttpRequest& request) -> std::optional<HttpResponse> {
    if ((request.method != "GET" && request.method != "HEAD") ||
        !http_internal::RouteMatches(request.path, "/")) {
      return std::nullopt;
    }
    HttpResponse response;
    response.headers.emplace_back("Content-Type", "text/event-stream; charset=utf-8");
    response.headers.emplace_back("Cache-Control", "no-cache");
    response.stream = [hub, last_event_id = LastEventIdOf(request)](
                          const std::shared_ptr<HttpBodyWriter>& writer) {
      Hub::Subscribe(hub, writer, last_event_id);
    };
    return response;
  };
}

const std::string& SchedulerEventStream::stream_name() const { return hub_->stream_name; }

std::size_t SchedulerEventStream::client_count() const { return hub_->Snapshot()->size(); }

void SchedulerEventStream::OnRunStarted(const RunInfo& run, std::chrono::nanoseconds /*lag*/) {
  const WallTime started_at = hub_->clock.Now();
  {
    MutexLock lock(hub_->starts_mu);
    hub_->starts.insert_or_assign(std::string(run.run_id), started_at);
  }
  hub_->Publish(run.plugin_id, run.task_id, "run.started",
                [&] { return hub_->RunEvent(run, started_at); });
}

void SchedulerEventStream::OnRunFinished(const RunInfo& run, const RunFinish& finish,
                                         std::chrono::nanoseconds duration) {
  const WallTime ended_at = hub_->clock.Now();
  const auto duration_ms = std::chrono::floor<std::chrono::milliseconds>(duration);
  WallTime started_at = ended_at - duration_ms;
  {
    MutexLock lock(hub_->starts_mu);
    if (auto it = hub_->starts.find(run.run_id); it != hub_->starts.end()) {
      started_at = it->second;
      hub_->starts.erase(it);
    }
  }
  hub_->Publish(run.plugin_id, run.task_id, "run.ended", [&] {
    nlohmann::ordered_json data = hub_->RunEvent(run, started_at);
    data["endedAt"] = http_internal::RunTimeText(ended_at);
    data["outcome"] = RunOutcomeName(finish.outcome);
    data["durationMs"] = duration_ms.count();
    data["error"] = http_internal::ErrorValue(finish.error_json);
    data["exitCode"] = http_internal::OptionalValue(finish.exit_code);
    data["signal"] = http_internal::OptionalValue(finish.signal);
    data["httpStatus"] = http_internal::OptionalValue(finish.http_status);
    return data;
  });
}

void SchedulerEventStream::OnTaskRegistered(std::string_view plugin_id, std::string_view task_id) {
  hub_->Publish(plugin_id, task_id, "task.registered",
                [&] { return Hub::TaskEvent(plugin_id, task_id); });
}

void SchedulerEventStream::OnTaskTriggerRequested(std::string_view plugin_id,
                                                  std::string_view task_id) {
  hub_->BeginTrigger(plugin_id, task_id);
}

void SchedulerEventStream::OnTaskTriggered(std::string_view plugin_id, std::string_view task_id) {
  hub_->EndTrigger(plugin_id, task_id, /*triggered=*/true);
}

void SchedulerEventStream::OnTaskTriggerRefused(std::string_view plugin_id,
                                                std::string_view task_id) {
  hub_->EndTrigger(plugin_id, task_id, /*triggered=*/false);
}

void SchedulerEventStream::OnTaskCancelled(std::string_view plugin_id, std::string_view task_id) {
  hub_->Publish(plugin_id, task_id, "task.cancelled",
                [&] { return Hub::TaskEvent(plugin_id, task_id); });
}

void SchedulerEventStream::OnTaskPaused(std::string_view plugin_id, std::string_view task_id,
                                        const PauseRequest& pause) {
  hub_->Publish(plugin_id, task_id, "task.paused", [&] {
    nlohmann::ordered_json data = Hub::TaskEvent(plugin_id, task_id);
    data["by"] = pause.by;
    data["reason"] = pause.reason;
    data["until"] = pause.until ? nlohmann::ordered_json(http_internal::RunTimeText(*pause.until))
                                : nlohmann::ordered_json(nullptr);
    data["cancelRun"] = pause.cancel_run;
    return data;
  });
}

void SchedulerEventStream::OnTaskResumed(std::string_view plugin_id, std::string_view task_id) {
  hub_->Publish(plugin_id, task_id, "task.resumed",
                [&] { return Hub::TaskEvent(plugin_id, task_id); });
}

void SchedulerEventStream::OnRetryScheduled(const RunInfo& run, int attempt,
                                            std::chrono::milliseconds delay) {
  hub_->Publish(run.plugin_id, run.task_id, "task.retrying", [&] {
    nlohmann::ordered_json data = Hub::TaskEvent(run.plugin_id, run.task_id);
    data["runId"] = run.run_id;
    data["failedAttempt"] = attempt;
    data["delayMs"] = delay.count();
    return data;
  });
}

}  // namespace stagehand
