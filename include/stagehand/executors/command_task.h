// Command tasks: the task functions `stagehand serve` builds from a YAML `command:` entry. Each run
// starts the argv as a child process in its own process group, logs its output, and maps its exit
// to a Status. A stopped run (timeout, cancel, lost lease, shutdown) ends the whole group.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"
#include "stagehand/engine/task_function.h"
#include "stagehand/time/clock.h"

namespace stagehand {

// What to run and how. Thread-compatible value type.
struct CommandSpec {
  // The program and its arguments; argv[0] is looked up in PATH when it has no slash.
  std::vector<std::string> argv;
  // Added to (and overriding) the environment of the stagehand process.
  std::map<std::string, std::string> env;
  // The child's working directory; empty keeps the current one.
  std::string working_directory;
  // How long the group has between SIGTERM and SIGKILL once the run is stopped (monotonic).
  std::chrono::milliseconds kill_grace{5000};
  // The most output bytes (stdout and stderr together) written to the log per run; the rest is
  // read and dropped.
  std::size_t output_cap_bytes = std::size_t{64} * 1024;
  // The `task` field of every log record; empty leaves it out.
  std::string task_id;
};

// Runs `spec` once and blocks until the child and every process left in its group are gone.
// Lines of stdout are logged at info and lines of stderr at warn, with the fields `task` and
// `stream`. Returns OK when the program exits with code 0; UNAVAILABLE with the exit code (or the
// signal) and the last lines of stderr (at most 10 lines and 1 KiB) otherwise; FAILED_PRECONDITION
// naming the program and the errno text when it cannot be started (missing binary, bad working
// directory); INVALID_ARGUMENT for an empty argv; CANCELLED when `stop` was requested, after
// SIGTERM to the group, at most `kill_grace` on `clock`, then SIGKILL. When the program exits by
// itself, processes it left in its group are killed with SIGKILL. Never throws. Thread-safe.
Status RunCommand(const CommandSpec& spec, Logger& logger, Clock& clock,
                  const std::stop_token& stop);

// Makes this process the reaper of its orphaned descendants (Linux PR_SET_CHILD_SUBREAPER), so that
// RunCommand can reap every member of a command's process group, not only the program itself.
// Without it, group members whose parent died are reaped by init. Call once at startup, before
// threads start commands. Returns UNAVAILABLE when the kernel refuses.
Status BecomeChildSubreaper();

// Returns a task function that calls RunCommand(spec, *logger, clock, stop) on each run, or
// INVALID_ARGUMENT when `spec.argv` is empty. `clock` must outlive the function.
Result<TaskFunction> MakeCommandTask(CommandSpec spec, std::shared_ptr<Logger> logger,
                                     Clock& clock);

}  // namespace stagehand
