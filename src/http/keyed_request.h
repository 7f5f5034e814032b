// Idempotency keys on the REST requests that change a task (trigger, cancel, pause, resume): a
// request with an `Idempotency-Key` header is applied once per key, in one database transaction
// with its answer, and a request sent again with the key is answered as the first was.
#pragma once

#include <functional>

#include "stagehand/base/logger.h"
#include "stagehand/http/http_message.h"
#include "stagehand/service/scheduler.h"

namespace stagehand::http_internal {

// The request header that carries the key, and the one a replayed answer carries ("true").
inline constexpr std::string_view kIdempotencyKeyHeader = "Idempotency-Key";
inline constexpr std::string_view kIdempotentReplayedHeader = "Idempotent-Replayed";
// The longest key accepted.
inline constexpr std::size_t kMaxIdempotencyKeyLength = 255;

// Answers `request` with `handle`'s response. Without the header, `handle` runs as it is. With
// it, through `scheduler`'s ApplyOnce: the first request with the key runs `handle` and keeps its
// answer with the writes it made, unless it answers 5xx (then its writes are rolled back and
// nothing is kept, so a retry applies it anew); a request sent again gets the kept answer with
// `Idempotent-Replayed: true`. Errors, as Backstage error bodies: 400 for a key that is empty,
// longer than 255 characters or not visible ASCII; 409 for a key first sent with another request
// (method, path and body); 503 when the database does not answer, or the commit's outcome is
// unknown (the client sends it again with its key). Called on the request's thread.
HttpResponse AnswerOnce(const HttpRequest& request, SchedulerService& scheduler, Logger& logger,
                        const std::function<HttpResponse()>& handle);

}  // namespace stagehand::http_internal
