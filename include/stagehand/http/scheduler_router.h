// The scheduler REST API of one plugin, as Backstage's scheduler router serves it under the
// plugin's mount (/api/<pluginId>):
//   GET  /.backstage/scheduler/v1/tasks               → 200 {"tasks":[...]}
//   POST /.backstage/scheduler/v1/tasks/<id>/trigger  → 200, empty body
//   POST /.backstage/scheduler/v1/tasks/<id>/cancel   → 200, empty body
// with Express's matching rules: case-insensitive paths, one optional trailing slash, the query
// ignored, HEAD answered like GET, and <id> a non-empty percent-decoded path segment.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "stagehand/base/logger.h"
#include "stagehand/http/http_message.h"
#include "stagehand/service/scheduler.h"

namespace stagehand {

// Routes requests (paths relative to the plugin mount) to a SchedulerService. Holds a reference to
// the scheduler, which must outlive it. Thread-safe when the scheduler is (SchedulerService is).
class SchedulerRestRouter {
 public:
  // `logger` receives the details of internal errors (500s); a null logger drops them.
  SchedulerRestRouter(std::string plugin_id, SchedulerService& scheduler,
                      std::shared_ptr<Logger> logger = nullptr);

  // Returns the response for a scheduler route, or nullopt when no route matches (unknown path or
  // method). Errors become Backstage error bodies (see ErrorResponse): 404 NotFoundError, 409
  // ConflictError, 400 InputError "Failed to decode param '<raw id>'" for malformed
  // percent-encoding, 500 with a log id for anything else.
  std::optional<HttpResponse> Handle(const HttpRequest& request) const;

  // Returns a handler for HttpServer::Mount that calls Handle. The router must outlive it.
  HttpHandler AsHandler() const;

 private:
  HttpResponse ListTasks(const HttpRequest& request) const;

  std::string plugin_id_;
  SchedulerService* scheduler_;
  std::shared_ptr<Logger> logger_;
};

}  // namespace stagehand
