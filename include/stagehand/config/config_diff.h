// Comparing two config trees by value: which keys a new app-config changes, so that a reload can
// name every setting it cannot apply. Where a value came from (file, line) is not compared.
#pragma once

#include <string>
#include <vector>

#include "stagehand/config/config.h"

namespace stagehand {

// Returns the full dotted keys whose values differ between `before` and `after`, in `before`'s
// key order then the keys only `after` has: a key present in one tree only, a scalar or array
// that differs, or a key whose type changed (objects are compared key by key, arrays as a whole).
// Empty when the trees are equal. Thread-safe.
std::vector<std::string> ChangedConfigKeys(const Config& before, const Config& after);

}  // namespace stagehand
