// Expected failures as values. Every fallible stagehand operation returns a Status or a Result<T>.
// Bugs are not Statuses: they abort through STAGEHAND_CHECK (base/check.h).
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "stagehand/base/check.h"

namespace stagehand {

// The failure classes callers branch on. Each maps to exactly one HTTP status in the http layer.
enum class StatusCode {
  kOk,
  kInvalidArgument,   // Bad input: config, cron, durations, ids, request bodies.
  kNotFound,          // The named task, plugin or row does not exist.
  kConflict,          // The request is valid but the current state forbids it.
  kUnauthenticated,   // The caller presented no valid credentials.
  kUnavailable,       // The environment failed (database down, connection lost); retrying may help.
  kCancelled,         // The operation was stopped through a stop token.
  kDeadlineExceeded,  // The operation ran out of time.
  kFailedPrecondition,  // The system is not in a state to do this (e.g. unknown migration).
  kUnimplemented,       // This deployment does not offer it (e.g. its run history is off).
  kInternal,            // Something that should not happen; details are logged, not shown.
};

// Returns the canonical name of `code`, e.g. "NOT_FOUND".
std::string_view StatusCodeName(StatusCode code);

// A code plus a human-readable message. Thread-compatible value type.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns "CODE: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is `prefix` followed by this message.
  Status WithPrefix(std::string_view prefix) const;

  friend bool operator==(const Status&, const Status&) = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Writes status.ToString() (test failure messages, logs).
std::ostream& operator<<(std::ostream& out, const Status& status);

Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status ConflictError(std::string message);
Status UnavailableError(std::string message);
Status CancelledError(std::string message);
Status DeadlineExceededError(std::string message);
Status FailedPreconditionError(std::string message);
Status UnimplementedError(std::string message);
Status InternalError(std::string message);

// Either a T or a non-OK Status. Thread-compatible value type.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    STAGEHAND_CHECK(!status_.ok());
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & {
    STAGEHAND_CHECK(ok());
    return *value_;
  }
  const T& value() const& {
    STAGEHAND_CHECK(ok());
    return *value_;
  }
  T&& value() && {
    STAGEHAND_CHECK(ok());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace stagehand

// Evaluates `expr` (a Status or Result) and returns its Status from the calling function if not OK.
#define STAGEHAND_RETURN_IF_ERROR(expr)                             \
  do {                                                              \
    if (auto stagehand_status_ = (expr); !stagehand_status_.ok()) { \
      return ::stagehand::internal::StatusOf(stagehand_status_);    \
    }                                                               \
  } while (false)

// Evaluates `expr` (a Result<T>); returns its Status from the calling function if not OK, else
// moves the value into `lhs`, which may declare a variable (`auto row`, `const Row& row`) or name
// one. Expands to several statements: do not use it as the body of an unbraced if or loop.
#define STAGEHAND_ASSIGN_OR_RETURN(lhs, expr) \
  STAGEHAND_ASSIGN_OR_RETURN_IMPL_(STAGEHAND_STATUS_CONCAT_(stagehand_result_, __LINE__), lhs, expr)

#define STAGEHAND_STATUS_CONCAT_INNER_(a, b) a##b
#define STAGEHAND_STATUS_CONCAT_(a, b) STAGEHAND_STATUS_CONCAT_INNER_(a, b)
#define STAGEHAND_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                     \
  if (!result.ok()) return result.status();                 \
  lhs = std::move(result).value()

namespace stagehand::internal {
inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}
}  // namespace stagehand::internal
