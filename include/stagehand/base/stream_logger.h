// The logger the stagehand program writes with: one line per record to a stdio stream, as text for
// people or as JSON for machines.
//   text: 2026-11-30T04:13:13.000Z info  Task worker starting plugin=jobs task=nightly
//   json: {"time":"2026-11-30T04:13:13.000Z","level":"info","message":"Task worker starting",
//          "plugin":"jobs","task":"nightly"}
// Text values that contain spaces, quotes, '=' or control characters are double-quoted with
// JSON escapes, so every line stays one line and parses back unambiguously.
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>

#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"

namespace stagehand {

enum class LogFormat { kText, kJson };

// Parses "text" or "json". Errors: kInvalidArgument naming the accepted values.
Result<LogFormat> ParseLogFormat(std::string_view text);

// Parses "debug", "info", "warn" or "error". Errors: kInvalidArgument naming the accepted values.
Result<LogLevel> ParseLogLevel(std::string_view text);

// Returns a thread-safe logger that writes records at `min_level` and above to `stream` (which must
// outlive it), one whole line per write, flushed per line. Timestamps are the system wall clock in
// UTC with milliseconds.
std::shared_ptr<Logger> MakeStreamLogger(std::FILE* stream, LogFormat format, LogLevel min_level);

}  // namespace stagehand
