//===- NormKernels.cpp - layer_norm, rms_norm, rope, embedding (+ backward) ===//
//
// Operand conventions are in Kernel.h's table (KernelSignatures.cpp). Storage dtypes f32, f64 and
// bf16; arithmetic in Acc<T> (f32 for f32/bf16, f64 for f64); statistics (mean, rstd) are stored
// as Stat<T> = statsDType(T).
//
// Every kernel tolerates an output that aliases the input of the same shape (y = x, dx = dy or
// dx = x): each element is read before it is written, and row reductions finish before the row is
// written.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/Dispatch.h"

#include <algorithm>
#include <omp.h>
#include <cstring>
#include <utility>
#include <vector>

namespace trainc::rt::cpu {
namespace {

/// sum_{j < n} f(j) with 8 independent partial sums: the compiler can vectorise it (no
/// reassociation needed) and the rounding error grows more slowly than with one running sum.
template <typename A, typename F> inline A rowSum(int64_t n, F &&f) {
  constexpr int L = 8;
  A part[L] = {};
  int64_t j = 0;
  for (; j + L <= n; j += L)
    for (int k = 0; k < L; ++k)
      part[k] += f(j + k);
  A s = A(0);
  for (; j < n; ++j)
    s += f(j);
  for (int k = 0; k < L; ++k)
    s += part[k];
  return s;
}

/// Elements above which the norms and embedding_backward split their rows (or columns) over the
/// OpenMP threads: 2^20, about 0.4 ms of one thread's memory-bound work at 0.3-0.5 ns per element.
/// Below it a parallel region does not pay on a loaded machine: when the other thread is not
/// running, the region waits for the scheduler to run it (measured on the shared 2-core machine at
/// load 11: 12-30 ms per call of a 3.1M-element norm, against 1-3 ms on one thread; docs/kernels.md).
constexpr int64_t kParallelMin = int64_t(1) << 20;

/// Calls f(j0, j1) for contiguous column ranges [j0, j1) covering [0, H), one per OpenMP thread
/// (boundaries at multiples of 16) when `work` elements exceed kParallelMin, else once for [0, H).
/// Each column is owned by one range, so a reduction over the rows inside f keeps its order, and
/// its bits, whatever the thread count.
template <typename F> void forColumnRanges(int64_t H, int64_t work, F &&f) {
  const int64_t maxRanges = (H + 15) / 16;
  if (work <= kParallelMin || maxRanges < 2 || omp_get_max_threads() < 2) {
    f(int64_t(0), H);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = std::min<int64_t>(omp_get_num_threads(), maxRanges);
    const int64_t t = omp_get_thread_num();
    if (t < nt) {
      const int64_t per = (maxRanges + nt - 1) / nt * 16;
      const int64_t j0 = std::min(H, t * per), j1 = std::min(H, (t + 1) * per);
      if (j0 < j1)
        f(j0, j1);
    }
  }
}

//===----------------------------------------------------------------------===//
// layer_norm: y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps), var biased.
//===----------------------------------------------------------------------===//

void layerNormKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T *x = c.in[0].as<T>(), *gamma = c.in[1].as<T>(), *beta = c.in[2].as<T>();
    T *y = c.out[0].as<T>();
    Stat<T> *meanOut = c.out[1].as<Stat<T>>(), *rstdOut = c.out[2].as<Stat<T>>();
    const int64_t H = c.in[0].dim(-1), R = c.in[0].rows();
    if (H == 0)
      return;
    const A eps = A(c.attrs->f(0)), invH = A(1) / A(H);
    // Rows are independent: split over the OpenMP threads (the bits do not depend on the count).
#pragma omp parallel for schedule(static) if (R * H > kParallelMin)
    for (int64_t r = 0; r < R; ++r) {
      const T *xr = x + r * H;
      T *yr = y + r * H;
      // Two passes (mean, then centred squares): exact enough even when |mean| >> std.
      A mean = rowSum<A>(H, [&](int64_t j) { return ld(xr, j); }) * invH;
      A var = rowSum<A>(H, [&](int64_t j) {
                A d = ld(xr, j) - mean;
                return d * d;
              }) *
              invH;
      A rstd = A(1) / std::sqrt(var + eps);
      for (int64_t j = 0; j < H; ++j)
        st(yr, j, (ld(xr, j) - mean) * rstd * ld(gamma, j) + ld(beta, j));
      meanOut[r] = Stat<T>(mean);
      rstdOut[r] = Stat<T>(rstd);
    }
  });
}

/// Stores a weight / bias gradient: in T, or in f32 when the output is f32 and
/// T is bf16 (mixed precision: the fp32 partial sum of a replicated weight over
/// a sequence shard, reduced over tp in fp32 before any rounding;
/// docs/design.md "fp32 tensor-parallel reductions").
template <typename T>
inline void stParamGrad(const TensorView &o, int64_t j, Acc<T> v) {
  if (o.dtype == DType::F32)
    o.as<float>()[j] = float(v);
  else
    st(o.as<T>(), j, v);
}

// With xhat = (x - mean) * rstd and g = dy * gamma (per row of H):
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dgamma = sum_rows dy * xhat,
//   dbeta = sum_rows dy.
void layerNormBackwardKernel(const KernelCtx &c) {
  dispatchFloat(c.in[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T *dy = c.in[0].as<T>(), *x = c.in[1].as<T>(), *gamma = c.in[2].as<T>();
    const Stat<T> *meanIn = c.in[3].as<Stat<T>>(), *rstdIn = c.in[4].as<Stat<T>>();
    T *dx = c.out[0].as<T>();
    const TensorView &dgamma = c.out[1], &dbeta = c.out[2];
    const int64_t H = c.in[1].dim(-1), R = c.in[1].rows();
    const A invH = H ? A(1) / A(H) : A(0);
    // dgamma and dbeta first (they read x and dy, which dx may alias): column ranges over the
    // threads, each column summed over the rows in row order, so the bits do not depend on the
    // thread count.
    forColumnRanges(H, R * H, [&](int64_t j0, int64_t j1) {
      const int64_t w = j1 - j0;
      std::vector<A> dgv(static_cast<size_t>(w), A(0)), dbv(static_cast<size_t>(w), A(0));
      A *dg = dgv.data(), *db = dbv.data();
      for (int64_t r = 0; r < R; ++r) {
        const T *dyr = dy + r * H + j0, *xr = x + r * H + j0;
        const A mean = A(meanIn[r]), rstd = A(rstdIn[r]);
        for (int64_t j = 0; j < w; ++j) {
          A d = ld(dyr, j), xh = (ld(xr, j) - mean) * rstd;
          dg[j] += d * xh;
          db[j] += d;
        }
      }
      for (int64_t j = 0; j < w; ++j) {
        stParamGrad<T>(dgamma, j0 + j, dg[j]);
        stParamGrad<T>(dbeta, j0 + j, db[j]);
      }
    });
    // dx: rows are independent.
#pragma omp parallel for schedule(static) if (R * H > kParallelMin)
    for (int64_t r = 0; r < R; ++r) {
      const T *dyr = dy + r * H, *xr = x + r * H;
      T *dxr = dx + r * H;
      const A mean = A(meanIn[r]), rstd = A(rstdIn[r]);
      A sg = rowSum<A>(H, [&](int64_t j) { return ld(dyr, j) * ld(gamma, j); }) * invH;
      A sgx = rowSum<A>(H, [&](int64_t j) {
                return ld(dyr, j) * ld(gamma, j) * ((ld(xr, j) - mean) * rstd);
              }) *
              invH;
      for (int64_t j = 0; j < H; ++j) {
        A xh = (ld(xr, j) - mean) * rstd;
        st(dxr, j, rstd * (ld(dyr, j) * ld(gamma, j) - sg - xh * sgx));
      }
    }
  });
}

//===----------------------------------------------------------------------===//
// rms_norm: y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps).
//===----------------------------------------------------------------------===//

void rmsNormKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T *x = c.in[0].as<T>(), *gamma = c.in[1].as<T>();
    T *y = c.out[0].as<T>();
    Stat<T> *rstdOut = c.out[1].as<Stat<T>>();
    const int64_t H = c.in[0].dim(-1), R = c.in[0].rows();
    if (H == 0)
      return;
    const A eps = A(c.attrs->f(0)), invH = A(1) / A(H);
#pragma omp parallel for schedule(static) if (R * H > kParallelMin)
    for (int64_t r = 0; r < R; ++r) {
      const T *xr = x + r * H;
      T *yr = y + r * H;
      A ms = rowSum<A>(H, [&](int64_t j) {
               A v = ld(xr, j);
               return v * v;
             }) *
             invH;
      A rstd = A(1) / std::sqrt(ms + eps);
      for (int64_t j = 0; j < H; ++j)
        st(yr, j, ld(xr, j) * rstd * ld(gamma, j));
      rstdOut[r] = Stat<T>(rstd);
    }
  });
}

// With xhat = x * rstd and g = dy * gamma: dx = rstd * (g - xhat * mean(g * xhat)),
// dgamma = sum_rows dy * xhat.
void rmsNormBackwardKernel(const KernelCtx &c) {
  dispatchFloat(c.in[1].dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T *dy = c.in[0].as<T>(), *x = c.in[1].as<T>(), *gamma = c.in[2].as<T>();
    const Stat<T> *rstdIn = c.in[3].as<Stat<T>>();
    T *dx = c.out[0].as<T>();
    const TensorView &dgamma = c.out[1];
    const int64_t H = c.in[1].dim(-1), R = c.in[1].rows();
    const A invH = H ? A(1) / A(H) : A(0);
    // dgamma first (dx may alias x or dy), as in layer_norm_backward.
    forColumnRanges(H, R * H, [&](int64_t j0, int64_t j1) {
      const int64_t w = j1 - j0;
      std::vector<A> dgv(static_cast<size_t>(w), A(0));
      A *dg = dgv.data();
      for (int64_t r = 0; r < R; ++r) {
        const T *dyr = dy + r * H + j0, *xr = x + r * H + j0;
        const A rstd = A(rstdIn[r]);
        for (int64_t j = 0; j < w; ++j)
          dg[j] += ld(dyr, j) * (ld(xr, j) * rstd);
      }
      for (int64_t j = 0; j < w; ++j)
        stParamGrad<T>(dgamma, j0 + j, dg[j]);
    });
#pragma omp parallel for schedule(static) if (R * H > kParallelMin)
    for (int64_t r = 0; r < R; ++r) {
      const T *dyr = dy + r * H, *xr = x + r * H;
      T *dxr = dx + r * H;
      const A rstd = A(rstdIn[r]);
      A sgx = rowSum<A>(H, [&](int64_t j) {
                return ld(dyr, j) * ld(gamma, j) * (ld(xr, j) * rstd);
              }) *
              invH;
      for (int64_t j = 0; j < H; ++j)
        st(dxr, j, rstd * (ld(dyr, j) * ld(gamma, j) - ld(xr, j) * rstd * sgx));
    }
  });
}

//===----------------------------------------------------------------------===//
// rope: rotate-half (non-interleaved) form on the first rotary_dim channels of each head.
//   theta_i = pos * base^(-2i / rd), i < rd/2
//   y[i] = x[i] cos - x[i + rd/2] sin,  y[i + rd/2] = x[i + rd/2] cos + x[i] sin
// Channels >= rd pass through. The backward rotates by -theta (sign = -1).
//===----------------------------------------------------------------------===//

void ropeApply(const KernelCtx &c, double sign) {
  const TensorView &xv = c.in[0];
  const int64_t B = xv.dims[0], S = xv.dims[1], N = xv.dims[2], D = xv.dims[3];
  const int64_t rd = c.attrs->i(1) == 0 ? D : c.attrs->i(1), half = rd / 2;
  const double base = c.attrs->f(0);
  const int32_t *pos = c.in[1].as<int32_t>();
  // Inverse frequencies and angles in double: at position 1e5 an f32 angle is already ~4e-3 rad
  // off. cos/sin are computed once per token and shared by its heads.
  std::vector<double> invFreq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    invFreq[i] = std::pow(base, -2.0 * double(i) / double(rd));
  // Positions usually repeat across the samples of a microbatch (0 .. S-1 in each): when their
  // range is at most the token count, cos and sin are tabulated once per distinct position (the
  // same expressions, so the same bits as per token) instead of once per token.
  int32_t pmin = 0, pmax = -1;
  for (int64_t t = 0; t < B * S; ++t) {
    pmin = t == 0 ? pos[t] : std::min(pmin, pos[t]);
    pmax = t == 0 ? pos[t] : std::max(pmax, pos[t]);
  }
  const int64_t range = int64_t(pmax) - int64_t(pmin) + 1;
  const bool table = B * S > 0 && range <= B * S;
  const bool threaded = B * S * N * D > kParallelMin;
  dispatchFloat(xv.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T *x = xv.as<T>();
    T *y = c.out[0].as<T>();
    auto angles = [&](double p, A *cs, A *sn) {
      for (int64_t i = 0; i < half; ++i) {
        double th = p * invFreq[i];
        cs[i] = A(std::cos(th));
        sn[i] = A(sign * std::sin(th));
      }
    };
    auto rotate = [&](int64_t t, const A *cs, const A *sn) {
      for (int64_t h = 0; h < N; ++h) {
        const T *xr = x + (t * N + h) * D;
        T *yr = y + (t * N + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          A a = ld(xr, i), b = ld(xr, i + half);
          st(yr, i, a * cs[i] - b * sn[i]);
          st(yr, i + half, b * cs[i] + a * sn[i]);
        }
        if (yr != xr)
          for (int64_t j = rd; j < D; ++j)
            yr[j] = xr[j];
      }
    };
    if (table) {
      std::vector<A> cs(static_cast<size_t>(range * half)), sn(static_cast<size_t>(range * half));
#pragma omp parallel for schedule(static) if (threaded)
      for (int64_t q = 0; q < range; ++q)
        angles(double(int64_t(pmin) + q), cs.data() + q * half, sn.data() + q * half);
#pragma omp parallel for schedule(static) if (threaded)
      for (int64_t t = 0; t < B * S; ++t) {
        const int64_t q = int64_t(pos[t]) - pmin;
        rotate(t, cs.data() + q * half, sn.data() + q * half);
      }
      return;
    }
    // Tokens are independent: split over the OpenMP threads (results do not depend on the count).
#pragma omp parallel if (threaded)
    {
      std::vector<A> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
#pragma omp for schedule(static)
      for (int64_t t = 0; t < B * S; ++t) {
        angles(double(pos[t]), cs.data(), sn.data());
        rotate(t, cs.data(), sn.data());
      }
    }
  });
}

void ropeKernel(const KernelCtx &c) { ropeApply(c, 1.0); }
void ropeBackwardKernel(const KernelCtx &c) { ropeApply(c, -1.0); }

//===----------------------------------------------------------------------===//
// embedding (vocab-parallel): y[i, :] = table[ids[i] - vocab_start, :] inside the shard, else 0.
//===----------------------------------------------------------------------===//

void embeddingKernel(const KernelCtx &c) {
  const TensorView &table = c.in[0];
  const int32_t *ids = c.in[1].as<int32_t>();
  const int64_t V = table.dims[0], H = table.dims[1], n = c.in[1].numel;
  const int64_t start = c.attrs->i(0);
  const size_t rowBytes = size_t(H) * dtypeSize(table.dtype);
  const char *tp = static_cast<const char *>(table.data);
  char *yp = static_cast<char *>(c.out[0].data);
  // Tokens are independent copies.
#pragma omp parallel for schedule(static) if (n * H > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    int64_t row = int64_t(ids[i]) - start;
    if (row >= 0 && row < V)
      std::memcpy(yp + i * rowBytes, tp + row * rowBytes, rowBytes);
    else
      std::memset(yp + i * rowBytes, 0, rowBytes); // all-zero bits are +0 in f32, f64 and bf16
  }
}

// dtable[ids[i] - vocab_start, :] += dy[i, :] for in-shard ids; beta = 0 first zeroes dtable.
// The in-shard tokens are grouped by table row (sorted by (row, token)); each row's sum is
// accumulated in Acc<T> in token order and rounded to T once, so the result is deterministic and
// bf16 tables do not lose precision on repeated ids.
void embeddingBackwardKernel(const KernelCtx &c) {
  const int32_t *ids = c.in[0].as<int32_t>();
  const TensorView &dtv = c.out[0];
  const int64_t V = dtv.dims[0], H = dtv.dims[1], n = c.in[0].numel;
  const int64_t start = c.attrs->i(0);
  const bool accumulate = c.attrs->f(1) != 0;
  std::vector<std::pair<int64_t, int64_t>> order; // (row, token)
  order.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t row = int64_t(ids[i]) - start;
    if (row >= 0 && row < V)
      order.emplace_back(row, i);
  }
  std::sort(order.begin(), order.end());
  if (!accumulate) {
    // Zeroing a [V, H] table is most of the kernel's memory traffic at a large vocabulary:
    // split it in 1 MiB pieces over the threads.
    char *d = static_cast<char *>(dtv.data);
    const int64_t bytes = int64_t(dtv.bytes()), piece = int64_t(1) << 20;
    const int64_t pieces = (bytes + piece - 1) / piece;
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (int64_t q = 0; q < pieces; ++q)
      std::memset(d + q * piece, 0, size_t(std::min(piece, bytes - q * piece)));
  }
  dispatchFloat(dtv.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    const T *dy = c.in[1].as<T>();
    T *dt = dtv.as<T>();
    // Column ranges over the threads; within a range, each row's tokens in token order: the
    // same sums whatever the thread count.
    forColumnRanges(H, int64_t(order.size()) * H, [&](int64_t j0, int64_t j1) {
      const int64_t w = j1 - j0;
      std::vector<A> accv(static_cast<size_t>(w));
      A *acc = accv.data();
      for (size_t k = 0; k < order.size();) {
        const int64_t row = order[k].first;
        T *dr = dt + row * H + j0;
        for (int64_t j = 0; j < w; ++j)
          acc[j] = accumulate ? ld(dr, j) : A(0);
        for (; k < order.size() && order[k].first == row; ++k) {
          const T *g = dy + order[k].second * H + j0;
          for (int64_t j = 0; j < w; ++j)
            acc[j] += ld(g, j);
        }
        for (int64_t j = 0; j < w; ++j)
          st(dr, j, acc[j]);
      }
    });
  });
}

} // namespace

void registerNormKernels(KernelTable &t) {
  t["layer_norm"] = layerNormKernel;
  t["layer_norm_backward"] = layerNormBackwardKernel;
  t["rms_norm"] = rmsNormKernel;
  t["rms_norm_backward"] = rmsNormBackwardKernel;
  t["rope"] = ropeKernel;
  t["rope_backward"] = ropeBackwardKernel;
  t["embedding"] = embeddingKernel;
  t["embedding_backward"] = embeddingBackwardKernel;
}

} // namespace trainc::rt::cpu
