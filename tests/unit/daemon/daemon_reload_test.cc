// Issue 17, item 5: what a config reload changes in a daemon's tasks, and what it refuses.
#include "stagehand/daemon/daemon_reload.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

std::vector<DaemonPlugin> Read(const std::string& yaml) {
  Result<Config> config = Config::FromYaml(yaml, "app-config.yaml");
  EXPECT_THAT(config, IsOk());
  Result<std::vector<DaemonPlugin>> plugins = ReadDaemonPlugins(*config);
  EXPECT_THAT(plugins, IsOk());
  return *plugins;
}

std::vector<LoadedPlugin> Loaded(const std::vector<DaemonPlugin>& plugins) {
  std::vector<LoadedPlugin> loaded;
  for (const DaemonPlugin& plugin : plugins) {
    LoadedPlugin& entry = loaded.emplace_back();
    entry.id = plugin.id;
    for (const DaemonTask& task : plugin.tasks) entry.tasks.push_back(LoadedTaskOf(task));
  }
  return loaded;
}

std::vector<std::string> Ids(const std::vector<DaemonTask>& tasks) {
  std::vector<std::string> ids;
  for (const DaemonTask& task : tasks) ids.push_back(task.id);
  return ids;
}

constexpr const char* kBefore = R"(
stagehand:
  plugins:
    jobs:
      tasks:
        keep: { schedule: { frequency: { minutes: 1 }, timeout: 10s }, command: [/bin/true] }
        slower: { schedule: { frequency: { minutes: 1 }, timeout: 10s }, command: [/bin/true] }
        other-command: { schedule: { frequency: { minutes: 1 }, timeout: 10s }, command: [/bin/true] }
        gone: { schedule: { frequency: { minutes: 1 }, timeout: 10s }, command: [/bin/true] }
)";

TEST(DiffDaemonPluginsTest, SortsTasksIntoAddedRemovedChangedAndUnchanged) {
  Result<std::vector<PluginTaskChanges>> changes = DiffDaemonPlugins(Loaded(Read(kBefore)), Read(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        keep: { schedule: { frequency: { minutes: 1 }, timeout: 10s }, command: [/bin/true] }
        slower: { schedule: { frequency: { minutes: 5 }, timeout: 10s }, command: [/bin/true] }
        other-command: { schedule: { frequency: { minutes: 1 }, timeout: 10s }, command: [/bin/false] }
        new: { schedule: { frequency: { minutes: 1 }, timeout: 10s }, command: [/bin/true] }
)"));
  ASSERT_THAT(changes, IsOk());
  ASSERT_EQ(changes->size(), 1u);
  const PluginTaskChanges& jobs = changes->front();
  EXPECT_EQ(jobs.plugin_id, "jobs");
  EXPECT_EQ(Ids(jobs.added), std::vector<std::string>{"new"});
  EXPECT_EQ(jobs.removed, std::vector<std::string>{"gone"});
  EXPECT_EQ(Ids(jobs.changed), (std::vector<std::string>{"slower", "other-command"}));
  EXPECT_EQ(jobs.unchanged, std::vector<std::string>{"keep"});
}

TEST(DiffDaemonPluginsTest, RefusesPluginsAddedOrRemovedAndScopeChangesListingEach) {
  Result<std::vector<PluginTaskChanges>> changes = DiffDaemonPlugins(Loaded(Read(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        t: { schedule: { frequency: { minutes: 1 }, timeout: 10s }, command: [/bin/true] }
    old: {}
)")),
                                                                     Read(R"(
stagehand:
  plugins:
    jobs:
      tasks:
        t: { schedule: { frequency: { minutes: 1 }, timeout: 10s, scope: local }, command: [/bin/true] }
    fresh: {}
)"));
  ASSERT_THAT(changes, StatusIs(StatusCode::kInvalidArgument));
  const std::string& message = changes.status().message();
  EXPECT_NE(message.find("'stagehand.plugins.fresh' is a new plugin"), std::string::npos)
      << message;
  EXPECT_NE(message.find("'stagehand.plugins.old' was removed"), std::string::npos) << message;
  EXPECT_NE(
      message.find("'stagehand.plugins.jobs.tasks.t.schedule.scope' changed from global to local"),
      std::string::npos)
      << message;
}

TEST(DaemonTaskFingerprintTest, DiffersForEnvironmentAndInheritedEnvironment) {
  std::vector<DaemonPlugin> a = Read(R"(
stagehand: { plugins: { jobs: { tasks: { t: { schedule: { frequency: { minutes: 1 }, timeout: 10s }, command: [/bin/true] } } } } }
)");
  std::vector<DaemonPlugin> b = Read(R"(
stagehand: { plugins: { jobs: { inheritEnv: [HOME], tasks: { t: { schedule: { frequency: { minutes: 1 }, timeout: 10s }, command: [/bin/true] } } } } }
)");
  EXPECT_NE(DaemonTaskFingerprint(a[0].tasks[0]), DaemonTaskFingerprint(b[0].tasks[0]));
  EXPECT_EQ(DaemonTaskFingerprint(a[0].tasks[0]), DaemonTaskFingerprint(Read(R"(
stagehand: { plugins: { jobs: { tasks: { t: { schedule: { frequency: { minutes: 1 }, timeout: 10s }, command: [/bin/true] } } } } }
)")[0]
                                                                            .tasks[0]));
}

TEST(DaemonTaskFingerprintTest, DiffersForEachSchedulingPolicy) {
  const auto fingerprint = [](const std::string& policy) {
    return DaemonTaskFingerprint(
        Read("stagehand: { plugins: { jobs: { tasks: { t: { schedule: { frequency: { minutes: 1 "
             "}, timeout: 10s" +
             policy + " }, command: [/bin/true] } } } } }")[0]
            .tasks[0]);
  };
  const std::string plain = fingerprint("");
  for (const std::string policy :
       {", catchupWindow: 0s", ", jitter: 5s", ", retry: { attempts: 2, backoff: 1s }"}) {
    EXPECT_NE(fingerprint(policy), plain) << policy << " changes nothing on reload";
  }
  EXPECT_NE(fingerprint(", retry: { attempts: 2, backoff: 1s }"),
            fingerprint(", retry: { attempts: 3, backoff: 1s }"));
}

}  // namespace
}  // namespace stagehand
