// The web dashboard of `stagehand serve`: one page (src/dashboard/assets/, compiled into the
// binary) that lists every plugin's tasks, their runs and their timeline, follows the live event
// stream and triggers, cancels, pauses and resumes tasks through the REST API. The page itself
// holds no data and needs no token; the REST calls it makes need what every client needs.
#pragma once

#include <string>
#include <string_view>

#include "stagehand/base/status.h"
#include "stagehand/http/http_message.h"

namespace stagehand {

// Where the page is served and what it is told. A value type.
struct DashboardOptions {
  // The page's path: "/" or a path ending in "/", such as "/ops/scheduler/" (a path given without
  // the final "/" is read with it).
  std::string path = "/";
  // Whether plugin routes need a bearer token: the page asks for one; without, it says in a
  // banner that the API is open.
  bool token_auth = true;
  // A URL template with "{traceId}" (CheckDashboardTraceUrl): the page links a run's trace id to
  // it, the id in place of "{traceId}". Empty: the id is shown without a link.
  std::string trace_url;
};

// Checks `url` for DashboardOptions::trace_url: an absolute http or https URL that holds
// "{traceId}". Errors: kInvalidArgument saying why.
Status CheckDashboardTraceUrl(std::string_view url);

// Checks and normalises `path` for DashboardOptions::path: it must start with "/", hold only
// URL path characters, and not fall under the daemon's own routes (/api, /.backstage,
// /.stagehand, /metrics). Returns it ending in "/". Errors: kInvalidArgument saying why.
Result<std::string> NormalizeDashboardPath(std::string_view path);

// Returns the handler to mount at the server's root, after every other mount. It answers GET
// requests for the page's path (index.html, with the relative URL of the daemon's root, the
// auth mode and the trace URL template filled in) and for each asset beside it, with a strict
// Content-Security-Policy and an ETag (a matching If-None-Match gets 304); the page's path without
// its final "/" is redirected to it. Anything else: not answered (404). `options.path` must be
// normalised. Thread-safe.
HttpHandler MakeDashboardHandler(const DashboardOptions& options);

}  // namespace stagehand
