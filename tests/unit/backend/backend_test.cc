#include "stagehand/backend/backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "integration/executors/recording_logger.h"
#include "stagehand/backend/database_config.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::LogRecord;
using ::stagehand::testing::RecordingLogger;
using ::stagehand::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr auto kDeadline = std::chrono::seconds(20);

const std::string kBaseYaml = R"(
backend:
  listen: { host: 127.0.0.1, port: 7007 }
  database: { client: better-sqlite3, connection: ':memory:' }
  auth:
    externalAccess:
      - type: static
        options: { token: unit-test-token, subject: unit-tests }
custom:
  value: seen by plugins
)";

Config ParseConfig(const std::string& yaml) {
  Result<Config> config = Config::FromYaml(yaml, "backend_test.yaml");
  EXPECT_THAT(config, IsOk());
  return config.ok() ? *config : Config::Empty();
}

class BackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> MakeBackend(const std::string& yaml = kBaseYaml) {
    BackendOptions options;
    options.config = ParseConfig(yaml);
    options.logger = logger_;
    options.port_override = 0;
    Result<std::unique_ptr<Backend>> backend = Backend::Create(std::move(options));
    EXPECT_THAT(backend, IsOk());
    return backend.ok() ? std::move(*backend) : nullptr;
  }

  static BackendPlugin Plugin(std::string id,
                              std::function<Status(PluginServices&)> init = nullptr) {
    if (!init) {
      init = [](PluginServices&) { return Status::Ok(); };
    }
    return BackendPlugin{std::move(id), std::move(init)};
  }

  bool Logged(std::string_view message) const {
    for (const LogRecord& record : logger_->Records()) {
      if (record.message == message) {
        return true;
      }
    }
    return false;
  }

  std::shared_ptr<RecordingLogger> logger_ = std::make_shared<RecordingLogger>();
};

TEST_F(BackendTest, CreateRejectsAnInvalidConfig) {
  BackendOptions options;
  options.config = ParseConfig("backend:\n  listen: { port: not-a-port }\n");
  Result<std::unique_ptr<Backend>> backend = Backend::Create(std::move(options));
  ASSERT_THAT(backend, StatusIs(StatusCode::kInvalidArgument, "backend.listen.port"));
}

TEST_F(BackendTest, ConfigIsReadAtCreate) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->config().listen_host, "127.0.0.1");
  EXPECT_EQ(backend->config().listen_port, 7007);
  ASSERT_EQ(backend->config().auth.static_tokens.size(), 1U);
  EXPECT_EQ(backend->config().auth.static_tokens[0].subject, "unit-tests");
}

TEST_F(BackendTest, AddPluginRejectsInvalidIds) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  for (const char* id : {"", "Jobs", "1jobs", "-jobs", "jobs_2", "jobs/x", "jöbs", "jobs "}) {
    Status status = backend->AddPlugin(Plugin(id));
    EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument, "is not a valid plugin id"))
        << "'" << id;
  }
  EXPECT_THAT(backend->AddPlugin(Plugin("j")), IsOk());
  EXPECT_THAT(backend->AddPlugin(Plugin("jobs-2")), IsOk());
}

// Issue 14: ids had no length limit although PostgreSQL truncates database names at 63 bytes.
TEST_F(BackendTest, PluginIdsAreLimitedSoTheirDatabaseNameFitsPostgres) {
  EXPECT_EQ(kMaxPluginIdLength, 46u);
  EXPECT_EQ(DatabaseConfig{}.prefix.size() + kMaxPluginIdLength, 63u);
  const std::string longest = "j" + std::string(kMaxPluginIdLength - 1, 'x');
  EXPECT_THAT(ValidatePluginId(longest), IsOk());
  const std::string too_long = longest + "x";
  const Status status = ValidatePluginId(too_long);
  EXPECT_THAT(status,
              StatusIs(StatusCode::kInvalidArgument,
                       "plugin id '" + too_long + "' is 47 characters long; the limit is 46"));
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_THAT(backend->AddPlugin(Plugin(too_long)), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(backend->AddPlugin(Plugin(longest)), IsOk());
}

TEST_F(BackendTest, AddPluginRejectsADuplicateId) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  ASSERT_THAT(backend->AddPlugin(Plugin("jobs")), IsOk());
  Status status = backend->AddPlugin(Plugin("jobs"));
  EXPECT_THAT(status, StatusIs(StatusCode::kInvalidArgument, "'jobs' is already registered"));
}

TEST_F(BackendTest, AddPluginRejectsAPluginWithoutInit) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_THAT(backend->AddPlugin(BackendPlugin{"jobs", nullptr}),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(BackendTest, AddPluginAfterStartIsAFailedPrecondition) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  ASSERT_THAT(backend->Start(), IsOk());
  EXPECT_THAT(backend->AddPlugin(Plugin("late")), StatusIs(StatusCode::kFailedPrecondition));
}

TEST_F(BackendTest, InitReceivesEveryService) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  PluginServices seen;
  std::string custom_value;
  ASSERT_TRUE(backend
                  ->AddPlugin(Plugin("jobs",
                                     [&](PluginServices& services) {
                                       seen = services;
                                       Result<std::string> value =
                                           services.config->GetString("custom.value");
                                       if (value.ok()) custom_value = *value;
                                       services.logger->Info("hello from jobs");
                                       return Status::Ok();
                                     }))
                  .ok());
  ASSERT_THAT(backend->Start(), IsOk());

  EXPECT_EQ(seen.plugin_id, "jobs");
  ASSERT_NE(seen.config, nullptr);
  EXPECT_EQ(custom_value, "seen by plugins");
  ASSERT_NE(seen.logger, nullptr);
  std::optional<LogRecord> hello = logger_->WaitFor("hello from jobs");
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->Field("plugin"), "jobs");
  ASSERT_NE(seen.database, nullptr);
  EXPECT_EQ(seen.database->plugin_id(), "jobs");
  // Migrated: the task table exists.
  EXPECT_THAT(seen.database->States(), IsOk());
  EXPECT_NE(seen.scheduler, nullptr);
  EXPECT_EQ(seen.scheduler, backend->scheduler("jobs"));
  EXPECT_NE(seen.router, nullptr);
  EXPECT_NE(seen.lifecycle, nullptr);
  EXPECT_EQ(seen.metrics, &backend->metrics());
}

TEST_F(BackendTest, EachPluginGetsItsOwnDatabaseAndScheduler) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  std::vector<PluginServices> seen;
  auto record = [&](PluginServices& services) {
    seen.push_back(services);
    return Status::Ok();
  };
  ASSERT_THAT(backend->AddPlugin(Plugin("alpha", record)), IsOk());
  ASSERT_THAT(backend->AddPlugin(Plugin("beta", record)), IsOk());
  ASSERT_THAT(backend->Start(), IsOk());
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[0].plugin_id, "alpha");
  EXPECT_EQ(seen[1].plugin_id, "beta");
  EXPECT_NE(seen[0].database, seen[1].database);
  EXPECT_NE(seen[0].scheduler, seen[1].scheduler);
  EXPECT_EQ(seen[1].database->plugin_id(), "beta");
}

TEST_F(BackendTest, SchedulerIsNullUntilStartedAndForUnknownPlugins) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  ASSERT_THAT(backend->AddPlugin(Plugin("jobs")), IsOk());
  EXPECT_EQ(backend->scheduler("jobs"), nullptr);
  ASSERT_THAT(backend->Start(), IsOk());
  EXPECT_NE(backend->scheduler("jobs"), nullptr);
  EXPECT_EQ(backend->scheduler("other"), nullptr);
}

TEST_F(BackendTest, PortIsBoundAfterStartAndReleasedByStop) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->port(), 0);
  ASSERT_THAT(backend->Start(), IsOk());
  EXPECT_NE(backend->port(), 0);
  EXPECT_TRUE(Logged("Listening on 127.0.0.1:" + std::to_string(backend->port())));
  backend->Stop();
  EXPECT_EQ(backend->port(), 0);
}

TEST_F(BackendTest, InitFailureNamesThePluginAndStopsWhatStarted) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  SchedulerService* first_scheduler = nullptr;
  bool first_shut_down = false;
  bool third_initialized = false;
  ASSERT_TRUE(backend
                  ->AddPlugin(Plugin("first",
                                     [&](PluginServices& services) {
                                       first_scheduler = services.scheduler;
                                       services.lifecycle->AddShutdownHook(
                                           [&] { first_shut_down = true; });
                                       return Status::Ok();
                                     }))
                  .ok());
  ASSERT_TRUE(backend
                  ->AddPlugin(Plugin("second",
                                     [](PluginServices&) {
                                       return UnavailableError("the widget service is down");
                                     }))
                  .ok());
  ASSERT_TRUE(backend
                  ->AddPlugin(Plugin("third",
                                     [&](PluginServices&) {
                                       third_initialized = true;
                                       return Status::Ok();
                                     }))
                  .ok());

  Status status = backend->Start();
  EXPECT_THAT(status, StatusIs(StatusCode::kUnavailable, "'second'"));
  EXPECT_THAT(status.message(), HasSubstr("the widget service is down"));
  EXPECT_TRUE(first_shut_down);
  EXPECT_FALSE(third_initialized);
  EXPECT_EQ(backend->port(), 0);
  ASSERT_NE(first_scheduler, nullptr);
  TaskDefinition task;
  task.id = "after-failure";
  task.timeout = std::chrono::minutes(1);
  task.fn = [](const std::stop_token&) { return Status::Ok(); };
  EXPECT_THAT(first_scheduler->ScheduleTask(std::move(task)), StatusIs(StatusCode::kUnavailable));
  // A failed backend cannot be started again; stopping it is harmless.
  EXPECT_THAT(backend->Start(), StatusIs(StatusCode::kFailedPrecondition));
  backend->Stop();
}

TEST_F(BackendTest, DatabaseFailureNamesThePluginAndTheDatabase) {
  const std::filesystem::path blocker = std::filesystem::temp_directory_path() /
                                        ("stagehand-backend-test-" + std::to_string(::getpid()));
  { std::ofstream(blocker) << "a file where a directory should be"; }
  const std::string directory = (blocker / "data").string();
  std::unique_ptr<Backend> backend = MakeBackend(
      "backend:\n  database:\n    client: better-sqlite3\n    connection: { directory: '" +
      directory + "' }\n");
  ASSERT_NE(backend, nullptr);
  bool initialized = false;
  ASSERT_TRUE(backend
                  ->AddPlugin(Plugin("jobs",
                                     [&](PluginServices&) {
                                       initialized = true;
                                       return Status::Ok();
                                     }))
                  .ok());
  Status status = backend->Start();
  std::filesystem::remove(blocker);
  EXPECT_THAT(status, Not(IsOk()));
  EXPECT_THAT(status.message(), HasSubstr("'jobs'"));
  EXPECT_THAT(status.message(), HasSubstr(directory + "/jobs.sqlite"));
  EXPECT_FALSE(initialized);
}

TEST_F(BackendTest, StartupHooksRunRootFirstThenPluginsInOrder) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  std::vector<std::string> order;
  auto hook = [&order](const std::string& name) {
    return [&order, name] {
      order.push_back(name);
      return Status::Ok();
    };
  };
  for (const char* id : {"alpha", "beta"}) {
    ASSERT_TRUE(backend
                    ->AddPlugin(Plugin(id,
                                       [&, id](PluginServices& services) {
                                         order.push_back(std::string("init ") + id);
                                         services.lifecycle->AddStartupHook(hook(id));
                                         return Status::Ok();
                                       }))
                    .ok());
  }
  backend->root_lifecycle().AddStartupHook(hook("root 1"));
  backend->root_lifecycle().AddStartupHook(hook("root 2"));
  ASSERT_THAT(backend->Start(), IsOk());
  EXPECT_THAT(order, ElementsAre("init alpha", "init beta", "root 1", "root 2", "alpha", "beta"));
}

TEST_F(BackendTest, StartupHookFailureFailsStartAndStopsEverything) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  bool later_hook_ran = false;
  bool shut_down = false;
  ASSERT_TRUE(backend
                  ->AddPlugin(Plugin("jobs",
                                     [&](PluginServices& services) {
                                       services.lifecycle->AddStartupHook(
                                           [] { return InternalError("cache warm-up failed"); });
                                       services.lifecycle->AddStartupHook([&] {
                                         later_hook_ran = true;
                                         return Status::Ok();
                                       });
                                       services.lifecycle->AddShutdownHook(
                                           [&] { shut_down = true; });
                                       return Status::Ok();
                                     }))
                  .ok());
  Status status = backend->Start();
  EXPECT_THAT(status, StatusIs(StatusCode::kInternal, "'jobs'"));
  EXPECT_THAT(status.message(), HasSubstr("cache warm-up failed"));
  EXPECT_FALSE(later_hook_ran);
  EXPECT_TRUE(shut_down);
  EXPECT_EQ(backend->port(), 0);
}

TEST_F(BackendTest, ShutdownHooksRunInReverseOrderPluginsBeforeRoot) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  std::vector<std::string> order;
  for (const char* id : {"alpha", "beta"}) {
    ASSERT_TRUE(backend
                    ->AddPlugin(Plugin(id,
                                       [&, id](PluginServices& services) {
                                         for (int i = 1; i <= 2; ++i) {
                                           services.lifecycle->AddShutdownHook([&order, id, i] {
                                             order.push_back(id + std::to_string(i));
                                           });
                                         }
                                         return Status::Ok();
                                       }))
                    .ok());
  }
  backend->root_lifecycle().AddShutdownHook([&] { order.emplace_back("root1"); });
  backend->root_lifecycle().AddShutdownHook([&] { order.emplace_back("root2"); });
  ASSERT_THAT(backend->Start(), IsOk());
  backend->Stop();
  EXPECT_THAT(order, ElementsAre("beta2", "beta1", "alpha2", "alpha1", "root2", "root1"));
  backend->Stop();
  EXPECT_EQ(order.size(), 6U);
}

TEST_F(BackendTest, HooksThatCallStopDoNotDeadlock) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  Backend* raw = backend.get();
  int shutdown_runs = 0;
  backend->root_lifecycle().AddStartupHook([raw] {
    raw->Stop();
    return Status::Ok();
  });
  backend->root_lifecycle().AddShutdownHook([raw, &shutdown_runs] {
    ++shutdown_runs;
    raw->Stop();
  });
  ASSERT_THAT(backend->Start(), IsOk());
  backend->Stop();
  EXPECT_EQ(shutdown_runs, 1);
}

TEST_F(BackendTest, StopBeforeStartIsHarmlessAndPreventsAStart) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  backend->Stop();
  backend->Stop();
  EXPECT_THAT(backend->Start(), StatusIs(StatusCode::kFailedPrecondition));
}

TEST_F(BackendTest, StopLogsTheShutdownSteps) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  ASSERT_THAT(backend->AddPlugin(Plugin("jobs")), IsOk());
  ASSERT_THAT(backend->Start(), IsOk());
  EXPECT_TRUE(Logged("Plugin initialization started"));
  EXPECT_TRUE(Logged("Plugin initialization complete"));
  backend->Stop();
  std::vector<std::string> messages;
  for (const LogRecord& record : logger_->Records()) {
    messages.push_back(record.message);
  }
  auto position = [&](const std::string& message) {
    return std::find(messages.begin(), messages.end(), message) - messages.begin();
  };
  const auto end = static_cast<std::ptrdiff_t>(messages.size());
  EXPECT_LT(position("Backend shutting down"), position("Running shutdown hooks"));
  EXPECT_LT(position("Running shutdown hooks"), position("Stopping schedulers"));
  EXPECT_LT(position("Stopping schedulers"), position("Closing the HTTP server"));
  EXPECT_LT(position("Closing the HTTP server"), position("Backend stopped"));
  EXPECT_LT(position("Backend stopped"), end);
}

TEST_F(BackendTest, DestroyingAStartedBackendStopsIt) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  bool shut_down = false;
  backend->root_lifecycle().AddShutdownHook([&] { shut_down = true; });
  ASSERT_THAT(backend->Start(), IsOk());
  backend.reset();
  EXPECT_TRUE(shut_down);
}

// Restores the calling thread's signal mask when the test ends.
class SignalMaskGuard {
 public:
  SignalMaskGuard() { pthread_sigmask(SIG_SETMASK, nullptr, &saved_); }
  ~SignalMaskGuard() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  SignalMaskGuard(const SignalMaskGuard&) = delete;
  SignalMaskGuard& operator=(const SignalMaskGuard&) = delete;

 private:
  sigset_t saved_{};
};

TEST_F(BackendTest, StopFromAnotherThreadEndsRunUntilShutdownSignal) {
  SignalMaskGuard guard;
  BlockShutdownSignals();
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  ASSERT_THAT(backend->Start(), IsOk());
  std::future<Status> run =
      std::async(std::launch::async, [&] { return backend->RunUntilShutdownSignal(); });
  ASSERT_TRUE(
      logger_->WaitFor("Waiting for SIGTERM, SIGINT, SIGHUP or SIGQUIT", kDeadline).has_value());
  backend->Stop();
  ASSERT_EQ(run.wait_for(kDeadline), std::future_status::ready);
  EXPECT_THAT(run.get(), IsOk());
  EXPECT_EQ(backend->port(), 0);
}

TEST_F(BackendTest, SigtermEndsRunUntilShutdownSignalWithAStop) {
  SignalMaskGuard guard;
  BlockShutdownSignals();
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  std::promise<void> shut_down;
  backend->root_lifecycle().AddShutdownHook([&] { shut_down.set_value(); });
  ASSERT_THAT(backend->Start(), IsOk());
  const pthread_t waiter = pthread_self();
  // Sent to this thread only, so the test process cannot be killed by it; it stays pending until
  // the sigwait in RunUntilShutdownSignal takes it.
  ASSERT_EQ(pthread_kill(waiter, SIGTERM), 0);  // NOLINT(bugprone-bad-signal-to-kill-thread)
  EXPECT_THAT(backend->RunUntilShutdownSignal(), IsOk());
  EXPECT_EQ(shut_down.get_future().wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_TRUE(Logged("Received SIGTERM, shutting down"));
  EXPECT_EQ(backend->port(), 0);
}

TEST_F(BackendTest, SigintAlsoEndsRunUntilShutdownSignal) {
  SignalMaskGuard guard;
  BlockShutdownSignals();
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  ASSERT_THAT(backend->Start(), IsOk());
  ASSERT_EQ(pthread_kill(pthread_self(), SIGINT), 0);
  EXPECT_THAT(backend->RunUntilShutdownSignal(), IsOk());
  EXPECT_TRUE(Logged("Received SIGINT, shutting down"));
}

TEST_F(BackendTest, RunUntilShutdownSignalAfterStopReturnsAtOnce) {
  std::unique_ptr<Backend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  ASSERT_THAT(backend->Start(), IsOk());
  backend->Stop();
  EXPECT_THAT(backend->RunUntilShutdownSignal(), IsOk());
}

}  // namespace
}  // namespace stagehand
