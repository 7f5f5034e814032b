// The command line's HTTP client for the daemon's REST API: where the daemon is (--url), path
// segment encoding, and one small blocking client with short timeouts. Private to the cli module;
// no httplib type appears here.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"

namespace stagehand::cli {

// A parsed --url: `http://host[:port][/base/path]`. A value type; thread-compatible.
struct ServerUrl {
  std::string host;  // without the brackets of an IPv6 literal
  std::uint16_t port = 80;
  // Prefix of every request path, without a trailing slash ("" or "/stagehand").
  std::string base_path;

  // Returns the URL in canonical form, e.g. "http://127.0.0.1:7007" or "http://[::1]:7007/x".
  std::string ToString() const;
};

// Parses `text` with ParseUrl (stagehand/base/url.h). Only http is supported (httplib is built
// without TLS here); the scheme may be omitted ("127.0.0.1:7007"). Errors: kInvalidArgument
// "invalid --url '<text>': <what is wrong>" (https, what ParseUrl refuses, a query or fragment).
Result<ServerUrl> ParseServerUrl(std::string_view text);

// Returns `host` as it goes into a URL: IPv6 literals in brackets; the wildcard addresses a server
// listens on (0.0.0.0, ::, empty) become the loopback address a client can connect to.
std::string ConnectableHost(std::string_view host);

// Percent-encodes `segment` for use as one path segment: every byte but the unreserved ones
// (letters, digits, '-', '.', '_', '~') becomes %XX, so '/' and ' ' cannot split or end it.
std::string EncodePathSegment(std::string_view segment);

// An HTTP answer. A value type.
struct RestReply {
  int status = 0;
  std::string body;
};

// One daemon's REST API. Each call opens a connection, sends one request with the bearer token
// (when there is one) and waits for the answer within the timeouts. Thread-compatible.
class RestClient {
 public:
  RestClient(ServerUrl url, std::optional<std::string> token,
             std::chrono::milliseconds connect_timeout = std::chrono::seconds(3),
             std::chrono::milliseconds read_timeout = std::chrono::seconds(10));

  // Sends GET `path` (relative to the base path, starting with '/'). Any HTTP status is a
  // reply. Errors: kUnavailable "cannot reach the daemon at <url>: <why>" when no answer came
  // (connection refused, unknown host, connect or read timeout, connection closed).
  Result<RestReply> Get(std::string_view path) const;

  // Sends POST `path` with `json_body` (empty by default: Content-Length: 0) as
  // application/json, with an `Idempotency-Key: <idempotency_key>` header unless it is empty.
  // Errors: as Get, but kDeadlineExceeded when the request was sent and no answer came (it may
  // have been applied).
  Result<RestReply> Post(std::string_view path, std::string_view json_body = {},
                         std::string_view idempotency_key = {}) const;

  const ServerUrl& url() const { return url_; }
  bool has_token() const { return token_.has_value(); }

 private:
  Result<RestReply> Send(std::string_view method, std::string_view path, std::string_view body,
                         std::string_view idempotency_key) const;

  ServerUrl url_;
  std::optional<std::string> token_;
  std::chrono::milliseconds connect_timeout_;
  std::chrono::milliseconds read_timeout_;
};

}  // namespace stagehand::cli
