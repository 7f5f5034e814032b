// JSON string literals written by hand where the exact bytes matter: settings_json must match what
// Backstage's JSON.stringify writes, and log lines must stay valid JSON whatever a message holds.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace stagehand {

// Returns the length of the valid UTF-8 sequence starting at text[i], or 0 when none starts there
// (stray continuation bytes, overlong forms, surrogates, code points above U+10FFFF, truncation).
std::size_t Utf8SequenceLength(std::string_view text, std::size_t i);

// Appends `text` as a JSON string literal, escaped as JavaScript's JSON.stringify escapes: '"',
// '\\' and the control characters below U+0020 (short forms \b \f \n \r \t, else \u00XX); every
// other character is written as is. Each byte that does not start a valid UTF-8 sequence becomes
// U+FFFD, so the result is always valid JSON.
void AppendJsonString(std::string& out, std::string_view text);

}  // namespace stagehand
