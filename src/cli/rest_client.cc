#include "cli/rest_client.h"

#include <httplib.h>

#include <cctype>
#include <charconv>
#include <string>
#include <system_error>
#include <utility>

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
  if (host.find(':') != std::string_view::npos && host.front() != '[') {
    return "[" + std::string(host) + "]";
  }
  return std::string(host);
}

Result<ServerUrl> ParseServerUrl(std::string_view text) {
  const std::string quoted = "'" + std::string(text) + "'";
  std::string_view rest = text;
  if (std::size_t scheme_end = rest.find("://"); scheme_end != std::string_view::npos) {
    std::string scheme(rest.substr(0, scheme_end));
    for (char& c : scheme) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    if (scheme == "https") {
      return InvalidArgumentError("invalid --url " + quoted +
                                  ": https is not supported; put a TLS proxy in front of "
                                  "stagehand or use http on a loopback or private address");
    }
    if (scheme != "http") {
      return InvalidArgumentError("invalid --url " + quoted + ": the scheme must be http");
    }
    rest.remove_prefix(scheme_end + 3);
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return InvalidArgumentError("invalid --url " + quoted + ": no query or fragment allowed");
  }
  std::string_view authority = rest.substr(0, rest.find('/'));
  std::string_view path = rest.substr(authority.size());
  ServerUrl url;
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    std::size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return InvalidArgumentError("invalid --url " + quoted + ": unclosed '[' in the host");
    }
    url.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return InvalidArgumentError("invalid --url " + quoted + ": expected ':' after ']'");
      }
      port_text = after.substr(1);
      if (port_text.empty()) {
        return InvalidArgumentError("invalid --url " + quoted + ": empty port");
      }
    }
  } else {
    std::size_t colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) {
        return InvalidArgumentError("invalid --url " + quoted + ": empty port");
      }
    }
  }
  if (url.host.empty()) {
    return InvalidArgumentError("invalid --url " + quoted + ": no host");
  }
  if (!port_text.empty()) {
    unsigned value = 0;
    auto [end, error] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
    if (error != std::errc() || end != port_text.data() + port_text.size() || value == 0 ||
        value > 65535) {
      return InvalidArgumentError("invalid --url " + quoted + ": the port must be 1-65535");
    }
    url.port = static_cast<std::uint16_t>(value);
  }
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

Result<RestReply> RestClient::Get(std::string_view path) const { return Send("GET", path); }

Result<RestReply> RestClient::Post(std::string_view path) const { return Send("POST", path); }

Result<RestReply> RestClient::Send(std::string_view method, std::string_view path) const {
  httplib::Client client(url_.host, url_.port);
  client.set_connection_timeout(connect_timeout_);
  client.set_read_timeout(read_timeout_);
  client.set_write_timeout(read_timeout_);
  client.set_keep_alive(false);
  httplib::Headers headers{{"Accept", "application/json"}};
  if (token_) {
    headers.emplace("Authorization", "Bearer " + *token_);
  }
  const std::string full_path = url_.base_path + std::string(path);
  httplib::Result result = method == "GET"
                               ? client.Get(full_path, headers)
                               : client.Post(full_path, headers, "", "application/json");
  if (!result) {
    return UnavailableError(
        "cannot reach the daemon at " + url_.ToString() + ": " +
        DescribeTransportError(result.error(), connect_timeout_, read_timeout_));
  }
  return RestReply{result->status, result->body};
}

}  // namespace stagehand::cli
