// Random identifiers.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace stagehand {

// Returns a random UUID v4, lowercase and hyphenated (like Node's randomUUID). Thread-safe.
std::string NewUuidV4();

// Fills `out` with random bytes from a per-thread generator seeded by std::random_device (not for
// secrets). Thread-safe.
void FillRandomBytes(std::span<std::uint8_t> out);

}  // namespace stagehand
