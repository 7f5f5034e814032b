// Command tasks: the task functions `stagehand serve` builds from a YAML `command:` entry. Each run
// starts the argv as a child process, hands its output to the run's report (or, without one, to the
// log), and maps its exit to a Status. A run owns
// its whole process tree, including processes that leave the command's group or session
// (`setsid`, double forks): a stopped run (timeout, cancel, lost lease, shutdown) signals all of
// them, and no process of a run outlives it, nor the stagehand process (see ADR 0007). A command
// sees a clean environment: a small base, the variables its spec sets and those it names to
// inherit; never the rest of the stagehand process's environment (its tokens and credentials).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"
#include "stagehand/model/task_function.h"
#include "stagehand/time/clock.h"
#include "stagehand/trace/trace_context.h"

namespace stagehand {

// The variables a command takes from the stagehand process's environment when they are set there,
// whatever its spec says: where programs are found, who and where the user is, the locale and the
// time zone (every LC_* variable too), and where temporary files go. Anything else (tokens,
// database credentials, proxies, the service manager's sockets) reaches a command only when named.
inline constexpr std::array<std::string_view, 9> kCommandBaseEnvironment = {
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR"};
// The prefix of the locale variables in the base (LC_ALL, LC_CTYPE, ...).
inline constexpr std::string_view kCommandBaseEnvironmentPrefix = "LC_";
// A command's PATH when neither the stagehand process nor its spec sets one.
inline constexpr std::string_view kDefaultCommandPath = "/usr/local/bin:/usr/bin:/bin";

// What to run and how. Thread-compatible value type.
struct CommandSpec {
  // The program and its arguments; argv[0] is looked up in the PATH of
  // the stagehand process (as execvp does) when it has no slash.
  std::vector<std::string> argv;
  // Set in the command's environment, overriding the base and the inherited variables.
  std::map<std::string, std::string> env;
  // Names of variables the command takes from the stagehand process's environment, besides the
  // base, when they are set there (an unset name is left out).
  std::vector<std::string> inherit_env;
  // The child's working directory; empty keeps the current one.
  std::string working_directory;
  // How long the tree has between SIGTERM and SIGKILL once the run is stopped (monotonic).
  std::chrono::milliseconds kill_grace{5000};
  // The most output bytes (stdout and stderr together) written to the log per run when the run
  // has no report; the rest is read and dropped.
  std::size_t output_cap_bytes = std::size_t{64} * 1024;
  // The `task` field of every log record; empty leaves it out.
  std::string task_id;
  // The run's trace context (set by RunCommand from RunControl::trace): when valid, the command
  // gets TRACEPARENT and TRACESTATE (unless `env` sets them) and the run's log records carry
  // trace_id and span_id.
  TraceContext trace{};
  // The run's id (set by RunCommand from RunControl::run_id): the command finds it in
  // STAGEHAND_RUN_ID, and its task's id in STAGEHAND_TASK_ID.
  std::string run_id;
};

// Returns whether `name` is a portable environment variable name: a letter or '_', then letters,
// digits and '_' (POSIX).
bool IsEnvironmentName(std::string_view name);

// Returns the environment a run of `spec` gets, as NAME=VALUE entries sorted by name: the
// variables of kCommandBaseEnvironment (and LC_*) and those `spec.inherit_env` names, taken from
// `parent` (a null-terminated NAME=VALUE array, such as `environ`; the first entry of a name wins)
// when set there; then `spec.env`, overriding; then TRACEPARENT and TRACESTATE of `spec.trace`
// when still unset; and PATH=kDefaultCommandPath when still unset. STAGEHAND_TASK_ID and
// STAGEHAND_RUN_ID are the run's own (`spec.task_id`, `spec.run_id`, when set), whatever the
// rest says.
// Nothing else of `parent` is kept. Thread-compatible: `parent` must not change meanwhile.
std::vector<std::string> CommandEnvironment(const CommandSpec& spec, const char* const* parent);

// Runs `spec` once and blocks until every process of its tree is dead and reaped. The command
// runs under a supervisor process forked for the run, which reaps every descendant (they are
// re-parented to it however they detach) and kills them all with SIGKILL when this process dies.
// The supervisor is a fork that does not exec: it shares this process's memory copy-on-write and
// keeps, until the run ends, the old copy of each page this process rewrites meanwhile (ADR 0007).
// The command has CommandEnvironment(spec, environ) as its environment, /dev/null as stdin, no
// descriptor beyond 0 to 2, every signal at its default
// disposition and unblocked, and its own process group.
//
// Output: with `control.report`, every byte of stdout and stderr is appended to it as it is read
// (the two interleaved in arrival order), and the exit code or the killing signal is set on it;
// nothing of the output is logged line by line. Without a report, lines of stdout are logged at
// info and lines of stderr at warn, with the fields `task` and `stream`, up to
// `output_cap_bytes`. Either way, once the command has ended one record is logged at info,
// "command exited with code N" or "command was killed by signal N (SIGX)", with the fields
// `task`, `program`, `exit_code` or `signal`, `output_bytes` and `last_line` (the last non-empty
// line printed, at most 200 bytes; absent when nothing was printed).
//
// Returns:
// - OK when the program exits with code 0. Processes it left running are killed (SIGKILL); their
//   number is logged at debug.
// - UNAVAILABLE with the exit code (or the signal) and the last lines of stderr (at most 10 lines
//   and 1 KiB) when it exits otherwise by itself; also when its supervisor is killed.
// - CANCELLED when `control.stop` was requested (before the start: "command 'x' not started").
//   Every process of the tree gets SIGTERM; those still running `kill_grace` later on `clock`
//   (monotonic) get SIGKILL. When `control.kill` is requested, before or during the grace, they
//   get SIGKILL at once. The message says how the command ended and does not say why it was
//   stopped (the caller prefixes that): "command 'sleep' ended by SIGTERM", "command 'x' exited
//   with code 143 after SIGTERM", "command 'x' was killed after ignoring SIGTERM for 5s",
//   "command 'x' was killed at once (SIGKILL)" (kill token; "... (SIGKILL) 1.5s after SIGTERM"
//   during the grace). A command that ended by itself before any signal reached it is reported
//   as above (OK or UNAVAILABLE).
// - FAILED_PRECONDITION naming the program and the errno text when it cannot be started
//   (missing binary, bad working directory); INVALID_ARGUMENT for an empty argv.
// Never throws. Thread-safe.
Status RunCommand(const CommandSpec& spec, Logger& logger, Clock& clock, const RunControl& control);

// Runs RunCommand with `stop` as the stop token and a kill token that is never requested.
Status RunCommand(const CommandSpec& spec, Logger& logger, Clock& clock,
                  const std::stop_token& stop);

// Makes this process the reaper of its orphaned descendants (Linux PR_SET_CHILD_SUBREAPER). Each
// run's supervisor is already the reaper of its command's tree; this only matters when a
// supervisor is killed from outside, and lets RunCommand reap the command's group then. Call once
// at startup, before threads start commands. Returns UNAVAILABLE when the kernel refuses.
Status BecomeChildSubreaper();

// Makes this process, and the supervisors it forks, non-dumpable (Linux PR_SET_DUMPABLE 0): their
// /proc files (environ, mem, fd) then belong to root, so a command running as the same user
// cannot read the secrets in the daemon's environment or memory, and no core dump is written.
// Commands are dumpable again once they exec. Call once at startup. Returns UNAVAILABLE when the
// kernel refuses.
Status HideProcessFromCommands();

// Returns a task function that calls RunCommand(spec, *logger, clock, control) on each run, or
// INVALID_ARGUMENT when `spec.argv` is empty. `clock` must outlive the function.
Result<TaskFunction> MakeCommandTask(CommandSpec spec, std::shared_ptr<Logger> logger,
                                     Clock& clock);

}  // namespace stagehand
