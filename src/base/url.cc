#include "stagehand/base/url.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace stagehand {
namespace {

bool IsHostChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.' || c == '_';
}

bool IsIpv6Char(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0 || c == ':' || c == '.';
}

bool IsSchemeChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '+' || c == '-' || c == '.';
}

Result<std::uint16_t> ParsePort(std::string_view text) {
  if (text.empty()) {
    return InvalidArgumentError("empty port");
  }
  unsigned port = 0;
  for (char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c)) == 0 || port > 65535) {
      return InvalidArgumentError("invalid port '" + std::string(text) + "'");
    }
    port = port * 10 + static_cast<unsigned>(c - '0');
  }
  if (port < 1 || port > 65535) {
    return InvalidArgumentError("invalid port '" + std::string(text) + "'");
  }
  return static_cast<std::uint16_t>(port);
}

}  // namespace

Result<Url> ParseUrl(std::string_view text) {
  for (char c : text) {
    if (std::isgraph(static_cast<unsigned char>(c)) == 0) {
      return InvalidArgumentError("it contains a space or a control character");
    }
  }
  const std::size_t scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos || scheme_end == 0) {
    return InvalidArgumentError("expected an absolute URL such as http://host:port/path");
  }
  const std::string_view scheme = text.substr(0, scheme_end);
  if (std::isalpha(static_cast<unsigned char>(scheme.front())) == 0 ||
      !std::all_of(scheme.begin(), scheme.end(), IsSchemeChar)) {
    return InvalidArgumentError("invalid scheme '" + std::string(scheme) + "'");
  }
  Url url;
  url.scheme.reserve(scheme.size());
  for (char c : scheme) {
    url.scheme += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }

  std::string_view rest = text.substr(scheme_end + 3);
  const std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  rest.remove_prefix(authority.size());
  if (authority.find('@') != std::string_view::npos) {
    return InvalidArgumentError("user information is not supported");
  }
  std::optional<std::string_view> port_text;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return InvalidArgumentError("unterminated IPv6 address");
    }
    url.host = std::string(authority.substr(1, close - 1));
    if (url.host.empty() || !std::all_of(url.host.begin(), url.host.end(), IsIpv6Char)) {
      return InvalidArgumentError("invalid IPv6 address");
    }
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return InvalidArgumentError("unexpected text after the IPv6 address");
      }
      port_text = after.substr(1);
    }
  } else {
    const std::size_t colon = authority.find(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
    }
    if (port_text && port_text->empty()) {
      return InvalidArgumentError("empty port");
    }
    if (url.host.empty()) {
      return InvalidArgumentError("missing host");
    }
    if (!std::all_of(url.host.begin(), url.host.end(), IsHostChar)) {
      return InvalidArgumentError("invalid host '" + url.host + "'");
    }
  }
  if (port_text) {
    STAGEHAND_ASSIGN_OR_RETURN(url.port, ParsePort(*port_text));
  }

  if (const std::size_t hash = rest.find('#'); hash != std::string_view::npos) {
    url.fragment = std::string(rest.substr(hash + 1));
    rest = rest.substr(0, hash);
  }
  if (const std::size_t question = rest.find('?'); question != std::string_view::npos) {
    url.query = std::string(rest.substr(question + 1));
    rest = rest.substr(0, question);
  }
  url.path = std::string(rest);
  return url;
}

std::string UrlHost(std::string_view host) {
  if (host.find(':') != std::string_view::npos && host.front() != '[') {
    return "[" + std::string(host) + "]";
  }
  return std::string(host);
}

}  // namespace stagehand
