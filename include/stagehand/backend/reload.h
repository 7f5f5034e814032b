// Config reloads of a running backend: what a reload reports, and the handler the host calls on
// SIGHUP and on POST /.stagehand/v1/reload. The host owns the serialization, the log lines and the
// metrics; the handler (the daemon's, see stagehand/daemon/daemon_reload.h) re-reads and applies
// the config.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "stagehand/base/status.h"

namespace stagehand {

// What a reload changed in one plugin's tasks. Ids in config order. A value type.
struct PluginReload {
  std::string plugin_id;
  std::vector<std::string> added;
  std::vector<std::string> removed;
  std::vector<std::string> changed;
  std::vector<std::string> unchanged;
};

// What a successful reload changed, plugin by plugin in config order. A value type.
struct ReloadReport {
  std::vector<PluginReload> plugins;
};

// Re-reads the config and applies it. Errors: kInvalidArgument listing every problem, one per
// line, when the new config is invalid or changes a setting that needs a restart (then nothing
// changed); kUnavailable when applying failed part-way (the message says what was applied).
// Called by one thread at a time.
using ReloadHandler = std::function<Result<ReloadReport>()>;

// Returns the report as the endpoint answers it: {"status":"reloaded","plugins":[{"id",
// "added":[..],"removed":[..],"changed":[..],"unchanged":[..]}],"added":n,"removed":n,
// "changed":n,"unchanged":n}.
std::string ReloadReportJson(const ReloadReport& report);

// Returns one line for the log: "added 1 (jobs/new), removed 0, changed 2 (jobs/a, jobs/b),
// unchanged 5".
std::string DescribeReload(const ReloadReport& report);

}  // namespace stagehand
