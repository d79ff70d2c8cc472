//===- ProgramLoaderFuzzer.cpp - libFuzzer target for the program loader -===//
//
// Feeds arbitrary bytes to parseProgram and, when they parse, to validateProgram. Neither may crash,
// hang or read out of bounds (built with address and undefined-behaviour sanitizers). Since the
// header's CRC32C refuses almost every mutated payload before protobuf sees it, each input is also
// loaded with its checksum rewritten to match, so the parser and the validator stay fuzzed.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Crc32c.h"
#include "runtime/core/Program.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {
void load(std::string_view bytes) {
  auto p = trainc::rt::parseProgram(bytes);
  if (p.ok())
    (void)trainc::rt::validateProgram(*p);
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char *>(data), size);
  load(bytes);
  if (size >= trainc::rt::kProgramHeaderSize) {
    std::string stamped(bytes);
    uint32_t crc = trainc::rt::crc32c(bytes.substr(trainc::rt::kProgramHeaderSize));
    for (int i = 0; i < 4; ++i)
      stamped[12 + i] = char((crc >> (8 * i)) & 0xff);
    load(stamped);
  }
  return 0;
}
