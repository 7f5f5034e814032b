// Text helpers: the one way a multi-line message is put on one line (log fields, command-line
// errors, table cells), and the one ASCII case-insensitive comparison and whitespace trim.
#pragma once

#include <string>
#include <string_view>

namespace stagehand {

// Returns `text` on one line: each line break, with the spaces, tabs and carriage returns around
// it, becomes "; ", and empty lines are dropped ("a \n\n b\n" is "a; b"). Thread-safe.
std::string OneLine(std::string_view text);

// Returns `text` without the spaces and tabs around it (HTTP's optional whitespace, as in header
// values and their lists). Thread-safe.
std::string_view TrimSpacesAndTabs(std::string_view text);

// Returns whether `a` and `b` are equal ignoring ASCII case (HTTP header names, path segments).
// Thread-safe.
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

}  // namespace stagehand
