// The `stagehand` command line: subcommands, their flags and their exit codes. main() only calls
// Main(); tests call Run() with their own streams.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace stagehand::cli {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;       // The command ran and failed.
inline constexpr int kExitUsage = 2;         // Bad flags or arguments, or invalid input.
inline constexpr int kExitUnavailable = 69;  // EX_UNAVAILABLE: the database or port is unusable.
inline constexpr int kExitConfig = 78;       // EX_CONFIG: the configuration is invalid.
// EX_TEMPFAIL: `serve` stopped with writes its database never took (run ends, history records).
inline constexpr int kExitUndelivered = 75;

// Exit codes of the client verbs (tasks, trigger, cancel, runs, logs), which talk to a running
// daemon over REST. Each answer a script may want to branch on has its own code; any other
// unexpected answer (e.g. 400) is kExitFailure.
inline constexpr int kExitNotFound = 3;  // 404: no such task, or no such plugin.
inline constexpr int kExitConflict = 4;  // 409: already running (trigger), not running (cancel).
inline constexpr int kExitUnauthenticated = 5;  // 401 or 403: missing, wrong or refused token.
inline constexpr int kExitServerError = 6;  // 5xx: the daemon failed (e.g. its database is down).
inline constexpr int kExitUnreachable = 7;  // No HTTP answer: refused, timed out, bad address.
// 501: the daemon does not offer what was asked (runs, logs, trigger --wait of a plugin whose run
// history is disabled or missing).
inline constexpr int kExitNotOffered = 8;

// Exit codes of `trigger --wait`, which ends with the outcome of the run it started (0 when it
// succeeded).
inline constexpr int kExitRunFailed = 10;     // The run failed (error, non-zero exit, bad status).
inline constexpr int kExitRunTimedOut = 11;   // The run passed its task's timeout.
inline constexpr int kExitRunCancelled = 12;  // The run was cancelled, or stopped by shutdown.
inline constexpr int kExitRunLost = 13;       // Lost (its host died) or fenced (it lost its claim).
inline constexpr int kExitStillRunning = 14;  // --timeout passed first; the run goes on.

// Runs the command line `args` (args[0] is the program name), writing to `out` and `err`.
// Returns the process exit code.
int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Runs with the process's argv, stdout and stderr.
int Main(int argc, char** argv);

}  // namespace stagehand::cli
