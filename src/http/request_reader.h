// The server's HTTP/1.x request parser: turns the bytes of one connection into HttpRequests, one
// at a time, and refuses what the server will not take (an oversized head, too many header
// fields, a streamed or oversized body) as soon as the head shows it, with the status to answer.
// Built on Boost.Beast's basic_parser; no sockets here, so it is unit-tested and fuzzed alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "stagehand/http/http_message.h"

namespace stagehand::http_internal {

struct RequestLimits {
  // Request line and header fields together, terminating blank line included.
  std::size_t max_head_bytes = std::size_t{16} * 1024;
  // A request line longer than this is 414 (checked before max_head_bytes).
  std::size_t max_request_line_bytes = std::size_t{8} * 1024;
  std::size_t max_header_fields = 100;
  // A Content-Length above this is 413, answered before any of the body is read.
  std::size_t max_body_bytes = std::size_t{1024} * 1024;
};

// Reads requests off one connection's byte stream. Not thread-safe: one connection's thread.
class RequestReader {
 public:
  enum class State {
    kNeedMore,  // Feed more bytes.
    kComplete,  // request() holds a whole request; call Next() before feeding the next one.
    kRefused,   // refused_status() says why; the connection must answer it and close.
  };

  explicit RequestReader(RequestLimits limits);
  ~RequestReader();
  RequestReader(const RequestReader&) = delete;
  RequestReader& operator=(const RequestReader&) = delete;

  // Consumes a prefix of `input` and returns its length; the caller keeps the rest and passes it
  // again with more bytes appended (the head is parsed once it is whole). Returns 0 unless
  // state() is kNeedMore.
  std::size_t Feed(std::string_view input);

  State state() const { return state_; }
  // Whether the head is whole (method, path, query and headers are then known).
  bool head_done() const;
  // 400, 411, 413, 414 or 431 when refused; else 0.
  int refused_status() const { return refused_status_; }
  // The message of a 400 that has a more precise one than "Bad Request" (an invalid
  // Content-Length), else empty.
  std::string_view refused_message() const { return refused_message_; }

  // The request read so far: whole when kComplete; when refused, the method and target if the
  // request line could be read (for the error body and the access log).
  const HttpRequest& request() const { return request_; }
  HttpRequest& mutable_request() { return request_; }
  // Whether the connection may carry another request after this one (HTTP/1.1 without
  // "Connection: close", or HTTP/1.0 with "Connection: keep-alive"). Valid once head_done().
  bool keep_alive() const;
  // 10 or 11. Valid once head_done().
  int version() const { return version_; }
  // The body's announced length (Content-Length), 0 without one. Valid once head_done().
  std::uint64_t body_length() const;

  // Starts the next request on the same connection (after kComplete).
  void Next();

 private:
  class Parser;
  void Refuse(int status, std::string_view message = {});

  RequestLimits limits_;
  std::unique_ptr<Parser> parser_;
  State state_ = State::kNeedMore;
  int refused_status_ = 0;
  std::string_view refused_message_;
  HttpRequest request_;
  int version_ = 11;
};

}  // namespace stagehand::http_internal
