// Daemon tasks: the tasks `stagehand serve` runs, defined in the app-config rather than in code.
// Each `stagehand.plugins.<pluginId>.tasks.<taskId>` block holds a schedule (every form Backstage's
// schedule reader accepts) and exactly one executor, a command or an HTTP call:
//
//   stagehand:
//     plugins:
//       jobs:
//         inheritEnv: [EXPORT_BUCKET]   # the default of the plugin's command tasks
//         tasks:
//           hello:
//             schedule: { frequency: { cron: '*/5 * * * * *' }, timeout: 30s }
//             command: ['/bin/sh', '-c', 'echo hello']
//             env: { GREETING: hi }
//             inheritEnv: [EXPORT_BUCKET, AWS_PROFILE]   # replaces the plugin's list
//             workingDirectory: /srv
//           ping:
//             schedule: { frequency: { minutes: 1 }, timeout: 10s, scope: local }
//             http: { url: 'http://127.0.0.1:8080/hook', method: POST, headers: {},
//                     body: '{}', expectStatus: 200 }
//
// Reading is separate from running: ReadDaemonPlugins checks the whole config and reports every
// problem at once; MakeDaemonBackendPlugin turns one checked plugin into a BackendPlugin whose init
// schedules its tasks with the plugin's scheduler.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "stagehand/backend/backend.h"
#include "stagehand/base/status.h"
#include "stagehand/config/config.h"
#include "stagehand/executors/command_task.h"
#include "stagehand/executors/http_task.h"
#include "stagehand/model/schedule.h"
#include "stagehand/service/scheduler.h"
#include "stagehand/time/clock.h"

namespace stagehand {

// One task read from the config. `executor` carries the task id in its `task_id`; a command's
// `inherit_env` is the task's `inheritEnv`, or the plugin's when the task has none. For HTTP tasks
// the total timeout is the task timeout and the connect timeout at most the total one. A value
// type; thread-compatible.
struct DaemonTask {
  std::string id;
  ScheduleDefinition schedule;
  std::variant<CommandSpec, HttpTaskSpec> executor;
};

// One `stagehand.plugins.<pluginId>` block: its tasks in config order. A value type;
// thread-compatible.
struct DaemonPlugin {
  std::string id;
  std::vector<DaemonTask> tasks;
};

// Reads every plugin under `stagehand.plugins` of the merged `root`, in config order; an empty
// list when the block is absent. Errors: kInvalidArgument listing every problem found, one per
// line, each naming the full key and the file it came from: an invalid plugin or task id, an
// unknown key anywhere down to the schedule's duration objects (with the key most likely meant, or
// the keys expected there), a missing or invalid schedule (Backstage's message, after the key), a
// schedule that cannot work (a zero or negative frequency or timeout, a negative initial delay, a
// cron that never fires), neither or both of `command` and `http`, an empty command, a bad URL,
// method, header or expectStatus, an `inheritEnv` (of a plugin or a task) holding a name that is
// not an environment variable name, `env`, `inheritEnv` or `workingDirectory` on an HTTP task,
// values of the wrong type.
Result<std::vector<DaemonPlugin>> ReadDaemonPlugins(const Config& root);

// Returns `root` with `stagehand.plugins` set to null: the config the backend keeps for the
// daemon's lifetime (the task definitions are read once, by ReadDaemonPlugins), and what a reload
// compares for settings that need a restart.
Config WithoutDaemonTasks(const Config& root);

// Returns the scheduler's definition of `task`: its schedule and a function that runs its command
// or HTTP call, logging to `logger` and waiting on `clock` (which must outlive the function).
// Errors: the executor's, after "task '<id>': ".
Result<TaskDefinition> MakeDaemonTaskDefinition(const DaemonTask& task,
                                                const std::shared_ptr<Logger>& logger,
                                                Clock& clock);

// Returns a backend plugin with `plugin`'s id whose init schedules each task, in order, with the
// plugin's scheduler and logger; command tasks and HTTP tasks wait and time out on `clock`, which
// must outlive the backend. The init fails with the first task the scheduler refuses, naming it.
BackendPlugin MakeDaemonBackendPlugin(DaemonPlugin plugin, Clock& clock);

}  // namespace stagehand
