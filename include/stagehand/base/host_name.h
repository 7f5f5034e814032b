// The name of the machine this process runs on, as the run history and the live event stream name
// a run's host.
#pragma once

#include <string>

namespace stagehand {

// Returns this machine's host name (gethostname), or "unknown" when it cannot be read.
// Thread-safe.
std::string LocalHostName();

}  // namespace stagehand
