//===- LossKernels.cpp - cross entropy and its vocab-parallel pieces ------===//
//
// Operand conventions are in Kernel.h's table (KernelSignatures.cpp). T is the logits dtype (f32,
// f64 or bf16); S = Stat<T> (f64 for f64, f32 otherwise) is the dtype of the mask, lse and all
// per-row statistics. Per-element math runs in Acc<T>; sums across rows (loss_sum, num_tokens) are
// accumulated in double so they do not depend on the number of tokens for accuracy.
//
// Vocabulary layout. A logits tensor [N, V] holds the columns of global vocabulary ids
// vocab_start .. vocab_start + V - 1 (the whole vocabulary, or one tensor-parallel shard of it as in
// Megatron's VocabParallelCrossEntropy). With valid_vocab = -1 every column is a real entry;
// otherwise global ids >= valid_vocab are padding (the vocabulary padded to a multiple of
// make-vocab-size-divisible-by x TP) and are excluded from the softmax, get no probability and a
// zero gradient. Global ids < 0 (only possible with a negative vocab_start) are likewise excluded.
//
// Labels are global ids. A label that is not a valid id of the whole vocabulary (< 0, or
// >= valid_vocab) must not occur on a masked-in row. We do not clamp it or fail: such a row has no
// target logit (the target term is 0 on every shard), so it contributes its lse only to loss_sum and
// its gradient is dloss * mask * softmax (no one-hot term). This is what the sharded pieces give as
// well (ce_target_logit returns 0 on every shard), so sharded and unsharded losses agree.
//
// Rows with mask 0 contribute nothing to loss_sum (they are skipped, so an inf/NaN loss on a
// masked-out row cannot poison the sum), still count 0 towards num_tokens, still get their lse
// written, and get an all-zero gradient row.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/Dispatch.h"
#include "runtime/cpu/FastMath.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace trainc::rt::cpu {
namespace {

/// The valid columns [lo, hi) of a [N, V] logits tensor given the vocab_start (attr 0) and
/// valid_vocab (attr 1) attributes shared by every loss kernel.
struct VocabShard {
  int64_t vocabStart, lo, hi;
  VocabShard(const Attrs &a, int64_t V) : vocabStart(a.i(0)) {
    int64_t validVocab = a.i(1);
    lo = std::clamp<int64_t>(-vocabStart, 0, V);
    hi = validVocab < 0 ? V : std::clamp<int64_t>(validVocab - vocabStart, 0, V);
    hi = std::max(hi, lo);
  }
  /// The column of global id `label` in this shard, or -1 if it is not a valid column here.
  int64_t labelColumn(int32_t label) const {
    int64_t j = int64_t(label) - vocabStart;
    return j >= lo && j < hi ? j : -1;
  }
};

/// Columns per chunk of the f32 row loops: the chunk is converted to f32 in a stack buffer and
/// exponentiated there by FastMath.h's vectorised expInPlace (the library exp is scalar: ~5 ns per
/// element, 5% of a GPT-2 124M step with its 50304-column vocabulary).
constexpr int64_t kChunk = 512;
/// Partial sums and maxima of the row loops: column lo + j goes to lane j % kLanes, the lanes are
/// combined in lane order at the end. A fixed order per row (no dependence on threads or chunking).
constexpr int kLanes = 16;

/// buf[0, n) = exp(row[j0 + j] - bias) in f32 for n <= kChunk columns (expInPlace).
template <typename T> void expChunk(const T *row, int64_t j0, int n, float bias, float *buf) {
  for (int j = 0; j < n; ++j)
    buf[j] = ld(row, j0 + j);
  expInPlace(buf, n, bias);
}

/// The max of a row over the valid columns. A shard with no valid column returns the lowest finite
/// value of A rather than -inf: an all-reduce MAX with the other shards then picks their maximum,
/// and no later `logit - max` can become inf - inf = NaN. (If no shard has a valid column at all,
/// the sum of exponentials is 0 and lse = lowest + log(0) = -inf.) NaN entries are skipped, as
/// std::max(m, NaN) does.
template <typename T> Acc<T> rowMax(const T *row, const VocabShard &s) {
  using A = Acc<T>;
  A lane[kLanes];
  std::fill(lane, lane + kLanes, std::numeric_limits<A>::lowest());
  const int64_t n = s.hi - s.lo;
  const T *r = row + s.lo;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k)
      lane[k] = std::max(lane[k], ld(r, j + k));
  for (int k = 0; j + k < n; ++k)
    lane[k] = std::max(lane[k], ld(r, j + k));
  A m = lane[0];
  for (int k = 1; k < kLanes; ++k)
    m = std::max(m, lane[k]);
  return m;
}

/// sum_j exp(row[j] - m) over the valid columns (f32 and bf16: expInPlace's exp, ~1.5 ulp, in
/// kLanes partial sums; f64: the library exp, summed in column order).
template <typename T> Acc<T> rowSumExp(const T *row, const VocabShard &s, Acc<T> m) {
  using A = Acc<T>;
  if constexpr (std::is_same_v<A, double>) {
    A sum = 0;
    for (int64_t j = s.lo; j < s.hi; ++j)
      sum += std::exp(ld(row, j) - m);
    return sum;
  } else {
    float lane[kLanes] = {};
    float buf[kChunk];
    for (int64_t j0 = s.lo; j0 < s.hi; j0 += kChunk) {
      const int n = int(std::min(kChunk, s.hi - j0));
      expChunk(row, j0, n, m, buf);
      int j = 0;
      for (; j + kLanes <= n; j += kLanes)
        for (int k = 0; k < kLanes; ++k)
          lane[k] += buf[j + k];
      for (int k = 0; j + k < n; ++k)
        lane[k] += buf[j + k];
    }
    float sum = 0;
    for (int k = 0; k < kLanes; ++k)
      sum += lane[k];
    return sum;
  }
}

//===----------------------------------------------------------------------===//
// cross_entropy: logits[N, V], labels[N], loss_mask[N] -> loss_sum[], num_tokens[], lse[N]
//===----------------------------------------------------------------------===//

void crossEntropyKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    using S = Stat<T>;
    int64_t N = c.in[0].dims[0], V = c.in[0].dims[1];
    VocabShard shard(*c.attrs, V);
    const T *x = c.in[0].as<T>();
    const int32_t *labels = c.in[1].as<int32_t>();
    const S *mask = c.in[2].as<S>();
    S *lse = c.out[2].as<S>();
    // Rows are independent and split over the OpenMP threads; the per-row losses are then summed
    // on the calling thread in row order, so the result does not depend on the thread count.
    std::vector<double> rowLoss(static_cast<size_t>(N));
#pragma omp parallel for schedule(static) if (N > 1 && N * (shard.hi - shard.lo) > 65536)
    for (int64_t i = 0; i < N; ++i) {
      const T *row = x + i * V;
      A m = rowMax(row, shard);
      A l = m + std::log(rowSumExp(row, shard, m));
      S mk = mask[i];
      lse[i] = S(l);
      int64_t j = shard.labelColumn(labels[i]);
      double target = j >= 0 ? double(ld(row, j)) : 0.0; // out-of-range label: lse only
      rowLoss[size_t(i)] = mk == S(0) ? 0.0 : double(mk) * (double(l) - target);
    }
    double lossSum = 0, tokens = 0;
    for (int64_t i = 0; i < N; ++i) {
      S mk = mask[i];
      tokens += double(mk);
      if (mk != S(0))
        lossSum += rowLoss[size_t(i)];
    }
    c.out[0].as<S>()[0] = S(lossSum);
    c.out[1].as<S>()[0] = S(tokens);
  });
}

//===----------------------------------------------------------------------===//
// cross_entropy_backward: logits, labels, loss_mask, lse[N], dloss[] -> dlogits[N, V]
//   dlogits = dloss * mask_i * (softmax_ij - onehot_ij); 0 on padding columns and masked-out rows.
// Each element is read before the same element of dlogits is written, so dlogits may alias logits
// (Megatron computes the gradient in place of the softmax buffer). With this shard's vocab_start and
// the global lse (from ce_combine) it computes this shard's columns of the full gradient.
//===----------------------------------------------------------------------===//

void crossEntropyBackwardKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    using S = Stat<T>;
    int64_t N = c.in[0].dims[0], V = c.in[0].dims[1];
    VocabShard shard(*c.attrs, V);
    const T *x = c.in[0].as<T>();
    const int32_t *labels = c.in[1].as<int32_t>();
    const S *mask = c.in[2].as<S>(), *lse = c.in[3].as<S>();
    A dloss = A(c.in[4].as<S>()[0]);
    T *dx = c.out[0].as<T>();
#pragma omp parallel for schedule(static) if (N > 1 && N * V > 65536)
    for (int64_t i = 0; i < N; ++i) {
      const T *row = x + i * V;
      T *drow = dx + i * V;
      A scale = dloss * A(mask[i]);
      if (mask[i] == S(0)) {
        for (int64_t j = 0; j < V; ++j)
          st(drow, j, A(0));
        continue;
      }
      A l = A(lse[i]);
      int64_t target = shard.labelColumn(labels[i]);
      for (int64_t j = 0; j < shard.lo; ++j)
        st(drow, j, A(0));
      for (int64_t j = shard.hi; j < V; ++j)
        st(drow, j, A(0));
      if constexpr (std::is_same_v<A, double>) {
        for (int64_t j = shard.lo; j < shard.hi; ++j) {
          A p = std::exp(ld(row, j) - l);
          st(drow, j, scale * (j == target ? p - A(1) : p));
        }
      } else {
        // The chunk is read into buf before its columns of drow are written (drow may be row).
        float buf[kChunk];
        for (int64_t j0 = shard.lo; j0 < shard.hi; j0 += kChunk) {
          const int n = int(std::min(kChunk, shard.hi - j0));
          expChunk(row, j0, n, l, buf);
          if (target >= j0 && target < j0 + n)
            buf[target - j0] -= 1.0f;
          for (int j = 0; j < n; ++j)
            st(drow, j0 + j, scale * buf[j]);
        }
      }
    }
  });
}

//===----------------------------------------------------------------------===//
// Vocab-parallel pieces (Megatron's VocabParallelCrossEntropy). Per rank:
//   ce_local_max -> all-reduce MAX -> ce_local_sumexp (with the global max) -> all-reduce SUM;
//   ce_target_logit -> all-reduce SUM; then ce_combine on the global values.
//===----------------------------------------------------------------------===//

/// logits[N, V] -> max[N] over this shard's valid columns (lowest finite value if there are none).
void ceLocalMaxKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    using S = Stat<T>;
    int64_t N = c.in[0].dims[0], V = c.in[0].dims[1];
    VocabShard shard(*c.attrs, V);
    const T *x = c.in[0].as<T>();
    S *out = c.out[0].as<S>();
#pragma omp parallel for schedule(static) if (N > 1 && N * V > 65536)
    for (int64_t i = 0; i < N; ++i)
      out[i] = S(rowMax(x + i * V, shard));
  });
}

/// logits[N, V], max[N] (the global max) -> sumexp[N] = sum_j exp(logit_ij - max_i), valid j.
void ceLocalSumExpKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    using S = Stat<T>;
    int64_t N = c.in[0].dims[0], V = c.in[0].dims[1];
    VocabShard shard(*c.attrs, V);
    const T *x = c.in[0].as<T>();
    const S *mx = c.in[1].as<S>();
    S *out = c.out[0].as<S>();
#pragma omp parallel for schedule(static) if (N > 1 && N * V > 65536)
    for (int64_t i = 0; i < N; ++i) {
      A m = A(mx[i]);
      out[i] = S(rowSumExp(x + i * V, shard, m));
    }
  });
}

/// logits[N, V], labels[N] -> target[N] = logit of the label when it is a valid column of this
/// shard, else 0 (so that an all-reduce SUM over the shards yields the target logit).
void ceTargetLogitKernel(const KernelCtx &c) {
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    using S = Stat<T>;
    int64_t N = c.in[0].dims[0], V = c.in[0].dims[1];
    VocabShard shard(*c.attrs, V);
    const T *x = c.in[0].as<T>();
    const int32_t *labels = c.in[1].as<int32_t>();
    S *out = c.out[0].as<S>();
    for (int64_t i = 0; i < N; ++i) {
      int64_t j = shard.labelColumn(labels[i]);
      out[i] = j >= 0 ? S(ld(x + i * V, j)) : S(0);
    }
  });
}

/// max[N], sumexp[N], target[N], loss_mask[N] (all global, dtype S) -> loss_sum[], num_tokens[],
/// lse[N] = max + log(sumexp); loss_i = lse_i - target_i, with the same masking as cross_entropy.
/// lse may alias any of the row inputs (each row is read before it is written).
template <typename S> void ceCombine(const KernelCtx &c) {
  int64_t N = c.in[0].numel;
  const S *mx = c.in[0].as<S>(), *se = c.in[1].as<S>(), *tg = c.in[2].as<S>(),
          *mask = c.in[3].as<S>();
  S *lse = c.out[2].as<S>();
  double lossSum = 0, tokens = 0;
  for (int64_t i = 0; i < N; ++i) {
    S m = mx[i], s = se[i], t = tg[i], mk = mask[i];
    S l = m + std::log(s);
    lse[i] = l;
    tokens += double(mk);
    if (mk != S(0))
      lossSum += double(mk) * (double(l) - double(t));
  }
  c.out[0].as<S>()[0] = S(lossSum);
  c.out[1].as<S>()[0] = S(tokens);
}

void ceCombineKernel(const KernelCtx &c) {
  if (c.in[0].dtype == DType::F64)
    ceCombine<double>(c);
  else
    ceCombine<float>(c);
}

} // namespace

void registerLossKernels(KernelTable &t) {
  t["cross_entropy"] = crossEntropyKernel;
  t["cross_entropy_backward"] = crossEntropyBackwardKernel;
  t["ce_local_max"] = ceLocalMaxKernel;
  t["ce_local_sumexp"] = ceLocalSumExpKernel;
  t["ce_target_logit"] = ceTargetLogitKernel;
  t["ce_combine"] = ceCombineKernel;
}

} // namespace trainc::rt::cpu
