#include "stagehand/base/status.h"

#include <cstdio>
#include <cstdlib>
#include <ostream>

namespace stagehand {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kConflict:
      return "CONFLICT";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithPrefix(std::string_view prefix) const {
  if (ok()) return *this;
  std::string message(prefix);
  message += message_;
  return {code_, std::move(message)};
}

std::ostream& operator<<(std::ostream& out, const Status& status) {
  return out << status.ToString();
}

Status InvalidArgumentError(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}
Status NotFoundError(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
Status ConflictError(std::string message) { return {StatusCode::kConflict, std::move(message)}; }
Status UnavailableError(std::string message) {
  return {StatusCode::kUnavailable, std::move(message)};
}
Status CancelledError(std::string message) { return {StatusCode::kCancelled, std::move(message)}; }
Status DeadlineExceededError(std::string message) {
  return {StatusCode::kDeadlineExceeded, std::move(message)};
}
Status FailedPreconditionError(std::string message) {
  return {StatusCode::kFailedPrecondition, std::move(message)};
}
Status UnimplementedError(std::string message) {
  return {StatusCode::kUnimplemented, std::move(message)};
}
Status InternalError(std::string message) { return {StatusCode::kInternal, std::move(message)}; }

namespace internal {
void CheckFailed(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "stagehand: check failed: %s at %s:%d\n", condition, file, line);
  std::fflush(stderr);
  std::abort();
}
}  // namespace internal

}  // namespace stagehand
