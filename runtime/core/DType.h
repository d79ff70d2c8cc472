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

} // namespace trainc::rt

#endif // TRAINC_RUNTIME_CORE_DTYPE_H
