//===- Dispatch.h - dtype dispatch and element access for CPU kernels ----===//
#ifndef TRAINC_RUNTIME_CPU_DISPATCH_H
#define TRAINC_RUNTIME_CPU_DISPATCH_H

#include "runtime/core/Kernel.h"

#include <cmath>
#include <type_traits>

namespace trainc::rt::cpu {

/// The accumulation type for storage type T: double for double, float otherwise (bf16 and f16 compute
/// in f32, as on GPUs).
template <typename T> using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

/// Statistics storage type (DType.h statsDType): double for double, float otherwise.
template <typename T> using Stat = Acc<T>;

template <typename T> inline Acc<T> ld(const T *p, int64_t i) { return Acc<T>(p[i]); }
template <typename T> inline void st(T *p, int64_t i, Acc<T> v) { p[i] = T(v); }

/// Calls `f(T{})` with T = float, double, bf16 or f16 according to `t`. Other dtypes are rejected by
/// the signature check before any kernel runs.
template <typename F> inline void dispatchFloat(DType t, F &&f) {
  switch (t) {
  case DType::F64:
    f(double{});
    break;
  case DType::BF16:
    f(bf16{});
    break;
  case DType::F16:
    f(f16{});
    break;
  default:
    f(float{});
    break;
  }
}

} // namespace trainc::rt::cpu

#endif
