// Transport-independent HTTP messages and handlers, so routers can be written and tested without
// a server. The server (http_server.h) turns wire requests into HttpRequest and back.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stagehand/base/status.h"

namespace stagehand {

// Header name/value pairs in the order received or to be sent. Names compare case-insensitively.
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Returns the value of the first header named `name` (case-insensitive), or nullopt.
std::optional<std::string_view> FindHeader(const HttpHeaders& headers, std::string_view name);

// One request. Plain value type.
struct HttpRequest {
  std::string method;  // "GET", "POST", ... as received (HTTP methods are case-sensitive).
  std::string path;    // The raw path as received: percent-encoding is not decoded.
  std::string query;   // The raw query string after '?', without the '?'; empty when absent.
  HttpHeaders headers;
  std::string body;

  // Returns the path followed by "?query" when there is a query: the URL as received.
  std::string Url() const;
};

// One response. Plain value type. For a HEAD request the transport sends the headers of the body
// (its length) without the body itself, so handlers answer HEAD as they answer GET.
struct HttpResponse {
  int status = 200;
  HttpHeaders headers;
  std::string body;
};

// Handles a request, or returns nullopt when no route matches (the caller then answers 404 with an
// empty body, as Express's final handler does). Must be thread-safe: servers call it concurrently.
using HttpHandler = std::function<std::optional<HttpResponse>(const HttpRequest&)>;

// Returns `text` with %XX escapes decoded as JavaScript's decodeURIComponent does: '+' stays '+',
// escaped bytes must form valid UTF-8. Errors: kInvalidArgument when a '%' is not followed by two
// hex digits or the escaped bytes are not valid UTF-8.
Result<std::string> DecodeUriComponent(std::string_view text);

}  // namespace stagehand
