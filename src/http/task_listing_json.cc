#include "http/task_listing_json.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "stagehand/http/error_response.h"
#include "stagehand/time/time_zone.h"

namespace stagehand::http_internal {
namespace {

std::string JsonString(std::string_view text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// {"by","reason","since","until"}, instants in ISO-8601 UTC, until null when indefinite.
std::string PauseJson(const TaskPause& pause) {
  return fmt::format(
      R"({{"by":{},"reason":{},"since":{},"until":{},"pending":{}}})", JsonString(pause.by),
      JsonString(pause.reason), JsonString(FormatIsoInstantUtc(pause.since)),
      pause.until ? JsonString(FormatIsoInstantUtc(*pause.until)) : "null", pause.pending);
}

}  // namespace

std::string TaskListingJson(std::string_view plugin_id, const std::vector<TaskListing>& listings,
                            bool time_zones) {
  const std::string plugin = JsonString(plugin_id);
  std::string body = R"({"tasks":[)";
  bool first = true;
  for (const TaskListing& listing : listings) {
    if (!first) {
      body += ',';
    }
    first = false;
    body += R"({"taskId":)";
    body += JsonString(listing.descriptor.id);
    body += R"(,"pluginId":)";
    body += plugin;
    body += R"(,"scope":)";
    body += JsonString(TaskScopeName(listing.descriptor.scope));
    body += R"(,"settings":)";
    body += listing.descriptor.settings.ToJson();
    if (time_zones) {
      body += R"(,"timeZone":)";
      body +=
          listing.descriptor.time_zone.empty() ? "null" : JsonString(listing.descriptor.time_zone);
      body += R"(,"pause":)";
      body += listing.pause ? PauseJson(*listing.pause) : "null";
    }
    body += R"(,"taskState":)";
    body += listing.task_state ? listing.task_state->ToJson() : "null";
    body += R"(,"workerState":)";
    body += listing.worker_state ? fmt::format(R"({{"status":{}}})",
                                               JsonString(WorkerStatusName(*listing.worker_state)))
                                 : "null";
    body += '}';
  }
  body += "]}";
  return body;
}

HttpResponse TaskListingResponse(const HttpRequest& request, SchedulerService& scheduler,
                                 std::string_view plugin_id, Logger& logger, bool time_zones) {
  Result<std::vector<TaskListing>> listings = scheduler.ListTasks();
  if (!listings.ok()) {
    return ErrorResponse(listings.status(), request, logger);
  }
  HttpResponse response;
  response.status = 200;
  response.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
  response.body = TaskListingJson(plugin_id, *listings, time_zones);
  return response;
}

}  // namespace stagehand::http_internal
