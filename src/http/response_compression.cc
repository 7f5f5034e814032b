#include "http/response_compression.h"

#include <zlib.h>

#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "stagehand/base/text.h"

namespace stagehand::http_internal {
namespace {

bool IsCompressibleType(std::string_view type) {
  const std::size_t semicolon = type.find(';');
  const std::string_view media = TrimSpacesAndTabs(type.substr(0, semicolon));
  const auto ends_with = [&](std::string_view suffix) {
    return media.size() >= suffix.size() &&
           EqualsIgnoreCase(media.substr(media.size() - suffix.size()), suffix);
  };
  return (media.size() >= 5 && EqualsIgnoreCase(media.substr(0, 5), "text/")) ||
         ends_with("/json") || ends_with("+json") || ends_with("/javascript") ||
         ends_with("/xml") || ends_with("+xml");
}

// Whether an Accept-Encoding value allows gzip: "gzip" or "*" listed without q=0.
bool AcceptsGzip(std::string_view accept) {
  while (!accept.empty()) {
    const std::size_t comma = accept.find(',');
    const std::string_view item = TrimSpacesAndTabs(accept.substr(0, comma));
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    const std::size_t semicolon = item.find(';');
    const std::string_view coding = TrimSpacesAndTabs(item.substr(0, semicolon));
    if (!EqualsIgnoreCase(coding, "gzip") && coding != "*") continue;
    if (semicolon == std::string_view::npos) return true;
    std::string_view params = TrimSpacesAndTabs(item.substr(semicolon + 1));
    if (params.size() >= 2 && (params[0] == 'q' || params[0] == 'Q') && params[1] == '=') {
      params.remove_prefix(2);
      // q=0, q=0.0, q=0.000: refused; any other weight accepts.
      return params.find_first_not_of("0.") != std::string_view::npos;
    }
    return true;
  }
  return false;
}

// Returns `body` as a gzip member at zlib's fastest level, or empty when zlib fails.
std::string Gzip(const std::string& body) {
  z_stream stream{};
  constexpr int kGzipWindowBits = 15 + 16;
  constexpr int kMemoryLevel = 8;
  if (deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, kGzipWindowBits, kMemoryLevel,
                   Z_DEFAULT_STRATEGY) != Z_OK) {
    return {};
  }
  std::string out(deflateBound(&stream, static_cast<uLong>(body.size())), '\0');
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): zlib's API takes a non-const input.
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  stream.avail_in = static_cast<uInt>(body.size());
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): zlib's byte type.
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int result = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return result == Z_STREAM_END ? out : std::string();
}

}  // namespace

void CompressIfAccepted(const HttpRequest& request, HttpResponse& response) {
  if (response.stream || response.body.size() < kMinCompressedBodyBytes ||
      response.body.size() > std::numeric_limits<uInt>::max() ||
      FindHeader(response.headers, "Content-Encoding")) {
    return;
  }
  const std::optional<std::string_view> type = FindHeader(response.headers, "Content-Type");
  if (!type || !IsCompressibleType(*type)) return;
  response.headers.emplace_back("Vary", "Accept-Encoding");
  const std::optional<std::string_view> accept = FindHeader(request.headers, "Accept-Encoding");
  if (!accept || !AcceptsGzip(*accept)) return;
  std::string compressed = Gzip(response.body);
  if (compressed.empty() || compressed.size() >= response.body.size()) return;
  response.body = std::move(compressed);
  response.headers.emplace_back("Content-Encoding", "gzip");
  for (auto& [name, value] : response.headers) {
    if (EqualsIgnoreCase(name, "ETag") && !value.starts_with("W/")) value = "W/" + value;
  }
}

}  // namespace stagehand::http_internal
