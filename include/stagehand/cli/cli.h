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

// Runs the command line `args` (args[0] is the program name), writing to `out` and `err`.
// Returns the process exit code.
int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Runs with the process's argv, stdout and stderr.
int Main(int argc, char** argv);

}  // namespace stagehand::cli
