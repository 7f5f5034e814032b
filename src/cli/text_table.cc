#include "cli/text_table.h"

#include <algorithm>
#include <cctype>

#include "stagehand/base/check.h"

namespace stagehand::cli {
namespace {

constexpr std::string_view kReset = "\033[0m";

bool StartsCodePoint(char c) { return (static_cast<unsigned char>(c) & 0xC0U) != 0x80U; }

}  // namespace

std::size_t DisplayWidth(std::string_view text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), StartsCodePoint));
}

std::string Truncate(std::string_view text, std::size_t max_chars) {
  if (DisplayWidth(text) <= max_chars) {
    return std::string(text);
  }
  std::string cut;
  std::size_t chars = 0;
  for (char c : text) {
    if (StartsCodePoint(c) && ++chars == max_chars) {
      break;
    }
    cut += c;
  }
  return cut + "…";
}

std::string ShellQuote(std::string_view word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("-._/:=@%+,").find(c) != std::string_view::npos;
  });
  if (plain) {
    return std::string(word);
  }
  std::string quoted = "'";
  for (char c : word) {
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return quoted + "'";
}

std::string RenderTable(const std::vector<std::vector<Cell>>& rows, bool colour) {
  if (rows.empty()) {
    return "";
  }
  const std::size_t columns = rows.front().size();
  std::vector<std::size_t> widths(columns, 0);
  for (const std::vector<Cell>& row : rows) {
    STAGEHAND_CHECK(row.size() == columns);
    for (std::size_t i = 0; i < columns; ++i) {
      widths[i] = std::max(widths[i], DisplayWidth(row[i].text));
    }
  }
  std::string out;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t i = 0; i < columns; ++i) {
      const Cell& cell = rows[r][i];
      const std::string_view cell_colour = r == 0 ? kBold : cell.colour;
      if (colour && !cell_colour.empty()) {
        out += std::string(cell_colour) + cell.text + std::string(kReset);
      } else {
        out += cell.text;
      }
      if (i + 1 < columns) {
        out += std::string(widths[i] - DisplayWidth(cell.text) + 2, ' ');
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace stagehand::cli
