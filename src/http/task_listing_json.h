// A plugin's task listing on the wire, shared by Backstage's route and stagehand's own. Private to
// the http module.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stagehand/base/logger.h"
#include "stagehand/http/http_message.h"
#include "stagehand/service/scheduler.h"

namespace stagehand::http_internal {

// Returns `{"tasks":[...]}` for `listings` of plugin `plugin_id`, byte for byte as Backstage's
// GET .../scheduler/v1/tasks answers: taskId, pluginId, scope, settings, taskState, workerState.
// With `time_zones` (stagehand's listing), each task also has, after "settings", "timeZone": the
// zone of its cron cadence, null for other cadences; and "pause": {"by","reason","since","until"}
// while it is paused (taskState then shows it running, as Backstage's listing does), else null.
// With `upcoming` > 0 (stagehand's listing only), each task also has, after "pause", "upcoming":
// its next starts from taskState.startsAt on, within 24 hours of it, at most `upcoming` of them
// (ISO-8601 UTC; empty for a manual task, a running one or one whose next start is unknown).
std::string TaskListingJson(std::string_view plugin_id, const std::vector<TaskListing>& listings,
                            bool time_zones, int upcoming = 0);

// The most starts "upcoming" lists per task.
inline constexpr int kMaxUpcomingStarts = 50;

// Answers `request` for the listing of `scheduler`'s tasks (TaskListingJson), or with the error
// that listing them gave. Called on a handler thread.
HttpResponse TaskListingResponse(const HttpRequest& request, SchedulerService& scheduler,
                                 std::string_view plugin_id, Logger& logger, bool time_zones,
                                 int upcoming = 0);

}  // namespace stagehand::http_internal
