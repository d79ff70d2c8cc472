//===- ElementwiseKernels.cpp - fill, copy, cast, add, gelu, swiglu, dropout ===//
//
// Operand conventions are in Kernel.h's table (KernelSignatures.cpp) and docs/kernels.md.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/Dispatch.h"
#include "runtime/cpu/FastMath.h"
#include "runtime/core/Philox.h"

#include <cstring>
#include <vector>

namespace trainc::rt::cpu {
namespace {

//===----------------------------------------------------------------------===//
// fill, copy, cast
//===----------------------------------------------------------------------===//

void fillKernel(const KernelCtx &c) {
  const TensorView &y = c.out[0];
  double v = c.attrs->f(0);
  switch (y.dtype) {
  case DType::F32:
    std::fill_n(y.as<float>(), y.numel, float(v));
    break;
  case DType::F64:
    std::fill_n(y.as<double>(), y.numel, v);
    break;
  case DType::BF16:
    std::fill_n(y.as<bf16>(), y.numel, bf16(float(v)));
    break;
  case DType::I32:
    std::fill_n(y.as<int32_t>(), y.numel, int32_t(v));
    break;
  case DType::I64:
    std::fill_n(y.as<int64_t>(), y.numel, int64_t(v));
    break;
  case DType::U8:
    std::fill_n(y.as<uint8_t>(), y.numel, uint8_t(v));
    break;
  case DType::F16: // refused by verifyFill
  case DType::Invalid:
    break;
  }
}

void copyKernel(const KernelCtx &c) {
  if (c.out[0].data != c.in[0].data)
    std::memmove(c.out[0].data, c.in[0].data, c.in[0].bytes());
}

void castKernel(const KernelCtx &c) {
  const TensorView &x = c.in[0], &y = c.out[0];
  int64_t n = x.numel;
  dispatchFloat(x.dtype, [&](auto xt) {
    using X = decltype(xt);
    dispatchFloat(y.dtype, [&](auto yt) {
      using Y = decltype(yt);
      const X *xp = x.as<X>();
      Y *yp = y.as<Y>();
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<Y, bf16>)
          yp[i] = bf16(float(double(xp[i])));
        else
          yp[i] = Y(double(xp[i]));
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// add, scale, scale_by, reciprocal, add_bias, sum_rows
//===----------------------------------------------------------------------===//

void addKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *a = c.in[0].as<T>(), *b = c.in[1].as<T>();
    T *y = c.out[0].as<T>();
    Acc<T> alpha = Acc<T>(c.attrs->f(0));
    int64_t n = c.in[0].numel;
    if (alpha == Acc<T>(1))
      for (int64_t i = 0; i < n; ++i)
        st(y, i, ld(a, i) + ld(b, i));
    else
      for (int64_t i = 0; i < n; ++i)
        st(y, i, ld(a, i) + alpha * ld(b, i));
  });
}

void scaleKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = c.in[0].as<T>();
    T *y = c.out[0].as<T>();
    Acc<T> alpha = Acc<T>(c.attrs->f(0));
    for (int64_t i = 0, n = c.in[0].numel; i < n; ++i)
      st(y, i, alpha * ld(x, i));
  });
}

/// Reads a float scalar of any float dtype as double.
double readScalar(const TensorView &s) {
  switch (s.dtype) {
  case DType::F64:
    return *s.as<double>();
  case DType::BF16:
    return float(*s.as<bf16>());
  default:
    return *s.as<float>();
  }
}

void scaleByKernel(const KernelCtx &c) {
  double s = readScalar(c.in[1]);
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = c.in[0].as<T>();
    T *y = c.out[0].as<T>();
    Acc<T> alpha = Acc<T>(s);
    for (int64_t i = 0, n = c.in[0].numel; i < n; ++i)
      st(y, i, alpha * ld(x, i));
  });
}

void reciprocalKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    Acc<T> x = ld(c.in[0].as<T>(), 0);
    st(c.out[0].as<T>(), 0, x == Acc<T>(0) ? Acc<T>(0) : Acc<T>(1) / x);
  });
}

void addBiasKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = c.in[0].as<T>(), *b = c.in[1].as<T>();
    T *y = c.out[0].as<T>();
    int64_t n = c.in[0].dim(-1), rows = c.in[0].rows();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        st(y, r * n + j, ld(x, r * n + j) + ld(b, j));
  });
}

void sumRowsKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = c.in[0].as<T>();
    T *y = c.out[0].as<T>();
    int64_t n = c.in[0].dim(-1), rows = c.in[0].rows();
    std::vector<Acc<T>> acc(size_t(n), Acc<T>(0));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        acc[j] += ld(x, r * n + j);
    bool accumulate = c.attrs->f(0) != 0;
    for (int64_t j = 0; j < n; ++j)
      st(y, j, accumulate ? ld(y, j) + acc[j] : acc[j]);
  });
}

//===----------------------------------------------------------------------===//
// gelu: erf form 0.5 x (1 + erf(x / sqrt 2)); tanh form 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))
//===----------------------------------------------------------------------===//

template <typename A> inline A geluFwd(A x, bool tanhForm) {
  if (tanhForm) {
    const A k = A(0.7978845608028654), a = A(0.044715);
    return A(0.5) * x * (A(1) + std::tanh(k * (x + a * x * x * x)));
  }
  return A(0.5) * x * (A(1) + std::erf(x * A(0.7071067811865476)));
}

template <typename A> inline A geluGrad(A x, bool tanhForm) {
  if (tanhForm) {
    const A k = A(0.7978845608028654), a = A(0.044715);
    A u = k * (x + a * x * x * x);
    A t = std::tanh(u);
    A du = k * (A(1) + A(3) * a * x * x);
    return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * du;
  }
  A cdf = A(0.5) * (A(1) + std::erf(x * A(0.7071067811865476)));
  A pdf = std::exp(A(-0.5) * x * x) * A(0.3989422804014327);
  return cdf + x * pdf;
}

void geluKernel(const KernelCtx &c) {
  bool t = c.attrs->i(0) != 0;
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = c.in[0].as<T>();
    T *y = c.out[0].as<T>();
    for (int64_t i = 0, n = c.in[0].numel; i < n; ++i)
      st(y, i, geluFwd(ld(x, i), t));
  });
}

void geluBackwardKernel(const KernelCtx &c) {
  bool t = c.attrs->i(0) != 0;
  dispatchFloat(c.in[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *dy = c.in[0].as<T>(), *x = c.in[1].as<T>();
    T *dx = c.out[0].as<T>();
    for (int64_t i = 0, n = c.in[1].numel; i < n; ++i)
      st(dx, i, ld(dy, i) * geluGrad(ld(x, i), t));
  });
}

//===----------------------------------------------------------------------===//
// swiglu: x = [a | b] along the last dim (Megatron's chunk(2, dim=-1)); y = silu(a) * b
//===----------------------------------------------------------------------===//

/// sigmoid(x[j]) for j < n into s (float accumulation: the vectorised exp; double: std::exp).
inline void sigmoidRow(const float *x, float *s, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    s[j] = -x[j];
  expInPlace(s, int(n), 0.0f);
  for (int64_t j = 0; j < n; ++j)
    s[j] = 1.0f / (1.0f + s[j]);
}
inline void sigmoidRow(const double *x, double *s, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    s[j] = 1.0 / (1.0 + std::exp(-x[j]));
}

// Rows are independent: split them over the OpenMP threads (each row is computed by one thread in
// the same way whatever the thread count, so results do not depend on it).
void swigluKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T *x = c.in[0].as<T>();
    T *y = c.out[0].as<T>();
    int64_t f = c.in[0].dim(-1) / 2, rows = c.in[0].rows();
#pragma omp parallel if (rows * f > 32768)
    {
      std::vector<A> a(static_cast<size_t>(f)), s(static_cast<size_t>(f));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const T *xa = x + r * 2 * f, *xb = xa + f;
        T *yr = y + r * f;
        for (int64_t j = 0; j < f; ++j)
          a[j] = ld(xa, j);
        sigmoidRow(a.data(), s.data(), f);
        for (int64_t j = 0; j < f; ++j)
          st(yr, j, a[j] * s[j] * ld(xb, j));
      }
    }
  });
}

void swigluBackwardKernel(const KernelCtx &c) {
  dispatchFloat(c.in[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T *dy = c.in[0].as<T>(), *x = c.in[1].as<T>();
    T *dx = c.out[0].as<T>();
    int64_t f = c.in[1].dim(-1) / 2, rows = c.in[1].rows();
#pragma omp parallel if (rows * f > 32768)
    {
      std::vector<A> av(static_cast<size_t>(f)), sv(static_cast<size_t>(f));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const T *xa = x + r * 2 * f, *xb = xa + f, *g = dy + r * f;
        T *da = dx + r * 2 * f, *db = da + f;
        for (int64_t j = 0; j < f; ++j)
          av[j] = ld(xa, j);
        sigmoidRow(av.data(), sv.data(), f);
        for (int64_t j = 0; j < f; ++j) {
          A a = av[j], s = sv[j], b = ld(xb, j), gj = ld(g, j);
          // Read everything before writing: dx may alias dy or x.
          A dA = gj * b * (s + a * s * (A(1) - s)), dB = gj * a * s;
          st(da, j, dA);
          st(db, j, dB);
        }
      }
    }
  });
}

//===----------------------------------------------------------------------===//
// dropout: keep element i when u(seed, op_id, iteration, microbatch, i) >= p; scale by 1/(1-p).
// rng = (seed, iteration, first sample), an i64 [3] buffer the host fills per microbatch (the
// index in the global batch of the microbatch's first sample), or the
// [4] key of rng_offset, whose last element is added to op_id (one layer function's dropout
// sites, called once per layer, get the layer's op ids).
//===----------------------------------------------------------------------===//

void rngOffsetKernel(const KernelCtx &c) {
  const int64_t *in = c.in[0].as<int64_t>();
  int64_t *out = c.out[0].as<int64_t>();
  int64_t base = c.in[0].numel == 4 ? in[3] : 0;
  out[0] = in[0];
  out[1] = in[1];
  out[2] = in[2];
  out[3] = base + c.attrs->i(0);
}

void dropoutApply(const KernelCtx &c) {
  const TensorView &x = c.in[0];
  const int64_t *rng = c.in[1].as<int64_t>();
  double p = c.attrs->f(0);
  int64_t offset = c.in[1].numel == 4 ? rng[3] : 0;
  uint32_t opId = uint32_t(c.attrs->i(1) + offset);
  // Dim 0 is the microbatch: element i of sample b is global element
  // (first sample + b) x sampleNumel + i, the same in every layout.
  const int64_t n = x.numel, samples = x.rank > 0 && x.dim(0) > 0 ? x.dim(0) : 1;
  const uint64_t first = uint64_t(rng[2]) * uint64_t(n / samples);
  dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T *xp = x.as<T>();
    T *yp = c.out[0].as<T>();
    A scale = A(1.0 / (1.0 - p));
    float u[4];
    uint64_t block = ~uint64_t(0);
    for (int64_t i = 0; i < n; ++i) {
      uint64_t g = first + uint64_t(i);
      if (g / 4 != block) {
        block = g / 4;
        philoxUniform4(uint64_t(rng[0]), opId, uint32_t(rng[1]), block, u);
      }
      st(yp, i, double(u[g % 4]) >= p ? ld(xp, i) * scale : A(0));
    }
  });
}

} // namespace

void registerElementwiseKernels(KernelTable &t) {
  t["fill"] = fillKernel;
  t["copy"] = copyKernel;
  t["cast"] = castKernel;
  t["add"] = addKernel;
  t["scale"] = scaleKernel;
  t["scale_by"] = scaleByKernel;
  t["reciprocal"] = reciprocalKernel;
  t["add_bias"] = addBiasKernel;
  t["sum_rows"] = sumRowsKernel;
  t["gelu"] = geluKernel;
  t["gelu_backward"] = geluBackwardKernel;
  t["swiglu"] = swigluKernel;
  t["swiglu_backward"] = swigluBackwardKernel;
  // The backward of dropout is the same masked scaling applied to dy.
  t["dropout"] = dropoutApply;
  t["dropout_backward"] = dropoutApply;
  t["rng_offset"] = rngOffsetKernel;
}

} // namespace trainc::rt::cpu
