#include "stagehand/base/uuid.h"

#include <array>
#include <cstdint>
#include <random>

namespace stagehand {

void FillRandomBytes(std::span<std::uint8_t> out) {
  thread_local std::mt19937_64 engine([] {
    std::random_device device;
    std::seed_seq seed{device(), device(), device(), device(), device(), device()};
    return std::mt19937_64(seed);
  }());
  for (std::size_t i = 0; i < out.size(); i += 8) {
    const std::uint64_t word = engine();
    for (std::size_t j = 0; j < 8 && i + j < out.size(); ++j) {
      out[i + j] = static_cast<std::uint8_t>(word >> (8 * j));
    }
  }
}

std::string NewUuidV4() {
  std::array<std::uint8_t, 16> bytes{};
  FillRandomBytes(bytes);
  bytes[6] = static_cast<std::uint8_t>((bytes[6] & 0x0F) | 0x40);
  bytes[8] = static_cast<std::uint8_t>((bytes[8] & 0x3F) | 0x80);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(kHex[bytes[i] >> 4]);
    out.push_back(kHex[bytes[i] & 0x0F]);
  }
  return out;
}

}  // namespace stagehand
