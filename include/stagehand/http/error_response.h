// Backstage's error responses: the one place where a Status becomes an HTTP status, an error name
// and the JSON error body of Backstage's MiddlewareFactory.error.
#pragma once

#include <string>
#include <string_view>

#include "stagehand/base/logger.h"
#include "stagehand/base/status.h"
#include "stagehand/http/http_message.h"

namespace stagehand {

// An HTTP status and the Backstage error class name that goes with it.
struct HttpErrorClass {
  int status = 500;
  std::string_view name = "Error";
  // Whether the Status's message is the response's message; else it is replaced by a log id.
  bool shows_message = false;
};

// Returns the HTTP status and error name of `code`: kInvalidArgument → 400 InputError,
// kNotFound → 404 NotFoundError, kConflict → 409 ConflictError, kUnavailable → 503
// ServiceUnavailableError, kUnimplemented → 501 NotImplementedError (Backstage's name for it),
// anything else → 500 Error. 4xx and 501 show their message. The only such mapping in stagehand.
HttpErrorClass HttpErrorClassFor(StatusCode code);

// Returns Backstage's error body for `error` (not OK) answering `request`:
// {"error":{"name","message"},"request":{"method","url"},"response":{"statusCode"}}, where url is
// request.Url(). For a 500 or 503 (an unavailable database's message may name hosts or SQL) the
// message is replaced by "An internal error occurred logId=<20 hex>" and the real error is logged
// at error level with that logId, so no detail leaves the process. A 501's message is stagehand's
// own advice on what is switched off and how to turn it on, and is shown.
HttpResponse ErrorResponse(const Status& error, const HttpRequest& request, Logger& logger);

// Returns Backstage's error body for a 4xx `status` that the server produces itself, before any
// route sees the request (400 malformed request, 408, 411, 413, 414, 416, 431), or for its 503
// when it has no room for a connection or request, with the name and
// message Express's http-errors gives that status (413 → PayloadTooLargeError "request entity
// too large"). `request` holds what could be parsed (its method and url may be empty).
HttpResponse ProtocolErrorResponse(int status, const HttpRequest& request);

}  // namespace stagehand
