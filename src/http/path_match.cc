#include "http/path_match.h"

#include <fmt/format.h>

#include "stagehand/base/json_string.h"
#include "stagehand/http/http_message.h"

namespace stagehand::http_internal {

std::optional<std::vector<std::string_view>> SplitRoutePath(std::string_view path) {
  if (path.empty() || path.front() != '/') {
    return std::nullopt;
  }
  path.remove_prefix(1);
  if (!path.empty() && path.back() == '/') {
    path.remove_suffix(1);
  }
  std::vector<std::string_view> segments;
  if (path.empty()) {
    return segments;
  }
  while (true) {
    const std::size_t slash = path.find('/');
    segments.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) {
      break;
    }
    path.remove_prefix(slash + 1);
  }
  return segments;
}

bool RouteMatches(std::string_view path, std::string_view route) {
  if (path.size() == route.size() + 1 && path.back() == '/') {
    path.remove_suffix(1);
  }
  return EqualsIgnoreCase(path, route);
}

std::optional<std::string_view> StripMount(std::string_view path, std::string_view prefix) {
  while (!prefix.empty() && prefix.back() == '/') {
    prefix.remove_suffix(1);
  }
  if (path.size() < prefix.size() || !EqualsIgnoreCase(path.substr(0, prefix.size()), prefix)) {
    return std::nullopt;
  }
  std::string_view rest = path.substr(prefix.size());
  if (rest.empty()) {
    return std::string_view("/");
  }
  if (rest.front() != '/') {
    return std::nullopt;
  }
  return rest;
}

bool StartsWithSegments(const std::vector<std::string_view>& segments,
                        std::span<const std::string_view> literals) {
  if (segments.size() < literals.size()) {
    return false;
  }
  for (std::size_t i = 0; i < literals.size(); ++i) {
    if (!EqualsIgnoreCase(segments[i], literals[i])) {
      return false;
    }
  }
  return true;
}

Status CheckStorableText(std::string_view text, std::string_view subject) {
  if (text.find('\0') != std::string_view::npos) {
    return InvalidArgumentError(fmt::format("{} must not contain a NUL character", subject));
  }
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = Utf8SequenceLength(text, i);
    if (length == 0) {
      return InvalidArgumentError(fmt::format("{} must be valid UTF-8", subject));
    }
    i += length;
  }
  return Status::Ok();
}

Result<std::string> DecodeIdParam(std::string_view raw, std::string_view what) {
  Result<std::string> id = DecodeUriComponent(raw);
  if (!id.ok()) {
    return InvalidArgumentError(fmt::format("Failed to decode param '{}'", raw));
  }
  STAGEHAND_RETURN_IF_ERROR(
      CheckStorableText(*id, fmt::format("Invalid param '{}': a {}", raw, what)));
  return id;
}

}  // namespace stagehand::http_internal
