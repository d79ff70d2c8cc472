//===- ProgramLoaderFuzzer.cpp - libFuzzer target for the program loader -===//
//
// Feeds arbitrary bytes to parseProgram and, when they parse, to validateProgram. Neither may crash,
// hang or read out of bounds (built with address and undefined-behaviour sanitizers).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Program.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto p = trainc::rt::parseProgram(std::string_view(reinterpret_cast<const char *>(data), size));
  if (p.ok())
    (void)trainc::rt::validateProgram(*p);
  return 0;
}
