#include "stagehand/http/event_stream.h"

#include <fmt/format.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <stop_token>
#include <thread>
#include <utility>
#include <vector>

#include "http/path_match.h"
#include "http/run_json.h"
#include "stagehand/base/host_name.h"
#include "stagehand/model/schedule.h"

namespace stagehand {

using Writers = std::vector<std::shared_ptr<HttpBodyWriter>>;

// The state shared by the stream, its handler and its writers' close callbacks, any of which may
// outlive the others.
struct SchedulerEventStream::Hub {
  explicit Hub(EventStreamOptions opts)
      : options(std::move(opts)),
        clock(options.clock != nullptr ? *options.clock : SystemClock::Instance()),
        host(options.host.empty() ? LocalHostName() : options.host) {}

  // Returns the subscribed writers as they are now.
  std::shared_ptr<const Writers> Snapshot() const {
    std::lock_guard lock(clients_mu);
    return clients;
  }

  // Subscribes `writer`, or ends it at once after Stop. I/O thread: quick.
  static void Subscribe(const std::shared_ptr<Hub>& hub,
                        const std::shared_ptr<HttpBodyWriter>& writer) {
    if (!writer->Write(": connected\n\n")) {
      return;
    }
    {
      std::lock_guard lock(hub->clients_mu);
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
      std::lock_guard lock(hub->clients_mu);
      stopped = hub->stopped;
    }
    if (stopped) {
      writer->Close();
    }
  }

  void Unsubscribe(const HttpBodyWriter* writer) {
    std::lock_guard lock(clients_mu);
    auto next = std::make_shared<Writers>();
    next->reserve(clients->size());
    for (const auto& client : *clients) {
      if (client.get() != writer) {
        next->push_back(client);
      }
    }
    clients = std::move(next);
  }

  // Sends event `name` with the data `make_data()` returns to every client; builds nothing when
  // there is none.
  template <typename MakeData>
  void Publish(std::string_view name, MakeData make_data) {
    if (Snapshot()->empty()) {
      return;
    }
    const std::string data = http_internal::DumpJson(make_data());
    // Under publish_mu, so that every client sees the events in the order of their ids. Never
    // held with clients_mu: a failing Write unsubscribes its client on this thread.
    std::lock_guard lock(publish_mu);
    const std::string message =
        fmt::format("id: {}\nevent: {}\ndata: {}\n\n", next_id++, name, data);
    // Held here: a Write that fails unsubscribes its client, which replaces the list.
    const std::shared_ptr<const Writers> writers = Snapshot();
    for (const auto& writer : *writers) {
      writer->Write(message);
    }
  }

  nlohmann::ordered_json TaskEvent(std::string_view plugin_id, std::string_view task_id) const {
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
    std::unique_lock lock(wait_mu);
    while (!stop.stop_requested()) {
      const MonoTime next = clock.MonoNow() + options.keepalive_interval;
      if (clock.WaitUntil(lock, wait_cv, next, stop, [] { return false; }) ||
          stop.stop_requested()) {
        continue;
      }
      lock.unlock();
      const std::shared_ptr<const Writers> writers = Snapshot();
      for (const auto& writer : *writers) {
        writer->Write(": keepalive\n\n");
      }
      lock.lock();
    }
  }

  const EventStreamOptions options;
  Clock& clock;
  const std::string host;

  mutable std::mutex clients_mu;
  std::shared_ptr<const Writers> clients = std::make_shared<Writers>();  // guarded by clients_mu
  bool stopped = false;                                                  // guarded by clients_mu

  std::mutex publish_mu;
  std::uint64_t next_id = 1;  // guarded by publish_mu

  // When each run still going started, by run id, so that its run.ended names the same start as
  // its run.started.
  std::mutex starts_mu;
  std::map<std::string, WallTime, std::less<>> starts;  // guarded by starts_mu

  std::mutex lifecycle_mu;
  std::jthread keepalive;  // guarded by lifecycle_mu
  std::mutex wait_mu;
  std::condition_variable_any wait_cv;
};

SchedulerEventStream::SchedulerEventStream(EventStreamOptions options)
    : hub_(std::make_shared<Hub>(std::move(options))) {}

SchedulerEventStream::~SchedulerEventStream() { Stop(); }

void SchedulerEventStream::Start() {
  std::lock_guard lock(hub_->lifecycle_mu);
  if (hub_->keepalive.joinable()) {
    return;
  }
  {
    std::lock_guard clients_lock(hub_->clients_mu);
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
    std::lock_guard lock(hub_->clients_mu);
    hub_->stopped = true;
    clients = std::exchange(hub_->clients, std::make_shared<Writers>());
  }
  for (const auto& writer : *clients) {
    writer->Close();
  }
  std::jthread keepalive;  // requested to stop and joined as it goes out of scope
  std::lock_guard lock(hub_->lifecycle_mu);
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
    response.stream = [hub](const std::shared_ptr<HttpBodyWriter>& writer) {
      Hub::Subscribe(hub, writer);
    };
    return response;
  };
}

std::size_t SchedulerEventStream::client_count() const { return hub_->Snapshot()->size(); }

void SchedulerEventStream::OnRunStarted(const RunInfo& run, std::chrono::nanoseconds /*lag*/) {
  const WallTime started_at = hub_->clock.Now();
  {
    std::lock_guard lock(hub_->starts_mu);
    hub_->starts.insert_or_assign(std::string(run.run_id), started_at);
  }
  hub_->Publish("run.started", [&] { return hub_->RunEvent(run, started_at); });
}

void SchedulerEventStream::OnRunFinished(const RunInfo& run, const RunFinish& finish,
                                         std::chrono::nanoseconds duration) {
  const WallTime ended_at = hub_->clock.Now();
  const auto duration_ms = std::chrono::floor<std::chrono::milliseconds>(duration);
  WallTime started_at = ended_at - duration_ms;
  {
    std::lock_guard lock(hub_->starts_mu);
    if (auto it = hub_->starts.find(run.run_id); it != hub_->starts.end()) {
      started_at = it->second;
      hub_->starts.erase(it);
    }
  }
  hub_->Publish("run.ended", [&] {
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
  hub_->Publish("task.registered", [&] { return hub_->TaskEvent(plugin_id, task_id); });
}

void SchedulerEventStream::OnTaskTriggered(std::string_view plugin_id, std::string_view task_id) {
  hub_->Publish("task.triggered", [&] { return hub_->TaskEvent(plugin_id, task_id); });
}

void SchedulerEventStream::OnTaskCancelled(std::string_view plugin_id, std::string_view task_id) {
  hub_->Publish("task.cancelled", [&] { return hub_->TaskEvent(plugin_id, task_id); });
}

}  // namespace stagehand
