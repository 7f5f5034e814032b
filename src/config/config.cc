#include "stagehand/config/config.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>
#include <vector>

#include "config/config_internal.h"
#include "stagehand/base/file.h"

namespace stagehand {
namespace {

using config_internal::MakeNode;
using config_internal::Source;

const std::string& SourceName(const ConfigNode& node) {
  static const std::string kUnknown = "unknown";
  return node.source ? *node.source : kUnknown;
}

const ConfigNode::Object* AsObject(const ConfigNode& node) {
  return std::get_if<ConfigNode::Object>(&node.value);
}

ConfigNodePtr FindChild(const ConfigNode::Object& object, std::string_view name) {
  for (const auto& [key, child] : object) {
    if (key == name) {
      return child;
    }
  }
  return nullptr;
}

std::string JoinKey(std::string_view prefix, std::string_view key) {
  std::string out(prefix);
  if (!prefix.empty() && !key.empty()) {
    out += '.';
  }
  out += key;
  return out;
}

Status TypeError(std::string_view full_key, std::string_view context, std::string_view got,
                 std::string_view wanted) {
  return InvalidArgumentError(
      fmt::format("Invalid type in config for key '{}' in '{}', got {}, wanted {}", full_key,
                  context, got, wanted));
}

Status MissingError(std::string_view full_key, std::string_view context) {
  return InvalidArgumentError(
      fmt::format("Missing required config value at '{}' in '{}'", full_key, context));
}

Status ConvertError(std::string_view full_key, std::string_view context, std::string_view wanted) {
  return InvalidArgumentError(fmt::format(
      "Unable to convert config value for key '{}' in '{}' to a {}", full_key, context, wanted));
}

// Returns the node at the dotted `key` below `root` (the node of the view at `prefix`), or nullptr
// when some part is missing. Walking through a value that is not an object is a type error on the
// key up to that value, as in Backstage's ConfigReader.
Result<ConfigNodePtr> ReadValue(const ConfigNodePtr& root, std::string_view prefix,
                                std::string_view key) {
  ConfigNodePtr node = root;
  if (key.empty()) {
    return node;
  }
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = key.find('.', start);
    const std::string_view part =
        key.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (part.empty()) {
      return InvalidArgumentError(fmt::format("Invalid config key '{}'", key));
    }
    if (node != nullptr) {
      if (const auto* object = AsObject(*node)) {
        node = FindChild(*object, part);
      } else {
        const std::string walked = JoinKey(prefix, key.substr(0, start == 0 ? 0 : start - 1));
        return TypeError(walked, SourceName(*node), node->TypeName(), "object");
      }
    }
    if (dot == std::string_view::npos) {
      break;
    }
    start = dot + 1;
  }
  return node;
}

// Reports `node` (found at `key`) as a type error if `valid` is false.
Status CheckType(bool valid, const ConfigNode& node, std::string_view full_key,
                 std::string_view wanted) {
  if (valid) {
    return Status::Ok();
  }
  return TypeError(full_key, SourceName(node), node.TypeName(), wanted);
}

bool IsNonEmptyString(const ConfigNode& node) {
  const auto* text = std::get_if<std::string>(&node.value);
  return text != nullptr && !text->empty();
}

// Lowercases ASCII letters.
std::string AsciiLower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

std::string_view TrimJsWhitespace(std::string_view text) {
  const auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
  };
  while (!text.empty() && is_space(text.front())) {
    text.remove_prefix(1);
  }
  while (!text.empty() && is_space(text.back())) {
    text.remove_suffix(1);
  }
  return text;
}

ConfigNodePtr MergeNodes(const ConfigNodePtr& base, const ConfigNodePtr& over) {
  const auto* base_object = AsObject(*base);
  const auto* over_object = AsObject(*over);
  if (base_object == nullptr || over_object == nullptr) {
    return over;
  }
  ConfigNode::Object merged = *base_object;
  for (const auto& [key, child] : *over_object) {
    bool replaced = false;
    for (auto& [merged_key, merged_child] : merged) {
      if (merged_key == key) {
        merged_child = MergeNodes(merged_child, child);
        replaced = true;
        break;
      }
    }
    if (!replaced) {
      merged.emplace_back(key, child);
    }
  }
  return MakeNode(std::move(merged), over->source, over->line);
}

// Returns `node` with `transform` applied to its strings, or `node` itself when none changed.
// Appends the message of every failed call to `errors`.
ConfigNodePtr TransformNode(const ConfigNodePtr& node, const std::string& full_key,
                            const Config::StringTransform& transform,
                            std::vector<std::string>& errors) {
  if (const auto* text = std::get_if<std::string>(&node->value)) {
    Result<std::string> replaced = transform(*text, full_key, *node);
    if (!replaced.ok()) {
      errors.push_back(replaced.status().message());
      return node;
    }
    if (*replaced == *text) {
      return node;
    }
    return MakeNode(*std::move(replaced), node->source, node->line);
  }
  if (const auto* items = std::get_if<ConfigNode::Array>(&node->value)) {
    ConfigNode::Array out;
    out.reserve(items->size());
    bool changed = false;
    for (std::size_t i = 0; i < items->size(); ++i) {
      out.push_back(
          TransformNode((*items)[i], fmt::format("{}[{}]", full_key, i), transform, errors));
      changed = changed || out.back() != (*items)[i];
    }
    return changed ? MakeNode(std::move(out), node->source, node->line) : node;
  }
  if (const auto* object = AsObject(*node)) {
    ConfigNode::Object out;
    out.reserve(object->size());
    bool changed = false;
    for (const auto& [key, child] : *object) {
      out.emplace_back(key, TransformNode(child, JoinKey(full_key, key), transform, errors));
      changed = changed || out.back().second != child;
    }
    return changed ? MakeNode(std::move(out), node->source, node->line) : node;
  }
  return node;
}

}  // namespace

std::string_view ConfigNode::TypeName() const {
  struct Visitor {
    std::string_view operator()(const Null&) const { return "null"; }
    std::string_view operator()(bool) const { return "boolean"; }
    std::string_view operator()(double number) const {
      return std::isnan(number) ? "nan" : "number";
    }
    std::string_view operator()(const std::string& text) const {
      return text.empty() ? "empty-string" : "string";
    }
    std::string_view operator()(const Array&) const { return "array"; }
    std::string_view operator()(const Object&) const { return "object"; }
  };
  return std::visit(Visitor{}, value);
}

Result<Config> Config::FromYaml(std::string_view text, std::string context) {
  STAGEHAND_ASSIGN_OR_RETURN(auto tree,
                             config_internal::ParseYamlTree(
                                 text, std::make_shared<const std::string>(std::move(context))));
  return Config(std::move(tree), "");
}

Result<Config> Config::FromYamlFile(const std::string& path) {
  Result<std::string> contents = ReadFile(path);
  if (!contents.ok()) {
    return InvalidArgumentError(
        fmt::format("Unable to read config file '{}': {}", path, contents.status().message()));
  }
  return FromYaml(*contents, path);
}

Result<Config> Config::FromJson(std::string_view text, std::string context) {
  STAGEHAND_ASSIGN_OR_RETURN(auto tree,
                             config_internal::ParseJsonTree(
                                 text, std::make_shared<const std::string>(std::move(context))));
  return Config(std::move(tree), "");
}

Config Config::Merge(const std::vector<Config>& layers) {
  if (layers.empty()) {
    return Empty();
  }
  ConfigNodePtr merged = layers.front().node_;
  for (std::size_t i = 1; i < layers.size(); ++i) {
    merged = MergeNodes(merged, layers[i].node_);
  }
  return {std::move(merged), ""};
}

Config Config::Empty(std::string context) {
  return {MakeNode(ConfigNode::Object{}, std::make_shared<const std::string>(std::move(context))),
          ""};
}

Result<Config> Config::TransformStrings(const StringTransform& transform) const {
  std::vector<std::string> errors;
  ConfigNodePtr root = TransformNode(node_, prefix_, transform, errors);
  if (!errors.empty()) {
    std::string message;
    for (const std::string& error : errors) {
      message += (message.empty() ? "" : "\n") + error;
    }
    return InvalidArgumentError(message);
  }
  return Config(std::move(root), prefix_);
}

bool Config::Has(std::string_view key) const {
  auto node = ReadValue(node_, prefix_, key);
  return node.ok() && *node != nullptr;
}

std::vector<std::string> Config::Keys() const {
  std::vector<std::string> keys;
  if (const auto* object = AsObject(*node_)) {
    keys.reserve(object->size());
    for (const auto& entry : *object) {
      keys.push_back(entry.first);
    }
  }
  return keys;
}

const ConfigNode* Config::Node(std::string_view key) const {
  auto node = ReadValue(node_, prefix_, key);
  return node.ok() ? node->get() : nullptr;
}

std::string Config::FullKey(std::string_view key) const { return JoinKey(prefix_, key); }

std::string Config::Context(std::string_view key) const {
  const ConfigNode* node = Node(key);
  return SourceName(node != nullptr ? *node : *node_);
}

template <typename T>
Result<T> Config::Required(Result<std::optional<T>> value, std::string_view key) const {
  STAGEHAND_ASSIGN_OR_RETURN(std::optional<T> present, std::move(value));
  if (!present.has_value()) {
    return MissingError(FullKey(key), Context());
  }
  return *std::move(present);
}

Result<std::optional<Config>> Config::GetOptionalConfig(std::string_view key) const {
  STAGEHAND_ASSIGN_OR_RETURN(auto node, ReadValue(node_, prefix_, key));
  if (node == nullptr) {
    return std::optional<Config>();
  }
  STAGEHAND_RETURN_IF_ERROR(CheckType(AsObject(*node) != nullptr, *node, FullKey(key), "object"));
  return std::optional<Config>(Config(node, FullKey(key)));
}

Result<Config> Config::GetConfig(std::string_view key) const {
  return Required(GetOptionalConfig(key), key);
}

Result<std::vector<Config>> Config::GetConfigArray(std::string_view key) const {
  STAGEHAND_ASSIGN_OR_RETURN(auto node, ReadValue(node_, prefix_, key));
  if (node == nullptr) {
    return MissingError(FullKey(key), Context());
  }
  const auto* items = std::get_if<ConfigNode::Array>(&node->value);
  STAGEHAND_RETURN_IF_ERROR(CheckType(items != nullptr, *node, FullKey(key), "object-array"));
  std::vector<Config> configs;
  configs.reserve(items->size());
  for (std::size_t i = 0; i < items->size(); ++i) {
    const ConfigNodePtr& item = (*items)[i];
    const std::string item_key = fmt::format("{}[{}]", FullKey(key), i);
    STAGEHAND_RETURN_IF_ERROR(
        CheckType(AsObject(*item) != nullptr, *item, item_key, "object-array"));
    configs.push_back(Config(item, item_key));
  }
  return configs;
}

Result<std::optional<std::string>> Config::GetOptionalString(std::string_view key) const {
  STAGEHAND_ASSIGN_OR_RETURN(auto node, ReadValue(node_, prefix_, key));
  if (node == nullptr) {
    return std::optional<std::string>();
  }
  STAGEHAND_RETURN_IF_ERROR(CheckType(IsNonEmptyString(*node), *node, FullKey(key), "string"));
  return std::optional<std::string>(std::get<std::string>(node->value));
}

Result<std::string> Config::GetString(std::string_view key) const {
  return Required(GetOptionalString(key), key);
}

Result<std::optional<double>> Config::GetOptionalNumber(std::string_view key) const {
  STAGEHAND_ASSIGN_OR_RETURN(auto node, ReadValue(node_, prefix_, key));
  if (node == nullptr) {
    return std::optional<double>();
  }
  const ConfigNode& value = *node;
  if (const auto* number = std::get_if<double>(&value.value)) {
    return std::optional<double>(*number);
  }
  const auto* text = std::get_if<std::string>(&value.value);
  STAGEHAND_RETURN_IF_ERROR(CheckType(text != nullptr, value, FullKey(key), "number"));
  const std::optional<double> converted = config_internal::ParseJsNumber(*text);
  if (!converted) {
    return ConvertError(FullKey(key), SourceName(value), "number");
  }
  return converted;
}

Result<double> Config::GetNumber(std::string_view key) const {
  return Required(GetOptionalNumber(key), key);
}

Result<std::optional<bool>> Config::GetOptionalBoolean(std::string_view key) const {
  STAGEHAND_ASSIGN_OR_RETURN(auto node, ReadValue(node_, prefix_, key));
  if (node == nullptr) {
    return std::optional<bool>();
  }
  const ConfigNode& value = *node;
  if (const auto* flag = std::get_if<bool>(&value.value)) {
    return std::optional<bool>(*flag);
  }
  std::string text;
  if (const auto* number = std::get_if<double>(&value.value)) {
    if (*number == 1) {
      return std::optional<bool>(true);
    }
    if (*number == 0) {
      return std::optional<bool>(false);
    }
  } else if (const auto* string = std::get_if<std::string>(&value.value)) {
    text = AsciiLower(TrimJsWhitespace(*string));
  } else {
    return TypeError(FullKey(key), SourceName(value), value.TypeName(), "boolean");
  }
  if (text == "y" || text == "yes" || text == "true" || text == "1" || text == "on") {
    return std::optional<bool>(true);
  }
  if (text == "n" || text == "no" || text == "false" || text == "0" || text == "off") {
    return std::optional<bool>(false);
  }
  return ConvertError(FullKey(key), SourceName(value), "boolean");
}

Result<bool> Config::GetBoolean(std::string_view key) const {
  return Required(GetOptionalBoolean(key), key);
}

Result<std::vector<std::string>> Config::GetStringArray(std::string_view key) const {
  STAGEHAND_ASSIGN_OR_RETURN(auto node, ReadValue(node_, prefix_, key));
  if (node == nullptr) {
    return MissingError(FullKey(key), Context());
  }
  const auto* items = std::get_if<ConfigNode::Array>(&node->value);
  STAGEHAND_RETURN_IF_ERROR(CheckType(items != nullptr, *node, FullKey(key), "string-array"));
  std::vector<std::string> strings;
  strings.reserve(items->size());
  for (std::size_t i = 0; i < items->size(); ++i) {
    const ConfigNode& item = *(*items)[i];
    STAGEHAND_RETURN_IF_ERROR(CheckType(IsNonEmptyString(item), item,
                                        fmt::format("{}[{}]", FullKey(key), i), "string-array"));
    strings.push_back(std::get<std::string>(item.value));
  }
  return strings;
}

}  // namespace stagehand
