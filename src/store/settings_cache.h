// Parsing of stored settings_json shared by every TaskStore: each distinct text is parsed and
// validated once, so a poll over thousands of unchanged rows costs a hash lookup per row.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "stagehand/base/status.h"
#include "stagehand/model/task_settings.h"

namespace stagehand::store_internal {

// Remembers TaskSettingsV2::FromJson per text. Bounded: it forgets everything past kMaxEntries
// distinct texts. Thread-safe.
class SettingsCache {
 public:
  // Returns TaskSettingsV2::FromJson(json), from memory when this text was seen before.
  Result<TaskSettingsV2> Parse(std::string_view json);

 private:
  static constexpr std::size_t kMaxEntries = 65536;

  std::mutex mu_;
  std::unordered_map<std::string, Result<TaskSettingsV2>> parsed_;
};

}  // namespace stagehand::store_internal
