#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "config/config_internal.h"

namespace stagehand::config_internal {
namespace {

// Deep enough for any real config; shallow enough that the recursive walk cannot exhaust the stack.
constexpr int kMaxDepth = 200;
// Bounds the work of expanding aliases (`&a [*a, *a]` nested many times grows exponentially).
constexpr std::size_t kMaxNodes = 250'000;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsJsWhitespace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

int DigitValue(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'z') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'Z') {
    return c - 'A' + 10;
  }
  return 99;
}

// Returns the value of a non-empty run of digits in `base`, or nullopt if a character is not one.
std::optional<double> ParseRadixDigits(std::string_view digits, int base) {
  if (digits.empty()) {
    return std::nullopt;
  }
  double value = 0;
  for (char c : digits) {
    const int digit = DigitValue(c);
    if (digit >= base) {
      return std::nullopt;
    }
    value = value * base + digit;
  }
  return value;
}

// Returns whether `text` is a decimal literal: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
// JavaScript's StrDecimalLiteral and the YAML 1.2 core schema float agree on this form.
bool IsDecimalLiteral(std::string_view text) {
  std::size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) {
    ++i;
  }
  std::size_t int_digits = 0;
  while (i < text.size() && IsDigit(text[i])) {
    ++i, ++int_digits;
  }
  std::size_t frac_digits = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && IsDigit(text[i])) {
      ++i, ++frac_digits;
    }
  }
  if (int_digits == 0 && frac_digits == 0) {
    return false;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) {
      ++i;
    }
    std::size_t exp_digits = 0;
    while (i < text.size() && IsDigit(text[i])) {
      ++i, ++exp_digits;
    }
    if (exp_digits == 0) {
      return false;
    }
  }
  return i == text.size();
}

double ToDouble(std::string_view decimal_literal) {
  const std::string copy(decimal_literal);
  return std::strtod(copy.c_str(), nullptr);
}

std::string LineSuffix(const YAML::Mark& mark) {
  if (mark.is_null()) {
    return "";
  }
  return fmt::format(" at line {}, column {}", mark.line + 1, mark.column + 1);
}

// Resolves a plain (unquoted, untagged) scalar with the YAML 1.2 core schema.
ConfigNodePtr ResolvePlainScalar(const std::string& text, const Source& source, int line) {
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") {
    return MakeNode(ConfigNode::Null{}, source, line);
  }
  if (text == "true" || text == "True" || text == "TRUE") {
    return MakeNode(true, source, line);
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    return MakeNode(false, source, line);
  }
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'o' || text[1] == 'x')) {
    const auto value = ParseRadixDigits(std::string_view(text).substr(2), text[1] == 'o' ? 8 : 16);
    if (value) {
      return MakeNode(*value, source, line);
    }
  }
  if (IsDecimalLiteral(text)) {
    return MakeNode(ToDouble(text), source, line);
  }
  std::string_view rest(text);
  double sign = 1;
  if (!rest.empty() && (rest[0] == '-' || rest[0] == '+')) {
    sign = rest[0] == '-' ? -1 : 1;
    rest.remove_prefix(1);
  }
  if (rest == ".inf" || rest == ".Inf" || rest == ".INF") {
    return MakeNode(sign * std::numeric_limits<double>::infinity(), source, line);
  }
  if (text == ".nan" || text == ".NaN" || text == ".NAN") {
    return MakeNode(std::numeric_limits<double>::quiet_NaN(), source, line);
  }
  return MakeNode(text, source, line);
}

// Records where each document starts and ignores everything else.
class DocumentMarks : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  std::vector<YAML::Mark> marks;
};

class YamlConverter {
 public:
  explicit YamlConverter(Source source) : source_(std::move(source)) {}

  // Converts `node`. `key_line` is the line of the key that holds it (0 if none): yaml-cpp marks an
  // empty value on the line after its key, so null values take their key's line.
  Result<ConfigNodePtr> Convert(const YAML::Node& node, int depth, int key_line = 0) {
    const YAML::Mark mark = node.Mark();
    int line = mark.is_null() ? 0 : mark.line + 1;
    if (key_line != 0 && node.IsNull()) {
      line = key_line;
    }
    if (depth > kMaxDepth) {
      return Error(mark, fmt::format("nesting deeper than {} levels", kMaxDepth));
    }
    if (++visited_ > kMaxNodes) {
      return Error(mark, "too many nodes (alias expansion)");
    }
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return MakeNode(ConfigNode::Null{}, source_, line);
      case YAML::NodeType::Scalar:
        return ConvertScalar(node, line);
      case YAML::NodeType::Sequence: {
        ConfigNode::Array items;
        items.reserve(node.size());
        for (const auto& item : node) {
          STAGEHAND_ASSIGN_OR_RETURN(auto converted, Convert(item, depth + 1));
          items.push_back(std::move(converted));
        }
        return MakeNode(std::move(items), source_, line);
      }
      case YAML::NodeType::Map: {
        ConfigNode::Object entries;
        std::unordered_set<std::string> seen;
        for (const auto& entry : node) {
          const YAML::Node& key = entry.first;
          if (!key.IsScalar() && !key.IsNull()) {
            return Error(key.Mark(), "keys must be scalars");
          }
          std::string name = key.IsNull() ? std::string() : key.Scalar();
          if (!seen.insert(name).second) {
            return Error(key.Mark(),
                         fmt::format("map keys must be unique; '{}' is repeated", name));
          }
          const YAML::Mark key_mark = key.Mark();
          STAGEHAND_ASSIGN_OR_RETURN(
              auto converted,
              Convert(entry.second, depth + 1, key_mark.is_null() ? 0 : key_mark.line + 1));
          entries.emplace_back(std::move(name), std::move(converted));
        }
        return MakeNode(std::move(entries), source_, line);
      }
    }
    return Error(mark, "unknown node type");
  }

  Status Error(const YAML::Mark& mark, std::string_view reason) const {
    return InvalidArgumentError(
        fmt::format("Invalid YAML in '{}'{}: {}", *source_, LineSuffix(mark), reason));
  }

 private:
  Result<ConfigNodePtr> ConvertScalar(const YAML::Node& node, int line) {
    const std::string& tag = node.Tag();
    const std::string& text = node.Scalar();
    if (tag == "?") {
      return ResolvePlainScalar(text, source_, line);
    }
    if (tag == "!" || tag == "tag:yaml.org,2002:str") {
      return MakeNode(text, source_, line);
    }
    if (tag == "tag:yaml.org,2002:null") {
      return MakeNode(ConfigNode::Null{}, source_, line);
    }
    if (tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:int" ||
        tag == "tag:yaml.org,2002:float") {
      ConfigNodePtr resolved = ResolvePlainScalar(text, source_, line);
      const bool wants_bool = tag == "tag:yaml.org,2002:bool";
      const bool matches = wants_bool ? std::holds_alternative<bool>(resolved->value)
                                      : std::holds_alternative<double>(resolved->value);
      if (!matches) {
        return Error(node.Mark(), fmt::format("'{}' does not match its tag {}", text, tag));
      }
      return resolved;
    }
    // Like the `yaml` package Backstage uses, an unknown tag leaves the scalar a string.
    return MakeNode(text, source_, line);
  }

  Source source_;
  std::size_t visited_ = 0;
};

class JsonConverter {
 public:
  explicit JsonConverter(Source source) : source_(std::move(source)) {}

  Result<ConfigNodePtr> Convert(const nlohmann::ordered_json& json, int depth) {
    if (depth > kMaxDepth) {
      return InvalidArgumentError(
          fmt::format("Invalid JSON in '{}': nesting deeper than {} levels", *source_, kMaxDepth));
    }
    switch (json.type()) {
      case nlohmann::json::value_t::null:
      case nlohmann::json::value_t::discarded:
        return MakeNode(ConfigNode::Null{}, source_);
      case nlohmann::json::value_t::boolean:
        return MakeNode(json.get<bool>(), source_);
      case nlohmann::json::value_t::number_integer:
      case nlohmann::json::value_t::number_unsigned:
      case nlohmann::json::value_t::number_float:
        return MakeNode(json.get<double>(), source_);
      case nlohmann::json::value_t::string:
        return MakeNode(json.get<std::string>(), source_);
      case nlohmann::json::value_t::binary:
        return InvalidArgumentError(fmt::format("Invalid JSON in '{}': binary value", *source_));
      case nlohmann::json::value_t::array: {
        ConfigNode::Array items;
        items.reserve(json.size());
        for (const auto& item : json) {
          STAGEHAND_ASSIGN_OR_RETURN(auto converted, Convert(item, depth + 1));
          items.push_back(std::move(converted));
        }
        return MakeNode(std::move(items), source_);
      }
      case nlohmann::json::value_t::object: {
        ConfigNode::Object entries;
        entries.reserve(json.size());
        for (const auto& [key, value] : json.items()) {
          STAGEHAND_ASSIGN_OR_RETURN(auto converted, Convert(value, depth + 1));
          entries.emplace_back(key, std::move(converted));
        }
        return MakeNode(std::move(entries), source_);
      }
    }
    return InvalidArgumentError(fmt::format("Invalid JSON in '{}': unknown value type", *source_));
  }

 private:
  Source source_;
};

}  // namespace

std::optional<double> ParseJsNumber(std::string_view text) {
  while (!text.empty() && IsJsWhitespace(text.front())) {
    text.remove_prefix(1);
  }
  while (!text.empty() && IsJsWhitespace(text.back())) {
    text.remove_suffix(1);
  }
  if (text.empty()) {
    return 0.0;
  }
  if (text.size() > 2 && text[0] == '0') {
    const char prefix = text[1];
    int base = 0;
    if (prefix == 'x' || prefix == 'X') {
      base = 16;
    }
    if (prefix == 'o' || prefix == 'O') {
      base = 8;
    }
    if (prefix == 'b' || prefix == 'B') {
      base = 2;
    }
    if (base != 0) {
      auto value = ParseRadixDigits(text.substr(2), base);
      if (value && std::isfinite(*value)) {
        return value;
      }
      return std::nullopt;
    }
  }
  if (!IsDecimalLiteral(text)) {
    return std::nullopt;
  }
  const double value = ToDouble(text);
  if (!std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

Result<ConfigNodePtr> ParseYamlTree(std::string_view text, const Source& source) {
  YamlConverter converter(source);
  try {
    // Documents are counted with a bounded loop: yaml-cpp 0.7's LoadAll never returns on some
    // malformed inputs, whose parser keeps reporting empty documents.
    std::istringstream stream{std::string(text)};
    YAML::Parser parser(stream);
    DocumentMarks documents;
    while (documents.marks.size() < 2 && parser.HandleNextDocument(documents)) {
    }
    if (documents.marks.size() > 1) {
      return converter.Error(documents.marks[1], "the source contains more than one document");
    }
    const YAML::Node root = YAML::Load(std::string(text));
    if (root.IsNull()) {
      return MakeNode(ConfigNode::Object{}, source, documents.marks.empty() ? 0 : 1);
    }
    if (!root.IsMap()) {
      return converter.Error(root.Mark(), "expected an object at the config root");
    }
    return converter.Convert(root, 0);
  } catch (const YAML::Exception& e) {
    return converter.Error(e.mark, e.msg);
  } catch (const std::exception& e) {
    return converter.Error(YAML::Mark::null_mark(), e.what());
  }
}

Result<ConfigNodePtr> ParseJsonTree(std::string_view text, const Source& source) {
  try {
    const auto json = nlohmann::ordered_json::parse(text.begin(), text.end());
    if (!json.is_object()) {
      return InvalidArgumentError(
          fmt::format("Invalid JSON in '{}': expected an object at the config root", *source));
    }
    return JsonConverter(source).Convert(json, 0);
  } catch (const std::exception& e) {
    return InvalidArgumentError(fmt::format("Invalid JSON in '{}': {}", *source, e.what()));
  }
}

}  // namespace stagehand::config_internal
