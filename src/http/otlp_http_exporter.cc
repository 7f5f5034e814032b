#include "stagehand/http/otlp_http_exporter.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <utility>

#include "stagehand/base/url.h"
#include "stagehand/trace/otlp_json.h"

namespace stagehand {

namespace {

constexpr std::chrono::milliseconds kFirstBackoff{1000};
constexpr std::chrono::milliseconds kMaxBackoff{30000};

}  // namespace

struct OtlpHttpExporter::Impl {
  OtlpHttpOptions options;
  std::string target;  // path and query
  httplib::Client client;
  const Clock& clock;
  std::chrono::milliseconds backoff{0};  // after the last unanswered request; zero when answered
  MonoTime refuse_until{};

  Impl(OtlpHttpOptions opts, const Url& url)
      : options(std::move(opts)),
        target(url.path.empty() ? "/" : url.path),
        client(UrlHost(url.host), url.port.value_or(80)),
        clock(options.clock != nullptr ? *options.clock : SystemClock::Instance()) {
    if (url.query) target += "?" + *url.query;
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(options.timeout);
    const auto micros =
        std::chrono::duration_cast<std::chrono::microseconds>(options.timeout - seconds);
    client.set_connection_timeout(seconds.count(), micros.count());
    client.set_read_timeout(seconds.count(), micros.count());
    client.set_write_timeout(seconds.count(), micros.count());
    client.set_keep_alive(true);
  }
};

Result<std::unique_ptr<OtlpHttpExporter>> OtlpHttpExporter::Create(OtlpHttpOptions options) {
  Result<Url> url = ParseUrl(options.endpoint);
  if (!url.ok()) {
    return InvalidArgumentError(
        fmt::format("invalid OTLP endpoint '{}': {}", options.endpoint, url.status().message()));
  }
  if (url->scheme != "http") {
    return InvalidArgumentError(
        fmt::format("invalid OTLP endpoint '{}': only http is supported, not {}", options.endpoint,
                    url->scheme));
  }
  return std::unique_ptr<OtlpHttpExporter>(
      new OtlpHttpExporter(std::make_unique<Impl>(std::move(options), *url)));
}

OtlpHttpExporter::OtlpHttpExporter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OtlpHttpExporter::~OtlpHttpExporter() = default;

Status OtlpHttpExporter::Export(const std::vector<SpanData>& spans) {
  const OtlpHttpOptions& options = impl_->options;
  if (impl_->backoff.count() > 0 && impl_->clock.MonoNow() < impl_->refuse_until) {
    return UnavailableError(
        fmt::format("OTLP export to {} skipped: the collector did not answer "
                    "the last request; next try within {} ms",
                    options.endpoint, impl_->backoff.count()));
  }
  const std::string body =
      EncodeOtlpTraces(options.resource, options.scope_name, options.scope_version, spans);
  httplib::Request request;
  request.method = "POST";
  request.path = impl_->target;
  for (const auto& [name, value] : options.headers) request.headers.emplace(name, value);
  request.headers.emplace("Content-Type", "application/json");
  request.body = body;
  // Only the status matters: the collector's answer is read and dropped, so that a collector
  // that sends without end costs no memory.
  request.content_receiver = [](const char*, std::size_t, std::uint64_t, std::uint64_t) {
    return true;
  };
  httplib::Result result = impl_->client.send(request);
  if (!result) {
    impl_->backoff =
        impl_->backoff.count() == 0 ? kFirstBackoff : std::min(impl_->backoff * 2, kMaxBackoff);
    impl_->refuse_until = impl_->clock.MonoNow() + impl_->backoff;
    return UnavailableError(fmt::format("OTLP export to {} failed: {}", options.endpoint,
                                        httplib::to_string(result.error())));
  }
  impl_->backoff = std::chrono::milliseconds(0);
  if (result->status < 200 || result->status > 299) {
    return UnavailableError(
        fmt::format("OTLP export to {} answered {}", options.endpoint, result->status));
  }
  return Status::Ok();
}

}  // namespace stagehand
