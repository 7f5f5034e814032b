// The clock of the system suite's event file: CLOCK_MONOTONIC in nanoseconds, the time base that
// the probes, the lock watcher and the harness (time.monotonic_ns) share.
#pragma once

#include <time.h>

#include <cstdint>

namespace stagehand_system {

inline std::int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace stagehand_system
