// Structured logging seen by every layer: a message plus key/value fields (task id, plugin, ...).
// The backend decides where lines go and in which format (text for people, JSON for machines).
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stagehand {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

// Returns "debug", "info", "warn" or "error".
std::string_view LogLevelName(LogLevel level);

using LogFields = std::vector<std::pair<std::string, std::string>>;

// Receives log records. Implementations are thread-safe. Logging never throws and never blocks
// for long; callers must not hold locks while logging.
class Logger {
 public:
  virtual ~Logger() = default;

  virtual void Log(LogLevel level, std::string_view message, const LogFields& fields) = 0;
  // Returns whether records at `level` are kept (so callers can skip building expensive ones).
  virtual bool Enabled(LogLevel level) const = 0;

  void Debug(std::string_view message, const LogFields& fields = {}) {
    Log(LogLevel::kDebug, message, fields);
  }
  void Info(std::string_view message, const LogFields& fields = {}) {
    Log(LogLevel::kInfo, message, fields);
  }
  void Warn(std::string_view message, const LogFields& fields = {}) {
    Log(LogLevel::kWarn, message, fields);
  }
  void Error(std::string_view message, const LogFields& fields = {}) {
    Log(LogLevel::kError, message, fields);
  }
};

// Returns a logger that adds `fields` to every record and forwards to `parent` (which must
// outlive it), like Backstage's logger.child({...}).
std::shared_ptr<Logger> ChildLogger(std::shared_ptr<Logger> parent, LogFields fields);

// Returns a logger that drops everything.
std::shared_ptr<Logger> NullLogger();

}  // namespace stagehand
