// URLs: the one parser of the project's absolute URLs (HTTP tasks, the command line's --url) and
// the one way a host is written back into a URL. Callers decide which schemes and parts they
// accept; this module only splits and validates the syntax.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"

namespace stagehand {

// The parts of an absolute URL `scheme://host[:port][path][?query][#fragment]`. User
// information is never accepted. Thread-compatible value type.
struct Url {
  std::string scheme;                   // Lower case, e.g. "http".
  std::string host;                     // A name or an IPv4 address; IPv6 without its brackets.
  std::optional<std::uint16_t> port;    // 1..65535 when the URL names one.
  std::string path;                     // "" or starting with '/'.
  std::optional<std::string> query;     // The text after '?' up to '#', when there is a '?'.
  std::optional<std::string> fragment;  // The text after '#', when there is a '#'.
};

// Returns the parts of `text`, an absolute URL as RFC 3986 writes it, restricted to what an HTTP
// client can connect to: a scheme (letters, digits, '+', '-', '.'; first a letter), "://", a
// host that is a name of letters, digits, '-', '.' and '_', or an IPv6 address in brackets, an
// optional port of 1 to 65535, then path, query and fragment. The host ends at the first ':',
// so an IPv6 address must be bracketed. INVALID_ARGUMENT naming only what is wrong (the caller
// quotes the URL, redacted as it needs): a space or control character, no "://" or scheme, user
// information, a missing or invalid host, an unterminated or invalid IPv6 address, text after
// it, an empty or invalid port. Thread-safe.
Result<Url> ParseUrl(std::string_view text);

// Returns `host` as it is written in a URL's authority: an IPv6 address (any host with a ':')
// in brackets, anything else (including an already bracketed address) unchanged. Thread-safe.
std::string UrlHost(std::string_view host);

}  // namespace stagehand
