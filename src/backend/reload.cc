#include "stagehand/backend/reload.h"

#include <nlohmann/json.hpp>

namespace stagehand {
namespace {

using IdList = std::vector<std::string> PluginReload::*;

std::size_t Count(const ReloadReport& report, IdList list) {
  std::size_t count = 0;
  for (const PluginReload& plugin : report.plugins) count += (plugin.*list).size();
  return count;
}

// "2 (jobs/a, jobs/b)", or "0".
std::string CountWithIds(const ReloadReport& report, IdList list) {
  std::string ids;
  for (const PluginReload& plugin : report.plugins) {
    for (const std::string& id : plugin.*list) {
      ids += (ids.empty() ? "" : ", ") + plugin.plugin_id + "/" + id;
    }
  }
  const std::string count = std::to_string(Count(report, list));
  return ids.empty() ? count : count + " (" + ids + ")";
}

}  // namespace

std::string ReloadReportJson(const ReloadReport& report) {
  nlohmann::json plugins = nlohmann::json::array();
  for (const PluginReload& plugin : report.plugins) {
    plugins.push_back({{"id", plugin.plugin_id},
                       {"added", plugin.added},
                       {"removed", plugin.removed},
                       {"changed", plugin.changed},
                       {"unchanged", plugin.unchanged}});
  }
  return nlohmann::json{{"status", "reloaded"},
                        {"plugins", std::move(plugins)},
                        {"added", Count(report, &PluginReload::added)},
                        {"removed", Count(report, &PluginReload::removed)},
                        {"changed", Count(report, &PluginReload::changed)},
                        {"unchanged", Count(report, &PluginReload::unchanged)}}
      .dump();
}

std::string DescribeReload(const ReloadReport& report) {
  return "added " + CountWithIds(report, &PluginReload::added) + ", removed " +
         CountWithIds(report, &PluginReload::removed) + ", changed " +
         CountWithIds(report, &PluginReload::changed) + ", unchanged " +
         std::to_string(Count(report, &PluginReload::unchanged));
}

}  // namespace stagehand
