//===- Init.cpp - Parameter initialisation --------------------------------===//

#include "runtime/core/Init.h"

#include "runtime/core/Philox.h"

#include "absl/strings/str_cat.h"

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

absl::Status initializeParameters(Executor &ex, uint64_t seed) {
  const schema::Program &prog = ex.program();
  for (const schema::Parameter &p : prog.parameters()) {
    if (p.init() != "normal" && p.init() != "ones" && p.init() != "zeros" && !p.init().empty())
      return absl::InvalidArgumentError(absl::StrCat("parameter '", p.name(), "': init rule '",
                                                     p.init(),
                                                     "' is not one of normal, ones, zeros"));
    const schema::Buffer &buf = prog.buffers(int(p.buffer()));
    DType t = DType(int(buf.dtype()));
    if (!isFloat(t))
      return absl::InvalidArgumentError(absl::StrCat("parameter '", p.name(), "': buffer '",
                                                     buf.name(), "' is not a float buffer"));
    if (t == DType::F16)
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", p.name(), "': buffer '", buf.name(),
          "' is f16, which the runtime does not initialise (f32, f64 or bf16 expected)"));
    std::vector<char> bytes(buf.byte_size());
    if (absl::Status s = ex.readBuffer(int(p.buffer()), bytes.data(), bytes.size()); !s.ok())
      return s;
    int rank = p.global_shape_size();
    int64_t n = 1;
    for (int d = 0; d < rank; ++d)
      n *= p.slice_size(d);
    std::vector<int64_t> idx(size_t(rank), 0);
    for (int64_t local = 0; local < n; ++local) {
      // Global row-major index of the local element (slice_start + idx).
      uint64_t g = 0;
      for (int d = 0; d < rank; ++d)
        g = g * uint64_t(p.global_shape(d)) + uint64_t(p.slice_start(d) + idx[d]);
      double v = initialValue(p, seed, g);
      char *dst = bytes.data() + (p.buffer_offset() + uint64_t(local)) * dtypeSize(t);
      if (t == DType::F64)
        std::memcpy(dst, &v, 8);
      else if (t == DType::F32) {
        float f = float(v);
        std::memcpy(dst, &f, 4);
      } else {
        bf16 h = bf16(float(v));
        std::memcpy(dst, &h, 2);
      }
      for (int d = rank - 1; d >= 0; --d) {
        if (++idx[d] < p.slice_size(d))
          break;
        idx[d] = 0;
      }
    }
    if (absl::Status s = ex.writeBuffer(int(p.buffer()), bytes.data(), bytes.size()); !s.ok())
      return s;
  }
  return absl::OkStatus();
}

} // namespace trainc::rt
