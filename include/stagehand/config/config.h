// Configuration trees in Backstage's shape (app-config.yaml), read the way @backstage/config's
// ConfigReader reads them: dotted keys, typed getters, numeric strings accepted as numbers, and
// errors that name the full key and the file the value came from.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "stagehand/base/status.h"

namespace stagehand {

struct ConfigNode;
using ConfigNodePtr = std::shared_ptr<const ConfigNode>;

// One value in a config tree. `source` names the file (or context) it came from. Objects keep
// their keys in insertion order. Immutable once built; thread-safe to share.
struct ConfigNode {
  using Null = std::monostate;
  using Array = std::vector<ConfigNodePtr>;
  using Object = std::vector<std::pair<std::string, ConfigNodePtr>>;

  std::variant<Null, bool, double, std::string, Array, Object> value;
  std::shared_ptr<const std::string> source;
  int line = 0;  // 1-based line in `source`, 0 if unknown.

  // Returns Backstage's type name: "null", "boolean", "number", "string", "empty-string" (the
  // empty string), "array" or "object"; "nan" for a YAML `.nan`, as JavaScript's typeOf reports.
  std::string_view TypeName() const;
};

// A read-only view of a config subtree at some key prefix. Cheap to copy; thread-safe.
class Config {
 public:
  // Parses YAML text. `context` names the source in error messages (usually the file path).
  // Errors: kInvalidArgument with the context, line and the parser's reason.
  static Result<Config> FromYaml(std::string_view text, std::string context);
  // Reads and parses a YAML file. Errors: kInvalidArgument (unreadable or malformed), naming it.
  static Result<Config> FromYamlFile(const std::string& path);
  // Parses JSON text (tests and fixtures). Errors: kInvalidArgument.
  static Result<Config> FromJson(std::string_view text, std::string context);
  // Deep-merges `layers` in order: later objects override earlier keys; non-objects replace.
  static Config Merge(const std::vector<Config>& layers);
  // An empty object.
  static Config Empty(std::string context = "empty");

  // Receives one string value, its full key ("a.b[2].c") and its node (for the source and line);
  // returns the replacement text or an error describing the problem.
  using StringTransform = std::function<Result<std::string>(
      const std::string& value, const std::string& full_key, const ConfigNode& node)>;
  // Returns a copy of this view in which every string value (keys are untouched) is replaced by
  // `transform`'s result; sources, lines and key order are kept. Every string is visited even
  // after a failure. Errors: kInvalidArgument holding the message of every failed call, one per
  // line, in document order.
  Result<Config> TransformStrings(const StringTransform& transform) const;

  // Returns whether a value exists at `key` (a dotted path relative to this view).
  bool Has(std::string_view key) const;
  // Returns the keys of this object view, in order. Empty if this view is not an object.
  std::vector<std::string> Keys() const;
  // Returns the node at `key`, or nullptr. `key` may be empty for this view's own node.
  const ConfigNode* Node(std::string_view key = {}) const;

  // Getters. "Optional" getters return nullopt when the key is missing; the others fail with
  // "Missing required config value at '{fullKey}' in '{context}'". A value of the wrong type
  // fails with "Invalid type in config for key '{fullKey}' in '{context}', got {type}, wanted
  // {wanted}". Numbers accept numeric strings; a non-numeric string fails with
  // "Unable to convert config value for key '{fullKey}' in '{context}' to a number".
  // Walking a dotted key through a value that is not an object is a type error on the part walked
  // ("wanted object"); a key with an empty part fails with "Invalid config key '{key}'". Booleans
  // also accept 1/0 and the strings y/yes/true/1/on and n/no/false/0/off, as Backstage does.
  // Array getters name the bad element as "{fullKey}[{index}]" and want "string-array" or
  // "object-array". Every error is kInvalidArgument.
  Result<Config> GetConfig(std::string_view key) const;
  Result<std::optional<Config>> GetOptionalConfig(std::string_view key) const;
  Result<std::vector<Config>> GetConfigArray(std::string_view key) const;
  Result<std::string> GetString(std::string_view key) const;
  Result<std::optional<std::string>> GetOptionalString(std::string_view key) const;
  Result<double> GetNumber(std::string_view key) const;
  Result<std::optional<double>> GetOptionalNumber(std::string_view key) const;
  Result<bool> GetBoolean(std::string_view key) const;
  Result<std::optional<bool>> GetOptionalBoolean(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;

  // Returns the dotted key of `key` from the root ("backend.database.client").
  std::string FullKey(std::string_view key = {}) const;
  // Returns the name of the source the value at `key` came from (this view's own if missing).
  std::string Context(std::string_view key = {}) const;

 private:
  // Returns the value of an optional getter, or the "Missing required config value" error.
  template <typename T>
  Result<T> Required(Result<std::optional<T>> value, std::string_view key) const;

  Config(ConfigNodePtr node, std::string prefix)
      : node_(std::move(node)), prefix_(std::move(prefix)) {}

  ConfigNodePtr node_;
  std::string prefix_;
};

}  // namespace stagehand
