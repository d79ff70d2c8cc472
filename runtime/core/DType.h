//===- DType.h - Element types of runtime buffers -------------------------===//
//
// The runtime's element types mirror schema::DType one to one.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CORE_DTYPE_H
#define TRAINC_RUNTIME_CORE_DTYPE_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace trainc::rt {

/// Element type of a buffer. Values equal schema::DType's.
enum class DType : uint8_t {
  Invalid = 0,
  F32 = 1,
  F64 = 2,
  BF16 = 3,
  F16 = 4,
  I32 = 5,
  I64 = 6,
  U8 = 7,
};

/// Size of one element in bytes; 0 for Invalid.
inline size_t dtypeSize(DType t) {
  switch (t) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::BF16:
  case DType::F16:
    return 2;
  case DType::U8:
    return 1;
  default:
    return 0;
  }
}

/// Lower-case name as used in error messages and IR ("f32", "bf16", ...).
inline const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::F64:
    return "f64";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  case DType::I32:
    return "i32";
  case DType::I64:
    return "i64";
  case DType::U8:
    return "u8";
  default:
    return "invalid";
  }
}

inline bool isFloat(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::BF16 ||
         t == DType::F16;
}

/// The dtype kernels use for statistics (norm mean/rstd, log-sum-exp, loss sums) of a tensor of
/// dtype `t`: f64 for f64, f32 otherwise (bf16/f16 storage accumulates in f32).
inline DType statsDType(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

/// bfloat16 storage: the upper 16 bits of an IEEE f32. Conversion from f32 rounds to nearest even
/// (NaN stays NaN).
struct bf16 {
  uint16_t bits;
  bf16() = default;
  explicit bf16(float f) { bits = fromFloat(f); }
  operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t fromFloat(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
      return uint16_t((u >> 16) | 0x40);
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return uint16_t(u >> 16);
  }
};
static_assert(sizeof(bf16) == 2);

/// IEEE binary16 (fp16) storage: 1 sign, 5 exponent (bias 15), 10 mantissa bits; largest finite
/// 65504, subnormals down to 2^-24. Conversion from f32 rounds to nearest even (IEEE 754's
/// default, what CUDA's __float2half_rn and numpy's astype(float16) do): values of magnitude
/// >= 65520 (the midpoint above 65504) become +-inf, NaN stays a (quiet) NaN, and results below
/// 2^-14 are subnormal (exact midpoints to the even neighbour, 2^-25 to zero). f16 -> f32 is exact.
struct f16 {
  uint16_t bits;
  f16() = default;
  explicit f16(float f) { bits = fromFloat(f); }
  operator float() const { return toFloat(bits); }
  static uint16_t fromFloat(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) // NaN: quiet, keep the top payload bits
      return uint16_t(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) // >= 65520 (and inf): rounds to inf
      return uint16_t(sign | 0x7c00u);
    if (ax < 0x38800000u) { // below 2^-14: a subnormal result in units of 2^-24
      if (ax < 0x33000000u) // below 2^-25 (the midpoint to 2^-24 ties to 0 below)
        return sign;
      const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
      const uint32_t shift = 126u - e; // 14 .. 24: |f| = m * 2^(e - 150) = (m >> shift) * 2^-24
      uint32_t r = m >> shift;
      const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (r & 1u)))
        ++r; // may carry into the smallest normal, 0x400: correct
      return uint16_t(sign | r);
    }
    // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits; a carry
    // into the exponent is the correctly rounded result (65504 rounds up to inf above).
    uint32_t r = (ax >> 13) - (112u << 10);
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
      ++r;
    return uint16_t(sign | r);
  }
  static float toFloat(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0) {
      float v = float(m) * 0x1p-24f; // zero or subnormal, exact
      std::memcpy(&u, &v, 4);
      u |= sign;
    } else if (e == 31) {
      u = sign | 0x7f800000u | (m << 13);
    } else {
      u = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
static_assert(sizeof(f16) == 2);

} // namespace trainc::rt

#endif // TRAINC_RUNTIME_CORE_DTYPE_H
