#include "stagehand/testing/test_backend.h"

#include <fmt/format.h>
#include <httplib.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <utility>

namespace stagehand::testing {
namespace {

constexpr char kListenHost[] = "127.0.0.1";
constexpr int kTimeoutSeconds = 30;

// The test defaults under the caller's config: loopback, databases in memory or in `directory`,
// and the auth policy off unless the caller's config speaks of auth.
Result<Config> TestConfig(const std::optional<Config>& extra, const std::string& directory) {
  const bool auth_configured = extra && extra->Has("backend.auth");
  std::string yaml = fmt::format("backend:\n  listen:\n    host: {}\n", kListenHost);
  yaml += "  database:\n    client: better-sqlite3\n";
  yaml += directory.empty() ? "    connection: ':memory:'\n"
                            : fmt::format("    connection:\n      directory: '{}'\n", directory);
  if (!auth_configured) yaml += "  auth:\n    dangerouslyDisableDefaultAuthPolicy: true\n";
  STAGEHAND_ASSIGN_OR_RETURN(Config defaults, Config::FromYaml(yaml, "test backend defaults"));
  if (!extra) return defaults;
  return Config::Merge({std::move(defaults), *extra});
}

Result<std::string> MakeTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                        "/stagehand-test-backend.XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    return UnavailableError(
        fmt::format("cannot create a temporary directory {}: {}", pattern, std::strerror(errno)));
  }
  return pattern;
}

}  // namespace

TestBackend::~TestBackend() {
  if (backend_) backend_->Stop();
  backend_.reset();
  if (!temp_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(temp_dir_, ignored);
  }
}

std::string TestBackend::base_url() const {
  return fmt::format("http://{}:{}", kListenHost, backend_->port());
}

std::uint16_t TestBackend::port() const { return backend_->port(); }

Backend& TestBackend::backend() { return *backend_; }

MockScheduler* TestBackend::scheduler(std::string_view plugin_id) {
  if (services_.find(plugin_id) == services_.end()) return nullptr;
  if (shared_mock_ != nullptr) return shared_mock_;
  auto mock = own_mocks_.find(plugin_id);
  return mock == own_mocks_.end() ? nullptr : mock->second.get();
}

const PluginServices* TestBackend::services(std::string_view plugin_id) const {
  auto found = services_.find(plugin_id);
  return found == services_.end() ? nullptr : &found->second;
}

Result<TestResponse> TestBackend::Send(std::string_view method, std::string_view path,
                                       std::string_view body, std::string_view content_type,
                                       const HttpHeaders& headers) const {
  httplib::Client client(kListenHost, backend_->port());
  client.set_connection_timeout(kTimeoutSeconds, 0);
  client.set_read_timeout(kTimeoutSeconds, 0);
  client.set_write_timeout(kTimeoutSeconds, 0);
  httplib::Request request;
  request.method = std::string(method);
  request.path = std::string(path);
  for (const auto& [name, value] : headers) request.headers.emplace(name, value);
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    request.body = std::string(body);
    request.headers.emplace("Content-Type", std::string(content_type));
  }
  httplib::Result result = client.send(request);
  if (!result) {
    return UnavailableError(fmt::format("{} {}{}: no answer ({})", method, base_url(), path,
                                        httplib::to_string(result.error())));
  }
  TestResponse response;
  response.status = result->status;
  for (const auto& [name, value] : result->headers) response.headers.emplace_back(name, value);
  response.body = result->body;
  return response;
}

Result<TestResponse> TestBackend::Get(std::string_view path, const HttpHeaders& headers) const {
  return Send("GET", path, {}, "application/json", headers);
}

Result<TestResponse> TestBackend::Post(std::string_view path, std::string_view body,
                                       const HttpHeaders& headers) const {
  return Send("POST", path, body, "application/json", headers);
}

Result<std::unique_ptr<TestBackend>> StartTestBackend(TestBackendOptions options) {
  std::unique_ptr<TestBackend> test(new TestBackend());
  if (options.sqlite_files) {
    STAGEHAND_ASSIGN_OR_RETURN(test->temp_dir_, MakeTempDir());
  }
  STAGEHAND_ASSIGN_OR_RETURN(Config config, TestConfig(options.config, test->temp_dir_));

  TestBackend* self = test.get();
  self->shared_mock_ = options.scheduler;
  MockSchedulerOptions mock_options = options.mock;
  if (mock_options.clock == nullptr) mock_options.clock = options.clock;

  BackendOptions backend_options;
  backend_options.config = std::move(config);
  backend_options.logger = options.logger;
  backend_options.clock = options.clock;
  backend_options.port_override = 0;
  backend_options.scheduler_for_plugin = [self, mock_options](std::string_view plugin_id) {
    if (self->shared_mock_ != nullptr) return self->shared_mock_;
    auto [entry, added] = self->own_mocks_.try_emplace(std::string(plugin_id));
    if (added) entry->second = std::make_unique<MockScheduler>(mock_options);
    return entry->second.get();
  };
  STAGEHAND_ASSIGN_OR_RETURN(self->backend_, Backend::Create(std::move(backend_options)));

  bool startup_hooked = false;
  for (BackendPlugin& plugin : options.plugins) {
    // Like Backstage's mock scheduler service: its startup hook is the plugin's first, so the
    // tasks run once after every init and before the plugins' own hooks.
    const bool hook_startup = self->shared_mock_ == nullptr || !startup_hooked;
    startup_hooked = true;
    plugin.init = [self, hook_startup,
                   init = std::move(plugin.init)](PluginServices& services) -> Status {
      self->services_.insert_or_assign(services.plugin_id, services);
      MockScheduler* mock = self->scheduler(services.plugin_id);
      if (hook_startup) {
        services.lifecycle->AddStartupHook([mock] {
          mock->RunStartup();
          return Status::Ok();
        });
        services.lifecycle->AddShutdownHook([mock] { mock->Shutdown(); });
      }
      return init ? init(services) : Status::Ok();
    };
    STAGEHAND_RETURN_IF_ERROR(self->backend_->AddPlugin(std::move(plugin)));
  }
  STAGEHAND_RETURN_IF_ERROR(self->backend_->Start());
  return test;
}

}  // namespace stagehand::testing
