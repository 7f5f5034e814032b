// Express-style path matching shared by the router and the server: case-insensitive literal
// segments and one optional trailing slash.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace stagehand::http_internal {

// Returns whether `a` and `b` are equal ignoring ASCII case.
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// Returns the segments of an absolute path after its leading '/', one trailing '/' ignored
// ("/a/b/" → {"a","b"}, "/a//b" → {"a","","b"}, "/" → {}), or nullopt when `path` does not
// start with '/'. The views point into `path`.
std::optional<std::vector<std::string_view>> SplitRoutePath(std::string_view path);

// Returns whether `path` equals `route` under Express's rules (case, one trailing slash).
bool RouteMatches(std::string_view path, std::string_view route);

// Returns the rest of `path` after the mount `prefix` ("/" when nothing is left), or nullopt when
// `path` is not under `prefix` (case-insensitive; the prefix must end at a segment boundary).
std::optional<std::string_view> StripMount(std::string_view path, std::string_view prefix);

}  // namespace stagehand::http_internal
