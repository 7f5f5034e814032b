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

HttpResponse ErrorBody(int status, std::string_view name, std::string_view message,
                       const HttpRequest& request) {
  nlohmann::ordered_json body;
  body["error"]["name"] = name;
  body["error"]["message"] = message;
  body["request"]["method"] = request.method;
  body["request"]["url"] = request.Url();
  body["response"]["statusCode"] = status;
  HttpResponse response;
  response.status = status;
  response.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
  response.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return response;
}

}  // namespace

HttpErrorClass HttpErrorClassFor(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return {400, "InputError", true};
    case StatusCode::kNotFound:
      return {404, "NotFoundError", true};
    case StatusCode::kConflict:
      return {409, "ConflictError", true};
    case StatusCode::kUnauthenticated:
      return {401, "AuthenticationError", true};
    case StatusCode::kUnavailable:
      return {503, "ServiceUnavailableError"};
    case StatusCode::kUnimplemented:
      return {501, "NotImplementedError", true};
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
  if (!error_class.shows_message) {
    std::string log_id = NewLogId();
    message = fmt::format("An internal error occurred logId={}", log_id);
    const LogFields fields{{"logId", log_id},
                           {"method", request.method},
                           {"path", request.path},
                           {"error", error.ToString()}};
    const std::string line = fmt::format("Request failed with status {}", error_class.status);
    // A database that does not answer fails every request until it is back, and the engine
    // reports the outage itself: a warning each, not an error.
    if (error.code() == StatusCode::kUnavailable) {
      logger.Warn(line, fields);
    } else {
      logger.Error(line, fields);
    }
  }
  return ErrorBody(error_class.status, error_class.name, message, request);
}

HttpResponse ProtocolErrorResponse(int status, const HttpRequest& request) {
  STAGEHAND_CHECK((status >= 400 && status < 500) || status == 503);
  // The names and messages of the http-errors package, which Express and its body parsers throw
  // and Backstage's error middleware serializes.
  switch (status) {
    case 400:
      return ErrorBody(status, "BadRequestError", "Bad Request", request);
    case 408:
      return ErrorBody(status, "RequestTimeoutError", "Request Timeout", request);
    case 411:
      return ErrorBody(status, "LengthRequiredError", "Length Required", request);
    case 413:
      return ErrorBody(status, "PayloadTooLargeError", "request entity too large", request);
    case 414:
      return ErrorBody(status, "URITooLongError", "URI Too Long", request);
    case 416:
      return ErrorBody(status, "RangeNotSatisfiableError", "Range Not Satisfiable", request);
    case 431:
      return ErrorBody(status, "RequestHeaderFieldsTooLargeError",
                       "Request Header Fields Too Large", request);
    case 503:
      return ErrorBody(status, "ServiceUnavailableError", "Service Unavailable", request);
    default:
      return ErrorBody(status, "Error", fmt::format("Request failed with status {}", status),
                       request);
  }
}

}  // namespace stagehand
