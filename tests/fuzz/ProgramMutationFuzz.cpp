//===- ProgramMutationFuzz.cpp - bounded mutation fuzzer of a rank file --===//
//
// Mutates a valid program file (byte and bit flips anywhere, header bytes, overwritten runs,
// truncations, insertions, deletions) a fixed number of times from a fixed seed, and loads each
// mutant the way trainrun does (parseProgram, then validateProgram). No mutant may be accepted:
// the header's payload size refuses length changes and its CRC32C refuses changed payload bytes.
//   program_mutation_fuzz FILE CASES SEED [--restamp]
// --restamp rewrites the header's checksum after each mutation, which loads the mutants the way a
// loader without the checksum would: it measures what the checksum catches and never fails.
// Exit status: 0 when no mutant was accepted (or with --restamp), 1 when one was, 2 on bad usage or
// an original file that does not load.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Crc32c.h"
#include "runtime/core/Program.h"

#include <google/protobuf/stubs/logging.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

using namespace trainc::rt;

namespace {

enum Kind { FlipByte, FlipBit, FlipHeader, FlipMany, Overwrite, Truncate, Insert, Delete, NumKinds };
const char *kKindNames[NumKinds] = {"byte flip",     "bit flip",   "header byte flip",
                                    "multi-byte flip", "overwrite", "truncation",
                                    "insertion",     "deletion"};

struct Mutator {
  std::mt19937_64 rng;
  explicit Mutator(uint64_t seed) : rng(seed) {}
  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng() % n; }
  char nonzero() { return char(1 + below(255)); }

  // Applies a mutation of `kind` to `s` and describes it.
  std::string mutate(std::string &s, Kind kind) {
    size_t n = s.size();
    switch (kind) {
    case FlipByte: {
      size_t at = below(n);
      s[at] ^= nonzero();
      return "byte " + std::to_string(at);
    }
    case FlipBit: {
      size_t at = below(n);
      int bit = int(below(8));
      s[at] ^= char(1 << bit);
      return "byte " + std::to_string(at) + " bit " + std::to_string(bit);
    }
    case FlipHeader: {
      size_t at = below(kProgramHeaderSize);
      s[at] ^= nonzero();
      return "header byte " + std::to_string(at);
    }
    case FlipMany: {
      int count = 2 + int(below(7));
      for (int i = 0; i < count; ++i)
        s[below(n)] ^= nonzero();
      return std::to_string(count) + " random bytes";
    }
    case Overwrite: {
      size_t len = 1 + below(16);
      size_t at = below(n - len + 1);
      for (size_t i = 0; i < len; ++i)
        s[at + i] = char(rng());
      return std::to_string(len) + " bytes at " + std::to_string(at);
    }
    case Truncate: {
      size_t to = below(n);
      s.resize(to);
      return "to " + std::to_string(to) + " bytes";
    }
    case Insert: {
      size_t len = 1 + below(16);
      size_t at = below(n + 1);
      std::string ins;
      for (size_t i = 0; i < len; ++i)
        ins.push_back(char(rng()));
      s.insert(at, ins);
      return std::to_string(len) + " bytes at " + std::to_string(at);
    }
    case Delete: {
      size_t len = 1 + below(16);
      size_t at = below(n - len + 1);
      s.erase(at, len);
      return std::to_string(len) + " bytes at " + std::to_string(at);
    }
    default:
      return "?";
    }
  }
};

void restamp(std::string &s) {
  if (s.size() < kProgramHeaderSize)
    return;
  uint32_t crc = crc32c(std::string_view(s).substr(kProgramHeaderSize));
  for (int i = 0; i < 4; ++i)
    s[12 + i] = char((crc >> (8 * i)) & 0xff);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 4 || argc > 5 || (argc == 5 && std::strcmp(argv[4], "--restamp") != 0)) {
    std::fprintf(stderr, "usage: %s FILE CASES SEED [--restamp]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const long cases = std::atol(argv[2]);
  const uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  const bool restamping = argc == 5;
  // Mutants with invalid UTF-8 in a string field make protobuf log an error for each; the
  // summary is what matters.
  google::protobuf::SetLogHandler(nullptr);
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string original = ss.str();
  auto p = parseProgram(original);
  if (!p.ok() || !validateProgram(*p).ok()) {
    std::fprintf(stderr, "%s: the original program does not load: %s\n", path.c_str(),
                 p.ok() ? std::string(validateProgram(*p).message()).c_str()
                        : std::string(p.status().message()).c_str());
    return 2;
  }

  Mutator m(seed);
  long accepted = 0, unchanged = 0;
  long perKind[NumKinds] = {}, acceptedPerKind[NumKinds] = {};
  double slowest = 0;
  auto start = std::chrono::steady_clock::now();
  for (long c = 0; c < cases; ++c) {
    Kind kind = Kind(c % NumKinds);
    std::string s = original;
    std::string what = m.mutate(s, kind);
    if (restamping)
      restamp(s);
    if (s == original) { // e.g. --restamp undid a flip of the checksum bytes
      ++unchanged;
      continue;
    }
    ++perKind[kind];
    auto t0 = std::chrono::steady_clock::now();
    auto q = parseProgram(s);
    bool ok = q.ok() && validateProgram(*q).ok();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count();
    if (ms > slowest)
      slowest = ms;
    if (ok) {
      ++accepted;
      ++acceptedPerKind[kind];
      if (accepted <= 10)
        std::printf("accepted: case %ld, %s %s\n", c, kKindNames[kind], what.c_str());
    }
  }
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s (%zu bytes), seed %llu%s: %ld cases", path.c_str(), original.size(),
              (unsigned long long)seed, restamping ? ", checksum restamped" : "", cases - unchanged);
  if (unchanged)
    std::printf(" (%ld no-op mutations skipped)", unchanged);
  std::printf(", %ld accepted (%.2f%%), %.2f s, slowest case %.1f ms\n", accepted,
              cases - unchanged ? 100.0 * accepted / double(cases - unchanged) : 0.0, secs, slowest);
  for (int k = 0; k < NumKinds; ++k)
    std::printf("  %-16s %6ld cases, %ld accepted\n", kKindNames[k], perKind[k],
                acceptedPerKind[k]);
  return restamping || accepted == 0 ? 0 : 1;
}
