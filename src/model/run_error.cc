#include "stagehand/model/run_error.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "stagehand/model/schedule.h"

namespace stagehand {

RunError RunError::Decode(std::string stored) {
  const nlohmann::json parsed = nlohmann::json::parse(stored, nullptr, /*allow_exceptions=*/false);
  int attempt = 0;
  if (parsed.is_object()) {
    const auto recorded = parsed.find("attempt");
    if (recorded != parsed.end() && recorded->is_number_integer()) {
      attempt = std::clamp(recorded->get<int>(), 0, kMaxRetryAttempts + 1);
    }
  }
  return RunError(std::move(stored), attempt);
}

RunError RunError::Retried(std::string error_json, int attempt) {
  if (!error_json.ends_with('}') || error_json.size() < 2) return Decode(std::move(error_json));
  error_json.pop_back();
  error_json += fmt::format(R"(,"attempt":{}}})", attempt);
  return Decode(std::move(error_json));
}

}  // namespace stagehand
