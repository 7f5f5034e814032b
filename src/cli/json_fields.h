// Reading the fields of the daemon's JSON answers leniently: a missing key, null or a value of
// another type reads as absent. Private to the cli module; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "stagehand/time/clock.h"

namespace stagehand::cli {

// Returns the string at `key` of `object`, or "" when absent or not a string.
std::string StringAt(const nlohmann::json& object, const char* key);

// Returns the instant at `key` (an ISO-8601 string), or nullopt when absent or not one.
std::optional<WallTime> TimeAt(const nlohmann::json& object, const char* key);

// Returns the integer at `key`, or nullopt when absent or not an integer.
std::optional<std::int64_t> IntegerAt(const nlohmann::json& object, const char* key);

}  // namespace stagehand::cli
