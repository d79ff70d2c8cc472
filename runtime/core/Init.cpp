//===- Init.cpp - Parameter initialisation --------------------------------===//

#include "runtime/core/Init.h"

#include "runtime/core/Philox.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace trainc::rt {

uint64_t parameterKey(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) {
    h ^= uint8_t(c);
    h *= 1099511628211ull;
  }
  return h;
}

double initialValue(const schema::Parameter &p, uint64_t seed, uint64_t globalIndex) {
  if (p.init() == "ones")
    return 1.0;
  if (p.init() == "zeros" || p.init().empty())
    return 0.0;
  double z[2];
  philoxNormal2(seed, parameterKey(p.name()), globalIndex / 2, z);
  return p.init_std() * z[globalIndex % 2];
}

namespace {

/// Stores v as dtype t at dst.
inline void storeValue(char *dst, DType t, double v) {
  if (t == DType::F64) {
    std::memcpy(dst, &v, 8);
  } else if (t == DType::F32) {
    float f = float(v);
    std::memcpy(dst, &f, 4);
  } else {
    bf16 h = bf16(float(v));
    std::memcpy(dst, &h, 2);
  }
}

/// Writes the local elements [begin, end) of parameter p (row-major over its slice) into `base`
/// (the parameter's first element) as dtype t. Element values are initialValue's, bit for bit:
/// the rule and the key are taken once, and one Philox call serves both elements of a pair.
void initRange(const schema::Parameter &p, DType t, uint64_t seed, uint64_t key, int64_t begin,
               int64_t end, char *base) {
  size_t es = dtypeSize(t);
  int rank = p.global_shape_size();
  bool normal = p.init() == "normal";
  if (!normal) {
    double v = p.init() == "ones" ? 1.0 : 0.0;
    for (int64_t local = begin; local < end; ++local)
      storeValue(base + uint64_t(local) * es, t, v);
    return;
  }
  double stdDev = p.init_std();
  // The multi-index of element `begin` within the slice.
  std::vector<int64_t> idx(size_t(rank), 0);
  for (int64_t d = rank - 1, r = begin; d >= 0; --d) {
    idx[size_t(d)] = r % p.slice_size(int(d));
    r /= p.slice_size(int(d));
  }
  uint64_t cachedPair = ~uint64_t(0);
  double z[2] = {0, 0};
  for (int64_t local = begin; local < end; ++local) {
    uint64_t g = 0;
    for (int d = 0; d < rank; ++d)
      g = g * uint64_t(p.global_shape(d)) + uint64_t(p.slice_start(d) + idx[size_t(d)]);
    if (g / 2 != cachedPair) {
      cachedPair = g / 2;
      philoxNormal2(seed, key, cachedPair, z);
    }
    storeValue(base + uint64_t(local) * es, t, stdDev * z[g % 2]);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < p.slice_size(d))
        break;
      idx[size_t(d)] = 0;
    }
  }
}

} // namespace

absl::Status initializeParameters(Executor &ex, uint64_t seed) {
  const schema::Program &prog = ex.program();
  // The buffer of the parameters being initialised, read once and written back when the next
  // parameter lives in another buffer (or at the end, or before an error is returned).
  int current = -1;
  std::vector<char> bytes;
  auto flush = [&]() -> absl::Status {
    if (current < 0)
      return absl::OkStatus();
    absl::Status s = ex.writeBuffer(current, bytes.data(), bytes.size());
    current = -1;
    return s;
  };
  for (const schema::Parameter &p : prog.parameters()) {
    if (p.init() != "normal" && p.init() != "ones" && p.init() != "zeros" && !p.init().empty()) {
      (void)flush();
      return absl::InvalidArgumentError(absl::StrCat("parameter '", p.name(), "': init rule '",
                                                     p.init(),
                                                     "' is not one of normal, ones, zeros"));
    }
    const schema::Buffer &buf = prog.buffers(int(p.buffer()));
    DType t = DType(int(buf.dtype()));
    if (!isFloat(t)) {
      (void)flush();
      return absl::InvalidArgumentError(absl::StrCat("parameter '", p.name(), "': buffer '",
                                                     buf.name(), "' is not a float buffer"));
    }
    if (t == DType::F16) {
      (void)flush();
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", p.name(), "': buffer '", buf.name(),
          "' is f16, which the runtime does not initialise (f32, f64 or bf16 expected)"));
    }
    if (current != int(p.buffer())) {
      if (absl::Status s = flush(); !s.ok())
        return s;
      bytes.assign(buf.byte_size(), 0);
      if (absl::Status s = ex.readBuffer(int(p.buffer()), bytes.data(), bytes.size()); !s.ok())
        return s;
      current = int(p.buffer());
    }
    int rank = p.global_shape_size();
    int64_t n = 1;
    for (int d = 0; d < rank; ++d)
      n *= p.slice_size(d);
    uint64_t key = parameterKey(p.name());
    char *base = bytes.data() + p.buffer_offset() * dtypeSize(t);
    // Every element is a pure function of (seed, parameter, global index): any split of the
    // local range over the threads gives the same bytes. Chunks start at even local indices, so
    // a chunk boundary rarely splits a Box-Muller pair (which would only cost one extra call).
    constexpr int64_t kChunk = 1 << 14;
    int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t ch = 0; ch < chunks; ++ch)
      initRange(p, t, seed, key, ch * kChunk, std::min(n, (ch + 1) * kChunk), base);
  }
  return flush();
}

} // namespace trainc::rt
