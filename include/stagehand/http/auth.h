// Bearer-token authentication of plugin routes, as Backstage's default auth policy applies it to
// external callers configured under `backend.auth.externalAccess` with `type: static`. A request
// without a valid `Authorization: Bearer <token>` gets 401 with Backstage's error body
// (AuthenticationError). Tokens are compared in constant time and never logged.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "stagehand/base/logger.h"
#include "stagehand/http/http_message.h"

namespace stagehand {

// One `externalAccess` entry of type static.
struct StaticAccessToken {
  std::string token;
  std::string subject;  // who the caller is, for logs (e.g. "cli-operator")
};

// Returns a handler that answers 401 unless the request carries one of `tokens` as a bearer token,
// and otherwise calls `inner` with the request's principal set to that token's subject. With no
// tokens every request is refused. `logger` receives one debug record per refusal (method, path,
// reason; never the presented token). Thread-safe when `inner` is.
HttpHandler RequireBearerToken(HttpHandler inner, std::vector<StaticAccessToken> tokens,
                               std::shared_ptr<Logger> logger = nullptr);

}  // namespace stagehand
