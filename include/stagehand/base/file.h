// Whole-file reads and writes: the one way stagehand opens its own files (config files, time zone
// rules, the ready file). Every descriptor these functions open is close-on-exec from the open
// itself (O_CLOEXEC), so a child forked by another thread meanwhile never inherits it;
// std::ifstream and std::ofstream cannot promise that. Error messages are the operating system's
// reason alone ("No such file or directory"), for the caller to say which file it was.
//
// Thread-safe: each call opens and closes its own descriptor.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"

namespace stagehand {

// Returns the contents of `path`, read to its end (so /proc files, whose size reads 0, work).
// Errors: kNotFound when `path` does not exist; kInvalidArgument ("larger than N bytes") when it
// holds more than `max_bytes`; kUnavailable for any other failure (permissions, a directory, I/O).
Result<std::string> ReadFile(const std::string& path,
                             std::size_t max_bytes = std::numeric_limits<std::size_t>::max());

// Writes `contents` to `path` + ".tmp" (created 0666 less the umask, or truncated), then renames it
// over `path`, so a reader sees the old file or the whole new one, never a part. Not synced: atomic
// for readers, not durable across a power loss. Errors: kUnavailable with the reason; the
// temporary file is removed.
Status WriteFileAtomically(const std::string& path, std::string_view contents);

}  // namespace stagehand
