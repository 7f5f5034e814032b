// The live event stream over a real HttpServer on 127.0.0.1: the events of a PluginScheduler's
// runs, a trigger before its run, keepalives on the clock, auth, the end of streams, a client that
// stops reading, and a client that reconnects naming the last event it got.
#include "stagehand/http/event_stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "stagehand/base/host_name.h"
#include "stagehand/http/auth.h"
#include "stagehand/http/http_server.h"
#include "stagehand/service/plugin_scheduler.h"
#include "stagehand/store/memory_task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/manual_clock.h"
#include "stagehand/time/time_zone.h"
#include "unit/http/loopback_client.h"
#include "unit/service/task_probe.h"

namespace stagehand {
namespace {

using http_testing::Client;
using http_testing::Get;
using service_testing::TaskProbe;
using ::stagehand::testing::IsOk;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kToken = "s3cret";
constexpr const char* kSubscribe =
    "GET /.stagehand/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n\r\n";

// One server-sent event.
struct Event {
  std::string id;
  std::string name;
  nlohmann::json data;
};

// Returns the events in `raw` (a response as read off the wire): its chunked body decoded, then
// split into messages; comments are left out.
std::vector<Event> EventsIn(const std::string& raw) {
  std::string body;
  std::size_t pos = raw.find("\r\n\r\n");
  if (pos == std::string::npos) return {};
  pos += 4;
  while (pos < raw.size()) {
    const std::size_t line_end = raw.find("\r\n", pos);
    if (line_end == std::string::npos) break;
    const std::size_t size = std::stoul(raw.substr(pos, line_end - pos), nullptr, 16);
    if (size == 0 || line_end + 2 + size > raw.size()) break;
    body += raw.substr(line_end + 2, size);
    pos = line_end + 2 + size + 2;
  }
  std::vector<Event> events;
  std::size_t start = 0;
  for (std::size_t end = body.find("\n\n"); end != std::string::npos;
       start = end + 2, end = body.find("\n\n", start)) {
    const std::string message = body.substr(start, end - start + 1);
    if (message.starts_with(":")) continue;
    Event event;
    std::size_t line_start = 0;
    for (std::size_t line_end = message.find('\n'); line_end != std::string::npos;
         line_start = line_end + 1, line_end = message.find('\n', line_start)) {
      const std::string line = message.substr(line_start, line_end - line_start);
      if (line.starts_with("id: ")) event.id = line.substr(4);
      if (line.starts_with("event: ")) event.name = line.substr(7);
      if (line.starts_with("data: ")) event.data = nlohmann::json::parse(line.substr(6));
    }
    events.push_back(std::move(event));
  }
  return events;
}

std::vector<std::string> NamesOf(const std::vector<Event>& events) {
  std::vector<std::string> names;
  for (const Event& event : events) names.push_back(event.name);
  return names;
}

class EventStreamTest : public ::testing::Test {
 protected:
  EventStreamTest() { Serve(HttpServerOptions{}); }

  ~EventStreamTest() override {
    if (scheduler_) scheduler_->Shutdown();
    server_->Stop();
  }

  // (Re)starts the server with `options` (on a free port), the stream mounted behind the token.
  void Serve(HttpServerOptions options) {
    if (server_) server_->Stop();
    options.port = 0;
    server_ = std::make_unique<HttpServer>(std::move(options));
    server_->Mount("/.stagehand/v1/events",
                   RequireBearerToken(events_->AsHandler(), {StaticAccessToken{kToken, "test"}}));
    ASSERT_THAT(server_->Start(), IsOk());
  }

  // Connects a client and waits until it is subscribed.
  std::unique_ptr<Client> Subscribe(int receive_buffer_bytes = 0) {
    auto client = std::make_unique<Client>(server_->port(), receive_buffer_bytes);
    EXPECT_TRUE(client->Send(kSubscribe));
    EXPECT_THAT(client->ReadUntil(": connected\n\n"), HasSubstr(": connected\n\n"));
    return client;
  }

  // Connects a client to `target` with `headers` (each ending in CRLF) and reads until `until`.
  std::unique_ptr<Client> Reconnect(const std::string& target, const std::string& headers,
                                    std::string_view until, std::string* raw) {
    auto client = std::make_unique<Client>(server_->port());
    EXPECT_TRUE(client->Send("GET " + target + " HTTP/1.1\r\nHost: x\r\n" +
                             "Authorization: Bearer s3cret\r\n" + headers + "\r\n"));
    *raw = client->ReadUntil(until);
    return client;
  }

  // Replaces the stream with one made with `options` (clock, host and name as the fixture's).
  void UseStream(EventStreamOptions options) {
    options.clock = &clock_;
    options.host = "web-1";
    options.stream_name = "s1";
    events_ = std::make_shared<SchedulerEventStream>(std::move(options));
    Serve(HttpServerOptions{});
  }

  void StartScheduler() {
    PluginSchedulerOptions options;
    options.plugin_id = "jobs";
    options.store = store_;
    options.clock = &clock_;
    options.observer = events_;
    options.default_zone = TimeZone::Utc();
    scheduler_ = std::make_unique<PluginScheduler>(std::move(options));
  }

  // Declared first so that it outlives every thread waiting on it.
  testing::ManualClock clock_;
  std::shared_ptr<testing::MemoryTaskStore> store_ =
      std::make_shared<testing::MemoryTaskStore>("jobs", clock_);
  std::shared_ptr<SchedulerEventStream> events_ = [this] {
    EventStreamOptions options;
    options.clock = &clock_;
    options.host = "web-1";
    options.stream_name = "s1";
    return std::make_shared<SchedulerEventStream>(std::move(options));
  }();
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<PluginScheduler> scheduler_;
};

TEST_F(EventStreamTest, ARunsEventsArriveWithTheirFields) {
  StartScheduler();
  auto client = Subscribe();
  auto probe = std::make_shared<TaskProbe>();
  TaskDefinition task;
  task.id = "report";
  task.frequency = ManualFrequency{};
  task.timeout = std::chrono::minutes(1);
  task.fn = probe->Returning(InternalError("exit status 3"));
  ASSERT_THAT(scheduler_->ScheduleTask(std::move(task)), IsOk());
  ASSERT_THAT(scheduler_->TriggerTask("report"), IsOk());

  const std::string raw = client->ReadUntil(R"("httpStatus":null})"
                                            "\n\n");
  const std::vector<Event> events = EventsIn(raw);
  ASSERT_EQ(events.size(), 4U) << raw;
  EXPECT_THAT(NamesOf(events),
              ElementsAre("task.registered", "task.triggered", "run.started", "run.ended"));
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].id, "s1-" + std::to_string(i + 1));
  }

  EXPECT_EQ(events[0].data, nlohmann::json::parse(R"({"pluginId":"jobs","taskId":"report"})"));
  for (const Event& event : events) {
    if (event.name == "task.triggered") {
      EXPECT_EQ(event.data, nlohmann::json::parse(R"({"pluginId":"jobs","taskId":"report"})"));
    }
    if (event.name != "run.started") continue;
    EXPECT_EQ(event.data["pluginId"], "jobs");
    EXPECT_EQ(event.data["taskId"], "report");
    EXPECT_EQ(event.data["host"], "web-1");
    EXPECT_EQ(event.data["trigger"], "manual");
    EXPECT_EQ(event.data["attempt"], 1);
    EXPECT_EQ(event.data["scope"], "global");
    EXPECT_EQ(event.data["startedAt"], "2026-01-01T00:00:00.000Z");
    EXPECT_EQ(event.data.size(), 8U);
  }
  nlohmann::json started;
  nlohmann::json ended;
  for (const Event& event : events) {
    if (event.name == "run.started") started = event.data;
    if (event.name == "run.ended") ended = event.data;
  }
  EXPECT_EQ(ended["runId"], started["runId"]);
  for (const char* key :
       {"pluginId", "taskId", "host", "trigger", "attempt", "scope", "startedAt"}) {
    EXPECT_EQ(ended[key], started[key]) << key;
  }
  EXPECT_EQ(ended["outcome"], "failed");
  EXPECT_EQ(ended["durationMs"], 0);
  EXPECT_EQ(ended["endedAt"], "2026-01-01T00:00:00.000Z");
  EXPECT_EQ(ended["error"], nlohmann::json::parse(R"({"name":"Error","message":"exit status 3"})"));
  EXPECT_EQ(ended["exitCode"], nullptr);
  EXPECT_EQ(ended["signal"], nullptr);
  EXPECT_EQ(ended["httpStatus"], nullptr);
  Result<RunPage> page = scheduler_->GetTaskRuns("report", 1, std::nullopt);
  ASSERT_THAT(page, IsOk());
  ASSERT_EQ(page->runs.size(), 1U);
  EXPECT_EQ(ended["runId"], page->runs[0].run_id);
}

TEST_F(EventStreamTest, TriggersCancelsAndRegistrationsOfEveryPluginArrive) {
  auto client = Subscribe();
  events_->OnTaskRegistered("jobs", "a");
  events_->OnTaskTriggered("other", "b");
  events_->OnTaskCancelled("jobs", "c\"d");

  const std::vector<Event> events = EventsIn(client->ReadUntil(R"("taskId":"c\"d"})"
                                                               "\n\n"));
  ASSERT_EQ(events.size(), 3U);
  EXPECT_THAT(NamesOf(events), ElementsAre("task.registered", "task.triggered", "task.cancelled"));
  EXPECT_EQ(events[1].data, nlohmann::json::parse(R"({"pluginId":"other","taskId":"b"})"));
  EXPECT_EQ(events[2].data["taskId"], "c\"d");
}

TEST_F(EventStreamTest, PausesResumesAndRetriesArrive) {
  auto client = Subscribe();
  PauseRequest pause{"alice", "deploy", std::nullopt};
  pause.cancel_run = true;
  events_->OnTaskPaused("jobs", "a", pause);
  events_->OnTaskResumed("jobs", "a");
  RunInfo run;
  run.plugin_id = "jobs";
  run.task_id = "b";
  run.run_id = "run-9";
  events_->OnRetryScheduled(run, 2, std::chrono::milliseconds(1500));

  const std::vector<Event> events = EventsIn(client->ReadUntil(R"("delayMs":1500})"
                                                               "\n\n"));
  ASSERT_EQ(events.size(), 3U);
  EXPECT_THAT(NamesOf(events), ElementsAre("task.paused", "task.resumed", "task.retrying"));
  EXPECT_EQ(events[0].data,
            nlohmann::json::parse(R"({"pluginId":"jobs","taskId":"a","by":"alice",)"
                                  R"("reason":"deploy","until":null,"cancelRun":true})"));
  EXPECT_EQ(events[2].data,
            nlohmann::json::parse(R"({"pluginId":"jobs","taskId":"b","runId":"run-9",)"
                                  R"("failedAttempt":2,"delayMs":1500})"));
}

TEST_F(EventStreamTest, ARunsEndNamesTheStartItsStartAnnounced) {
  auto client = Subscribe();
  RunInfo run;
  run.plugin_id = "jobs";
  run.task_id = "sync";
  run.scope = TaskScope::kLocal;
  run.run_id = "run-1";
  run.trigger = RunTrigger::kCatchUp;
  run.attempt = 2;
  events_->OnRunStarted(run, std::chrono::nanoseconds(0));
  clock_.Advance(std::chrono::milliseconds(2500));
  RunFinish finish;
  finish.outcome = RunOutcome::kTimedOut;
  finish.error_json = R"({"name":"Error","message":"timed out after 2s"})";
  finish.http_status = 504;
  // The duration is the run's own (monotonic), whatever the wall clock did meanwhile.
  events_->OnRunFinished(run, finish, std::chrono::milliseconds(2000));

  const std::vector<Event> events = EventsIn(client->ReadUntil(R"("httpStatus":504})"
                                                               "\n\n"));
  ASSERT_EQ(events.size(), 2U);
  EXPECT_EQ(events[0].data,
            nlohmann::json::parse(R"({"pluginId":"jobs","taskId":"sync","runId":"run-1",)"
                                  R"("host":"web-1","trigger":"catch_up","attempt":2,)"
                                  R"("scope":"local","startedAt":"2026-01-01T00:00:00.000Z"})"));
  EXPECT_EQ(events[1].data,
            nlohmann::json::parse(
                R"({"pluginId":"jobs","taskId":"sync","runId":"run-1","host":"web-1",)"
                R"("trigger":"catch_up","attempt":2,"scope":"local",)"
                R"("startedAt":"2026-01-01T00:00:00.000Z","endedAt":"2026-01-01T00:00:02.500Z",)"
                R"("outcome":"timed_out","durationMs":2000,)"
                R"("error":{"name":"Error","message":"timed out after 2s"},"exitCode":null,)"
                R"("signal":null,"httpStatus":504})"));
  EXPECT_THAT(client->ReadUntil("\n\n"), HasSubstr(R"("endedAt":"2026-01-01T00:00:02.500Z",)"
                                                   R"("outcome":"timed_out")"));
}

TEST_F(EventStreamTest, AKeepaliveCommentIsSentEveryInterval) {
  events_->Start();
  auto client = Subscribe();
  ASSERT_TRUE(clock_.BlockUntilWaiters(1));
  EXPECT_EQ(clock_.NextDeadline(), clock_.MonoNow() + std::chrono::seconds(15));

  clock_.Advance(std::chrono::seconds(15));
  EXPECT_THAT(client->ReadUntil(": keepalive\n\n"), HasSubstr(": keepalive\n\n"));
  ASSERT_TRUE(clock_.BlockUntilWaiters(1));
  clock_.Advance(std::chrono::seconds(15));
  EXPECT_TRUE(client->Consume(": keepalive\n\n"));
  EXPECT_TRUE(client->Consume(": keepalive\n\n"));
  events_->Stop();
  EXPECT_EQ(clock_.NumWaiters(), 0U);
}

TEST_F(EventStreamTest, TheStreamNeedsTheToken) {
  const auto refused = [&](const std::string& authorization) {
    return http_testing::Exchange(
        server_->port(), "GET /.stagehand/v1/events HTTP/1.1\r\nHost: x\r\n" + authorization +
                             "Connection: close\r\n\r\n");
  };
  const http_testing::RawResponse anonymous = refused("");
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_THAT(anonymous.body,
              HasSubstr(R"({"name":"AuthenticationError","message":"Missing credentials"})"));
  const http_testing::RawResponse wrong = refused("Authorization: Bearer wrong\r\n");
  EXPECT_EQ(wrong.status, 401);
  EXPECT_THAT(wrong.body, HasSubstr("Illegal token"));
  EXPECT_EQ(events_->client_count(), 0U);

  auto client = Subscribe();
  EXPECT_THAT(client->ReadUntil("\r\n\r\n"), HasSubstr("Content-Type: text/event-stream"));
  EXPECT_EQ(events_->client_count(), 1U);
}

TEST_F(EventStreamTest, OnlyTheMountItselfIsAStream) {
  const auto status = [&](const std::string& request) {
    return http_testing::Exchange(server_->port(),
                                  request +
                                      " HTTP/1.1\r\nHost: x\r\n"
                                      "Authorization: Bearer s3cret\r\n"
                                      "Connection: close\r\nContent-Length: 0\r\n\r\n")
        .status;
  };
  EXPECT_EQ(status("POST /.stagehand/v1/events"), 404);
  EXPECT_EQ(status("GET /.stagehand/v1/events/x"), 404);
  EXPECT_EQ(status("HEAD /.stagehand/v1/events"), 200);
  EXPECT_EQ(events_->client_count(), 0U);
}

TEST_F(EventStreamTest, StopEndsEveryStreamAndLaterOnesAtOnce) {
  auto first = Subscribe();
  auto second = Subscribe();
  EXPECT_EQ(events_->client_count(), 2U);

  events_->Stop();
  EXPECT_EQ(events_->client_count(), 0U);
  EXPECT_THAT(first->ReadUntil("0\r\n\r\n"), HasSubstr("0\r\n\r\n"));
  EXPECT_TRUE(first->ClosedByServer());
  EXPECT_TRUE(second->ClosedByServer());
  auto late = Subscribe();
  EXPECT_TRUE(late->ClosedByServer());
  EXPECT_EQ(events_->client_count(), 0U);
}

TEST_F(EventStreamTest, AClientThatStopsReadingIsDroppedWithoutStallingTheOthers) {
  HttpServerOptions options;
  options.max_stream_backlog_bytes = 64 * 1024;
  Serve(options);
  auto stalled = Subscribe(/*receive_buffer_bytes=*/4096);
  auto reader = Subscribe();
  ASSERT_EQ(events_->client_count(), 2U);

  // Each event is published once the reader has the one before, so the reader never falls
  // behind; the stalled client's kernel buffers and then its backlog fill up.
  const std::string big(16 * 1024, 'x');
  int published = 0;
  while (events_->client_count() == 2 && published < 20000) {
    events_->OnTaskTriggered("jobs", big);
    ++published;
    ASSERT_TRUE(reader->Consume("id: s1-" + std::to_string(published) + "\n"));
  }
  EXPECT_EQ(events_->client_count(), 1U);
  EXPECT_LT(published, 20000);
  EXPECT_TRUE(stalled->ClosedByServer());

  events_->OnTaskTriggered("jobs", "after");
  EXPECT_TRUE(reader->Consume(
      "id: s1-" + std::to_string(published + 1) +
      "\nevent: task.triggered\ndata: {\"pluginId\":\"jobs\",\"taskId\":\"after\"}"));
}

// Issue 16: task.triggered could arrive after the run.started of the run it caused, when the
// engine started the run before TriggerTask returned. The run's events now wait for the trigger.
TEST_F(EventStreamTest, ATriggerComesBeforeTheRunItStartsEvenWhenTheRunStartsFirst) {
  auto client = Subscribe();
  RunInfo run;
  run.plugin_id = "jobs";
  run.task_id = "report";
  run.run_id = "run-1";
  run.trigger = RunTrigger::kManual;
  events_->OnTaskTriggerRequested("jobs", "report");
  events_->OnRunStarted(run, std::chrono::nanoseconds(0));
  events_->OnTaskCancelled("jobs", "other");
  events_->OnTaskTriggered("jobs", "report");
  events_->OnRunFinished(run, RunFinish{}, std::chrono::milliseconds(5));
  // A refused trigger sends nothing and lets the task's events go.
  events_->OnTaskTriggerRequested("jobs", "report");
  events_->OnTaskRegistered("jobs", "report");
  events_->OnTaskTriggerRefused("jobs", "report");

  const std::vector<Event> events = EventsIn(client->ReadUntil("event: task.registered"));
  EXPECT_THAT(NamesOf(events), ElementsAre("task.cancelled", "task.triggered", "run.started",
                                           "run.ended", "task.registered"));
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].id, "s1-" + std::to_string(i + 1));
  }
}

TEST_F(EventStreamTest, TwoTriggersOfATaskHoldItsEventsUntilBothEnded) {
  auto client = Subscribe();
  events_->OnTaskTriggerRequested("jobs", "report");
  events_->OnTaskTriggerRequested("jobs", "report");
  events_->OnTaskTriggered("jobs", "report");
  events_->OnTaskCancelled("jobs", "report");
  events_->OnTaskTriggerRefused("jobs", "report");
  events_->OnTaskRegistered("jobs", "last");
  const std::vector<Event> events = EventsIn(client->ReadUntil("event: task.registered"));
  EXPECT_THAT(NamesOf(events), ElementsAre("task.triggered", "task.cancelled", "task.registered"));
}

// A reconnect used to lose what happened while the client was away.
TEST_F(EventStreamTest, AReconnectNamingTheLastEventGetsWhatItMissedThenTheLiveOnes) {
  auto first = Subscribe();
  for (const char* task : {"a", "b", "c"}) events_->OnTaskRegistered("jobs", task);
  ASSERT_EQ(EventsIn(first->ReadUntil(R"("taskId":"c"})")).size(), 3U);
  first.reset();
  events_->OnTaskRegistered("jobs", "d");
  events_->OnTaskRegistered("jobs", "e");

  std::string raw;
  auto again =
      Reconnect("/.stagehand/v1/events", "Last-Event-ID: s1-3\r\n", R"("taskId":"e"})", &raw);
  events_->OnTaskRegistered("jobs", "f");
  raw = again->ReadUntil(R"("taskId":"f"})");
  std::vector<Event> events = EventsIn(raw);
  ASSERT_EQ(events.size(), 3U) << raw;
  EXPECT_EQ(events[0].id, "s1-4");
  EXPECT_EQ(events[0].data["taskId"], "d");
  EXPECT_EQ(events[1].id, "s1-5");
  EXPECT_EQ(events[2].id, "s1-6");
  EXPECT_EQ(events[2].data["taskId"], "f");

  // The query parameter, for clients that cannot set headers; the header wins over it.
  auto by_query = Reconnect("/.stagehand/v1/events?lastEventId=s1-5", "", R"("taskId":"f"})", &raw);
  events = EventsIn(raw);
  ASSERT_EQ(events.size(), 1U) << raw;
  EXPECT_EQ(events[0].id, "s1-6");
  auto both = Reconnect("/.stagehand/v1/events?lastEventId=s1-1", "Last-Event-ID: s1-4\r\n",
                        R"("taskId":"f"})", &raw);
  EXPECT_THAT(NamesOf(EventsIn(raw)), ElementsAre("task.registered", "task.registered"));

  // Up to date: nothing to send until the next event.
  auto current =
      Reconnect("/.stagehand/v1/events", "Last-Event-ID: s1-6\r\n", ": connected\n\n", &raw);
  events_->OnTaskRegistered("jobs", "g");
  events = EventsIn(current->ReadUntil(R"("taskId":"g"})"));
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].id, "s1-7");
}

TEST_F(EventStreamTest, AnIdOfAnotherStreamOrNoLongerKeptGetsAReset) {
  EventStreamOptions options;
  options.replay_events = 3;
  options.replay_window = std::chrono::minutes(5);
  UseStream(options);
  auto first = Subscribe();
  for (const char* task : {"a", "b", "c", "d", "e"}) events_->OnTaskRegistered("jobs", task);
  ASSERT_EQ(EventsIn(first->ReadUntil(R"("taskId":"e"})")).size(), 5U);

  const auto reset_for = [&](const std::string& headers, const std::string& target) {
    std::string raw;
    auto client = Reconnect(target, headers, "event: reset\ndata: ", &raw);
    raw = client->ReadUntil("}\n\n");
    return EventsIn(raw);
  };
  // Events 3 to 5 are kept: a client that got 1 missed 2, which is gone.
  std::vector<Event> events = reset_for("Last-Event-ID: s1-1\r\n", "/.stagehand/v1/events");
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].name, "reset");
  EXPECT_EQ(events[0].id, "s1-5");
  EXPECT_EQ(events[0].data, nlohmann::json::parse(R"({"reason":"expired","lastEventId":"s1-1"})"));
  for (const char* unknown : {"zz-3", "s1-9", "s1-", "s1-x", "3"}) {
    events = reset_for(std::string("Last-Event-ID: ") + unknown + "\r\n", "/.stagehand/v1/events");
    ASSERT_EQ(events.size(), 1U) << unknown;
    EXPECT_EQ(events[0].id, "s1-5") << unknown;
    EXPECT_EQ(events[0].data["reason"], "unknown") << unknown;
    EXPECT_EQ(events[0].data["lastEventId"], unknown);
  }
  events = reset_for("", "/.stagehand/v1/events?lastEventId=%ZZ");
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].data["reason"], "unknown");

  std::string raw;
  auto kept =
      Reconnect("/.stagehand/v1/events", "Last-Event-ID: s1-2\r\n", R"("taskId":"e"})", &raw);
  EXPECT_EQ(EventsIn(raw).size(), 3U) << raw;

  // Past the window nothing is kept: only a client that had everything needs no reset.
  clock_.Advance(std::chrono::minutes(5) + std::chrono::milliseconds(1));
  events = reset_for("Last-Event-ID: s1-4\r\n", "/.stagehand/v1/events");
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].data["reason"], "expired");
  auto current =
      Reconnect("/.stagehand/v1/events", "Last-Event-ID: s1-5\r\n", ": connected\n\n", &raw);
  events_->OnTaskRegistered("jobs", "f");
  events = EventsIn(current->ReadUntil(R"("taskId":"f"})"));
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].id, "s1-6");
}

TEST_F(EventStreamTest, EventsBeforeTheFirstClientAreNeitherSentNorNumbered) {
  events_->OnTaskRegistered("jobs", "early");
  std::string raw;
  auto client =
      Reconnect("/.stagehand/v1/events", "Last-Event-ID: s1-0\r\n", ": connected\n\n", &raw);
  events_->OnTaskRegistered("jobs", "late");
  const std::vector<Event> events = EventsIn(client->ReadUntil(R"("taskId":"late"})"));
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].id, "s1-1");
  EXPECT_EQ(events[0].data["taskId"], "late");
}

}  // namespace
}  // namespace stagehand
