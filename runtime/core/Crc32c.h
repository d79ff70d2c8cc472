//===- Crc32c.h - CRC32C (Castagnoli) checksum ---------------------------===//
//
// The checksum of a program file's payload (Program.h). Debian 12's Abseil (20220623) predates
// absl/crc and no other CRC32C library is a build dependency, so this is a small table-driven
// implementation (reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF; the
// check value CRC32C("123456789") is 0xE3069283).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CORE_CRC32C_H
#define TRAINC_RUNTIME_CORE_CRC32C_H

#include <cstdint>
#include <string_view>

namespace trainc::rt {

/// CRC32C of `data`. To checksum data in pieces, pass the previous result as `crc`:
/// crc32c(b, crc32c(a)) == crc32c(a + b).
uint32_t crc32c(std::string_view data, uint32_t crc = 0);

} // namespace trainc::rt

#endif
