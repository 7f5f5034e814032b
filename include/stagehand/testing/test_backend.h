// A whole backend inside a test, as Backstage's startTestBackend gives plugin authors: the plugins
// under test start with their real services (config, logger, database, router, lifecycle,
// metrics) except the scheduler, which is a MockScheduler; the HTTP server listens on 127.0.0.1
// on a free port. As with Backstage's mock scheduler, the tasks that are neither manual nor
// initially delayed run once at startup (after every plugin's init, before the plugins' own
// startup hooks); after that nothing runs unless the test triggers it.
//
//   stagehand::testing::TestBackendOptions options;
//   options.plugins.push_back(MakeMyPlugin(state));
//   auto backend = stagehand::testing::StartTestBackend(std::move(options));
//   ASSERT_TRUE(backend.ok());
//   (*backend)->scheduler("my-plugin")->TriggerTask("refresh");
//   auto reply = (*backend)->Get("/api/my-plugin/status");  // reply->status, reply->body
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "stagehand/backend/backend.h"
#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"
#include "stagehand/config/config.h"
#include "stagehand/http/http_message.h"
#include "stagehand/service/mock_scheduler.h"
#include "stagehand/time/clock.h"

namespace stagehand::testing {

struct TestBackendOptions {
  // The plugins to start, in this order.
  std::vector<BackendPlugin> plugins;
  // One mock for every plugin, owned by the test and outliving the backend. When null, each
  // plugin gets a mock of its own (TestBackend::scheduler), made with `mock`.
  MockScheduler* scheduler = nullptr;
  // The options of the mocks the test backend makes (their clock defaults to `clock`).
  MockSchedulerOptions mock;
  // App-config laid over the test defaults: listen on 127.0.0.1, each plugin's database in
  // memory (SQLite ':memory:'), and the auth policy off unless this config has `backend.auth`.
  std::optional<Config> config;
  // Each plugin's database in a SQLite file in a temporary directory, removed with the backend,
  // instead of in memory (config's `backend.database` still wins).
  bool sqlite_files = false;
  // Time for the backend and the mocks; the system clock when null. Must outlive the backend.
  Clock* clock = nullptr;
  // Receives the backend's log; dropped when null.
  std::shared_ptr<Logger> logger;
};

// An HTTP answer from the test backend. A value type.
struct TestResponse {
  int status = 0;
  HttpHeaders headers;  // FindHeader (stagehand/http/http_message.h) looks one up
  std::string body;
};

// A started backend. Destroying it stops the backend (shutdown hooks, the mocks' Shutdown, the
// server) and removes its temporary files. Thread-safe: the HTTP calls may come from any thread.
class TestBackend {
 public:
  ~TestBackend();
  TestBackend(const TestBackend&) = delete;
  TestBackend& operator=(const TestBackend&) = delete;

  // "http://127.0.0.1:<port>".
  std::string base_url() const;
  std::uint16_t port() const;
  Backend& backend();

  // The mock scheduler of `plugin_id` (the shared one when TestBackendOptions::scheduler was
  // set), or null for a plugin that is not running.
  MockScheduler* scheduler(std::string_view plugin_id);
  // The services `plugin_id` received at init, or null. Valid while the backend lives.
  const PluginServices* services(std::string_view plugin_id) const;

  // Sends one request to `path` (e.g. "/api/my-plugin/things?limit=2") and waits up to 30 s for
  // the answer; any HTTP status is an answer. Errors: kUnavailable when none came.
  Result<TestResponse> Send(std::string_view method, std::string_view path,
                            std::string_view body = {},
                            std::string_view content_type = "application/json",
                            const HttpHeaders& headers = {}) const;
  Result<TestResponse> Get(std::string_view path, const HttpHeaders& headers = {}) const;
  // Posts `body` as application/json (an empty body is sent with Content-Length: 0).
  Result<TestResponse> Post(std::string_view path, std::string_view body = {},
                            const HttpHeaders& headers = {}) const;

 private:
  friend Result<std::unique_ptr<TestBackend>> StartTestBackend(TestBackendOptions options);
  TestBackend() = default;

  std::string temp_dir_;  // empty when the databases are in memory
  std::map<std::string, std::unique_ptr<MockScheduler>, std::less<>> own_mocks_;
  MockScheduler* shared_mock_ = nullptr;
  std::map<std::string, PluginServices, std::less<>> services_;
  std::unique_ptr<Backend> backend_;  // destroyed first: it stops before the mocks go
};

// Creates and starts the backend. Errors: kInvalidArgument for bad config or plugin ids (every
// problem listed, as Backend::Create and AddPlugin report them); a plugin's init or startup hook
// failure, or the server not starting, as Backend::Start reports it.
Result<std::unique_ptr<TestBackend>> StartTestBackend(TestBackendOptions options);

}  // namespace stagehand::testing
