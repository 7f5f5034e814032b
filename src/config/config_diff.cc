#include "stagehand/config/config_diff.h"

#include <algorithm>
#include <utility>
#include <variant>

namespace stagehand {
namespace {

bool SameValue(const ConfigNode* a, const ConfigNode* b);

const ConfigNode* Member(const ConfigNode::Object& object, const std::string& key) {
  for (const auto& [name, node] : object) {
    if (name == key) return node.get();
  }
  return nullptr;
}

bool SameObject(const ConfigNode::Object& a, const ConfigNode::Object& b) {
  if (a.size() != b.size()) return false;
  return std::all_of(a.begin(), a.end(), [&](const auto& member) {
    return SameValue(member.second.get(), Member(b, member.first));
  });
}

bool SameValue(const ConfigNode* a, const ConfigNode* b) {
  if (a == nullptr || b == nullptr) return a == b;
  if (a->value.index() != b->value.index()) return false;
  if (const auto* array = std::get_if<ConfigNode::Array>(&a->value)) {
    const auto& other = std::get<ConfigNode::Array>(b->value);
    return std::equal(
        array->begin(), array->end(), other.begin(), other.end(),
        [](const ConfigNodePtr& x, const ConfigNodePtr& y) { return SameValue(x.get(), y.get()); });
  }
  if (const auto* object = std::get_if<ConfigNode::Object>(&a->value)) {
    return SameObject(*object, std::get<ConfigNode::Object>(b->value));
  }
  return a->value == b->value;
}

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

void Collect(const ConfigNode* a, const ConfigNode* b, const std::string& key,
             std::vector<std::string>& changed) {
  const auto* a_object = a != nullptr ? std::get_if<ConfigNode::Object>(&a->value) : nullptr;
  const auto* b_object = b != nullptr ? std::get_if<ConfigNode::Object>(&b->value) : nullptr;
  if (a_object == nullptr || b_object == nullptr) {
    if (!SameValue(a, b)) changed.push_back(key);
    return;
  }
  for (const auto& [name, node] : *a_object) {
    Collect(node.get(), Member(*b_object, name), Join(key, name), changed);
  }
  for (const auto& [name, node] : *b_object) {
    if (Member(*a_object, name) == nullptr) Collect(nullptr, node.get(), Join(key, name), changed);
  }
}

}  // namespace

std::vector<std::string> ChangedConfigKeys(const Config& before, const Config& after) {
  std::vector<std::string> changed;
  Collect(before.Node(), after.Node(), before.FullKey(), changed);
  return changed;
}

}  // namespace stagehand
