#include <fmt/format.h>

#include <algorithm>
#include <exception>

#include "http/http_server_internal.h"
#include "http/path_match.h"
#include "stagehand/base/json_string.h"
#include "stagehand/http/error_response.h"

namespace stagehand::http_internal {
namespace {

constexpr std::string_view kLivenessPath = "/.backstage/health/v1/liveness";
constexpr std::string_view kReadinessPath = "/.backstage/health/v1/readiness";

HttpResponse JsonResponse(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
  response.body = std::move(body);
  return response;
}

}  // namespace

std::string_view MethodLabel(std::string_view method) {
  for (const std::string_view known :
       {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
    if (method == known) {
      return known;
    }
  }
  return "other";
}

std::optional<HttpResponse> ServerCore::HealthResponse(const HttpRequest& request) const {
  const bool get = request.method == "GET" || request.method == "HEAD";
  if (get && RouteMatches(request.path, kLivenessPath)) {
    return JsonResponse(200, R"({"status":"ok"})");
  }
  if (get && RouteMatches(request.path, kReadinessPath)) {
    if (!ready.load()) {
      return JsonResponse(503, R"({"status":"error","message":"Backend is not ready"})");
    }
    if (readiness_check) {
      if (std::optional<std::string> reason = readiness_check()) {
        std::string body = R"({"status":"error","message":)";
        AppendJsonString(body, *reason);
        body += '}';
        return JsonResponse(503, std::move(body));
      }
    }
    return JsonResponse(200, R"({"status":"ok"})");
  }
  return std::nullopt;
}

HttpResponse ServerCore::Handle(const HttpRequest& request) {
  HttpHandler handler;
  std::optional<std::string_view> relative;
  {
    MutexLock lock(mu);
    for (const auto& [prefix, mounted] : mounts) {
      relative = StripMount(request.path, prefix);
      if (relative) {
        handler = mounted;
        break;
      }
    }
  }
  std::optional<HttpResponse> routed;
  if (relative) {
    HttpRequest inner = request;
    inner.path = std::string(*relative);
    try {
      routed = handler(inner);
    } catch (const std::exception& exception) {
      return ErrorResponse(InternalError(exception.what()), request, *logger);
    } catch (...) {
      return ErrorResponse(InternalError("unknown exception"), request, *logger);
    }
  }
  if (!routed) {
    routed.emplace();
    routed->status = 404;
  }
  return std::move(*routed);
}

std::string ServerCore::RouteOf(std::string_view method, std::string_view path) {
  const bool get = method == "GET" || method == "HEAD";
  for (const std::string_view health : {kLivenessPath, kReadinessPath}) {
    if (get && RouteMatches(path, health)) {
      return std::string(health);
    }
  }
  MutexLock lock(mu);
  for (const auto& [prefix, mounted] : mounts) {
    if (StripMount(path, prefix)) {
      return prefix;
    }
  }
  return "unmatched";
}

bool ServerCore::IsQuietRoute(std::string_view route) const {
  return route == kLivenessPath || route == kReadinessPath ||
         std::find(options.quiet_routes.begin(), options.quiet_routes.end(), route) !=
             options.quiet_routes.end();
}

void ServerCore::RecordAnswer(const HttpRequest& request, int status,
                              std::optional<MonoTime> head_done) {
  const std::chrono::nanoseconds elapsed =
      head_done ? clock->MonoNow() - *head_done : std::chrono::nanoseconds(0);
  const std::string route = RouteOf(request.method, request.path);
  if (options.on_request) {
    HttpRequestRecord record;
    record.method = MethodLabel(request.method);
    record.route = route;
    record.status = status;
    record.duration = elapsed;
    options.on_request(record);
  }
  const LogLevel level = status < 400 && IsQuietRoute(route) ? LogLevel::kDebug : LogLevel::kInfo;
  if (!logger->Enabled(level)) {
    return;
  }
  LogFields fields = {
      {"method", request.method}, {"path", request.path}, {"status", std::to_string(status)}};
  if (head_done) {
    fields.emplace_back(
        "duration_ms",
        fmt::format("{:.3f}", std::chrono::duration<double, std::milli>(elapsed).count()));
  }
  logger->Log(level, "request", fields);
}

}  // namespace stagehand::http_internal
