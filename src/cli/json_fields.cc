#include "cli/json_fields.h"

#include "stagehand/time/time_zone.h"

namespace stagehand::cli {

std::string StringAt(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) {
    return "";
  }
  auto found = object.find(key);
  return found != object.end() && found->is_string() ? found->get<std::string>() : "";
}

std::optional<WallTime> TimeAt(const nlohmann::json& object, const char* key) {
  std::string text = StringAt(object, key);
  if (text.empty()) {
    return std::nullopt;
  }
  Result<WallTime> parsed = ParseIsoInstant(text);
  return parsed.ok() ? std::optional<WallTime>(*parsed) : std::nullopt;
}

std::optional<std::int64_t> IntegerAt(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) {
    return std::nullopt;
  }
  auto found = object.find(key);
  if (found == object.end() || !found->is_number_integer()) {
    return std::nullopt;
  }
  return found->get<std::int64_t>();
}

}  // namespace stagehand::cli
