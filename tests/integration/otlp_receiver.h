// Test helpers of the tracing tests (issue 18): a local HTTP server on 127.0.0.1 and, on one, a
// minimal OTLP/HTTP receiver that keeps every span it is sent. Header-only, on cpp-httplib and
// nlohmann/json alone, so that tests of the built binary can use it too.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace stagehand::test_otlp {

// How long a test waits (real time) for something a server should receive.
inline constexpr std::chrono::seconds kReceiveDeadline{10};

// An httplib server on 127.0.0.1 at a free port, listening from construction to destruction.
class LocalHttpServer {
 public:
  // `routes` adds the server's handlers before it listens.
  explicit LocalHttpServer(const std::function<void(httplib::Server&)>& routes) {
    routes(server_);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the accept loop has started would not end it.
    const auto deadline = std::chrono::steady_clock::now() + kReceiveDeadline;
    while (!server_.is_running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    EXPECT_TRUE(server_.is_running()) << "the local HTTP server did not start";
  }
  ~LocalHttpServer() {
    server_.stop();
    thread_.join();
  }
  LocalHttpServer(const LocalHttpServer&) = delete;
  LocalHttpServer& operator=(const LocalHttpServer&) = delete;

  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

// Keeps every span POSTed to /v1/traces as OTLP/JSON, each with its scope's name ("scope") and
// its resource ("resource") added. Thread-safe.
class OtlpReceiver {
 public:
  OtlpReceiver()
      : server_([this](httplib::Server& server) {
          server.Post("/v1/traces",
                      [this](const httplib::Request& request, httplib::Response& res) {
                        Receive(request);
                        res.set_content("{}", "application/json");
                      });
        }) {}

  int port() const { return server_.port(); }
  std::string endpoint() const { return server_.base_url(); }

  // Waits (real time, bounded by `deadline`) for a span for which `match` holds and returns it,
  // or null json.
  nlohmann::json WaitForSpan(const std::function<bool(const nlohmann::json&)>& match,
                             std::chrono::milliseconds deadline = kReceiveDeadline) {
    std::unique_lock lock(mu_);
    nlohmann::json found;
    cv_.wait_for(lock, deadline, [&] {
      for (const nlohmann::json& span : spans_) {
        if (match(span)) {
          found = span;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  nlohmann::json WaitForSpan(const std::string& name,
                             std::chrono::milliseconds deadline = kReceiveDeadline) {
    return WaitForSpan([&](const nlohmann::json& span) { return span.at("name") == name; },
                       deadline);
  }
  std::vector<std::string> content_types() {
    std::lock_guard lock(mu_);
    return content_types_;
  }
  std::vector<std::string> auth() {
    std::lock_guard lock(mu_);
    return auth_;
  }

 private:
  void Receive(const httplib::Request& request) {
    {
      std::lock_guard lock(mu_);
      content_types_.push_back(request.get_header_value("Content-Type"));
      auth_.push_back(request.get_header_value("x-api-key"));
      const nlohmann::json body = nlohmann::json::parse(request.body);
      for (const nlohmann::json& resource : body.at("resourceSpans")) {
        for (const nlohmann::json& scope : resource.at("scopeSpans")) {
          for (nlohmann::json span : scope.at("spans")) {
            span["scope"] = scope.at("scope").at("name");
            span["resource"] = resource.at("resource");
            spans_.push_back(std::move(span));
          }
        }
      }
    }
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<nlohmann::json> spans_;
  std::vector<std::string> content_types_;
  std::vector<std::string> auth_;
  LocalHttpServer server_;  // last: it stops (and its handlers end) before the state above goes
};

// The value of a span's attribute `key` in OTLP/JSON: the string of a stringValue, the JSON text
// of any other value, "<none>" when the span has no such attribute.
inline std::string Attribute(const nlohmann::json& span, const std::string& key) {
  for (const nlohmann::json& attribute : span.at("attributes")) {
    if (attribute.at("key") == key) {
      const nlohmann::json& value = attribute.at("value");
      return value.contains("stringValue") ? value.at("stringValue").get<std::string>()
                                           : value.begin().value().dump();
    }
  }
  return "<none>";
}

}  // namespace stagehand::test_otlp
