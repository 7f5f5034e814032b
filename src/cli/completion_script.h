// Shell completion scripts for the `stagehand` command line, rendered from a description of its
// commands and options (CompletionCommand), which `stagehand completion` reads off the parser so
// that the scripts never lag behind the verbs. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace stagehand::cli {

// One option of a command. A value type.
struct CompletionOption {
  std::vector<std::string> names;  // "--url", "-c": with their dashes, long ones first
  std::string description;         // one line
  bool takes_value = false;
  std::vector<std::string> choices;  // the values it accepts, when they are a fixed set
  bool file = false;                 // its value is a file name
};

// A command: the program itself or one of its (nested) subcommands. A value type.
struct CompletionCommand {
  std::string name;
  std::string description;  // one line
  std::vector<CompletionOption> options;
  std::vector<std::string> argument_choices;  // fixed values of its positional arguments
  std::vector<CompletionCommand> subcommands;
};

// The shells `stagehand completion` writes for.
inline constexpr std::string_view kCompletionShells[] = {"bash", "zsh", "fish"};

// Returns the completion script of `program` for `shell` ("bash", "zsh" or "fish"): subcommands,
// options (after a '-'), the fixed values of options and arguments, and file names for options
// that take files. Returns "" for another shell.
std::string CompletionScript(std::string_view shell, const CompletionCommand& program);

// Returns the first clause of `description` (up to " (", "; " or ". "), at most 70 characters:
// what a completion menu shows beside a name.
std::string ShortDescription(std::string_view description);

}  // namespace stagehand::cli
