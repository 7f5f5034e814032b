#include "stagehand/base/stream_logger.h"

#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>
#include <utility>

#include "stagehand/base/json_string.h"
#include "stagehand/base/mutex.h"

namespace stagehand {
namespace {

// Returns whether a text-format value must be quoted to stay on one line and parse back:
// empty, or holding a space, a control character, '"', '=' or invalid UTF-8. A message may hold
// spaces (it is followed only by key=value fields, which it then cannot be confused with).
bool NeedsQuoting(std::string_view text, bool spaces_allowed) {
  if (text.empty()) {
    return true;
  }
  std::size_t i = 0;
  while (i < text.size()) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u >= 0x80) {
      const std::size_t length = Utf8SequenceLength(text, i);
      if (length == 0) {
        return true;
      }
      i += length;
      continue;
    }
    if (u < 0x20 || u == 0x7F || u == '"' || u == '=' || (u == ' ' && !spaces_allowed)) {
      return true;
    }
    ++i;
  }
  return false;
}

void AppendTextValue(std::string& out, std::string_view text, bool spaces_allowed) {
  if (NeedsQuoting(text, spaces_allowed)) {
    AppendJsonString(out, text);
  } else {
    out.append(text);
  }
}

// Returns the wall-clock time in UTC as "2026-11-30T04:13:13.000Z".
std::string Timestamp() {
  const auto now = std::chrono::system_clock::now();
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  auto seconds = static_cast<std::time_t>(millis / 1000);
  auto fraction = static_cast<int>(millis % 1000);
  if (fraction < 0) {
    fraction += 1000;
    --seconds;
  }
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[32];
  const int written = std::snprintf(buffer, sizeof(buffer), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                                    utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour,
                                    utc.tm_min, utc.tm_sec, fraction);
  return {buffer, written > 0 ? static_cast<std::size_t>(written) : 0};
}

bool IsReservedJsonKey(std::string_view key) {
  return key == "time" || key == "level" || key == "message";
}

class StreamLogger final : public Logger {
 public:
  StreamLogger(std::FILE* stream, LogFormat format, LogLevel min_level)
      : stream_(stream), format_(format), min_level_(min_level) {}

  void Log(LogLevel level, std::string_view message, const LogFields& fields) override {
    if (!Enabled(level)) {
      return;
    }
    const std::string line = format_ == LogFormat::kJson ? JsonLine(level, message, fields)
                                                         : TextLine(level, message, fields);
    // One fwrite per line under the mutex: lines from concurrent callers never interleave.
    MutexLock lock(mutex_);
    std::fwrite(line.data(), 1, line.size(), stream_);
    std::fflush(stream_);
  }

  bool Enabled(LogLevel level) const override {
    return static_cast<int>(level) >= static_cast<int>(min_level_);
  }

 private:
  static std::string TextLine(LogLevel level, std::string_view message, const LogFields& fields) {
    std::string line = Timestamp();
    line += ' ';
    const std::string_view name = LogLevelName(level);
    line.append(name);
    line.append(name.size() < 5 ? 5 - name.size() : 0, ' ');
    line += ' ';
    AppendTextValue(line, message, /*spaces_allowed=*/true);
    for (const auto& [key, value] : fields) {
      line += ' ';
      AppendTextValue(line, key, /*spaces_allowed=*/false);
      line += '=';
      AppendTextValue(line, value, /*spaces_allowed=*/false);
    }
    line += '\n';
    return line;
  }

  static std::string JsonLine(LogLevel level, std::string_view message, const LogFields& fields) {
    std::string line = "{\"time\":";
    AppendJsonString(line, Timestamp());
    line += ",\"level\":";
    AppendJsonString(line, LogLevelName(level));
    line += ",\"message\":";
    AppendJsonString(line, message);
    for (const auto& [key, value] : fields) {
      line += ',';
      // A field may not replace the record's own keys (parsers keep the last duplicate).
      AppendJsonString(line, IsReservedJsonKey(key) ? "fields." + key : key);
      line += ':';
      AppendJsonString(line, value);
    }
    line += "}\n";
    return line;
  }

  // Written only with mutex_ held (the analysis cannot check that: fwrite takes the pointer).
  std::FILE* const stream_;
  const LogFormat format_;
  const LogLevel min_level_;
  Mutex mutex_;
};

}  // namespace

Result<LogFormat> ParseLogFormat(std::string_view text) {
  if (text == "text") {
    return LogFormat::kText;
  }
  if (text == "json") {
    return LogFormat::kJson;
  }
  return InvalidArgumentError("Invalid log format '" + std::string(text) +
                              "', expected one of: text, json");
}

Result<LogLevel> ParseLogLevel(std::string_view text) {
  for (LogLevel level : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (text == LogLevelName(level)) {
      return level;
    }
  }
  return InvalidArgumentError("Invalid log level '" + std::string(text) +
                              "', expected one of: debug, info, warn, error");
}

std::shared_ptr<Logger> MakeStreamLogger(std::FILE* stream, LogFormat format, LogLevel min_level) {
  return std::make_shared<StreamLogger>(stream, format, min_level);
}

}  // namespace stagehand
