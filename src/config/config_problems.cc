#include "stagehand/config/config_problems.h"

#include <fmt/format.h>

#include <utility>

namespace stagehand {

void ConfigProblems::Add(const Status& status) {
  std::string_view rest = status.message();
  while (!rest.empty()) {
    const std::size_t end = rest.find('\n');
    if (const std::string_view line = rest.substr(0, end); !line.empty()) {
      lines_.emplace_back(line);
    }
    if (end == std::string_view::npos) {
      break;
    }
    rest.remove_prefix(end + 1);
  }
}

void ConfigProblems::Add(std::string problem) { lines_.push_back(std::move(problem)); }

Status ConfigProblems::ToStatus() const {
  if (lines_.empty()) {
    return Status::Ok();
  }
  return InvalidArgumentError(fmt::format("{}", fmt::join(lines_, "\n")));
}

std::string InvalidConfigValue(const Config& config, std::string_view key, std::string_view why) {
  return fmt::format("Invalid config value for key '{}' in '{}': {}", config.FullKey(key),
                     config.Context(key), why);
}

}  // namespace stagehand
