//===- Crc32c.cpp - CRC32C (Castagnoli) checksum -------------------------===//
//
// Slicing-by-8 over eight 256-entry tables built at compile time: about 1 GB/s, so checking a
// program file of tens of megabytes costs milliseconds next to parsing it.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Crc32c.h"

#include <array>
#include <cstddef>

namespace trainc::rt {

namespace {
constexpr uint32_t kPolynomial = 0x82F63B78u; // 0x1EDC6F41 bit-reversed

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables makeTables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    t[0][i] = c;
  }
  for (int s = 1; s < 8; ++s)
    for (uint32_t i = 0; i < 256; ++i)
      t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  return t;
}

constexpr Tables kTables = makeTables();
} // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  const auto *p = reinterpret_cast<const unsigned char *>(data.data());
  size_t n = data.size();
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo = c ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                       uint32_t(p[3]) << 24);
    c = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^
        kTables[4][lo >> 24] ^ kTables[3][p[4]] ^ kTables[2][p[5]] ^ kTables[1][p[6]] ^
        kTables[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--)
    c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xff];
  return ~c;
}

} // namespace trainc::rt
