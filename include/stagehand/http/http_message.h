// Transport-independent HTTP messages and handlers, so routers can be written and tested without
// a server. The server (http_server.h) turns wire requests into HttpRequest and back.
#pragma once

#include <functional>
#include <memory>
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
  // Who sent it, as authentication established it (RequireBearerToken: the token's subject);
  // empty when no authentication ran. Never taken from the request itself.
  std::string principal;

  // Returns the path followed by "?query" when there is a query: the URL as received.
  std::string Url() const;
};

// The sending end of a response body that is produced over time (server-sent events). The server
// creates it and hands it to HttpResponse::stream; the producer keeps it and may write from any
// thread. Writing never blocks: a client that does not keep up is cut off instead.
class HttpBodyWriter {
 public:
  virtual ~HttpBodyWriter() = default;
  // Queues `data` to be sent after what was queued before. Returns false, dropping `data`, once
  // the stream is closed: the client went away, fell too far behind, or the server stopped.
  virtual bool Write(std::string data) = 0;
  // Ends the body after what is queued. Idempotent.
  virtual void Close() = 0;
  // Returns whether the stream is closed (Write would return false).
  virtual bool closed() const = 0;
  // Registers `callback` to run once when the stream closes, for any reason, on the thread that
  // closes it (at once on this one when it already is): a producer's cue to let go of the writer.
  virtual void OnClose(std::function<void()> callback) = 0;
};

// One response. Plain value type. For a HEAD request the transport sends the headers of the body
// (its length) without the body itself, so handlers answer HEAD as they answer GET.
struct HttpResponse {
  int status = 200;
  HttpHeaders headers;
  std::string body;
  // When set, the body is streamed and `body` is ignored: the server sends the status and headers
  // (the body chunked, the connection closed after it), then calls `stream` once with the writer.
  // It runs on the server's I/O thread, so it must only keep the writer and return.
  std::function<void(std::shared_ptr<HttpBodyWriter>)> stream;
};

// Handles a request, or returns nullopt when no route matches (the caller then answers 404 with an
// empty body, as Express's final handler does). Must be thread-safe: servers call it concurrently.
using HttpHandler = std::function<std::optional<HttpResponse>(const HttpRequest&)>;

// Returns `text` with %XX escapes decoded as JavaScript's decodeURIComponent does: '+' stays '+',
// escaped bytes must form valid UTF-8. Errors: kInvalidArgument when a '%' is not followed by two
// hex digits or the escaped bytes are not valid UTF-8.
Result<std::string> DecodeUriComponent(std::string_view text);

// Returns the values of the parameter `name` in the raw query string `query` ("a=1&b=2&a=3" gives
// {"1","3"} for "a"), in order; a parameter without '=' has the empty value. Names and values are
// decoded as forms encode them: '+' is a space, then DecodeUriComponent. Errors: kInvalidArgument
// "Failed to decode query parameter '<name>'" when a value of `name` is not valid encoding.
Result<std::vector<std::string>> QueryParameterValues(std::string_view query,
                                                      std::string_view name);

}  // namespace stagehand
