#include "store/settings_cache.h"

namespace stagehand::store_internal {

Result<TaskSettingsV2> SettingsCache::Parse(std::string_view json) {
  const std::string key(json);
  {
    std::lock_guard lock(mu_);
    if (auto it = parsed_.find(key); it != parsed_.end()) return it->second;
  }
  Result<TaskSettingsV2> parsed = TaskSettingsV2::FromJson(json);
  std::lock_guard lock(mu_);
  if (parsed_.size() >= kMaxEntries) parsed_.clear();
  parsed_.emplace(key, parsed);
  return parsed;
}

}  // namespace stagehand::store_internal
