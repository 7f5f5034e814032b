// The dashboard's static assets (src/dashboard/assets/), compiled into the binary by
// cmake/EmbedFiles.cmake. Internal to the dashboard module.
#pragma once

#include <span>
#include <string_view>

namespace stagehand::dashboard_internal {

struct EmbeddedFile {
  std::string_view name;     // the file's base name, e.g. "app.js"
  std::string_view content;  // its bytes; static storage
};

// Every asset, in file name order. Thread-safe.
std::span<const EmbeddedFile> EmbeddedFiles();

}  // namespace stagehand::dashboard_internal
