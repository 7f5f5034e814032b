// Invariant checks. A failed check is a bug in stagehand: it prints the location and aborts.
// Never use these for anything the environment or the user controls; return a Status instead.
#pragma once

namespace stagehand::internal {
[[noreturn]] void CheckFailed(const char* condition, const char* file, int line);
}  // namespace stagehand::internal

#define STAGEHAND_CHECK(condition)                                        \
  do {                                                                    \
    if (!(condition)) {                                                   \
      ::stagehand::internal::CheckFailed(#condition, __FILE__, __LINE__); \
    }                                                                     \
  } while (false)
