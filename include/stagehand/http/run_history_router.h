// The run history REST API of one plugin, and its task listing with stagehand's fields: stagehand's
// own routes under the plugin's mount (/api/<pluginId>), beside Backstage's (scheduler_router.h),
// whose paths and bytes stay as they are:
//   GET /.stagehand/v1/tasks
//       → 200 Backstage's listing with "timeZone" in each task (its cron cadence's zone, or null)
//   GET /.stagehand/v1/tasks/<taskId>/runs?limit=&before=
//       → 200 {"runs":[RUN...],"nextCursor":string|null}, newest first; limit 1..1000 (20)
//   GET /.stagehand/v1/runs/<runId>
//       → 200 RUN with "output" (its tail), "outputBytes" and "live"
//   POST /.stagehand/v1/tasks/<taskId>/pause  body {"by"?,"reason"?,"until"?} (or empty)
//       → 200, empty; the task is paused on every host (SchedulerService::PauseTask)
//   POST /.stagehand/v1/tasks/<taskId>/resume
//       → 200, empty
// with SchedulerRestRouter's matching rules (case-insensitive literal segments, one optional
// trailing slash, HEAD answered like GET, ids percent-decoded) and Backstage's error bodies. The
// RUN object and its fields are described in docs/rest-api.md.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "stagehand/base/logger.h"
#include "stagehand/http/http_message.h"
#include "stagehand/service/scheduler.h"

namespace stagehand {

// The page size when a request names none.
inline constexpr int kDefaultRunPageSize = 20;

// Routes requests (paths relative to the plugin mount) to a SchedulerService's ListTasks,
// GetTaskRuns, GetRun, PauseTask and ResumeTask. Holds a reference to the scheduler, which must
// outlive it. Thread-safe when the scheduler is (SchedulerService is).
class RunHistoryRouter {
 public:
  // `logger` receives the details of internal errors (500s); a null logger drops them.
  RunHistoryRouter(std::string plugin_id, SchedulerService& scheduler,
                   std::shared_ptr<Logger> logger = nullptr);

  // Returns the response for a run history route, or nullopt when no route matches. Errors become
  // Backstage error bodies (ErrorResponse): 400 InputError naming `limit`, `before` or a pause's
  // field, or for a malformed id; 404 NotFoundError for an unknown task or run; 409 ConflictError
  // for a pause of a running task or a resume of one that is not paused; 501 NotImplementedError,
  // with the scheduler's advice, when the plugin keeps no run history (disabled, no database, or no
  // history tables); 500 with a log id for anything else.
  std::optional<HttpResponse> Handle(const HttpRequest& request) const;

 private:
  HttpResponse ListTasks(const HttpRequest& request) const;
  HttpResponse Pause(const HttpRequest& request, std::string_view raw_task_id) const;
  HttpResponse Resume(const HttpRequest& request, std::string_view raw_task_id) const;
  HttpResponse ListRuns(const HttpRequest& request, std::string_view raw_task_id) const;
  HttpResponse GetRun(const HttpRequest& request, std::string_view raw_run_id) const;

  std::string plugin_id_;
  SchedulerService* scheduler_;
  std::shared_ptr<Logger> logger_;
};

}  // namespace stagehand
