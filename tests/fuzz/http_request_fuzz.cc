// libFuzzer target for what a client's bytes reach: the server's request parser (RequestReader,
// fed in pieces of a size taken from the first input byte, as a socket delivers them) and, for
// every request it completes, the scheduler REST routes and the run history routes with their id
// and query decoding. Nothing may
// crash; a refusal must be one of the statuses the server answers; the bytes held back while a
// head is incomplete stay within the head limit (so a connection's memory is bounded); every
// routed answer is a valid status with Backstage's JSON or an empty body.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "http/request_reader.h"
#include "stagehand/http/run_history_router.h"
#include "stagehand/http/scheduler_router.h"
#include "stagehand/service/mock_scheduler.h"

namespace {

using stagehand::http_internal::RequestLimits;
using stagehand::http_internal::RequestReader;

void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "http_request_fuzz: %s\n", what);
    std::abort();
  }
}

constexpr RequestLimits kLimits = {2048, 1024, 32, 4096};

// A scheduler with one manual task, "a/b", that has run once, for the routes to find.
stagehand::testing::MockScheduler& Scheduler() {
  static auto* scheduler = [] {
    auto* mock = new stagehand::testing::MockScheduler();
    stagehand::TaskDefinition task;
    task.id = "a/b";
    task.frequency = stagehand::ManualFrequency{};
    task.timeout = std::chrono::minutes(1);
    task.fn = [](const std::stop_token&) {};
    Require(mock->ScheduleTask(std::move(task)).ok(), "scheduling the fuzz task failed");
    Require(mock->TriggerTask("a/b").ok(), "running the fuzz task failed");
    return mock;
  }();
  return *scheduler;
}

stagehand::SchedulerRestRouter& Router() {
  static auto* router = new stagehand::SchedulerRestRouter("fuzz", Scheduler());
  return *router;
}

stagehand::RunHistoryRouter& RunRouter() {
  static auto* router = new stagehand::RunHistoryRouter("fuzz", Scheduler());
  return *router;
}

void Route(const stagehand::HttpRequest& request) {
  std::optional<stagehand::HttpResponse> response = Router().Handle(request);
  if (!response) {
    response = RunRouter().Handle(request);
  }
  if (!response) {
    return;
  }
  Require(response->status >= 200 && response->status < 600, "routed status out of range");
  Require(response->body.empty() || response->body.front() == '{', "routed body is not JSON");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const std::size_t step = 1 + data[0] % 97;
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): libFuzzer's bytes.
  const std::string_view wire(reinterpret_cast<const char*>(data + 1), size - 1);
  RequestReader reader(kLimits);
  std::string pending;
  std::size_t next = 0;
  while (next < wire.size()) {
    pending.append(wire.substr(next, step));
    next += step;
    for (;;) {
      pending.erase(0, reader.Feed(pending));
      if (reader.state() == RequestReader::State::kComplete) {
        Require(reader.request().body.size() <= kLimits.max_body_bytes, "body above the limit");
        Route(reader.request());
        reader.Next();
        continue;
      }
      break;
    }
    if (reader.state() == RequestReader::State::kRefused) {
      const int status = reader.refused_status();
      Require(status == 400 || status == 411 || status == 413 || status == 414 || status == 431,
              "refused with an unexpected status");
      return 0;
    }
    Require(pending.size() < kLimits.max_head_bytes + step, "held back more than a head");
  }
  return 0;
}
