#include "stagehand/config/config_problems.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

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

namespace {

char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// Returns the optimal string alignment distance between `a` and `b`, ignoring ASCII case.
std::size_t EditDistance(std::string_view a, std::string_view b) {
  const std::size_t width = b.size() + 1;
  std::vector<std::size_t> d((a.size() + 1) * width);
  const auto at = [&](std::size_t i, std::size_t j) -> std::size_t& { return d[i * width + j]; };
  for (std::size_t i = 0; i <= a.size(); ++i) {
    at(i, 0) = i;
  }
  for (std::size_t j = 0; j <= b.size(); ++j) {
    at(0, j) = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const bool same = AsciiLower(a[i - 1]) == AsciiLower(b[j - 1]);
      at(i, j) =
          std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + (same ? 0U : 1U)});
      if (i > 1 && j > 1 && AsciiLower(a[i - 1]) == AsciiLower(b[j - 2]) &&
          AsciiLower(a[i - 2]) == AsciiLower(b[j - 1])) {
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
      }
    }
  }
  return at(a.size(), b.size());
}

}  // namespace

std::optional<std::string_view> NearestKey(std::string_view key,
                                           std::span<const std::string_view> candidates) {
  const std::size_t limit = key.size() <= 5 ? 1 : 2;
  std::optional<std::string_view> nearest;
  std::size_t best = limit + 1;
  for (std::string_view candidate : candidates) {
    const std::size_t dot = candidate.rfind('.');
    const std::string_view last =
        dot == std::string_view::npos ? candidate : candidate.substr(dot + 1);
    if (const std::size_t distance = EditDistance(key, last); distance < best) {
      best = distance;
      nearest = candidate;
    }
  }
  return nearest;
}

std::string UnknownKeyMessage(std::string_view key, std::span<const std::string_view> known,
                              std::span<const std::string_view> elsewhere) {
  std::vector<std::string_view> candidates(known.begin(), known.end());
  candidates.insert(candidates.end(), elsewhere.begin(), elsewhere.end());
  if (std::optional<std::string_view> nearest = NearestKey(key, candidates)) {
    return fmt::format("unknown key '{}'; did you mean '{}'?", key, *nearest);
  }
  return fmt::format("unknown key '{}'; expected {}", key, fmt::join(known, ", "));
}

bool AddUnknownKeys(const Config& config, std::span<const std::string_view> known,
                    ConfigProblems& problems, std::span<const std::string_view> elsewhere) {
  bool all_known = true;
  for (const std::string& key : config.Keys()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) {
      continue;
    }
    all_known = false;
    const std::string message = UnknownKeyMessage(key, known, elsewhere);
    if (key.empty() || key.find('.') != std::string::npos) {
      problems.Add(fmt::format("Invalid config key '{}' in '{}': {}", config.FullKey(),
                               config.Context(), message));
    } else {
      problems.Add(InvalidConfigValue(config, key, message));
    }
  }
  return all_known;
}

}  // namespace stagehand
