// The text the client verbs print: aligned tables (`tasks`, `runs`), cells padded to their
// column's width in code points and optionally coloured with ANSI escapes that the alignment
// ignores, and words quoted for a shell. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::cli {

inline constexpr std::string_view kBold = "\033[1m";
inline constexpr std::string_view kGreen = "\033[32m";
inline constexpr std::string_view kYellow = "\033[33m";
inline constexpr std::string_view kRed = "\033[31m";

// One cell: its text and the colour it is shown in (empty for none). A value type.
struct Cell {
  std::string text;
  std::string_view colour;
};

// Returns the number of code points in the UTF-8 `text`: its width in a table.
std::size_t DisplayWidth(std::string_view text);

// Returns the first `max_chars` code points of `text`, with "…" in place of the last one when
// `text` is longer.
std::string Truncate(std::string_view text, std::size_t max_chars);

// Returns `word` as a POSIX shell reads it back as one word: unchanged when it is made of letters,
// digits and "-._/:=@%+,", else in single quotes (each ' written as '\'').
std::string ShellQuote(std::string_view word);

// Returns the lines of `rows` (the first is the header, shown bold when `colour`), each cell
// padded to its column's width plus two blanks, the last column unpadded; every line ends with
// '\n'. Every row must have as many cells as the header. With `colour`, cells with a colour are
// wrapped in its escape and a reset.
std::string RenderTable(const std::vector<std::vector<Cell>>& rows, bool colour);

}  // namespace stagehand::cli
