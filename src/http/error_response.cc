#include "stagehand/http/error_response.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <random>

namespace stagehand {
namespace {

// Backstage's log ids: 10 random bytes in hex.
std::string NewLogId() {
  std::random_device random;
  std::string id;
  id.reserve(20);
  for (int i = 0; i < 5; ++i) {
    id += fmt::format("{:04x}", random() & 0xFFFFu);
  }
  return id;
}

}  // namespace

HttpErrorClass HttpErrorClassFor(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return {400, "InputError"};
    case StatusCode::kNotFound:
      return {404, "NotFoundError"};
    case StatusCode::kConflict:
      return {409, "ConflictError"};
    case StatusCode::kUnauthenticated:
      return {401, "AuthenticationError"};
    case StatusCode::kUnavailable:
      return {503, "ServiceUnavailableError"};
    case StatusCode::kOk:
    case StatusCode::kCancelled:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kInternal:
      break;
  }
  return {500, "Error"};
}

HttpResponse ErrorResponse(const Status& error, const HttpRequest& request, Logger& logger) {
  STAGEHAND_CHECK(!error.ok());
  const HttpErrorClass error_class = HttpErrorClassFor(error.code());
  std::string message = error.message();
  if (error_class.status >= 500) {
    std::string log_id = NewLogId();
    message = fmt::format("An internal error occurred logId={}", log_id);
    logger.Error(fmt::format("Request failed with status {}", error_class.status),
                 {{"logId", log_id},
                  {"method", request.method},
                  {"path", request.path},
                  {"error", error.ToString()}});
  }
  nlohmann::ordered_json body;
  body["error"]["name"] = error_class.name;
  body["error"]["message"] = message;
  body["request"]["method"] = request.method;
  body["request"]["url"] = request.Url();
  body["response"]["statusCode"] = error_class.status;
  HttpResponse response;
  response.status = error_class.status;
  response.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
  response.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return response;
}

}  // namespace stagehand
