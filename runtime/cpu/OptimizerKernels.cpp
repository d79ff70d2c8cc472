//===- OptimizerKernels.cpp - adamw, sum_squares, grad_norm_finalize ------===//
//
// Operand conventions are in Kernel.h's table (KernelSignatures.cpp).
//
// The optimizer step of a Megatron iteration on device, without host synchronisation:
//   sum_squares over every gradient (beta = 1 accumulates) -> all-reduce SUM across the ranks
//   holding distinct gradient shards -> grad_norm_finalize -> adamw on every parameter, with
//   grad_scale (the clipping coefficient) and update (0 when the norm is inf/NaN) as device scalars.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/Dispatch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

// As in FastMath.h: an AVX2 clone chosen at load time; AVX2 alone does not enable FMA
// contraction, so both clones give the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRAINC_ADAMW_AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#else
#define TRAINC_ADAMW_AVX2_CLONE
#endif

namespace trainc::rt::cpu {
namespace {

//===----------------------------------------------------------------------===//
// adamw: param, grad, exp_avg, exp_avg_sq, lr[], weight_decay[], step[], grad_scale[], update[]
//          -> param, exp_avg, exp_avg_sq (normally in place of inputs 0, 2, 3)
//
// torch.optim.AdamW / Apex FusedAdam(adam_w_mode=True) as Megatron uses them, with g = grad *
// grad_scale and t = step (1-based, already incremented by the host):
//   param *= 1 - lr * weight_decay          (only when decay != 0: biases and norm weights use 0)
//   m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
//   param -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// The bias corrections are computed in double from the attributes (as the host computes them in
// Python) and rounded once to T; the per-element math runs in T (f32 master weights compute in f32
// like Apex's MATH_T = float). step must be >= 1 (t = 0 would divide by a zero bias correction).
// Any non-zero `decay` attribute means "apply weight decay" (it is a flag, not a multiplier).
// With `segments` = (begin, end, decay) triples (the distributed optimizer's view of one bucket
// shard: the pieces of the parameters inside it, each with its own flag, padding excluded), only
// those ranges are updated and `decay` is ignored; other elements keep their values.
//
// update == 0 is the predicated (skipped) step: nothing changes, and the outputs equal the inputs
// (copied when they are not in place).
//===----------------------------------------------------------------------===//

/// Scalars of one adamw step, each already rounded to T (the per-element math runs in T).
template <typename T> struct AdamwCoeffs {
  T b1, b2, oneMinusB1, oneMinusB2, biasCorr1, biasCorr2, eps, lr, gradScale, decayFactor;
};

/// The per-element update on [0, n): reads p, g, m, v of element i before writing po, mo, vo of
/// element i, so in place (po == p, mo == m, vo == v) is safe. `omp simd` states that the lanes
/// are independent (GCC would otherwise check for overlap at run time and fall back to the scalar
/// loop when the outputs alias the inputs, the normal case). Each lane computes the scalar
/// formula with the same operations in the same order (no FMA contraction: neither clone enables
/// FMA), so vector and scalar code give the same bits.
template <typename T>
inline void adamwRangeImpl(const AdamwCoeffs<T> &k, int64_t n, const T *p, const T *g, const T *m,
                           const T *v, T *po, T *mo, T *vo) {
  const T b1 = k.b1, b2 = k.b2, oneMinusB1 = k.oneMinusB1, oneMinusB2 = k.oneMinusB2,
          biasCorr1 = k.biasCorr1, biasCorr2 = k.biasCorr2, eps = k.eps, lr = k.lr,
          gradScale = k.gradScale, decayFactor = k.decayFactor;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    T gi = g[i] * gradScale;
    T mi = b1 * m[i] + oneMinusB1 * gi;
    T vi = b2 * v[i] + oneMinusB2 * gi * gi;
    T mhat = mi / biasCorr1, vhat = vi / biasCorr2;
    T pi = p[i] * decayFactor;
    pi -= lr * mhat / (std::sqrt(vhat) + eps);
    po[i] = pi;
    mo[i] = mi;
    vo[i] = vi;
  }
}

/// f32: an AVX2 clone (8 lanes) chosen at load time when the CPU has AVX2, SSE2 otherwise.
TRAINC_ADAMW_AVX2_CLONE void adamwRange(const AdamwCoeffs<float> &k, int64_t n, const float *p,
                                  const float *g, const float *m, const float *v, float *po,
                                  float *mo, float *vo) {
  adamwRangeImpl(k, n, p, g, m, v, po, mo, vo);
}

void adamwRange(const AdamwCoeffs<double> &k, int64_t n, const double *p, const double *g,
                const double *m, const double *v, double *po, double *mo, double *vo) {
  adamwRangeImpl(k, n, p, g, m, v, po, mo, vo);
}

template <typename T> void adamw(const KernelCtx &c) {
  const Attrs &a = *c.attrs;
  int64_t n = c.in[0].numel;
  const T *p = c.in[0].as<T>(), *g = c.in[1].as<T>(), *m = c.in[2].as<T>(),
          *v = c.in[3].as<T>();
  T lr = c.in[4].as<T>()[0], wd = c.in[5].as<T>()[0], step = c.in[6].as<T>()[0],
    gradScale = c.in[7].as<T>()[0], update = c.in[8].as<T>()[0];
  T *po = c.out[0].as<T>(), *mo = c.out[1].as<T>(), *vo = c.out[2].as<T>();
  const std::vector<int64_t> &segments = a.ints(4);

  // Elements the step does not update keep their values: all of them on a skipped step, those
  // outside every segment otherwise (copied when the outputs are not in place).
  if (update == T(0) || !segments.empty()) {
    const T *src[3] = {p, m, v};
    T *dst[3] = {po, mo, vo};
    for (int k = 0; k < 3; ++k)
      if (dst[k] != src[k])
        std::memmove(dst[k], src[k], size_t(n) * sizeof(T));
    if (update == T(0))
      return;
  }

  double b1d = a.f(0), b2d = a.f(1), t = double(step);
  T b1 = T(b1d), b2 = T(b2d), eps = T(a.f(2));
  T oneMinusB1 = T(1.0 - b1d), oneMinusB2 = T(1.0 - b2d);
  T biasCorr1 = T(1.0 - std::pow(b1d, t)), biasCorr2 = T(1.0 - std::pow(b2d, t));
  // Reads all inputs of element i before writing outputs of element i: in place is safe.
  // Elements are independent: a range is split statically over the OpenMP threads (each element
  // computed the same way whatever the split, so results do not depend on the thread count).
  // Blocks of kAdamwBlock elements are split statically over the threads.
  constexpr int64_t kAdamwBlock = 16384;
  auto run = [&](int64_t begin, int64_t end, bool decay) {
    T decayFactor = decay ? T(1) - lr * wd : T(1);
    AdamwCoeffs<T> k{b1, b2, oneMinusB1, oneMinusB2, biasCorr1, biasCorr2, eps, lr, gradScale,
                     decayFactor};
    int64_t blocks = (end - begin + kAdamwBlock - 1) / kAdamwBlock;
#pragma omp parallel for schedule(static) if (end - begin > 32768)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      int64_t b = begin + blk * kAdamwBlock, e = std::min(end, b + kAdamwBlock);
      adamwRange(k, e - b, p + b, g + b, m + b, v + b, po + b, mo + b, vo + b);
    }
  };
  if (segments.empty())
    run(0, n, a.i(3) != 0);
  else
    for (size_t s = 0; s + 2 < segments.size(); s += 3)
      run(segments[s], segments[s + 1], segments[s + 2] != 0);
}

void adamwKernel(const KernelCtx &c) {
  if (c.in[0].dtype == DType::F64)
    adamw<double>(c);
  else
    adamw<float>(c);
}

//===----------------------------------------------------------------------===//
// adamw_master: adamw's inputs with f32 master weights as input 0 -> master, exp_avg, exp_avg_sq,
// param (bf16 or f16). Megatron's Float16OptimizerWithFloat16Params step: the update runs on the fp32
// master weights (exactly adamw<float>), then _copy_main_params_to_model_params writes the bf16
// model parameters, param = bf16(master) (or f16(master), overflow to inf) rounded to nearest even, over every element (also on a
// skipped step and outside the segments: the copy of an unchanged master is the unchanged param,
// since param = bf16(master) holds from initialisation on).
//===----------------------------------------------------------------------===//

void adamwMasterKernel(const KernelCtx &c) {
  adamw<float>(c);
  const float *master = c.out[0].as<float>();
  int64_t n = c.out[0].numel;
  dispatchFloat(c.out[3].dtype, [&](auto tag) { // bf16 or f16 (the signature's check)
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
      T *param = c.out[3].as<T>();
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i)
        param[i] = T(master[i]);
    }
  });
}

//===----------------------------------------------------------------------===//
// loss_scale_update: update[], scale[], growth_tracker[], hysteresis_tracker[] -> scale,
// growth_tracker, hysteresis_tracker (normally in place of inputs 1..3). Megatron's
// DynamicGradScaler.update with found_inf = (update == 0), the step's predicate from
// grad_norm_finalize (a non-finite gradient gives a non-finite norm):
//   found_inf: growth = 0; hysteresis -= 1; if hysteresis <= 0: scale = max(scale * backoff, min)
//   else:      growth += 1; if growth == interval: growth = 0, hysteresis = H, scale *= growth_factor
// The trackers are small integers held exactly in f32. Computed in double, stored as f32.
//===----------------------------------------------------------------------===//

void lossScaleUpdateKernel(const KernelCtx &c) {
  const Attrs &a = *c.attrs;
  bool foundInf = c.in[0].as<float>()[0] == 0.0f;
  double scale = c.in[1].as<float>()[0], growth = c.in[2].as<float>()[0],
         hysteresis = c.in[3].as<float>()[0];
  if (foundInf) {
    growth = 0;
    hysteresis -= 1;
    if (hysteresis <= 0)
      scale = std::max(scale * a.f(1), a.f(4));
  } else {
    growth += 1;
    if (growth == double(a.i(2))) {
      growth = 0;
      hysteresis = double(a.i(3));
      scale *= a.f(0);
    }
  }
  c.out[0].as<float>()[0] = float(scale);
  c.out[1].as<float>()[0] = float(growth);
  c.out[2].as<float>()[0] = float(hysteresis);
}

//===----------------------------------------------------------------------===//
// sum_squares: x (T) -> out[] (S) = sum x^2 (+ out when beta = 1). Squares and the sum are taken
// in double whatever T is: sequentially for f64, in fixed blocks for f32/bf16 (threaded). The
// result is deterministic, independent of the thread count, and exact to the final rounding to S
// for any realistic element count.
//===----------------------------------------------------------------------===//

constexpr int64_t kSumSqBlock = 16384;

template <typename T> double blockSumSquares(const T *x, int64_t n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      double v = double(float(x[i + k]));
      lane[k] += v * v;
    }
  for (int k = 0; i + k < n; ++k) {
    double v = double(float(x[i + k]));
    lane[k] += v * v;
  }
  double s = 0;
  for (int k = 0; k < 8; ++k)
    s += lane[k];
  return s;
}

/// The sum of squares of x[0, n) in double (the blocking described above).
template <typename T> double sumSquares(const T *x, int64_t n) {
  double acc = 0;
  if constexpr (std::is_same_v<T, double>) {
    // f64 (gradient checks): one sequential double sum.
    for (int64_t i = 0; i < n; ++i)
      acc += x[i] * x[i];
  } else {
    // f32 / bf16: fixed blocks of kSumSqBlock elements, each summed in double into 8 partial
    // sums (lane k takes the elements i = k mod 8, then the 8 are added in order); the block sums
    // are added in block order. The blocks do not depend on the thread count, so neither does
    // the result; its double rounding error is far below the final rounding to f32.
    int64_t blocks = (n + kSumSqBlock - 1) / kSumSqBlock;
    std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      int64_t b = blk * kSumSqBlock, e = std::min(n, b + kSumSqBlock);
      partial[size_t(blk)] = blockSumSquares(x + b, e - b);
    }
    for (double p : partial)
      acc += p;
  }
  return acc;
}

// With `segments` ((begin, end, flag) triples, the distributed optimizer's view of one bucket
// shard under tensor parallelism), only the ranges with a non-zero flag, each summed as above,
// in segment order.
void sumSquaresKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    using S = Stat<T>;
    const T *x = c.in[0].as<T>();
    const std::vector<int64_t> &segments = c.attrs->ints(1);
    double acc = 0;
    if (segments.empty())
      acc = sumSquares(x, c.in[0].numel);
    for (size_t s = 0; s + 2 < segments.size(); s += 3)
      if (segments[s + 2] != 0)
        acc += sumSquares(x + segments[s], segments[s + 1] - segments[s]);
    S *out = c.out[0].as<S>();
    if (c.attrs->f(0) != 0)
      acc = double(out[0]) + acc;
    out[0] = S(acc);
  });
}

//===----------------------------------------------------------------------===//
// grad_norm_finalize: sumsq[] -> norm[], grad_scale[], update[] (all S), Megatron's
// clip_grad_norm: norm = sqrt(sumsq); clip_coeff = max_norm / (norm + 1e-6), applied only when < 1;
// max_norm = 0 disables clipping. A non-finite norm (inf/NaN gradients) gives update = 0 (the step
// is skipped) and grad_scale = 1. Computed in double, stored as S.
//===----------------------------------------------------------------------===//

template <typename S> void gradNormFinalize(const KernelCtx &c) {
  double sumsq = double(c.in[0].as<S>()[0]);
  double maxNorm = c.attrs->f(0);
  double norm = std::sqrt(sumsq);
  bool finite = std::isfinite(norm);
  double scale = maxNorm > 0 && finite ? std::min(1.0, maxNorm / (norm + 1e-6)) : 1.0;
  c.out[0].as<S>()[0] = S(norm);
  c.out[1].as<S>()[0] = S(scale);
  c.out[2].as<S>()[0] = finite ? S(1) : S(0);
}

void gradNormFinalizeKernel(const KernelCtx &c) {
  if (c.in[0].dtype == DType::F64)
    gradNormFinalize<double>(c);
  else
    gradNormFinalize<float>(c);
}

} // namespace

void registerOptimizerKernels(KernelTable &t) {
  t["adamw"] = adamwKernel;
  t["adamw_master"] = adamwMasterKernel;
  t["loss_scale_update"] = lossScaleUpdateKernel;
  t["sum_squares"] = sumSquaresKernel;
  t["grad_norm_finalize"] = gradNormFinalizeKernel;
}

} // namespace trainc::rt::cpu
