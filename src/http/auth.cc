#include "stagehand/http/auth.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "stagehand/base/text.h"
#include "stagehand/http/error_response.h"

namespace stagehand {
namespace {

// Backstage's messages: DefaultHttpAuthService without a bearer token, DefaultAuthService when no
// token handler recognises the token.
constexpr std::string_view kMissingCredentials = "Missing credentials";
constexpr std::string_view kIllegalToken = "Illegal token";

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// Returns the token of an `Authorization` value matching Backstage's /^Bearer[ ]+(\S+)$/i, after
// trimming the spaces and tabs HTTP allows around a header value (Node drops them too).
std::optional<std::string_view> BearerToken(std::string_view value) {
  value = TrimSpacesAndTabs(value);
  constexpr std::string_view kScheme = "bearer";
  if (value.size() <= kScheme.size() ||
      !EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return std::nullopt;
  }
  std::size_t start = kScheme.size();
  if (value[start] != ' ') {
    return std::nullopt;
  }
  while (start < value.size() && value[start] == ' ') {
    ++start;
  }
  const std::string_view token = value.substr(start);
  if (token.empty()) {
    return std::nullopt;
  }
  for (char c : token) {
    if (IsAsciiSpace(c)) {
      return std::nullopt;
    }
  }
  return token;
}

// Returns 1 when `presented` equals `expected`, else 0. The time taken depends on the length of
// `expected` (fixed by the config) only, never on where the two first differ or on the presented
// length.
std::uint8_t ConstantTimeEquals(std::string_view presented, std::string_view expected) {
  std::size_t difference = presented.size() ^ expected.size();
  const std::size_t presented_size = presented.size();
  for (std::size_t i = 0; i < expected.size(); ++i) {
    // Past the presented token's end compare against a byte of it again (or 0 when it is
    // empty): the length check above already records the mismatch.
    const std::size_t j = presented_size == 0 ? 0 : i % presented_size;
    const auto presented_byte =
        presented_size == 0 ? std::uint8_t{0} : static_cast<std::uint8_t>(presented[j]);
    difference |= static_cast<std::size_t>(presented_byte ^ static_cast<std::uint8_t>(expected[i]));
  }
  // Folds `difference` to 0 or 1 without a data-dependent branch.
  const std::size_t nonzero = (difference | (~difference + 1)) >> (sizeof(std::size_t) * 8 - 1);
  return static_cast<std::uint8_t>(1 ^ nonzero);
}

// Returns the index of the token equal to `presented`, or nullopt. Every token is compared, and
// none is skipped once one matched.
std::optional<std::size_t> MatchToken(std::string_view presented,
                                      const std::vector<StaticAccessToken>& tokens) {
  std::uint8_t matched = 0;
  std::size_t index = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::uint8_t equal = ConstantTimeEquals(presented, tokens[i].token);
    const std::size_t mask = ~(static_cast<std::size_t>(equal) - 1);  // all ones when equal
    index = (i & mask) | (index & ~mask);
    matched |= equal;
  }
  if (matched == 0) {
    return std::nullopt;
  }
  return index;
}

}  // namespace

HttpHandler RequireBearerToken(HttpHandler inner, std::vector<StaticAccessToken> tokens,
                               std::shared_ptr<Logger> logger) {
  if (logger == nullptr) {
    logger = NullLogger();
  }
  return [inner = std::move(inner), tokens = std::move(tokens),
          logger = std::move(logger)](const HttpRequest& request) -> std::optional<HttpResponse> {
    std::optional<std::string_view> token;
    if (std::optional<std::string_view> header = FindHeader(request.headers, "Authorization")) {
      token = BearerToken(*header);
    }
    std::string_view refusal;
    std::optional<std::size_t> matched;
    if (!token) {
      refusal = kMissingCredentials;
    } else if (matched = MatchToken(*token, tokens); !matched) {
      refusal = kIllegalToken;
    }
    if (!refusal.empty()) {
      if (logger->Enabled(LogLevel::kDebug)) {
        logger->Debug(
            "Request refused",
            {{"method", request.method}, {"path", request.path}, {"reason", std::string(refusal)}});
      }
      return ErrorResponse(Status(StatusCode::kUnauthenticated, std::string(refusal)), request,
                           *logger);
    }
    if (tokens[*matched].subject.empty()) {
      return inner(request);
    }
    HttpRequest authenticated = request;
    authenticated.principal = tokens[*matched].subject;
    return inner(authenticated);
  };
}

}  // namespace stagehand
