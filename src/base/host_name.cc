#include "stagehand/base/host_name.h"

#include <unistd.h>

namespace stagehand {

std::string LocalHostName() {
  char name[256] = {};
  return gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string("unknown");
}

}  // namespace stagehand
