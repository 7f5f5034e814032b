// Private helpers of the config module: building immutable nodes, loading YAML and JSON text into
// node trees, and JavaScript's Number() conversion that Backstage's reader applies to strings.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/config/config.h"

namespace stagehand::config_internal {

using Source = std::shared_ptr<const std::string>;

// Returns a new node holding `value`.
template <typename T>
ConfigNodePtr MakeNode(T value, Source source, int line = 0) {
  auto node = std::make_shared<ConfigNode>();
  node->value = std::move(value);
  node->source = std::move(source);
  node->line = line;
  return node;
}

// Returns the value of JavaScript's Number(text) when it is finite, else nullopt. Surrounding
// whitespace is ignored and the empty string is 0, as in JavaScript; "0x1f", "0o17" and "0b11"
// are accepted, "Infinity" and anything that is not a whole numeric literal are not.
std::optional<double> ParseJsNumber(std::string_view text);

// Parses YAML text into a tree whose root is an object (an empty document is an empty object).
// Plain scalars are typed by the YAML 1.2 core schema; quoted and block scalars are strings.
// Errors: kInvalidArgument naming `source` and the line: malformed YAML, a root that is not a
// mapping, duplicate or non-scalar keys, nesting deeper than 200 levels or more than 250,000
// nodes after alias expansion.
Result<ConfigNodePtr> ParseYamlTree(std::string_view text, const Source& source);

// Parses JSON text into a tree whose root is an object. Errors: kInvalidArgument naming `source`.
Result<ConfigNodePtr> ParseJsonTree(std::string_view text, const Source& source);

}  // namespace stagehand::config_internal
