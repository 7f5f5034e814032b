// Random identifiers.
#pragma once

#include <string>

namespace stagehand {

// Returns a random UUID v4, lowercase and hyphenated (like Node's randomUUID). Thread-safe.
std::string NewUuidV4();

}  // namespace stagehand
