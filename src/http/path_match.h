// Express-style path matching shared by the routers and the server: case-insensitive literal
// segments, one optional trailing slash, and decoded path parameters.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/base/text.h"

namespace stagehand::http_internal {

// Returns the segments of an absolute path after its leading '/', one trailing '/' ignored
// ("/a/b/" → {"a","b"}, "/a//b" → {"a","","b"}, "/" → {}), or nullopt when `path` does not
// start with '/'. The views point into `path`.
std::optional<std::vector<std::string_view>> SplitRoutePath(std::string_view path);

// Returns whether `path` equals `route` under Express's rules (case, one trailing slash).
bool RouteMatches(std::string_view path, std::string_view route);

// Returns the rest of `path` after the mount `prefix` ("/" when nothing is left), or nullopt when
// `path` is not under `prefix` (case-insensitive; the prefix must end at a segment boundary).
std::optional<std::string_view> StripMount(std::string_view path, std::string_view prefix);

// Returns whether `segments` starts with `literals`, compared ignoring ASCII case.
bool StartsWithSegments(const std::vector<std::string_view>& segments,
                        std::span<const std::string_view> literals);

// Returns OK when the database can store `text`: PostgreSQL text holds neither NUL (libpq would
// cut "report%00x" to "report") nor invalid UTF-8. Errors: kInvalidArgument "<subject> must not
// contain a NUL character" or "<subject> must be valid UTF-8".
Status CheckStorableText(std::string_view text, std::string_view subject);

// Returns the path parameter `raw` percent-decoded as Express decodes it (decodeURIComponent), for
// a parameter naming a `what` ("task id", "run id") that the database must be able to store.
// Errors: kInvalidArgument "Failed to decode param '<raw>'" for malformed encoding, and
// CheckStorableText's with the subject "Invalid param '<raw>': a <what>".
Result<std::string> DecodeIdParam(std::string_view raw, std::string_view what);

}  // namespace stagehand::http_internal
