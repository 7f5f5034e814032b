#include "cli/rest_client.h"

#include <httplib.h>

#include <cctype>
#include <string>
#include <utility>

#include "stagehand/base/url.h"

namespace stagehand::cli {
namespace {

// Returns why a request got no answer, for a message that ends "cannot reach ...: <why>".
std::string DescribeTransportError(httplib::Error error, std::chrono::milliseconds connect_timeout,
                                   std::chrono::milliseconds read_timeout) {
  switch (error) {
    case httplib::Error::Connection:
      return "connection refused or host unknown";
    case httplib::Error::ConnectionTimeout:
      return "no connection within " + std::to_string(connect_timeout.count()) + " ms";
    case httplib::Error::Read:
      return "no answer within " + std::to_string(read_timeout.count()) +
             " ms, or the connection was closed";
    case httplib::Error::Write:
      return "the connection was closed while sending";
    default:
      return "request failed (" + httplib::to_string(error) + ")";
  }
}

}  // namespace

std::string ServerUrl::ToString() const {
  return "http://" + ConnectableHost(host) + ":" + std::to_string(port) + base_path;
}

std::string ConnectableHost(std::string_view host) {
  if (host.empty() || host == "0.0.0.0") {
    return "127.0.0.1";
  }
  if (host == "::" || host == "[::]") {
    return "[::1]";
  }
  return UrlHost(host);
}

Result<ServerUrl> ParseServerUrl(std::string_view text) {
  const auto invalid = [text](std::string_view reason) {
    return InvalidArgumentError("invalid --url '" + std::string(text) +
                                "': " + std::string(reason));
  };
  // The scheme may be left out: "127.0.0.1:7007" is http://127.0.0.1:7007.
  const bool has_scheme = text.find("://") != std::string_view::npos;
  Result<Url> parsed = ParseUrl(has_scheme ? std::string(text) : "http://" + std::string(text));
  if (!parsed.ok()) {
    return invalid(parsed.status().message());
  }
  if (parsed->scheme == "https") {
    return invalid(
        "https is not supported; put a TLS proxy in front of stagehand or use http on a loopback "
        "or private address");
  }
  if (parsed->scheme != "http") {
    return invalid("the scheme must be http");
  }
  if (parsed->query || parsed->fragment) {
    return invalid("no query or fragment allowed");
  }
  ServerUrl url;
  url.host = std::move(parsed->host);
  url.port = parsed->port.value_or(80);
  std::string_view path = parsed->path;
  while (!path.empty() && path.back() == '/') {
    path.remove_suffix(1);
  }
  url.base_path = std::string(path);
  return url;
}

std::string EncodePathSegment(std::string_view segment) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string encoded;
  encoded.reserve(segment.size());
  for (char c : segment) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
      encoded += c;
    } else {
      encoded += '%';
      encoded += kHex[byte >> 4U];
      encoded += kHex[byte & 0x0FU];
    }
  }
  return encoded;
}

RestClient::RestClient(ServerUrl url, std::optional<std::string> token,
                       std::chrono::milliseconds connect_timeout,
                       std::chrono::milliseconds read_timeout)
    : url_(std::move(url)),
      token_(std::move(token)),
      connect_timeout_(connect_timeout),
      read_timeout_(read_timeout) {}

Result<RestReply> RestClient::Get(std::string_view path) const { return Send("GET", path, {}, {}); }

Result<RestReply> RestClient::Post(std::string_view path, std::string_view json_body,
                                   std::string_view idempotency_key) const {
  return Send("POST", path, json_body, idempotency_key);
}

Result<RestReply> RestClient::Send(std::string_view method, std::string_view path,
                                   std::string_view body, std::string_view idempotency_key) const {
  httplib::Client client(url_.host, url_.port);
  client.set_connection_timeout(connect_timeout_);
  client.set_read_timeout(read_timeout_);
  client.set_write_timeout(read_timeout_);
  client.set_keep_alive(false);
  httplib::Headers headers{{"Accept", "application/json"}};
  if (token_) {
    headers.emplace("Authorization", "Bearer " + *token_);
  }
  if (!idempotency_key.empty()) {
    headers.emplace("Idempotency-Key", std::string(idempotency_key));
  }
  const std::string full_path = url_.base_path + std::string(path);
  httplib::Result result =
      method == "GET" ? client.Get(full_path, headers)
                      : client.Post(full_path, headers, std::string(body), "application/json");
  if (!result) {
    const std::string why = "cannot reach the daemon at " + url_.ToString() + ": " +
                            DescribeTransportError(result.error(), connect_timeout_, read_timeout_);
    const bool sent = result.error() == httplib::Error::Read;
    return sent ? DeadlineExceededError(why) : UnavailableError(why);
  }
  return RestReply{result->status, result->body};
}

}  // namespace stagehand::cli
