// A Logger for executor tests: keeps every record and lets a test wait for one.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stagehand/base/logger.h"

namespace stagehand::testing {

struct LogRecord {
  LogLevel level;
  std::string message;
  LogFields fields;

  // Returns the value of field `key`, or "" when absent.
  std::string Field(std::string_view key) const {
    for (const auto& [k, v] : fields) {
      if (k == key) {
        return v;
      }
    }
    return "";
  }
};

// Keeps every record. Thread-safe.
class RecordingLogger final : public Logger {
 public:
  void Log(LogLevel level, std::string_view message, const LogFields& fields) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      records_.push_back(LogRecord{level, std::string(message), fields});
    }
    cv_.notify_all();
  }
  bool Enabled(LogLevel) const override { return true; }

  std::vector<LogRecord> Records() const {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }

  // Returns the messages of the records whose `stream` field is `stream`, in order.
  std::vector<std::string> Lines(std::string_view stream) const {
    std::vector<std::string> lines;
    for (const LogRecord& record : Records()) {
      if (record.Field("stream") == stream) {
        lines.push_back(record.message);
      }
    }
    return lines;
  }

  // Returns the first record with message `message`, waiting for it up to `limit` of real time.
  std::optional<LogRecord> WaitFor(std::string_view message,
                                   std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    return WaitFor([message](const LogRecord& r) { return r.message == message; }, limit);
  }

  // Returns the first record matching `match`, waiting for it up to `limit` of real time.
  std::optional<LogRecord> WaitFor(const std::function<bool(const LogRecord&)>& match,
                                   std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<LogRecord> found;
    cv_.wait_for(lock, limit, [&] {
      for (const LogRecord& record : records_) {
        if (match(record)) {
          found = record;
          return true;
        }
      }
      return false;
    });
    return found;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<LogRecord> records_;
};

}  // namespace stagehand::testing
