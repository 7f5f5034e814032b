// Collects every problem found while reading a config, so that one run reports them all (a user
// fixes a file once, not once per error). Each problem is one line that names the key and the file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/config/config.h"

namespace stagehand {

// Thread-compatible.
class ConfigProblems {
 public:
  // Adds each non-empty line of a failed `status`'s message as its own problem; OK adds nothing.
  void Add(const Status& status);
  void Add(std::string problem);

  bool empty() const { return lines_.empty(); }
  const std::vector<std::string>& lines() const { return lines_; }

  // Returns OK when there are no problems, else kInvalidArgument with one problem per line.
  Status ToStatus() const;

 private:
  std::vector<std::string> lines_;
};

// Returns ConfigReader's message for a value that has the right type but is not acceptable:
// "Invalid config value for key '<full key>' in '<file>': <why>".
std::string InvalidConfigValue(const Config& config, std::string_view key, std::string_view why);

}  // namespace stagehand
