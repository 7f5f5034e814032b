#include "http/request_reader.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <utility>

namespace stagehand::http_internal {
namespace {

namespace http = boost::beast::http;
using boost::beast::error_code;

std::string_view View(boost::beast::string_view text) { return {text.data(), text.size()}; }

// What a parser callback refused, beyond Beast's own errors.
enum class Refusal { kNone, kTooManyFields, kTransferEncoding, kVersion };

}  // namespace

class RequestReader::Parser final : public http::basic_parser<true> {
 public:
  Parser(const RequestLimits& limits, HttpRequest& request, int& version)
      : limits_(limits), request_(request), version_(version) {
    header_limit(static_cast<std::uint32_t>(limits.max_head_bytes));
    body_limit(static_cast<std::uint64_t>(limits.max_body_bytes));
  }

  Refusal refusal() const { return refusal_; }

 private:
  void on_request_impl(http::verb, boost::beast::string_view method,
                       boost::beast::string_view target, int version, error_code& ec) override {
    request_.method = std::string(View(method));
    const std::string_view whole = View(target);
    const std::size_t question = whole.find('?');
    request_.path = std::string(whole.substr(0, question));
    request_.query = question == std::string_view::npos ? std::string()
                                                        : std::string(whole.substr(question + 1));
    version_ = version;
    if (version != 10 && version != 11) {
      refusal_ = Refusal::kVersion;
      ec = http::error::bad_version;
    }
  }

  void on_response_impl(int, boost::beast::string_view, int, error_code& ec) override {
    ec = http::error::bad_status;
  }

  void on_field_impl(http::field, boost::beast::string_view name, boost::beast::string_view value,
                     error_code& ec) override {
    if (request_.headers.size() >= limits_.max_header_fields) {
      refusal_ = Refusal::kTooManyFields;
      ec = http::error::header_limit;
      return;
    }
    request_.headers.emplace_back(View(name), View(value));
  }

  // A streamed body is refused before a chunk is read: no route takes one, and a chunk header
  // can announce terabytes.
  void on_header_impl(error_code& ec) override {
    if (chunked() || FindHeader(request_.headers, "Transfer-Encoding")) {
      refusal_ = Refusal::kTransferEncoding;
      ec = http::error::bad_transfer_encoding;
    }
  }

  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         error_code&) override {
    if (content_length) {
      request_.body.reserve(static_cast<std::size_t>(*content_length));
    }
  }

  std::size_t on_body_impl(boost::beast::string_view body, error_code&) override {
    request_.body.append(body.data(), body.size());
    return body.size();
  }

  void on_chunk_header_impl(std::uint64_t, boost::beast::string_view, error_code& ec) override {
    ec = http::error::bad_transfer_encoding;
  }

  std::size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view,
                                 error_code& ec) override {
    ec = http::error::bad_transfer_encoding;
    return 0;
  }

  void on_finish_impl(error_code&) override {}

  const RequestLimits& limits_;
  HttpRequest& request_;
  int& version_;
  Refusal refusal_ = Refusal::kNone;
};

RequestReader::RequestReader(RequestLimits limits)
    : limits_(limits), parser_(std::make_unique<Parser>(limits_, request_, version_)) {}

RequestReader::~RequestReader() = default;

std::size_t RequestReader::Feed(std::string_view input) {
  std::size_t consumed = 0;
  while (state_ == State::kNeedMore && consumed < input.size()) {
    const std::string_view rest = input.substr(consumed);
    if (!parser_->is_header_done()) {
      const std::size_t line_end = rest.find('\n');
      const std::size_t line_length = line_end == std::string_view::npos ? rest.size() : line_end;
      if (line_length > limits_.max_request_line_bytes) {
        Refuse(414);
        break;
      }
    }
    error_code ec;
    consumed += parser_->put(boost::asio::buffer(rest.data(), rest.size()), ec);
    if (ec == http::error::need_more) {
      break;
    }
    if (ec) {
      if (parser_->refusal() == Refusal::kTransferEncoding) {
        Refuse(411);
      } else if (ec == http::error::header_limit) {
        Refuse(431);
      } else if (ec == http::error::body_limit) {
        Refuse(413);
      } else if (ec == http::error::bad_content_length) {
        Refuse(400, "Invalid Content-Length header");
      } else {
        Refuse(400);
      }
      break;
    }
    if (parser_->is_done()) {
      state_ = State::kComplete;
    }
  }
  return consumed;
}

bool RequestReader::head_done() const { return parser_->is_header_done(); }

bool RequestReader::keep_alive() const {
  return parser_->is_header_done() && parser_->keep_alive();
}

std::uint64_t RequestReader::body_length() const {
  return parser_->is_header_done() ? parser_->content_length().value_or(0) : 0;
}

void RequestReader::Next() {
  request_ = HttpRequest();
  version_ = 11;
  state_ = State::kNeedMore;
  refused_status_ = 0;
  refused_message_ = {};
  parser_ = std::make_unique<Parser>(limits_, request_, version_);
}

void RequestReader::Refuse(int status, std::string_view message) {
  state_ = State::kRefused;
  refused_status_ = status;
  refused_message_ = message;
}

}  // namespace stagehand::http_internal
