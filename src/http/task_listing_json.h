// A plugin's task listing on the wire, shared by Backstage's route and stagehand's own. Private to
// the http module.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stagehand/service/scheduler.h"

namespace stagehand::http_internal {

// Returns `{"tasks":[...]}` for `listings` of plugin `plugin_id`, byte for byte as Backstage's
// GET .../scheduler/v1/tasks answers: taskId, pluginId, scope, settings, taskState, workerState.
// With `time_zones` (stagehand's listing), each task also has "timeZone" after "settings": the
// zone of its cron cadence, null for other cadences.
std::string TaskListingJson(std::string_view plugin_id, const std::vector<TaskListing>& listings,
                            bool time_zones);

}  // namespace stagehand::http_internal
