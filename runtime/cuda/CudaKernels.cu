//===- CudaKernels.cu - The CUDA backend's own kernels --------------------===//
//
// Device code only: nvcc compiles this file to a fatbin (sm_90 SASS + compute_90 PTX) that is
// embedded in the runtime and loaded at run time with cudaLibraryLoadData (docs/cuda.md). Every
// kernel is extern "C" so that the host side (CudaKernels.cpp) finds it by name; templated bodies
// are instantiated for f32, f64 and bf16 storage with the suffixes _f32, _f64, _bf16. Arithmetic is
// in Acc<T> (f64 for f64, f32 otherwise) as in the CPU backend (runtime/cpu/Dispatch.h); statistics
// (norm mean/rstd, lse, loss sums) are stored as Acc<T> (DType.h statsDType). Operand conventions
// are those of runtime/core/KernelSignatures.cpp and docs/kernels.md; the host side maps a
// KernelCtx to the scalar parameters below. Reductions use a fixed order (no atomics) except
// embedding_backward (atomicAdd, documented in docs/cuda.md).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/DropoutRng.h"

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

template <typename T> struct AccOf { typedef float type; };
template <> struct AccOf<double> { typedef double type; };
#define ACC(T) typename AccOf<T>::type

__device__ __forceinline__ float ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ double ld(const double *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16 *p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(double *p, int64_t i, double v) { p[i] = v; }
__device__ __forceinline__ void st(bf16 *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

__device__ __forceinline__ int64_t gtid() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t gstride() { return int64_t(gridDim.x) * blockDim.x; }

// Math overloads for Acc types.
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_erf(float x) { return erff(x); }
__device__ __forceinline__ double m_erf(double x) { return erf(x); }
__device__ __forceinline__ float m_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double m_max(double a, double b) { return fmax(a, b); }
template <typename A> __device__ __forceinline__ A lowest();
template <> __device__ __forceinline__ float lowest<float>() { return -3.402823466e38f; }
template <> __device__ __forceinline__ double lowest<double>() { return -1.7976931348623157e308; }

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
template <typename A> __device__ A blockSum(A v) {
  __shared__ A part[32];
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads(); // part[] may still be read by a previous call
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  A r = A(0);
  for (int w = 0; w < nw; ++w)
    r += part[w];
  return r;
}

template <typename A> __device__ A blockMax(A v) {
  __shared__ A part[32];
  for (int o = 16; o > 0; o >>= 1)
    v = m_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  A r = part[0];
  for (int w = 1; w < nw; ++w)
    r = m_max(r, part[w]);
  return r;
}

#define INST3(NAME, PARAMS, ARGS)                                                                  \
  namespace NAME##_f32_ns {                                                                        \
  typedef float T;                                                                                 \
  extern "C" __global__ void NAME##_f32 PARAMS { NAME##_impl<T> ARGS; }                            \
  }                                                                                                \
  namespace NAME##_f64_ns {                                                                        \
  typedef double T;                                                                                \
  extern "C" __global__ void NAME##_f64 PARAMS { NAME##_impl<T> ARGS; }                            \
  }                                                                                                \
  namespace NAME##_bf16_ns {                                                                       \
  typedef bf16 T;                                                                                  \
  extern "C" __global__ void NAME##_bf16 PARAMS { NAME##_impl<T> ARGS; }                           \
  }

// Master-weight / statistics kernels: f32 and f64 only.
#define INST2(NAME, PARAMS, ARGS)                                                                  \
  namespace NAME##_f32_ns {                                                                        \
  typedef float T;                                                                                 \
  extern "C" __global__ void NAME##_f32 PARAMS { NAME##_impl<T> ARGS; }                            \
  }                                                                                                \
  namespace NAME##_f64_ns {                                                                        \
  typedef double T;                                                                                \
  extern "C" __global__ void NAME##_f64 PARAMS { NAME##_impl<T> ARGS; }                            \
  }

//===----------------------------------------------------------------------===//
// fill, cast, add, scale, scale_by, reciprocal, add_bias, sum_rows
//===----------------------------------------------------------------------===//

template <typename T> __device__ void fill_impl(T *y, int64_t n, double v) {
  T val = T(v);
  for (int64_t i = gtid(); i < n; i += gstride())
    y[i] = val;
}
template <> __device__ void fill_impl<bf16>(bf16 *y, int64_t n, double v) {
  bf16 val = __float2bfloat16_rn(float(v));
  for (int64_t i = gtid(); i < n; i += gstride())
    y[i] = val;
}
INST3(fill, (T * y, int64_t n, double v), (y, n, v))
extern "C" __global__ void fill_i32(int32_t *y, int64_t n, double v) { fill_impl<int32_t>(y, n, v); }
extern "C" __global__ void fill_i64(int64_t *y, int64_t n, double v) { fill_impl<int64_t>(y, n, v); }
extern "C" __global__ void fill_u8(uint8_t *y, int64_t n, double v) { fill_impl<uint8_t>(y, n, v); }

// dtype codes as runtime/core/DType.h: 1 f32, 2 f64, 3 bf16.
__device__ __forceinline__ double loadAny(const void *p, int t, int64_t i) {
  if (t == 2)
    return static_cast<const double *>(p)[i];
  if (t == 3)
    return double(__bfloat162float(static_cast<const bf16 *>(p)[i]));
  return double(static_cast<const float *>(p)[i]);
}
extern "C" __global__ void cast_any(const void *x, int xt, void *y, int yt, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) {
    double v = loadAny(x, xt, i);
    if (yt == 2)
      static_cast<double *>(y)[i] = v;
    else if (yt == 3)
      static_cast<bf16 *>(y)[i] = __float2bfloat16_rn(float(v));
    else
      static_cast<float *>(y)[i] = float(v);
  }
}

template <typename T> __device__ void add_impl(const T *a, const T *b, T *y, int64_t n, double alphaD) {
  typedef ACC(T) A;
  A alpha = A(alphaD);
  for (int64_t i = gtid(); i < n; i += gstride())
    st(y, i, alpha == A(1) ? ld(a, i) + ld(b, i) : ld(a, i) + alpha * ld(b, i));
}
INST3(add, (const T *a, const T *b, T *y, int64_t n, double alpha), (a, b, y, n, alpha))

template <typename T> __device__ void scale_impl(const T *x, T *y, int64_t n, double alphaD) {
  typedef ACC(T) A;
  A alpha = A(alphaD);
  for (int64_t i = gtid(); i < n; i += gstride())
    st(y, i, alpha * ld(x, i));
}
INST3(scale, (const T *x, T *y, int64_t n, double alpha), (x, y, n, alpha))

template <typename T>
__device__ void scale_by_impl(const T *x, const void *s, int st_, T *y, int64_t n) {
  typedef ACC(T) A;
  A alpha = A(loadAny(s, st_, 0));
  for (int64_t i = gtid(); i < n; i += gstride())
    st(y, i, alpha * ld(x, i));
}
INST3(scale_by, (const T *x, const void *s, int sdt, T *y, int64_t n), (x, s, sdt, y, n))

template <typename T> __device__ void reciprocal_impl(const T *x, T *y) {
  typedef ACC(T) A;
  if (gtid() == 0) {
    A v = ld(x, 0);
    st(y, 0, v == A(0) ? A(0) : A(1) / v);
  }
}
INST3(reciprocal, (const T *x, T *y), (x, y))

template <typename T>
__device__ void add_bias_impl(const T *x, const T *b, T *y, int64_t rows, int64_t n) {
  for (int64_t i = gtid(); i < rows * n; i += gstride())
    st(y, i, ld(x, i) + ld(b, i % n));
}
INST3(add_bias, (const T *x, const T *b, T *y, int64_t rows, int64_t n), (x, b, y, rows, n))

// One thread per column, rows summed in order (the CPU backend's order).
template <typename T, typename W = T>
__device__ void sum_rows_impl(const T *x, W *y, int64_t rows, int64_t n,
                              int accumulate) {
  typedef ACC(T) A;
  for (int64_t j = gtid(); j < n; j += gstride()) {
    A acc = A(0);
    for (int64_t r = 0; r < rows; ++r)
      acc += ld(x, r * n + j);
    st(y, j, accumulate ? ld(y, j) + acc : acc);
  }
}
INST3(sum_rows, (const T *x, T *y, int64_t rows, int64_t n, int acc), (x, y, rows, n, acc))
// f32 y of bf16 x (mixed precision: a bias gradient's fp32 sum).
extern "C" __global__ void
sum_rows_bf16_f32w(const bf16 *x, float *y, int64_t rows, int64_t n, int acc) {
  sum_rows_impl<bf16, float>(x, y, rows, n, acc);
}

//===----------------------------------------------------------------------===//
// gelu, swiglu
//===----------------------------------------------------------------------===//

template <typename A> __device__ A geluFwd(A x, int tanhForm) {
  if (tanhForm) {
    const A k = A(0.7978845608028654), a = A(0.044715);
    return A(0.5) * x * (A(1) + m_tanh(k * (x + a * x * x * x)));
  }
  return A(0.5) * x * (A(1) + m_erf(x * A(0.7071067811865476)));
}
template <typename A> __device__ A geluGrad(A x, int tanhForm) {
  if (tanhForm) {
    const A k = A(0.7978845608028654), a = A(0.044715);
    A t = m_tanh(k * (x + a * x * x * x));
    A du = k * (A(1) + A(3) * a * x * x);
    return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * du;
  }
  A cdf = A(0.5) * (A(1) + m_erf(x * A(0.7071067811865476)));
  A pdf = m_exp(A(-0.5) * x * x) * A(0.3989422804014327);
  return cdf + x * pdf;
}
template <typename T> __device__ void gelu_impl(const T *x, T *y, int64_t n, int t) {
  for (int64_t i = gtid(); i < n; i += gstride())
    st(y, i, geluFwd(ld(x, i), t));
}
INST3(gelu, (const T *x, T *y, int64_t n, int t), (x, y, n, t))
template <typename T>
__device__ void gelu_backward_impl(const T *dy, const T *x, T *dx, int64_t n, int t) {
  for (int64_t i = gtid(); i < n; i += gstride())
    st(dx, i, ld(dy, i) * geluGrad(ld(x, i), t));
}
INST3(gelu_backward, (const T *dy, const T *x, T *dx, int64_t n, int t), (dy, x, dx, n, t))

// The host stages x (or dy) into scratch when an output overlaps it (a row's outputs straddle
// other rows' inputs).
template <typename T> __device__ void swiglu_impl(const T *x, T *y, int64_t rows, int64_t f) {
  typedef ACC(T) A;
  for (int64_t i = gtid(); i < rows * f; i += gstride()) {
    int64_t r = i / f, j = i % f;
    A a = ld(x, r * 2 * f + j), b = ld(x, r * 2 * f + f + j);
    A s = A(1) / (A(1) + m_exp(-a));
    st(y, i, a * s * b);
  }
}
INST3(swiglu, (const T *x, T *y, int64_t rows, int64_t f), (x, y, rows, f))
template <typename T>
__device__ void swiglu_backward_impl(const T *dy, const T *x, T *dx, int64_t rows, int64_t f) {
  typedef ACC(T) A;
  for (int64_t i = gtid(); i < rows * f; i += gstride()) {
    int64_t r = i / f, j = i % f;
    A a = ld(x, r * 2 * f + j), b = ld(x, r * 2 * f + f + j), g = ld(dy, i);
    A s = A(1) / (A(1) + m_exp(-a));
    A dA = g * b * (s + a * s * (A(1) - s)), dB = g * a * s;
    st(dx, r * 2 * f + j, dA);
    st(dx, r * 2 * f + f + j, dB);
  }
}
INST3(swiglu_backward, (const T *dy, const T *x, T *dx, int64_t rows, int64_t f),
      (dy, x, dx, rows, f))

//===----------------------------------------------------------------------===//
// dropout: the counter layout of runtime/core/Philox.h (philoxUniform4), bit for bit, through
// DropoutRng.h, which a host test checks against the CPU backend.
//===----------------------------------------------------------------------===//

template <typename T>
__device__ void dropout_impl(const T *x, const int64_t *rng, int64_t rngNumel, T *y, int64_t n,
                             int64_t perSample, int64_t globalPer, int64_t shift, double p,
                             int64_t opIdAttr) {
  typedef ACC(T) A;
  const uint64_t seed = uint64_t(rng[0]);
  const int64_t offset = rngNumel == 4 ? rng[3] : 0;
  const uint32_t opId = uint32_t(opIdAttr + offset), iteration = uint32_t(rng[1]);
  const A scale = A(1.0 / (1.0 - p));
  for (int64_t i = gtid(); i < n; i += gstride()) {
    uint64_t g = trainc::rt::cuda::dropoutElement(i, uint64_t(rng[2]), perSample,
                                                  uint64_t(globalPer), uint64_t(shift));
    float u = trainc::rt::cuda::dropoutUniform(seed, opId, iteration, g);
    st(y, i, double(u) >= p ? ld(x, i) * scale : A(0));
  }
}
INST3(dropout,
      (const T *x, const int64_t *rng, int64_t rngNumel, T *y, int64_t n, int64_t perSample,
       int64_t globalPer, int64_t shift, double p, int64_t opId),
      (x, rng, rngNumel, y, n, perSample, globalPer, shift, p, opId))

extern "C" __global__ void rng_offset(const int64_t *in, int64_t inNumel, int64_t *out,
                                      int64_t offset) {
  if (gtid() == 0) {
    int64_t base = inNumel == 4 ? in[3] : 0;
    int64_t a = in[0], b = in[1], c = in[2];
    out[0] = a;
    out[1] = b;
    out[2] = c;
    out[3] = base + offset;
  }
}

//===----------------------------------------------------------------------===//
// layer_norm, rms_norm (one block per row), their backward (dx: a block per row; dgamma, dbeta:
// a thread per column summing rows in order, launched before dx so that dx may alias dy)
//===----------------------------------------------------------------------===//

template <typename T>
__device__ void layer_norm_impl(const T *x, const T *gamma, const T *beta, T *y,
                                ACC(T) * meanOut, ACC(T) * rstdOut, int64_t H, double epsD) {
  typedef ACC(T) A;
  const int64_t r = blockIdx.x;
  const T *xr = x + r * H;
  T *yr = y + r * H;
  A s = A(0);
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x)
    s += ld(xr, j);
  A mean = blockSum(s) / A(H);
  A v = A(0);
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    A d = ld(xr, j) - mean;
    v += d * d;
  }
  A var = blockSum(v) / A(H);
  A rstd = A(1) / m_sqrt(var + A(epsD));
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x)
    st(yr, j, (ld(xr, j) - mean) * rstd * ld(gamma, j) + ld(beta, j));
  if (threadIdx.x == 0) {
    meanOut[r] = mean;
    rstdOut[r] = rstd;
  }
}
INST3(layer_norm,
      (const T *x, const T *gamma, const T *beta, T *y, ACC(T) * mean, ACC(T) * rstd, int64_t H,
       double eps),
      (x, gamma, beta, y, mean, rstd, H, eps))

// W: the dgamma/dbeta storage type (T, or float for bf16 x: the _bf16_f32w
// kernels, mixed precision's fp32 weight-gradient partial sums).
template <typename T, typename W = T>
__device__ void layer_norm_bwd_params_impl(const T *dy, const T *x,
                                           const ACC(T) * mean,
                                           const ACC(T) * rstd, W *dgamma,
                                           W *dbeta, int64_t R, int64_t H) {
  typedef ACC(T) A;
  for (int64_t j = gtid(); j < H; j += gstride()) {
    A dg = A(0), db = A(0);
    for (int64_t r = 0; r < R; ++r) {
      A d = ld(dy, r * H + j);
      dg += d * ((ld(x, r * H + j) - mean[r]) * rstd[r]);
      db += d;
    }
    st(dgamma, j, dg);
    if (dbeta)
      st(dbeta, j, db);
  }
}
INST3(layer_norm_bwd_params,
      (const T *dy, const T *x, const ACC(T) * mean, const ACC(T) * rstd, T *dgamma, T *dbeta,
       int64_t R, int64_t H),
      (dy, x, mean, rstd, dgamma, dbeta, R, H))
extern "C" __global__ void layer_norm_bwd_params_bf16_f32w(
    const bf16 *dy, const bf16 *x, const float *mean, const float *rstd,
    float *dgamma, float *dbeta, int64_t R, int64_t H) {
  layer_norm_bwd_params_impl<bf16, float>(dy, x, mean, rstd, dgamma, dbeta, R,
                                          H);
}

template <typename T>
__device__ void layer_norm_bwd_dx_impl(const T *dy, const T *x, const T *gamma,
                                       const ACC(T) * meanIn, const ACC(T) * rstdIn, T *dx,
                                       int64_t H) {
  typedef ACC(T) A;
  const int64_t r = blockIdx.x;
  const T *dyr = dy + r * H, *xr = x + r * H;
  T *dxr = dx + r * H;
  const A mean = meanIn[r], rstd = rstdIn[r], invH = A(1) / A(H);
  A sg = A(0), sgx = A(0);
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    A t = ld(dyr, j) * ld(gamma, j);
    sg += t;
    sgx += t * ((ld(xr, j) - mean) * rstd);
  }
  sg = blockSum(sg) * invH;
  sgx = blockSum(sgx) * invH;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    A xh = (ld(xr, j) - mean) * rstd;
    st(dxr, j, rstd * (ld(dyr, j) * ld(gamma, j) - sg - xh * sgx));
  }
}
INST3(layer_norm_bwd_dx,
      (const T *dy, const T *x, const T *gamma, const ACC(T) * mean, const ACC(T) * rstd, T *dx,
       int64_t H),
      (dy, x, gamma, mean, rstd, dx, H))

template <typename T>
__device__ void rms_norm_impl(const T *x, const T *gamma, T *y, ACC(T) * rstdOut, int64_t H,
                              double epsD) {
  typedef ACC(T) A;
  const int64_t r = blockIdx.x;
  const T *xr = x + r * H;
  T *yr = y + r * H;
  A s = A(0);
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    A v = ld(xr, j);
    s += v * v;
  }
  A ms = blockSum(s) / A(H);
  A rstd = A(1) / m_sqrt(ms + A(epsD));
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x)
    st(yr, j, ld(xr, j) * rstd * ld(gamma, j));
  if (threadIdx.x == 0)
    rstdOut[r] = rstd;
}
INST3(rms_norm, (const T *x, const T *gamma, T *y, ACC(T) * rstd, int64_t H, double eps),
      (x, gamma, y, rstd, H, eps))

template <typename T, typename W = T>
__device__ void rms_norm_bwd_params_impl(const T *dy, const T *x,
                                         const ACC(T) * rstd, W *dgamma,
                                         int64_t R, int64_t H) {
  typedef ACC(T) A;
  for (int64_t j = gtid(); j < H; j += gstride()) {
    A dg = A(0);
    for (int64_t r = 0; r < R; ++r)
      dg += ld(dy, r * H + j) * (ld(x, r * H + j) * rstd[r]);
    st(dgamma, j, dg);
  }
}
INST3(rms_norm_bwd_params,
      (const T *dy, const T *x, const ACC(T) * rstd, T *dgamma, int64_t R, int64_t H),
      (dy, x, rstd, dgamma, R, H))
extern "C" __global__ void
rms_norm_bwd_params_bf16_f32w(const bf16 *dy, const bf16 *x, const float *rstd,
                              float *dgamma, int64_t R, int64_t H) {
  rms_norm_bwd_params_impl<bf16, float>(dy, x, rstd, dgamma, R, H);
}

template <typename T>
__device__ void rms_norm_bwd_dx_impl(const T *dy, const T *x, const T *gamma,
                                     const ACC(T) * rstdIn, T *dx, int64_t H) {
  typedef ACC(T) A;
  const int64_t r = blockIdx.x;
  const T *dyr = dy + r * H, *xr = x + r * H;
  T *dxr = dx + r * H;
  const A rstd = rstdIn[r], invH = A(1) / A(H);
  A sgx = A(0);
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x)
    sgx += ld(dyr, j) * ld(gamma, j) * (ld(xr, j) * rstd);
  sgx = blockSum(sgx) * invH;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x)
    st(dxr, j, rstd * (ld(dyr, j) * ld(gamma, j) - ld(xr, j) * rstd * sgx));
}
INST3(rms_norm_bwd_dx,
      (const T *dy, const T *x, const T *gamma, const ACC(T) * rstd, T *dx, int64_t H),
      (dy, x, gamma, rstd, dx, H))

//===----------------------------------------------------------------------===//
// rope: one block per (token, head) row; angles in f64 as the CPU backend
//===----------------------------------------------------------------------===//

template <typename T>
__device__ void rope_impl(const T *x, const int32_t *pos, T *y, int64_t N, int64_t D, int64_t rd,
                          double base, double sign) {
  typedef ACC(T) A;
  const int64_t row = blockIdx.x, t = row / N, half = rd / 2;
  const T *xr = x + row * D;
  T *yr = y + row * D;
  const double p = double(pos[t]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    double th = p * pow(base, -2.0 * double(i) / double(rd));
    A cs = A(cos(th)), sn = A(sign * sin(th));
    A a = ld(xr, i), b = ld(xr, i + half);
    st(yr, i, a * cs - b * sn);
    st(yr, i + half, b * cs + a * sn);
  }
  if (yr != xr)
    for (int64_t j = rd + threadIdx.x; j < D; j += blockDim.x)
      yr[j] = xr[j];
}
INST3(rope,
      (const T *x, const int32_t *pos, T *y, int64_t N, int64_t D, int64_t rd, double base,
       double sign),
      (x, pos, y, N, D, rd, base, sign))

//===----------------------------------------------------------------------===//
// embedding, embedding_backward
//===----------------------------------------------------------------------===//

template <typename T> __device__ __forceinline__ T zero() { return T(0); }
template <> __device__ __forceinline__ bf16 zero<bf16>() { return __float2bfloat16_rn(0.0f); }

template <typename T>
__device__ void embedding_impl(const T *table, const int32_t *ids, T *y, int64_t n, int64_t V,
                               int64_t H, int64_t start) {
  for (int64_t e = gtid(); e < n * H; e += gstride()) {
    int64_t i = e / H, j = e % H, row = int64_t(ids[i]) - start;
    if (row >= 0 && row < V)
      y[e] = table[row * H + j];
    else
      y[e] = zero<T>();
  }
}
INST3(embedding,
      (const T *table, const int32_t *ids, T *y, int64_t n, int64_t V, int64_t H, int64_t start),
      (table, ids, y, n, V, H, start))

// acc is f32 (f32 / bf16 tables) or f64; the host zeroes or loads it and casts back for bf16.
template <typename A>
__device__ void embedding_bwd_accum(const int32_t *ids, const void *dyp, int dyt, A *acc,
                                    int64_t n, int64_t V, int64_t H, int64_t start) {
  for (int64_t e = gtid(); e < n * H; e += gstride()) {
    int64_t i = e / H, j = e % H, row = int64_t(ids[i]) - start;
    if (row >= 0 && row < V)
      atomicAdd(acc + row * H + j, A(loadAny(dyp, dyt, e)));
  }
}
extern "C" __global__ void embedding_bwd_accum_f32(const int32_t *ids, const void *dy, int dyt,
                                                   float *acc, int64_t n, int64_t V, int64_t H,
                                                   int64_t start) {
  embedding_bwd_accum<float>(ids, dy, dyt, acc, n, V, H, start);
}
extern "C" __global__ void embedding_bwd_accum_f64(const int32_t *ids, const void *dy, int dyt,
                                                   double *acc, int64_t n, int64_t V, int64_t H,
                                                   int64_t start) {
  embedding_bwd_accum<double>(ids, dy, dyt, acc, n, V, H, start);
}

//===----------------------------------------------------------------------===//
// Causal GQA attention: q[B, S, NH, D], k, v [B, S, NG, D], o [B, S, NH, D], lse [B, NH, S].
// One thread per query row (forward, dq) or key row (dk, dv), kAttnThreads rows per block, keys
// (queries) streamed through shared memory in tiles of kAttnTile rows with an online softmax; the
// backward recomputes the probabilities from lse. Straightforward, not FlashAttention-2 speed.
//===----------------------------------------------------------------------===//

#define kAttnThreads 64
#define kAttnTile 16
#define kAttnMaxD 256

template <typename T>
__device__ void attn_fwd_impl(const T *q, const T *k, const T *v, T *o, ACC(T) * lse, int64_t S,
                              int64_t NH, int64_t NG, int64_t D, int causal, double scaleD) {
  typedef ACC(T) A;
  extern __shared__ __align__(16) unsigned char smem[];
  A *ks = reinterpret_cast<A *>(smem), *vs = ks + kAttnTile * D;
  const int64_t b = blockIdx.z, h = blockIdx.y, g = h / (NH / NG);
  const int64_t i0 = int64_t(blockIdx.x) * kAttnThreads, i = i0 + threadIdx.x;
  const bool active = i < S;
  const A scale = A(scaleD);
  A qr[kAttnMaxD], acc[kAttnMaxD];
  if (active)
    for (int64_t d = 0; d < D; ++d) {
      qr[d] = ld(q, ((b * S + i) * NH + h) * D + d) * scale;
      acc[d] = A(0);
    }
  A m = lowest<A>(), l = A(0);
  int64_t jEnd = causal ? min(S, i0 + kAttnThreads) : S;
  for (int64_t j0 = 0; j0 < jEnd; j0 += kAttnTile) {
    __syncthreads();
    for (int64_t e = threadIdx.x; e < kAttnTile * D; e += blockDim.x) {
      int64_t jj = j0 + e / D, d = e % D;
      bool in = jj < S;
      ks[e] = in ? ld(k, ((b * S + jj) * NG + g) * D + d) : A(0);
      vs[e] = in ? ld(v, ((b * S + jj) * NG + g) * D + d) : A(0);
    }
    __syncthreads();
    if (!active)
      continue;
    for (int t = 0; t < kAttnTile; ++t) {
      int64_t j = j0 + t;
      if (j >= S || (causal && j > i))
        break;
      A s = A(0);
      for (int64_t d = 0; d < D; ++d)
        s += qr[d] * ks[t * D + d];
      A mNew = m_max(m, s);
      A corr = m_exp(m - mNew), p = m_exp(s - mNew);
      l = l * corr + p;
      for (int64_t d = 0; d < D; ++d)
        acc[d] = acc[d] * corr + p * vs[t * D + d];
      m = mNew;
    }
  }
  if (!active)
    return;
  A inv = A(1) / l;
  for (int64_t d = 0; d < D; ++d)
    st(o, ((b * S + i) * NH + h) * D + d, acc[d] * inv);
  lse[(b * NH + h) * S + i] = m + m_log(l);
}
INST3(attn_fwd,
      (const T *q, const T *k, const T *v, T *o, ACC(T) * lse, int64_t S, int64_t NH, int64_t NG,
       int64_t D, int causal, double scale),
      (q, k, v, o, lse, S, NH, NG, D, causal, scale))

/// Di[b, h, i] = do_i . o_i
template <typename T>
__device__ void attn_bwd_dot_impl(const T *o, const T *dout, ACC(T) * Di, int64_t B, int64_t S,
                                  int64_t NH, int64_t D) {
  typedef ACC(T) A;
  for (int64_t r = gtid(); r < B * S * NH; r += gstride()) {
    int64_t b = r / (S * NH), i = (r / NH) % S, h = r % NH;
    A s = A(0);
    for (int64_t d = 0; d < D; ++d)
      s += ld(o, r * D + d) * ld(dout, r * D + d);
    Di[(b * NH + h) * S + i] = s;
  }
}
INST3(attn_bwd_dot,
      (const T *o, const T *dout, ACC(T) * Di, int64_t B, int64_t S, int64_t NH, int64_t D),
      (o, dout, Di, B, S, NH, D))

template <typename T>
__device__ void attn_bwd_dq_impl(const T *q, const T *k, const T *v, const T *dout,
                                 const ACC(T) * lse, const ACC(T) * Di, T *dq, int64_t S,
                                 int64_t NH, int64_t NG, int64_t D, int causal, double scaleD) {
  typedef ACC(T) A;
  extern __shared__ __align__(16) unsigned char smem[];
  A *ks = reinterpret_cast<A *>(smem), *vs = ks + kAttnTile * D;
  const int64_t b = blockIdx.z, h = blockIdx.y, g = h / (NH / NG);
  const int64_t i0 = int64_t(blockIdx.x) * kAttnThreads, i = i0 + threadIdx.x;
  const bool active = i < S;
  const A scale = A(scaleD);
  A qr[kAttnMaxD], dor[kAttnMaxD], acc[kAttnMaxD];
  A li = A(0), di = A(0);
  if (active) {
    for (int64_t d = 0; d < D; ++d) {
      qr[d] = ld(q, ((b * S + i) * NH + h) * D + d) * scale;
      dor[d] = ld(dout, ((b * S + i) * NH + h) * D + d);
      acc[d] = A(0);
    }
    li = lse[(b * NH + h) * S + i];
    di = Di[(b * NH + h) * S + i];
  }
  int64_t jEnd = causal ? min(S, i0 + kAttnThreads) : S;
  for (int64_t j0 = 0; j0 < jEnd; j0 += kAttnTile) {
    __syncthreads();
    for (int64_t e = threadIdx.x; e < kAttnTile * D; e += blockDim.x) {
      int64_t jj = j0 + e / D, d = e % D;
      bool in = jj < S;
      ks[e] = in ? ld(k, ((b * S + jj) * NG + g) * D + d) : A(0);
      vs[e] = in ? ld(v, ((b * S + jj) * NG + g) * D + d) : A(0);
    }
    __syncthreads();
    if (!active)
      continue;
    for (int t = 0; t < kAttnTile; ++t) {
      int64_t j = j0 + t;
      if (j >= S || (causal && j > i))
        break;
      A s = A(0), dp = A(0);
      for (int64_t d = 0; d < D; ++d) {
        s += qr[d] * ks[t * D + d];
        dp += dor[d] * vs[t * D + d];
      }
      A p = m_exp(s - li), ds = p * (dp - di);
      for (int64_t d = 0; d < D; ++d)
        acc[d] += ds * ks[t * D + d];
    }
  }
  if (active)
    for (int64_t d = 0; d < D; ++d)
      st(dq, ((b * S + i) * NH + h) * D + d, acc[d] * scale);
}
INST3(attn_bwd_dq,
      (const T *q, const T *k, const T *v, const T *dout, const ACC(T) * lse, const ACC(T) * Di,
       T *dq, int64_t S, int64_t NH, int64_t NG, int64_t D, int causal, double scale),
      (q, k, v, dout, lse, Di, dq, S, NH, NG, D, causal, scale))

// One thread per key row j of kv head g; sums over the NH / NG query heads of the group and the
// query rows i >= j (causal), query tiles through shared memory.
template <typename T>
__device__ void attn_bwd_dkdv_impl(const T *q, const T *k, const T *v, const T *dout,
                                   const ACC(T) * lse, const ACC(T) * Di, T *dk, T *dv, int64_t S,
                                   int64_t NH, int64_t NG, int64_t D, int causal, double scaleD) {
  typedef ACC(T) A;
  extern __shared__ __align__(16) unsigned char smem[];
  A *qs = reinterpret_cast<A *>(smem), *dos = qs + kAttnTile * D, *ls = dos + kAttnTile * D,
    *dis = ls + kAttnTile;
  const int64_t b = blockIdx.z, g = blockIdx.y, rep = NH / NG;
  const int64_t j0b = int64_t(blockIdx.x) * kAttnThreads, j = j0b + threadIdx.x;
  const bool active = j < S;
  const A scale = A(scaleD);
  A kr[kAttnMaxD], vr[kAttnMaxD], dka[kAttnMaxD], dva[kAttnMaxD];
  if (active)
    for (int64_t d = 0; d < D; ++d) {
      kr[d] = ld(k, ((b * S + j) * NG + g) * D + d);
      vr[d] = ld(v, ((b * S + j) * NG + g) * D + d);
      dka[d] = A(0);
      dva[d] = A(0);
    }
  const int64_t iStart = causal ? j0b / kAttnTile * kAttnTile : 0;
  for (int64_t h = g * rep; h < (g + 1) * rep; ++h)
    for (int64_t i0 = iStart; i0 < S; i0 += kAttnTile) {
      __syncthreads();
      for (int64_t e = threadIdx.x; e < kAttnTile * D; e += blockDim.x) {
        int64_t ii = i0 + e / D, d = e % D;
        bool in = ii < S;
        qs[e] = in ? ld(q, ((b * S + ii) * NH + h) * D + d) * scale : A(0);
        dos[e] = in ? ld(dout, ((b * S + ii) * NH + h) * D + d) : A(0);
      }
      for (int64_t t = threadIdx.x; t < kAttnTile; t += blockDim.x) {
        int64_t ii = i0 + t;
        ls[t] = ii < S ? lse[(b * NH + h) * S + ii] : A(0);
        dis[t] = ii < S ? Di[(b * NH + h) * S + ii] : A(0);
      }
      __syncthreads();
      if (!active)
        continue;
      for (int t = 0; t < kAttnTile; ++t) {
        int64_t i = i0 + t;
        if (i >= S)
          break;
        if (causal && i < j)
          continue;
        A s = A(0), dp = A(0);
        for (int64_t d = 0; d < D; ++d) {
          s += qs[t * D + d] * kr[d];
          dp += dos[t * D + d] * vr[d];
        }
        A p = m_exp(s - ls[t]), ds = p * (dp - dis[t]);
        for (int64_t d = 0; d < D; ++d) {
          dva[d] += p * dos[t * D + d];
          dka[d] += ds * qs[t * D + d];
        }
      }
    }
  if (active)
    for (int64_t d = 0; d < D; ++d) {
      st(dk, ((b * S + j) * NG + g) * D + d, dka[d]);
      st(dv, ((b * S + j) * NG + g) * D + d, dva[d]);
    }
}
INST3(attn_bwd_dkdv,
      (const T *q, const T *k, const T *v, const T *dout, const ACC(T) * lse, const ACC(T) * Di,
       T *dk, T *dv, int64_t S, int64_t NH, int64_t NG, int64_t D, int causal, double scale),
      (q, k, v, dout, lse, Di, dk, dv, S, NH, NG, D, causal, scale))

//===----------------------------------------------------------------------===//
// Cross-entropy over a vocab shard [lo, hi) of the local columns (VocabShard in the CPU backend):
// one block per row; loss sums in f64 as the CPU backend.
//===----------------------------------------------------------------------===//

template <typename T>
__device__ ACC(T) rowMaxBlock(const T *row, int64_t lo, int64_t hi) {
  typedef ACC(T) A;
  A m = lowest<A>();
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
    m = m_max(m, ld(row, j));
  return blockMax(m);
}
template <typename T>
__device__ ACC(T) rowSumExpBlock(const T *row, int64_t lo, int64_t hi, ACC(T) m) {
  typedef ACC(T) A;
  A s = A(0);
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
    s += m_exp(ld(row, j) - m);
  return blockSum(s);
}
__device__ __forceinline__ int64_t labelColumn(int32_t label, int64_t vs, int64_t lo, int64_t hi) {
  int64_t j = int64_t(label) - vs;
  return j >= lo && j < hi ? j : -1;
}

template <typename T>
__device__ void ce_rows_impl(const T *x, const int32_t *labels, const ACC(T) * mask,
                             ACC(T) * lse, double *rowLoss, int64_t V, int64_t vs, int64_t lo,
                             int64_t hi) {
  typedef ACC(T) A;
  const int64_t i = blockIdx.x;
  const T *row = x + i * V;
  A m = rowMaxBlock(row, lo, hi);
  A l = m + m_log(rowSumExpBlock(row, lo, hi, m));
  if (threadIdx.x == 0) {
    A mk = mask[i];
    lse[i] = l;
    int64_t j = labelColumn(labels[i], vs, lo, hi);
    double target = j >= 0 ? double(ld(row, j)) : 0.0;
    rowLoss[i] = mk == A(0) ? 0.0 : double(mk) * (double(l) - target);
  }
}
INST3(ce_rows,
      (const T *x, const int32_t *labels, const ACC(T) * mask, ACC(T) * lse, double *rowLoss,
       int64_t V, int64_t vs, int64_t lo, int64_t hi),
      (x, labels, mask, lse, rowLoss, V, vs, lo, hi))

/// One block: loss_sum = sum rowLoss, num_tokens = sum mask (f64 sums). rowLoss null: lse, loss
/// from (max, sumexp, target) (ce_combine).
template <typename S>
__device__ void ce_reduce_impl(const S *mask, const double *rowLoss, const S *mx, const S *se,
                               const S *tg, S *lseOut, int64_t N, S *lossOut, S *tokensOut) {
  double loss = 0, tokens = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    S mk = mask[i];
    tokens += double(mk);
    if (rowLoss) {
      loss += rowLoss[i];
    } else {
      S l = mx[i] + m_log(se[i]);
      lseOut[i] = l;
      if (mk != S(0))
        loss += double(mk) * (double(l) - double(tg[i]));
    }
  }
  loss = blockSum(loss);
  tokens = blockSum(tokens);
  if (threadIdx.x == 0) {
    lossOut[0] = S(loss);
    tokensOut[0] = S(tokens);
  }
}
INST2(ce_reduce,
      (const T *mask, const double *rowLoss, const T *mx, const T *se, const T *tg, T *lse,
       int64_t N, T *loss, T *tokens),
      (mask, rowLoss, mx, se, tg, lse, N, loss, tokens))

template <typename T>
__device__ void ce_backward_impl(const T *x, const int32_t *labels, const ACC(T) * mask,
                                 const ACC(T) * lse, const ACC(T) * dlossP, T *dx, int64_t N,
                                 int64_t V, int64_t vs, int64_t lo, int64_t hi) {
  typedef ACC(T) A;
  const A dloss = dlossP[0];
  for (int64_t e = gtid(); e < N * V; e += gstride()) {
    int64_t i = e / V, j = e % V;
    A mk = mask[i];
    if (mk == A(0) || j < lo || j >= hi) {
      st(dx, e, A(0));
      continue;
    }
    A p = m_exp(ld(x, e) - lse[i]);
    int64_t target = labelColumn(labels[i], vs, lo, hi);
    st(dx, e, dloss * mk * (j == target ? p - A(1) : p));
  }
}
INST3(ce_backward,
      (const T *x, const int32_t *labels, const ACC(T) * mask, const ACC(T) * lse,
       const ACC(T) * dloss, T *dx, int64_t N, int64_t V, int64_t vs, int64_t lo, int64_t hi),
      (x, labels, mask, lse, dloss, dx, N, V, vs, lo, hi))

template <typename T>
__device__ void ce_local_max_impl(const T *x, ACC(T) * out, int64_t V, int64_t lo, int64_t hi) {
  ACC(T) m = rowMaxBlock(x + int64_t(blockIdx.x) * V, lo, hi);
  if (threadIdx.x == 0)
    out[blockIdx.x] = m;
}
INST3(ce_local_max, (const T *x, ACC(T) * out, int64_t V, int64_t lo, int64_t hi),
      (x, out, V, lo, hi))

template <typename T>
__device__ void ce_local_sumexp_impl(const T *x, const ACC(T) * mx, ACC(T) * out, int64_t V,
                                     int64_t lo, int64_t hi) {
  ACC(T) s = rowSumExpBlock(x + int64_t(blockIdx.x) * V, lo, hi, mx[blockIdx.x]);
  if (threadIdx.x == 0)
    out[blockIdx.x] = s;
}
INST3(ce_local_sumexp,
      (const T *x, const ACC(T) * mx, ACC(T) * out, int64_t V, int64_t lo, int64_t hi),
      (x, mx, out, V, lo, hi))

template <typename T>
__device__ void ce_target_logit_impl(const T *x, const int32_t *labels, ACC(T) * out, int64_t N,
                                     int64_t V, int64_t vs, int64_t lo, int64_t hi) {
  for (int64_t i = gtid(); i < N; i += gstride()) {
    int64_t j = labelColumn(labels[i], vs, lo, hi);
    out[i] = j >= 0 ? ACC(T)(ld(x, i * V + j)) : ACC(T)(0);
  }
}
INST3(ce_target_logit,
      (const T *x, const int32_t *labels, ACC(T) * out, int64_t N, int64_t V, int64_t vs,
       int64_t lo, int64_t hi),
      (x, labels, out, N, V, vs, lo, hi))

//===----------------------------------------------------------------------===//
// AdamW (f32/f64 master weights), sum_squares, grad_norm_finalize
//===----------------------------------------------------------------------===//

template <typename T>
__device__ void adamw_impl(const T *p, const T *g, const T *m, const T *v, const T *lrP,
                           const T *wdP, const T *stepP, const T *gsP, const T *updP, T *po,
                           T *mo, T *vo, int64_t begin, int64_t end, int decay, double b1d,
                           double b2d, double epsD) {
  if (updP[0] == T(0))
    return;
  const T lr = lrP[0], wd = wdP[0], gradScale = gsP[0];
  const double t = double(stepP[0]);
  const T b1 = T(b1d), b2 = T(b2d), eps = T(epsD), omb1 = T(1.0 - b1d), omb2 = T(1.0 - b2d);
  const T bc1 = T(1.0 - pow(b1d, t)), bc2 = T(1.0 - pow(b2d, t));
  const T decayFactor = decay ? T(1) - lr * wd : T(1);
  for (int64_t i = begin + gtid(); i < end; i += gstride()) {
    T gi = g[i] * gradScale;
    T mi = b1 * m[i] + omb1 * gi;
    T vi = b2 * v[i] + omb2 * gi * gi;
    T mhat = mi / bc1, vhat = vi / bc2;
    T pi = p[i] * decayFactor;
    pi -= lr * mhat / (m_sqrt(vhat) + eps);
    po[i] = pi;
    mo[i] = mi;
    vo[i] = vi;
  }
}
INST2(adamw,
      (const T *p, const T *g, const T *m, const T *v, const T *lr, const T *wd, const T *step,
       const T *gs, const T *upd, T *po, T *mo, T *vo, int64_t begin, int64_t end, int decay,
       double b1, double b2, double eps),
      (p, g, m, v, lr, wd, step, gs, upd, po, mo, vo, begin, end, decay, b1, b2, eps))

#define kSumSqBlocks 256
/// partials[blockIdx.x] = sum over this block's grid-stride elements of double(float(x))^2
/// (f64: x^2), f64 sums; fixed grid of kSumSqBlocks blocks so the order is fixed.
template <typename T> __device__ void sumsq_partial_impl(const T *x, int64_t n, double *partials) {
  double s = 0;
  for (int64_t i = gtid(); i < n; i += gstride()) {
    double v = double(ld(x, i));
    s += v * v;
  }
  s = blockSum(s);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = s;
}
INST3(sumsq_partial, (const T *x, int64_t n, double *partials), (x, n, partials))

template <typename S>
__device__ void sumsq_final_impl(const double *partials, int nparts, S *out, int accumulate) {
  if (gtid() != 0)
    return;
  double acc = 0;
  for (int k = 0; k < nparts; ++k)
    acc += partials[k];
  if (accumulate)
    acc = double(out[0]) + acc;
  out[0] = S(acc);
}
INST2(sumsq_final, (const double *partials, int nparts, T *out, int acc),
      (partials, nparts, out, acc))

template <typename S>
__device__ void grad_norm_finalize_impl(const S *sumsqP, S *normOut, S *scaleOut, S *updOut,
                                        double maxNorm) {
  if (gtid() != 0)
    return;
  double norm = sqrt(double(sumsqP[0]));
  bool finite = isfinite(norm);
  double scale = maxNorm > 0 && finite ? fmin(1.0, maxNorm / (norm + 1e-6)) : 1.0;
  normOut[0] = S(norm);
  scaleOut[0] = S(scale);
  updOut[0] = finite ? S(1) : S(0);
}
INST2(grad_norm_finalize, (const T *sumsq, T *norm, T *scale, T *upd, double maxNorm),
      (sumsq, norm, scale, upd, maxNorm))

// Megatron's DynamicGradScaler.update (the CPU kernel's comment: OptimizerKernels.cpp), one
// thread: found_inf = (update == 0).
extern "C" __global__ void loss_scale_update(const float *updP, const float *scaleP,
                                             const float *growthP, const float *hystP,
                                             float *scaleOut, float *growthOut, float *hystOut,
                                             double growthFactor, double backoff,
                                             int64_t interval, int64_t hysteresis,
                                             double minScale) {
  if (gtid() != 0)
    return;
  double scale = scaleP[0], growth = growthP[0], hyst = hystP[0];
  if (updP[0] == 0.0f) {
    growth = 0;
    hyst -= 1;
    if (hyst <= 0)
      scale = fmax(scale * backoff, minScale);
  } else {
    growth += 1;
    if (growth == double(interval)) {
      growth = 0;
      hyst = double(hysteresis);
      scale *= growthFactor;
    }
  }
  scaleOut[0] = float(scale);
  growthOut[0] = float(growth);
  hystOut[0] = float(hyst);
}
