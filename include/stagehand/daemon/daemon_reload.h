// Config reload for `stagehand serve`: on SIGHUP or POST /.stagehand/v1/reload the daemon re-reads
// every config file it was started with, checks the whole new config as startup does, and only
// then applies it: tasks added are scheduled, removed ones stop recurring (a run in progress ends
// normally), changed ones take their new definition from their next run. A config that is invalid,
// adds or removes a plugin, changes a task's scope or changes any other setting (those need a
// restart) changes nothing; every problem is reported.
//
// The pure part (fingerprints and the diff) is separate from DaemonReloader, which talks to the
// schedulers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "stagehand/backend/backend.h"
#include "stagehand/backend/reload.h"
#include "stagehand/base/status.h"
#include "stagehand/config/config.h"
#include "stagehand/daemon/daemon_tasks.h"
#include "stagehand/time/clock.h"

namespace stagehand {

// One task as a running daemon remembers it, to compare with a new config. A value type.
struct LoadedTask {
  std::string id;
  TaskScope scope = TaskScope::kGlobal;
  // DaemonTaskFingerprint of its definition.
  std::string fingerprint;
};

// One plugin's tasks as a running daemon remembers them, in config order. A value type.
struct LoadedPlugin {
  std::string id;
  std::vector<LoadedTask> tasks;
};

// Returns the task as a running daemon remembers it.
LoadedTask LoadedTaskOf(const DaemonTask& task);

// Returns a text that is equal for two tasks exactly when they would run the same way: the
// settings Backstage stores (cadence, timeout, initial delay), the scope, the cron zone and
// everything the command or HTTP call uses. Thread-safe.
std::string DaemonTaskFingerprint(const DaemonTask& task);

// What a new config changes in one plugin's tasks; tasks and ids in the new config's order
// (removed ones in the old order). A value type.
struct PluginTaskChanges {
  std::string plugin_id;
  std::vector<DaemonTask> added;
  std::vector<std::string> removed;
  std::vector<DaemonTask> changed;
  std::vector<std::string> unchanged;
};

// Returns the changes `next` makes to `loaded`, plugin by plugin in `loaded`'s order. Errors:
// kInvalidArgument listing every problem, one per line: a plugin `next` adds or removes (its
// database and routes exist only after a restart), a task whose scope changes (local and global
// tasks are coordinated differently: remove it in one reload and add it in the next, or restart).
Result<std::vector<PluginTaskChanges>> DiffDaemonPlugins(const std::vector<LoadedPlugin>& loaded,
                                                         std::vector<DaemonPlugin> next);

// The reload of a running `stagehand serve`. Owns the daemon's memory of its config; the plugins'
// schedulers are the backend's. Thread-compatible: Adopt before the backend starts, then Reload
// from one thread at a time (Backend::Reload serializes it).
class DaemonReloader {
 public:
  // `config_files` are re-read on each reload, with the process environment; `running` is the
  // config the backend was created with (stagehand.plugins left out), against which the settings
  // that need a restart are compared. `clock` must outlive the backend.
  DaemonReloader(std::vector<std::string> config_files, Config running, Clock& clock);

  // Returns MakeDaemonBackendPlugin(plugin) whose init also records the plugin's scheduler and
  // logger for later reloads; remembers the plugin's tasks. The reloader must outlive the
  // backend's start.
  BackendPlugin Adopt(DaemonPlugin plugin);

  // Re-reads and applies the config (see the file comment); the backend's ReloadHandler. Errors:
  // kInvalidArgument listing every problem (nothing changed); kUnavailable when a scheduler
  // refused a change part-way (the message names the plugin and task; what was applied before it
  // stays applied).
  Result<ReloadReport> Reload();

 private:
  struct Plugin {
    LoadedPlugin loaded;
    SchedulerService* scheduler = nullptr;
    std::shared_ptr<Logger> logger;
  };
  Status Apply(Plugin& plugin, PluginTaskChanges& changes, PluginReload& report);

  std::vector<std::string> config_files_;
  Config running_;
  Clock* clock_;
  std::vector<std::unique_ptr<Plugin>> plugins_;
};

}  // namespace stagehand
