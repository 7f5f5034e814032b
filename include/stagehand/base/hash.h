// Stable hashes: the same value on every host, build and standard library (std::hash promises
// none of this), for values that hosts must agree on or that are stored.
#pragma once

#include <cstdint>
#include <string_view>

namespace stagehand {

// Returns the 64-bit FNV-1a hash of `text`. Thread-safe (pure).
constexpr std::uint64_t Fnv1a64(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

}  // namespace stagehand
