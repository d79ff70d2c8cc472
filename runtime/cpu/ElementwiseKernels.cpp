//===- ElementwiseKernels.cpp - fill, copy, cast, add, gelu, swiglu, dropout ===//
//
// Operand conventions are in Kernel.h's table (KernelSignatures.cpp) and docs/kernels.md.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/Dispatch.h"
#include "runtime/cpu/FastMath.h"
#include "runtime/core/Philox.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

namespace trainc::rt::cpu {
namespace {

/// Elementwise kernels cut [0, n) into blocks of kEwBlock elements, split statically over the
/// OpenMP threads above kEwThreadMin elements (the norms' threshold: docs/kernels.md, "Threads on
/// a loaded machine"); f(begin, end) computes one block. Each element is computed the same way
/// whatever the split, so results do not depend on the thread count.
constexpr int64_t kEwBlock = 16384;
constexpr int64_t kEwThreadMin = int64_t(1) << 20;
template <typename F> void forBlocks(int64_t n, F &&f) {
  int64_t blocks = (n + kEwBlock - 1) / kEwBlock;
#pragma omp parallel for schedule(static) if (n > kEwThreadMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    int64_t b = blk * kEwBlock;
    f(b, std::min(n, b + kEwBlock));
  }
}

//===----------------------------------------------------------------------===//
// fill, copy, cast
//===----------------------------------------------------------------------===//

/// y[0, n) = v, blocks split over the threads (a step's zero_grads fills every main grad).
template <typename T> void fillElements(T *y, int64_t n, T v) {
  forBlocks(n, [&](int64_t lo, int64_t hi) { std::fill(y + lo, y + hi, v); });
}

void fillKernel(const KernelCtx &c) {
  const TensorView &y = c.out[0];
  double v = c.attrs->f(0);
  switch (y.dtype) {
  case DType::F32:
    fillElements(y.as<float>(), y.numel, float(v));
    break;
  case DType::F64:
    fillElements(y.as<double>(), y.numel, v);
    break;
  case DType::BF16:
    fillElements(y.as<bf16>(), y.numel, bf16(float(v)));
    break;
  case DType::F16:
    fillElements(y.as<f16>(), y.numel, f16(float(v)));
    break;
  case DType::I32:
    fillElements(y.as<int32_t>(), y.numel, int32_t(v));
    break;
  case DType::I64:
    fillElements(y.as<int64_t>(), y.numel, int64_t(v));
    break;
  case DType::U8:
    fillElements(y.as<uint8_t>(), y.numel, uint8_t(v));
    break;
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
        if constexpr (std::is_same_v<Y, bf16> || std::is_same_v<Y, f16>)
          yp[i] = Y(float(double(xp[i]))); // f64 -> f32 -> 16 bits: double rounding, as torch
        else
          yp[i] = Y(double(xp[i]));
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// add, scale, scale_by, reciprocal, add_bias, sum_rows
//===----------------------------------------------------------------------===//

// The loops below are `omp simd`: element i reads a[i] and b[i] (x[i]) before writing y[i], so an
// output in place of an input is safe, and without the pragma GCC would check the outputs for
// overlap at run time and fall back to the scalar loop in that (normal) case.
void addKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T *a = c.in[0].as<T>(), *b = c.in[1].as<T>();
    T *y = c.out[0].as<T>();
    A alpha = A(c.attrs->f(0));
    forBlocks(c.in[0].numel, [&](int64_t lo, int64_t hi) {
      if (alpha == A(1)) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i)
          y[i] = T(A(a[i]) + A(b[i]));
      } else {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i)
          y[i] = T(A(a[i]) + alpha * A(b[i]));
      }
    });
  });
}

/// y = alpha * x over numel elements (scale and scale_by).
template <typename T> void scaleElements(const T *x, T *y, int64_t n, Acc<T> alpha) {
  forBlocks(n, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i)
      y[i] = T(alpha * Acc<T>(x[i]));
  });
}

void scaleKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    scaleElements(c.in[0].as<T>(), c.out[0].as<T>(), c.in[0].numel, Acc<T>(c.attrs->f(0)));
  });
}

/// Reads a float scalar of any float dtype as double.
double readScalar(const TensorView &s) {
  switch (s.dtype) {
  case DType::F64:
    return *s.as<double>();
  case DType::BF16:
    return float(*s.as<bf16>());
  case DType::F16:
    return float(*s.as<f16>());
  default:
    return *s.as<float>();
  }
}

void scaleByKernel(const KernelCtx &c) {
  double s = readScalar(c.in[1]);
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    scaleElements(c.in[0].as<T>(), c.out[0].as<T>(), c.in[0].numel, Acc<T>(s));
  });
}

void reciprocalKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    Acc<T> x = ld(c.in[0].as<T>(), 0);
    st(c.out[0].as<T>(), 0, x == Acc<T>(0) ? Acc<T>(0) : Acc<T>(1) / x);
  });
}

// Rows split statically over the threads above kEwThreadMin elements (rows are independent).
void addBiasKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T *x = c.in[0].as<T>(), *b = c.in[1].as<T>();
    T *y = c.out[0].as<T>();
    int64_t n = c.in[0].dim(-1), rows = c.in[0].rows();
#pragma omp parallel for schedule(static) if (rows * n > kEwThreadMin)
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x + r * n;
      T *yr = y + r * n;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j)
        yr[j] = T(A(xr[j]) + A(b[j]));
    }
  });
}

/// y[j] (+)= sum over rows of x[r, j] for the columns [j0, j1), each column summed in Acc in row
/// order and rounded once: the same bits whatever the column range is.
template <typename T, typename Y>
void sumRowsColumns(const T *x, int64_t rows, int64_t n, int64_t j0, int64_t j1, bool accumulate,
                    Y *y) {
  using A = Acc<T>;
  std::vector<A> acc(size_t(j1 - j0), A(0));
  A *s = acc.data();
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * n + j0;
#pragma omp simd
    for (int64_t j = 0; j < j1 - j0; ++j)
      s[j] += A(xr[j]);
  }
  for (int64_t j = j0; j < j1; ++j)
    st(y, j, accumulate ? ld(y, j) + s[j - j0] : s[j - j0]);
}

// Above kEwThreadMin elements, contiguous column ranges (multiples of 16 columns) one per thread.
void sumRowsKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = c.in[0].as<T>();
    int64_t n = c.in[0].dim(-1), rows = c.in[0].rows();
    bool accumulate = c.attrs->f(0) != 0;
    // y in T, or f32 for bf16/fp16 x (mixed precision: a bias gradient's fp32 sum, unrounded).
    auto run = [&](auto *y) {
      int64_t pieces = (n + 15) / 16;
#pragma omp parallel if (rows * n > kEwThreadMin)
      {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t p0 = pieces * t / nt, p1 = pieces * (t + 1) / nt;
        int64_t j0 = std::min(n, p0 * 16), j1 = std::min(n, p1 * 16);
        if (j0 < j1)
          sumRowsColumns(x, rows, n, j0, j1, accumulate, y);
      }
    };
    if (c.out[0].dtype == DType::F32)
      run(c.out[0].as<float>());
    else
      run(c.out[0].as<T>());
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

// f32 (and bf16, which computes in f32): vectorisable formulations, compiled for SSE2 and as AVX2
// clones like expInPlace (no FMA contraction in either, so both give bitwise the same results).
//   tanh form: 0.5 x (1 + tanh u) = x s,  s = sigmoid(2u) = 1 / (1 + e),  e = exp(-2u)
//              gelu'(x) = s + 2 x s (1 - s) du,  1 - s = e s          (0.5 (1 - t^2) = 2 s (1 - s))
//   erf form:  erf from a rational approximation (odd degree-13 numerator over an even degree-8
//              denominator, +-1 beyond |z| >= 3.8325; Eigen's generic_fast_erf_float), the pdf from
//              expInPlace.
// No 1 - t or 1 + erf cancellation enters the tanh form; beyond |x| > 10 (tanh form) or |x| > 13
// (erf pdf) the results are selected as the limits (gelu' = 1 or 0, the pdf term 0), which also
// keeps the clamped exp of expInPlace (~1.6e-38 instead of 0) and an overflowing x^3 from leaking
// into them. NaN propagates. Element i depends only on x[i] (and dy[i]), so any split of the index
// range over threads gives the same bits.
constexpr int kGeluChunk = 512;

/// Bitwise select: m is all ones (take a) or zero (take b); written on the integer bits so that GCC
/// vectorises it under -ftrapping-math.
inline float selectBits(int32_t m, float a, float b) {
  int32_t ab, bb;
  std::memcpy(&ab, &a, 4);
  std::memcpy(&bb, &b, 4);
  int32_t r = (ab & m) | (bb & ~m);
  float f;
  std::memcpy(&f, &r, 4);
  return f;
}

inline float erfRational(float x) {
  float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * x;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  float r = p / q;
  int32_t big = -int32_t(std::fabs(x) >= 3.832506856900711f);
  int32_t neg = -int32_t(x < 0.0f);
  return selectBits(big, selectBits(neg, -1.0f, 1.0f), r);
}

/// y[i] = gelu(x[i]) for i < n (n <= kGeluChunk).
TRAINC_AVX2_CLONE void geluF32(const float *__restrict x, float *__restrict y, int n, bool tanhForm) {
  if (tanhForm) {
    const float k = 0.7978845608028654f, a = 0.044715f;
    for (int i = 0; i < n; ++i) {
      float v = x[i];
      y[i] = -2.0f * (k * (v + a * v * v * v));
    }
    expInPlace(y, n, 0.0f);
    for (int i = 0; i < n; ++i) {
      float v = x[i];
      float s = 1.0f / (1.0f + y[i]);
      s = selectBits(-int32_t(v < -10.0f), 0.0f, s);
      y[i] = v * s;
    }
    return;
  }
  for (int i = 0; i < n; ++i) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + erfRational(v * 0.7071067811865476f));
  }
}

/// dx[i] = dy[i] * gelu'(x[i]) for i < n (n <= kGeluChunk).
TRAINC_AVX2_CLONE void geluGradF32(const float *__restrict dy, const float *__restrict x,
                                   float *__restrict dx, int n, bool tanhForm) {
  float e[kGeluChunk];
  if (tanhForm) {
    const float k = 0.7978845608028654f, a = 0.044715f;
    for (int i = 0; i < n; ++i) {
      float v = x[i];
      e[i] = -2.0f * (k * (v + a * v * v * v));
    }
    expInPlace(e, n, 0.0f);
    for (int i = 0; i < n; ++i) {
      float v = x[i];
      float s = 1.0f / (1.0f + e[i]);
      float du = k * (1.0f + 3.0f * a * v * v);
      float g = s + 2.0f * v * s * (e[i] * s) * du;
      g = selectBits(-int32_t(v > 10.0f), 1.0f, g);
      g = selectBits(-int32_t(v < -10.0f), 0.0f, g);
      dx[i] = dy[i] * g;
    }
    return;
  }
  for (int i = 0; i < n; ++i) {
    float v = x[i];
    e[i] = -0.5f * v * v;
  }
  expInPlace(e, n, 0.0f);
  for (int i = 0; i < n; ++i) {
    float v = x[i];
    float cdf = 0.5f * (1.0f + erfRational(v * 0.7071067811865476f));
    float pdf = selectBits(-int32_t(std::fabs(v) > 13.0f), 0.0f, e[i] * 0.3989422804014327f);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

/// The chunks [ch * kGeluChunk, ...) of n elements, split statically over the OpenMP threads when
/// there is enough work; f(begin, count) computes one chunk.
template <typename F> void forChunks(int64_t n, F &&f) {
  int64_t chunks = (n + kGeluChunk - 1) / kGeluChunk;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    int64_t b = ch * kGeluChunk;
    f(b, int(std::min<int64_t>(kGeluChunk, n - b)));
  }
}

/// Loads `m` elements of p + b as f32: p itself when T is float, else converted into buf.
template <typename T> const float *loadF32(const T *p, int64_t b, int m, float *buf) {
  if constexpr (std::is_same_v<T, float>) {
    return p + b;
  } else {
    for (int i = 0; i < m; ++i)
      buf[i] = float(p[b + i]);
    return buf;
  }
}

template <typename T> void storeF32(T *p, int64_t b, int m, const float *v) {
  if constexpr (std::is_same_v<T, float>)
    std::memcpy(p + b, v, size_t(m) * 4);
  else
    for (int i = 0; i < m; ++i)
      p[b + i] = T(v[i]);
}

// Both kernels are safe in place: a chunk's inputs are read (into the chunk's result buffer)
// before any of its outputs are written, and chunks do not overlap.
void geluKernel(const KernelCtx &c) {
  bool t = c.attrs->i(0) != 0;
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = c.in[0].as<T>();
    T *y = c.out[0].as<T>();
    forChunks(c.in[0].numel, [&](int64_t b, int m) {
      if constexpr (std::is_same_v<T, double>) {
        // f64 (gradient checks): the formula with the library tanh / erf.
        for (int64_t i = b; i < b + m; ++i)
          y[i] = geluFwd(x[i], t);
      } else {
        float xin[kGeluChunk], out[kGeluChunk];
        geluF32(loadF32(x, b, m, xin), out, m, t);
        storeF32(y, b, m, out);
      }
    });
  });
}

void geluBackwardKernel(const KernelCtx &c) {
  bool t = c.attrs->i(0) != 0;
  dispatchFloat(c.in[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *dy = c.in[0].as<T>(), *x = c.in[1].as<T>();
    T *dx = c.out[0].as<T>();
    forChunks(c.in[1].numel, [&](int64_t b, int m) {
      if constexpr (std::is_same_v<T, double>) {
        for (int64_t i = b; i < b + m; ++i)
          dx[i] = dy[i] * geluGrad(x[i], t);
      } else {
        float xin[kGeluChunk], gin[kGeluChunk], out[kGeluChunk];
        geluGradF32(loadF32(dy, b, m, gin), loadF32(x, b, m, xin), out, m, t);
        storeF32(dx, b, m, out);
      }
    });
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

/// Dropout Philox blocks per batch (4 elements each): the batch's state stays in L1.
constexpr int kDropoutBatch = 256;

/// bits[4 j + k] = the 24 bits of philoxUniform4(seed, opId, iteration, firstBlock + j)[k], i.e.
/// that uniform times 2^24, for j < n <= kDropoutBatch: Philox4x32-10 on n counters at once,
/// structure-of-arrays so the rounds vectorise (16 or 8 lanes). Integer arithmetic only: every
/// clone gives philoxUniform4's bits.
TRAINC_AVX512_CLONE void dropoutBits(uint64_t seed, uint32_t opId, uint32_t iteration,
                                     uint64_t firstBlock, int n, uint32_t *__restrict bits) {
  alignas(64) uint32_t c0[kDropoutBatch], c1[kDropoutBatch], c2[kDropoutBatch], c3[kDropoutBatch];
  for (int j = 0; j < n; ++j) {
    uint64_t b = firstBlock + uint64_t(j);
    c0[j] = uint32_t(b);
    c1[j] = uint32_t(b >> 32);
    c2[j] = opId;
    c3[j] = iteration;
  }
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  philox4x32Batch(k0, k1, n, c0, c1, c2, c3);
  for (int j = 0; j < n; ++j) {
    bits[4 * j + 0] = c0[j] >> 8;
    bits[4 * j + 1] = c1[j] >> 8;
    bits[4 * j + 2] = c2[j] >> 8;
    bits[4 * j + 3] = c3[j] >> 8;
  }
}

/// y[e] = bits[e] >= threshold ? x[e] * scale : 0 for e < len (y may be x: each element is read
/// before it is written).
template <typename T>
TRAINC_AVX2_CLONE void dropoutMask(const T *x, T *y, const uint32_t *__restrict bits,
                                   uint32_t threshold, Acc<T> scale, int64_t len) {
#pragma omp simd
  for (int64_t e = 0; e < len; ++e)
    y[e] = T(bits[e] >= threshold ? Acc<T>(x[e]) * scale : Acc<T>(0));
}

void dropoutApply(const KernelCtx &c) {
  const TensorView &x = c.in[0];
  const int64_t *rng = c.in[1].as<int64_t>();
  double p = c.attrs->f(0);
  int64_t offset = c.in[1].numel == 4 ? rng[3] : 0;
  uint32_t opId = uint32_t(c.attrs->i(1) + offset);
  // Dim 0 is the microbatch: element i of sample b is global element
  // (first sample + b) x sampleNumel + i, the same in every layout. On a sequence shard
  // (seq_length > 0, x = [samples, local, rest...] holding positions seq_start ..), element
  // (b, j, r) is global element (first sample + b) x seq_length x rest + (seq_start + j) x rest
  // + r: the single-rank plan's mask.
  const int64_t n = x.numel, samples = x.rank > 0 && x.dim(0) > 0 ? x.dim(0) : 1;
  const int64_t localPer = n / samples, seqStart = c.attrs->i(2), seqLength = c.attrs->i(3);
  const int64_t rest = seqLength > 0 && x.dim(1) > 0 ? localPer / x.dim(1) : 0;
  const uint64_t globalPer = seqLength > 0 ? uint64_t(seqLength * rest) : uint64_t(localPer);
  const uint64_t shift = uint64_t(seqStart * rest);
  const uint64_t first = uint64_t(rng[2]) * globalPer;
  dispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T *xp = x.as<T>();
    T *yp = c.out[0].as<T>();
    const A scale = A(1.0 / (1.0 - p));
    // u = bits / 2^24 exactly, so u >= p exactly when bits >= ceil(p 2^24) (p 2^24 is exact).
    const double pt = std::ceil(p * 16777216.0);
    const uint32_t threshold = pt <= 0 ? 0u : pt >= 16777216.0 ? 16777216u : uint32_t(pt);
    // Elements are independent functions of their global index g: the operand is cut into
    // chunks of consecutive local elements, split statically over the OpenMP threads (the bits
    // do not depend on the split). Within one sample the global indices are consecutive, so a
    // chunk is processed in runs of at most 4 x kDropoutBatch elements, whose uniforms come from
    // one dropoutUniforms batch.
    constexpr int64_t kChunk = 4 * kDropoutBatch * 4;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    // Threaded above 2^18 elements (about 1.5 ms on one thread): a smaller region does not pay when
    // the machine is loaded (NormKernels.cpp's kParallelMin).
#pragma omp parallel for schedule(static) if (n > (int64_t(1) << 18))
    for (int64_t ch = 0; ch < chunks; ++ch) {
      alignas(64) uint32_t bits[4 * kDropoutBatch + 4];
      const int64_t end = std::min(n, (ch + 1) * kChunk);
      for (int64_t i = ch * kChunk; i < end;) {
        const int64_t sample = localPer > 0 ? i / localPer : 0;
        const int64_t sampleEnd = localPer > 0 ? (sample + 1) * localPer : end;
        const uint64_t g0 = first + uint64_t(sample) * globalPer + shift +
                            (uint64_t(i) - uint64_t(sample) * uint64_t(localPer));
        const uint64_t block0 = g0 / 4, off = g0 % 4;
        // Run [i, i + len): consecutive g, at most kDropoutBatch blocks.
        const int64_t len = std::min({end - i, sampleEnd - i, int64_t(4 * kDropoutBatch - off)});
        const int blocks = int((off + uint64_t(len) + 3) / 4);
        dropoutBits(uint64_t(rng[0]), opId, uint32_t(rng[1]), block0, blocks, bits);
        dropoutMask<T>(xp + i, yp + i, bits + off, threshold, scale, len);
        i += len;
      }
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
