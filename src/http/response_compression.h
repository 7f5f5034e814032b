// gzip for large responses: what the HTTP server does to a handler's answer before it is sent.
// Private to the http module.
#pragma once

#include "stagehand/http/http_message.h"

namespace stagehand::http_internal {

// The smallest body worth compressing.
inline constexpr std::size_t kMinCompressedBodyBytes = 1024;

// Compresses `response`'s body with gzip when `request` accepts it (`Accept-Encoding` names gzip
// or `*` with a non-zero q), the body is text (text/*, JSON, JavaScript, XML, SVG) of at least
// kMinCompressedBodyBytes, it is not streamed, has no Content-Encoding yet, and gzip makes it
// smaller. Then sets `Content-Encoding: gzip` and makes a strong ETag weak (the bytes differ from
// the identity form's). Whenever the body could be compressed, adds `Vary: Accept-Encoding`.
// Runs on a handler thread; compression is zlib's fastest level (about 100 MB/s).
void CompressIfAccepted(const HttpRequest& request, HttpResponse& response);

}  // namespace stagehand::http_internal
