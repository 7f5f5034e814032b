#include "http/path_match.h"

namespace stagehand::http_internal {
namespace {

char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) {
      return false;
    }
  }
  return true;
}

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

}  // namespace stagehand::http_internal
