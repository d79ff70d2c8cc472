//===- IndexMutationFuzz.cpp - bounded mutation test of the .bin/.idx reader -===//
//
// Writes a valid Megatron indexed dataset, then a fixed number of times from a fixed seed mutates
// its .idx or .bin (byte and bit flips, header bytes, a field of the header or of the three index
// arrays overwritten with an edge value, truncations, extensions, deletions) and opens the mutant
// as trainrun does. A refused mutant must name its file; an accepted one (a mutation that keeps
// the pair consistent, e.g. a changed token or a shorter sequence length) is read entirely:
// every sequence, and every sample of a GPTDataset over it. Built with AddressSanitizer and
// UBSan, so an out-of-bounds read or undefined behaviour aborts the run.
//   index_mutation_fuzz WORKDIR CASES SEED
// Exit status 0 when every mutant was refused with its file named or read without fault, and
// every truncation was refused; 1 otherwise; 2 on bad usage.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/GPTDataset.h"
#include "runtime/data/IndexedDataset.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

using namespace trainc::rt::data;

namespace {

enum Kind { FlipByte, FlipBit, FlipHeader, Field, Truncate, Extend, Delete, NumKinds };
const char *kNames[NumKinds] = {"byte flip", "bit flip",  "header byte flip", "field overwrite",
                                "truncation", "extension", "deletion"};

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: index_mutation_fuzz WORKDIR CASES SEED\n");
    return 2;
  }
  std::string work = argv[1];
  long cases = std::atol(argv[2]);
  std::mt19937_64 rng(std::strtoull(argv[3], nullptr, 10));
  auto below = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
  std::filesystem::create_directories(work);
  const std::string prefix = work + "/data";
  {
    auto b = IndexedDatasetBuilder::create(prefix, 8);
    if (!b.ok())
      return 2;
    std::mt19937 g(7);
    for (int d = 0; d < 60; ++d) {
      std::vector<int32_t> toks, lens;
      int n = 1 + int(g() % 3);
      for (int s = 0; s < n; ++s) {
        int len = 1 + int(g() % 40);
        lens.push_back(len);
        for (int j = 0; j < len; ++j)
          toks.push_back(int32_t(g() % 1000));
      }
      if (!(*b)->addDocument(toks, lens).ok())
        return 2;
    }
    if (!(*b)->finalize().ok())
      return 2;
  }
  const std::string idx0 = slurp(prefix + ".idx"), bin0 = slurp(prefix + ".bin");
  const int64_t S = (*IndexedDataset::open(prefix))->numSequences();
  long refused[NumKinds] = {}, accepted[NumKinds] = {}, total[NumKinds] = {}, failures = 0;
  for (long c = 0; c < cases; ++c) {
    Kind kind = Kind(below(NumKinds));
    bool onIdx = kind == FlipHeader || kind == Field || below(10) < 7;
    std::string m = onIdx ? idx0 : bin0;
    std::string what;
    switch (kind) {
    case FlipByte: { size_t at = below(m.size()); m[at] ^= char(1 + below(255)); break; }
    case FlipBit: { size_t at = below(m.size()); m[at] ^= char(1 << below(8)); break; }
    case FlipHeader: { size_t at = below(size_t(kIndexHeaderBytes)); m[at] ^= char(1 + below(255)); break; }
    case Field: {
      // A header count, a sequence length, a pointer or a document index.
      static const int64_t edges[] = {0, 1, -1, 2, 3, 7, 40, 41, 1 << 20, INT32_MAX, INT64_MAX,
                                      INT64_MIN, S, S - 1, S + 1, int64_t(bin0.size()),
                                      int64_t(bin0.size()) + 1};
      int64_t v = edges[below(sizeof(edges) / sizeof(edges[0]))];
      switch (below(5)) {
      case 0: { uint64_t u = uint64_t(v); std::memcpy(&m[18 + 8 * below(2)], &u, 8); break; }
      case 1: { int32_t x = int32_t(v); std::memcpy(&m[size_t(kIndexHeaderBytes + 4 * int64_t(below(uint64_t(S))))], &x, 4); break; }
      case 2: std::memcpy(&m[size_t(kIndexHeaderBytes + 4 * S + 8 * int64_t(below(uint64_t(S))))], &v, 8); break;
      default: {
        size_t docs = (idx0.size() - size_t(kIndexHeaderBytes) - size_t(12 * S)) / 8;
        std::memcpy(&m[size_t(kIndexHeaderBytes + 12 * S) + 8 * below(docs)], &v, 8);
      }
      }
      break;
    }
    case Truncate: m.resize(below(m.size())); break;
    case Extend: m.append(1 + below(64), char(below(256))); break;
    case Delete: { size_t at = below(m.size()); m.erase(at, 1 + below(16)); break; }
    default: break;
    }
    ++total[kind];
    spit(prefix + (onIdx ? ".idx" : ".bin"), m);
    auto ds = IndexedDataset::open(prefix);
    if (!ds.ok()) {
      ++refused[kind];
      std::string msg(ds.status().message());
      if (msg.find(prefix + ".idx") == std::string::npos && msg.find(prefix + ".bin") == std::string::npos) {
        std::fprintf(stderr, "case %ld (%s): refusal does not name the file: %s\n", c, kNames[kind], msg.c_str());
        ++failures;
      }
    } else {
      ++accepted[kind];
      if (kind == Truncate) {
        std::fprintf(stderr, "case %ld: a truncated %s was accepted\n", c, onIdx ? ".idx" : ".bin");
        ++failures;
      }
      // Read everything the mutant claims to hold.
      const IndexedDataset &d = **ds;
      std::vector<int32_t> buf;
      for (int64_t s = 0; s < d.numSequences(); ++s) {
        buf.resize(size_t(d.sequenceLength(s)) + 1);
        (void)d.read(s, 0, d.sequenceLength(s), buf.data());
      }
      std::vector<int32_t> lengths = d.sequenceLengths();
      auto g = buildGptIndices(lengths, 0, d.numSequences(), 0, 8, 1234);
      if (g.ok()) {
        std::vector<int32_t> tokens(9);
        for (int64_t i = 0; i < g->numSamples(); ++i)
          (void)gptSample(d, *g, 8, i, tokens.data());
      }
    }
    spit(prefix + (onIdx ? ".idx" : ".bin"), onIdx ? idx0 : bin0);
  }
  std::printf("index_mutation_fuzz: %ld mutants of a %zu-byte .idx / %zu-byte .bin\n", cases,
              idx0.size(), bin0.size());
  for (int k = 0; k < NumKinds; ++k)
    std::printf("  %-18s %6ld cases  %6ld refused  %6ld consistent (read without fault)\n",
                kNames[k], total[k], refused[k], accepted[k]);
  std::printf("  0 crashes, %ld failures\n", failures);
  return failures ? 1 : 0;
}
