// `stagehand completion bash|zsh|fish`: prints a completion script for every command and option,
// read off the parser itself.

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/completion_script.h"
#include "stagehand/cli/cli.h"

namespace stagehand::cli {
namespace {

// Returns the fixed values an option's IsMember check accepts (its description is "{a,b}"), or
// none.
std::vector<std::string> Choices(CLI::Option& option) {
  std::vector<std::string> choices;
  for (int i = 0;; ++i) {
    CLI::Validator* validator = nullptr;
    try {
      validator = option.get_validator(i);
    } catch (const CLI::OptionNotFound&) {
      break;
    }
    const std::string set = validator->get_description();
    if (set.size() < 2 || set.front() != '{' || set.back() != '}') {
      continue;
    }
    std::string word;
    for (char c : set.substr(1, set.size() - 2)) {
      if (c == ',') {
        choices.push_back(word);
        word.clear();
      } else {
        word += c;
      }
    }
    choices.push_back(word);
  }
  return choices;
}

// Returns whether an option's value names a file: config files and the ready file.
bool TakesFile(const CLI::Option& option) {
  for (const std::string& name : option.get_lnames()) {
    if (name == "config" || name.ends_with("-file")) {
      return true;
    }
  }
  return false;
}

CompletionCommand Describe(CLI::App& app) {
  CompletionCommand command;
  command.name = app.get_name();
  command.description = ShortDescription(app.get_description());
  for (CLI::Option* option : app.get_options()) {
    if (option->get_positional()) {
      std::vector<std::string> choices = Choices(*option);
      command.argument_choices.insert(command.argument_choices.end(), choices.begin(),
                                      choices.end());
      continue;
    }
    CompletionOption described;
    for (const std::string& name : option->get_lnames()) {
      described.names.push_back("--" + name);
    }
    for (const std::string& name : option->get_snames()) {
      described.names.push_back("-" + name);
    }
    described.description = ShortDescription(option->get_description());
    described.takes_value = option->get_expected_max() != 0;
    described.choices = Choices(*option);
    described.file = described.takes_value && TakesFile(*option);
    command.options.push_back(std::move(described));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    command.subcommands.push_back(Describe(*sub));
  }
  return command;
}

}  // namespace

void AddCompletionCommand(CLI::App& app, Action& action) {
  auto shell = std::make_shared<std::string>();
  CLI::App* completion = app.add_subcommand(
      "completion",
      "Print a shell completion script for stagehand's commands and options (bash, zsh or "
      "fish)");
  completion->add_option("shell", *shell, "The shell: bash, zsh or fish")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));
  completion->footer(
      "It completes commands, options, their fixed values (e.g. --log-format text|json) and file "
      "names for --config; not plugin or task ids.\n"
      "Example:\n"
      "  source <(stagehand completion bash)      # bash, this shell\n"
      "  stagehand completion bash > ~/.local/share/bash-completion/completions/stagehand\n"
      "  source <(stagehand completion zsh)       # zsh, after compinit\n"
      "  stagehand completion zsh > \"${fpath[1]}/_stagehand\"\n"
      "  stagehand completion fish | source       # fish, this shell\n"
      "  stagehand completion fish > ~/.config/fish/completions/stagehand.fish");
  completion->callback([shell, &app, &action] {
    action = [shell, &app](const Context& context) {
      context.out << CompletionScript(*shell, Describe(app));
      context.out.flush();
      return kExitOk;
    };
  });
}

}  // namespace stagehand::cli
