#include "http/task_listing_json.h"

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

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

// How far ahead of a task's next start "upcoming" looks.
constexpr std::chrono::hours kUpcomingWindow{24};

// The task's starts from its next one on (see TaskListingJson), as a JSON array. `zones` caches
// the zones located so far by name.
std::string UpcomingJson(const TaskListing& listing, int count,
                         std::map<std::string, TimeZone, std::less<>>& zones) {
  std::vector<WallTime> starts;
  const Cadence& cadence = listing.descriptor.settings.cadence;
  std::optional<WallTime> next;
  if (listing.task_state && listing.task_state->starts_at && !listing.pause &&
      !cadence.is_manual()) {
    if (Result<WallTime> parsed = ParseIsoInstant(*listing.task_state->starts_at); parsed.ok()) {
      next = *parsed;
    }
  }
  const std::string& zone_name = listing.descriptor.time_zone;
  auto zone = zones.find(zone_name);
  if (next && zone == zones.end()) {
    Result<TimeZone> located =
        zone_name.empty() ? Result<TimeZone>(TimeZone::Utc()) : TimeZone::Locate(zone_name);
    if (located.ok()) zone = zones.emplace(zone_name, *located).first;
  }
  if (next && zone != zones.end()) {
    const WallTime until = *next + kUpcomingWindow;
    // A Backstage worker stores a cron task's next start one second before its fire time.
    Result<std::optional<WallTime>> at =
        cadence.is_cron() ? cadence.NextAfter(*next - std::chrono::seconds(1), zone->second)
                          : Result<std::optional<WallTime>>(next);
    while (at.ok() && *at && static_cast<int>(starts.size()) < count && **at <= until) {
      starts.push_back(**at);
      if (cadence.is_duration() && cadence.period().count() <= 0) break;
      at = cadence.NextAfter(**at, zone->second);
    }
  }
  std::string json = "[";
  for (std::size_t i = 0; i < starts.size(); ++i) {
    if (i > 0) json += ',';
    json += JsonString(FormatIsoInstantUtc(starts[i]));
  }
  json += ']';
  return json;
}

}  // namespace

std::string TaskListingJson(std::string_view plugin_id, const std::vector<TaskListing>& listings,
                            bool time_zones, int upcoming) {
  const std::string plugin = JsonString(plugin_id);
  std::map<std::string, TimeZone, std::less<>> zones;
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
      if (upcoming > 0) {
        body += R"(,"upcoming":)";
        body += UpcomingJson(listing, upcoming, zones);
      }
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
                                 std::string_view plugin_id, Logger& logger, bool time_zones,
                                 int upcoming) {
  Result<std::vector<TaskListing>> listings = scheduler.ListTasks();
  if (!listings.ok()) {
    return ErrorResponse(listings.status(), request, logger);
  }
  HttpResponse response;
  response.status = 200;
  response.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
  response.body = TaskListingJson(plugin_id, *listings, time_zones, upcoming);
  return response;
}

}  // namespace stagehand::http_internal
