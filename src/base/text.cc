#include "stagehand/base/text.h"

namespace stagehand {

std::string OneLine(std::string_view text) {
  constexpr std::string_view kBlank = " \t\r";
  std::string line;
  while (true) {
    const std::size_t end = text.find('\n');
    std::string_view piece = text.substr(0, end);
    const std::size_t first = piece.find_first_not_of(kBlank);
    if (first != std::string_view::npos) {
      piece = piece.substr(first, piece.find_last_not_of(kBlank) - first + 1);
      if (!line.empty()) {
        line += "; ";
      }
      line += piece;
    }
    if (end == std::string_view::npos) {
      return line;
    }
    text.remove_prefix(end + 1);
  }
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  const auto lower = [](char c) {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  };
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string_view TrimSpacesAndTabs(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace stagehand
