// A run's error as a task row records it (last_run_error_json): Backstage's serialized error
// (ErrorJson), in which stagehand records the attempt that failed when it schedules a retry
// (docs/adr/0015-retries.md), as a stagehand-only "attempt" key that Backstage ignores; the host
// that runs the retry reads it from the row. The one codec of that column's attempt: stores decode
// it where they read the row, and the engine encodes it. Plain value type; thread-safe.
#pragma once

#include <string>
#include <utility>

namespace stagehand {

class RunError {
 public:
  // Decodes a stored error; Encode() gives it back byte for byte.
  static RunError Decode(std::string stored);
  // The error `error_json` (an error object) with the failed attempt `attempt` recorded; text that
  // does not end as an object does is kept as it is.
  static RunError Retried(std::string error_json, int attempt);

  // The error's stored text.
  const std::string& Encode() const { return json_; }
  // The attempt the error records as failed and retried (at most kMaxRetryAttempts + 1), or 0
  // when it records none: the next run of the task is then its attempt that plus one.
  int retried_attempt() const { return retried_attempt_; }

  friend bool operator==(const RunError&, const RunError&) = default;

 private:
  RunError(std::string json, int retried_attempt)
      : json_(std::move(json)), retried_attempt_(retried_attempt) {}

  std::string json_;
  int retried_attempt_ = 0;
};

}  // namespace stagehand
