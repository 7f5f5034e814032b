#include "stagehand/trace/trace_context.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>

#include "stagehand/base/text.h"
#include "stagehand/base/uuid.h"

namespace stagehand {
namespace {

constexpr std::size_t kTraceparentLength = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2
constexpr std::size_t kMaxTraceStateLength = 512;
constexpr char kHexDigits[] = "0123456789abcdef";

std::optional<std::uint8_t> HexDigit(char c) {
  if (c >= '0' && c <= '9') return static_cast<std::uint8_t>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<std::uint8_t>(c - 'a' + 10);
  return std::nullopt;
}

// Decodes lowercase hex into `out`; false on any other character.
bool DecodeHex(std::string_view text, std::span<std::uint8_t> out) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::optional<std::uint8_t> high = HexDigit(text[2 * i]);
    std::optional<std::uint8_t> low = HexDigit(text[2 * i + 1]);
    if (!high || !low) return false;
    out[i] = static_cast<std::uint8_t>(*high << 4 | *low);
  }
  return true;
}

std::string EncodeHex(std::span<const std::uint8_t> bytes) {
  std::string out;
  out.reserve(2 * bytes.size());
  for (const std::uint8_t byte : bytes) {
    out.push_back(kHexDigits[byte >> 4]);
    out.push_back(kHexDigits[byte & 0x0F]);
  }
  return out;
}

bool AllZero(std::span<const std::uint8_t> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::uint8_t b) { return b == 0; });
}

// Random bytes, drawn again in the (2^-64 or rarer) case they are all zero: an invalid id.
template <typename Id>
Id NonZeroRandom() {
  Id id{};
  do {
    FillRandomBytes(id);
  } while (AllZero(id));
  return id;
}

Status Invalid(std::string_view traceparent, std::string_view why) {
  return InvalidArgumentError(fmt::format("invalid traceparent '{}': {}", traceparent, why));
}

}  // namespace

bool TraceContext::valid() const { return !AllZero(trace_id) && !AllZero(span_id); }

Result<TraceContext> ParseTraceparent(std::string_view traceparent, std::string_view tracestate) {
  const std::string_view text = TrimSpacesAndTabs(traceparent);
  if (text.size() < kTraceparentLength) {
    return Invalid(text, fmt::format("it has {} characters, not 55", text.size()));
  }
  std::uint8_t version = 0;
  if (!DecodeHex(text.substr(0, 2), std::span(&version, 1))) {
    return Invalid(text, "the version is not two lowercase hex digits");
  }
  if (version == 0xFF) return Invalid(text, "version ff is forbidden");
  // Version 00 is exactly 55 characters; a later version may append fields after a dash.
  if (version == 0 ? text.size() != kTraceparentLength
                   : text.size() > kTraceparentLength && text[kTraceparentLength] != '-') {
    return Invalid(text, fmt::format("it has {} characters, not 55", text.size()));
  }
  if (text[2] != '-' || text[35] != '-' || text[52] != '-') {
    return Invalid(text, "the fields are not separated by '-'");
  }
  TraceContext context;
  if (!DecodeHex(text.substr(3, 32), context.trace_id)) {
    return Invalid(text, "the trace id is not 32 lowercase hex digits");
  }
  if (!DecodeHex(text.substr(36, 16), context.span_id)) {
    return Invalid(text, "the parent id is not 16 lowercase hex digits");
  }
  if (!DecodeHex(text.substr(53, 2), std::span(&context.flags, 1))) {
    return Invalid(text, "the flags are not two lowercase hex digits");
  }
  if (AllZero(context.trace_id)) return Invalid(text, "the trace id is all zeros");
  if (AllZero(context.span_id)) return Invalid(text, "the parent id is all zeros");
  const std::string_view state = TrimSpacesAndTabs(tracestate);
  if (state.size() <= kMaxTraceStateLength) context.trace_state = std::string(state);
  return context;
}

std::string FormatTraceparent(const TraceContext& context) {
  return fmt::format("00-{}-{}-{}", HexOf(context.trace_id), HexOf(context.span_id),
                     EncodeHex(std::span(&context.flags, 1)));
}

void AddTraceFields(const TraceContext& context, LogFields& fields) {
  if (!context.valid()) return;
  fields.emplace_back("trace_id", HexOf(context.trace_id));
  fields.emplace_back("span_id", HexOf(context.span_id));
}

std::string HexOf(const TraceId& id) { return EncodeHex(id); }
std::string HexOf(const SpanId& id) { return EncodeHex(id); }

TraceId NewTraceId() { return NonZeroRandom<TraceId>(); }

SpanId NewSpanId() { return NonZeroRandom<SpanId>(); }

}  // namespace stagehand
