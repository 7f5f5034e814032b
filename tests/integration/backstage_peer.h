// Running Backstage 0.19 itself from integration tests: bench/backstage-peer/peer.js in node, with
// the npm packages that bench/backstage-peer/install.sh installs (once per process) into the cache
// bench/side_by_side.sh fills. Tests that install must run alone (RUN_SERIAL).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <optional>
#include <string>

namespace stagehand::peer_test {

struct Command {
  int exit_code = -1;
  std::string out;
};

// Runs `command` with /bin/sh and returns its exit code and standard output (its standard error
// goes to the test's).
inline Command RunShell(const std::string& command) {
  Command result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) {
    result.out.append(buffer.data(), n);
  }
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Returns `text` quoted for /bin/sh.
inline std::string Quote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

// Returns the name of the first of node and npm that is not installed, or nullopt.
inline std::optional<std::string> MissingTool() {
  for (const char* tool : {"node", "npm"}) {
    if (RunShell(std::string("command -v ") + tool + " >/dev/null").exit_code != 0) return tool;
  }
  return std::nullopt;
}

// The peer's node_modules folder, installed once per process; nullopt when the install failed.
inline const std::optional<std::string>& Modules() {
  static const std::optional<std::string> modules = []() -> std::optional<std::string> {
    Command installed = RunShell(Quote(STAGEHAND_SOURCE_DIR "/bench/backstage-peer/install.sh"));
    while (!installed.out.empty() && installed.out.back() == '\n') installed.out.pop_back();
    if (installed.exit_code != 0 || installed.out.empty()) return std::nullopt;
    return installed.out;
  }();
  return modules;
}

// Runs Backstage's migrator (peer.js --migrate-check) on `database` of the server at `url`
// (postgresql:// or mysql://), in `schema` when not empty, and returns its JSON report.
inline Command RunBackstageMigrator(const std::string& url, const std::string& database,
                                    const std::string& schema = "") {
  std::string command = "node " + Quote(STAGEHAND_SOURCE_DIR "/bench/backstage-peer/peer.js") +
                        " --url=" + Quote(url) + " --modules=" + Quote(*Modules()) +
                        " --migrate-check=" + Quote(database);
  if (!schema.empty()) command += " --schema=" + Quote(schema);
  return RunShell(command);
}

}  // namespace stagehand::peer_test
