#include "stagehand/dashboard/dashboard.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "dashboard/embedded_files.h"
#include "stagehand/base/hash.h"
#include "stagehand/base/text.h"
#include "stagehand/base/url.h"

namespace stagehand {
namespace {

using dashboard_internal::EmbeddedFile;
using dashboard_internal::EmbeddedFiles;

constexpr std::string_view kIndex = "index.html";
constexpr std::string_view kRootPlaceholder = "%STAGEHAND_ROOT%";
constexpr std::string_view kAuthPlaceholder = "%STAGEHAND_AUTH%";
constexpr std::string_view kTraceUrlPlaceholder = "%STAGEHAND_TRACE_URL%";
constexpr std::string_view kTraceIdField = "{traceId}";
// The page loads only its own files and talks only to its own origin.
constexpr std::string_view kContentSecurityPolicy =
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; "
    "script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";
// The daemon's own routes, which the page's path must not shadow.
constexpr std::array<std::string_view, 4> kReservedPrefixes = {"/api", "/.backstage", "/.stagehand",
                                                               "/metrics"};

std::string_view ContentTypeOf(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  if (name.ends_with(".svg")) return "image/svg+xml";
  if (name.ends_with(".png")) return "image/png";
  return "application/octet-stream";
}

// The relative URL from a page at `path` (ending in "/") to the server's root: "./" for "/",
// "../" for "/a/", "../../" for "/a/b/".
std::string RelativeRoot(std::string_view path) {
  std::string root;
  for (std::size_t i = 1; i < path.size(); ++i) {
    if (path[i] == '/') root += "../";
  }
  return root.empty() ? "./" : root;
}

void ReplaceAll(std::string& text, std::string_view placeholder, std::string_view value) {
  for (std::size_t at = text.find(placeholder); at != std::string::npos;
       at = text.find(placeholder, at + value.size())) {
    text.replace(at, placeholder.size(), value);
  }
}

// Returns `text` as it may stand in an HTML attribute value.
std::string EscapeHtml(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        escaped += "&amp;";
        break;
      case '<':
        escaped += "&lt;";
        break;
      case '>':
        escaped += "&gt;";
        break;
      case '"':
        escaped += "&quot;";
        break;
      case '\'':
        escaped += "&#39;";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

// One file as served: its bytes (index.html with its placeholders filled in), type and ETag.
struct ServedFile {
  std::string body;
  std::string content_type;
  std::string etag;
};

bool IsPathCharacter(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
         std::string_view("/-._~!$&'()*+,;=:@%").find(c) != std::string_view::npos;
}

// Whether `header` (an If-None-Match value) names `etag` or is "*".
bool MatchesEtag(std::string_view header, std::string_view etag) {
  while (!header.empty()) {
    const std::size_t comma = header.find(',');
    std::string_view item = TrimSpacesAndTabs(header.substr(0, comma));
    if (item.starts_with("W/")) item.remove_prefix(2);
    if (item == "*" || item == etag) return true;
    if (comma == std::string_view::npos) break;
    header.remove_prefix(comma + 1);
  }
  return false;
}

HttpResponse WithSecurityHeaders(HttpResponse response) {
  response.headers.emplace_back("Content-Security-Policy", std::string(kContentSecurityPolicy));
  response.headers.emplace_back("X-Content-Type-Options", "nosniff");
  response.headers.emplace_back("Referrer-Policy", "no-referrer");
  response.headers.emplace_back("X-Frame-Options", "DENY");
  return response;
}

}  // namespace

Result<std::string> NormalizeDashboardPath(std::string_view path) {
  if (path.empty() || path.front() != '/') {
    return InvalidArgumentError(fmt::format("dashboard path '{}' does not start with '/'", path));
  }
  for (char c : path) {
    if (!IsPathCharacter(c) || c == '%') {
      return InvalidArgumentError(
          fmt::format("dashboard path '{}' has the character '{}', which a URL path cannot hold "
                      "unescaped (use letters, digits and -._~)",
                      path, c));
    }
  }
  if (path.find("//") != std::string_view::npos || path.find("/./") != std::string_view::npos ||
      path.find("/../") != std::string_view::npos || path.ends_with("/.") ||
      path.ends_with("/..")) {
    return InvalidArgumentError(
        fmt::format("dashboard path '{}' has an empty, '.' or '..' segment", path));
  }
  std::string normalized(path);
  if (!normalized.ends_with('/')) normalized += '/';
  for (std::string_view reserved : kReservedPrefixes) {
    const std::string with_slash = std::string(reserved) + "/";
    if (normalized.size() >= with_slash.size() &&
        EqualsIgnoreCase(std::string_view(normalized).substr(0, with_slash.size()), with_slash)) {
      return InvalidArgumentError(
          fmt::format("dashboard path '{}' is under the daemon's own route {}: choose another",
                      path, reserved));
    }
  }
  return normalized;
}

Status CheckDashboardTraceUrl(std::string_view url) {
  if (url.find(kTraceIdField) == std::string_view::npos) {
    return InvalidArgumentError("it must hold {traceId}, where the page puts a run's trace id");
  }
  std::string sample(url);
  ReplaceAll(sample, kTraceIdField, "4bf92f3577b34da6a3ce929d0e0e4736");
  Result<Url> parsed = ParseUrl(sample);
  if (!parsed.ok()) return InvalidArgumentError(parsed.status().message());
  if (parsed->scheme != "http" && parsed->scheme != "https") {
    return InvalidArgumentError(
        fmt::format("it must be an http or https URL, not {}", parsed->scheme));
  }
  return Status::Ok();
}

HttpHandler MakeDashboardHandler(const DashboardOptions& options) {
  auto files = std::make_shared<std::map<std::string, ServedFile, std::less<>>>();
  for (const EmbeddedFile& file : EmbeddedFiles()) {
    ServedFile served;
    served.body = std::string(file.content);
    if (file.name == kIndex) {
      ReplaceAll(served.body, kRootPlaceholder, RelativeRoot(options.path));
      ReplaceAll(served.body, kAuthPlaceholder, options.token_auth ? "token" : "development");
      ReplaceAll(served.body, kTraceUrlPlaceholder, EscapeHtml(options.trace_url));
    }
    served.content_type = std::string(ContentTypeOf(file.name));
    served.etag = fmt::format("\"{:016x}\"", Fnv1a64(served.body));
    files->emplace(std::string(file.name), std::move(served));
  }
  const std::string page = options.path;
  return [files, page](const HttpRequest& request) -> std::optional<HttpResponse> {
    if (request.method != "GET") return std::nullopt;
    const std::string_view path = request.path;
    if (path.size() + 1 == page.size() && page.starts_with(path)) {
      // Without its final "/", the page's relative URLs would resolve one level up. The
      // Location is relative too, so that it holds behind a proxy that serves a sub-path.
      HttpResponse redirect;
      redirect.status = 308;
      const std::size_t last = path.rfind('/');
      std::string location = std::string(path.substr(last + 1)) + "/";
      if (!request.query.empty()) location += "?" + request.query;
      redirect.headers.emplace_back("Location", std::move(location));
      return redirect;
    }
    if (!path.starts_with(page)) return std::nullopt;
    std::string_view name = path.substr(page.size());
    if (name.empty()) name = kIndex;
    const auto found = files->find(name);
    if (found == files->end()) return std::nullopt;
    const ServedFile& file = found->second;
    HttpResponse response;
    response.headers.emplace_back("ETag", file.etag);
    // Revalidated on every load, so that a new daemon's page is never mixed with an old one's.
    response.headers.emplace_back("Cache-Control", "no-cache");
    const std::optional<std::string_view> if_none_match =
        FindHeader(request.headers, "If-None-Match");
    if (if_none_match && MatchesEtag(*if_none_match, file.etag)) {
      response.status = 304;
      return WithSecurityHeaders(std::move(response));
    }
    response.headers.emplace_back("Content-Type", file.content_type);
    response.body = file.body;
    return WithSecurityHeaders(std::move(response));
  };
}

}  // namespace stagehand
