// Idempotency keys: a request sent again with the key of an earlier one (a client retrying after
// a 503 or a dropped connection) is answered as the first was, and applied once. The key, what it
// was sent with and the answer are kept in the plugin's database (stagehand_request_keys) for a
// retention, written in the same transaction as the change the request made, so that a change
// is committed with its answer or not at all: a retry after a commit whose outcome its client
// never learnt finds the answer if the commit happened and applies the request if it did not.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "stagehand/base/status.h"

namespace stagehand {

// A request sent with an idempotency key. Plain value type.
struct KeyedRequest {
  std::string key;
  // What the request was (its method, path and body): a key sent again with another request is
  // refused, never answered with the other request's answer.
  std::string fingerprint;
  // How long the answer is kept after the request was first applied (database time).
  std::chrono::milliseconds retention{std::chrono::hours(24)};
};

// An answer as it is kept: its HTTP status and body. Plain value type.
struct KeptAnswer {
  int status = 200;
  std::string body;

  bool operator==(const KeptAnswer&) const = default;
};

// What came of a keyed request. Plain value type.
struct KeyedOutcome {
  KeptAnswer answer;
  // The answer kept for an earlier request with the key; nothing was applied now.
  bool replayed = false;
};

// Where a plugin's idempotency keys are kept. Thread-safe: any thread may call it.
class RequestKeys {
 public:
  virtual ~RequestKeys() = default;

  // Applies a keyed request once. With a key not kept (or kept past its retention), runs `apply`
  // on the calling thread inside one transaction with the key's record, the store's own writes
  // in `apply` included, and commits the answer `apply` returns with them. With a key kept for
  // the same fingerprint, returns its answer, replayed, without calling `apply`. A second
  // request with a key whose first is still being applied waits for it. An error from `apply`
  // rolls its writes back and keeps nothing. Expired keys are removed on the way, a few at a
  // time. Errors: kConflict (the key was kept for another fingerprint), kUnavailable (then
  // nothing was committed, or the commit's outcome is unknown and a retry resolves it), or
  // `apply`'s error.
  virtual Result<KeyedOutcome> ApplyOnce(const KeyedRequest& request,
                                         const std::function<Result<KeptAnswer>()>& apply) = 0;
};

}  // namespace stagehand
