#include "stagehand/http/http_message.h"

#include <cstdint>

#include "http/path_match.h"

namespace stagehand {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

// Reads the escape "%XX" at text[pos]; returns the byte or -1.
int EscapedByte(std::string_view text, std::size_t pos) {
  if (pos + 2 >= text.size() || text[pos] != '%') {
    return -1;
  }
  const int high = HexValue(text[pos + 1]);
  const int low = HexValue(text[pos + 2]);
  if (high < 0 || low < 0) {
    return -1;
  }
  return high * 16 + low;
}

// Decodes one name or value of a query string. Errors: as DecodeUriComponent.
Result<std::string> DecodeQueryPart(std::string_view text) {
  std::string spaced(text);
  for (char& c : spaced) {
    if (c == '+') {
      c = ' ';
    }
  }
  return DecodeUriComponent(spaced);
}

}  // namespace

std::optional<std::string_view> FindHeader(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [key, value] : headers) {
    if (EqualsIgnoreCase(key, name)) {
      return std::string_view(value);
    }
  }
  return std::nullopt;
}

std::string HttpRequest::Url() const { return query.empty() ? path : path + "?" + query; }

Result<std::string> DecodeUriComponent(std::string_view text) {
  const auto malformed = [] { return InvalidArgumentError("URI malformed"); };
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] != '%') {
      out.push_back(text[pos++]);
      continue;
    }
    const int lead = EscapedByte(text, pos);
    if (lead < 0) {
      return malformed();
    }
    pos += 3;
    if (lead < 0x80) {
      out.push_back(static_cast<char>(lead));
      continue;
    }
    int length = 0;
    std::uint32_t code_point = 0;
    if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code_point = static_cast<std::uint32_t>(lead & 0x1F);
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code_point = static_cast<std::uint32_t>(lead & 0x0F);
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code_point = static_cast<std::uint32_t>(lead & 0x07);
    } else {
      return malformed();
    }
    std::string bytes(1, static_cast<char>(lead));
    for (int i = 1; i < length; ++i) {
      const int next = EscapedByte(text, pos);
      if (next < 0 || (next & 0xC0) != 0x80) {
        return malformed();
      }
      pos += 3;
      code_point = (code_point << 6) | static_cast<std::uint32_t>(next & 0x3F);
      bytes.push_back(static_cast<char>(next));
    }
    constexpr std::uint32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < kMinimum[length] || code_point > 0x10FFFF ||
        (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return malformed();
    }
    out += bytes;
  }
  return out;
}

Result<std::vector<std::string>> QueryParameterValues(std::string_view query,
                                                      std::string_view name) {
  std::vector<std::string> values;
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query.remove_prefix(amp == std::string_view::npos ? query.size() : amp + 1);
    const std::size_t equals = pair.find('=');
    const std::string_view raw_name = pair.substr(0, equals);
    Result<std::string> decoded_name = DecodeQueryPart(raw_name);
    if (decoded_name.ok() ? *decoded_name != name : raw_name != name) {
      continue;
    }
    if (equals == std::string_view::npos) {
      values.emplace_back();
      continue;
    }
    Result<std::string> value = DecodeQueryPart(pair.substr(equals + 1));
    if (!value.ok()) {
      return InvalidArgumentError("Failed to decode query parameter '" + std::string(name) + "'");
    }
    values.push_back(*std::move(value));
  }
  return values;
}

}  // namespace stagehand
