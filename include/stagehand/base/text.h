// Text helpers for messages: the one way a multi-line message is put on one line (log fields,
// command-line errors, table cells).
#pragma once

#include <string>
#include <string_view>

namespace stagehand {

// Returns `text` on one line: each line break, with the spaces, tabs and carriage returns around
// it, becomes "; ", and empty lines are dropped ("a \n\n b\n" is "a; b"). Thread-safe.
std::string OneLine(std::string_view text);

}  // namespace stagehand
