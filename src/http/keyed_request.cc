#include "http/keyed_request.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "stagehand/http/error_response.h"

namespace stagehand::http_internal {

namespace {

constexpr std::string_view kJsonContentType = "application/json; charset=utf-8";

Status CheckKey(std::string_view key) {
  const bool visible =
      std::all_of(key.begin(), key.end(), [](char c) { return c > ' ' && c < 0x7f; });
  if (key.empty() || key.size() > kMaxIdempotencyKeyLength || !visible) {
    return InvalidArgumentError(
        "The Idempotency-Key header must be 1 to 255 visible ASCII characters");
  }
  return Status::Ok();
}

}  // namespace

HttpResponse AnswerOnce(const HttpRequest& request, SchedulerService& scheduler, Logger& logger,
                        const std::function<HttpResponse()>& handle) {
  const std::optional<std::string_view> key = FindHeader(request.headers, kIdempotencyKeyHeader);
  if (!key) return handle();
  if (Status checked = CheckKey(*key); !checked.ok()) {
    return ErrorResponse(checked, request, logger);
  }
  KeyedRequest keyed;
  keyed.key = std::string(*key);
  keyed.fingerprint = request.method + " " + request.path + "\n" + request.body;
  std::optional<HttpResponse> fresh;
  bool unkept = false;
  Result<KeyedOutcome> outcome = scheduler.ApplyOnce(keyed, [&]() -> Result<KeptAnswer> {
    fresh = handle();
    if (fresh->status >= 500) {
      unkept = true;
      return UnavailableError("a request answered " + std::to_string(fresh->status) +
                              " keeps no answer");
    }
    return KeptAnswer{fresh->status, fresh->body};
  });
  if (!outcome.ok()) {
    if (unkept) return *std::move(fresh);
    return ErrorResponse(outcome.status(), request, logger);
  }
  if (!outcome->replayed) return *std::move(fresh);
  HttpResponse replayed;
  replayed.status = outcome->answer.status;
  replayed.body = std::move(outcome->answer.body);
  if (!replayed.body.empty()) {
    replayed.headers.emplace_back("Content-Type", std::string(kJsonContentType));
  }
  replayed.headers.emplace_back(std::string(kIdempotentReplayedHeader), "true");
  return replayed;
}

}  // namespace stagehand::http_internal
