//===- AttentionKernels.cpp - fused core attention (GQA) and its backward ===//
//
// Operand conventions are in Kernel.h's table (KernelSignatures.cpp):
//   attention:          q[B, S, NH, D], k[B, S, NG, D], v[B, S, NG, D] -> o[B, S, NH, D],
//                       lse[B, NH, S]
//   attention_backward: q, k, v, o, lse, do -> dq, dk, dv (overwritten)
//   attention_dropout:  q, k, v, rng -> o, lse; attention_dropout_backward: q, k, v, o, lse, do,
//                       rng -> dq, dk, dv (rng: i64 [3] or [4] dropout key, as dropout's)
//   attention_segments, attention_dropout_segments, and their _backward: the same inputs plus a
//                       last input doc_start: i32 [B, S] (Megatron's --reset-attention-mask)
// Query head h reads key/value head h / (NH / NG). Attributes: causal (query i attends keys
// j <= i) and scale (0 means 1 / sqrt(D)); the dropout kernels add p and op_id. Dropout is
// applied to the normalised probabilities before P.V (Megatron's core attention): probability
// (b, h, i, j) is kept, scaled by 1/(1-p), when the dropout kernel's Philox uniform at global
// index ((first + b) * NH + h) * S^2 + i * S + j is >= p (docs/kernels.md); the backward
// regenerates the mask. p = 0 gives attention's results.
//
// Segments (--reset-attention-mask, Megatron's get_ltor_masks_and_position_ids): query i of
// sample b attends key j only when doc_start[b, i] <= j <= i, where doc_start[b, i] is the first
// position of token i's document (one past the last EOD before i: an EOD token belongs to the
// document it ends). Causal only; a start outside [0, i] is clamped into it. doc_start = 0
// everywhere gives attention's results bitwise (the same blocks, sums and orders). Key blocks
// entirely before every start of a query block are skipped.
//
// Blocked structure (issue 17), single-threaded per (batch, kv head) and deterministic: a block
// of kBr query rows is processed against all the keys it may attend at once, as one row panel of
// kBr x n scores (n <= S: the keys up to the block's diagonal under causal masking, from the
// first key block any of its rows attends with segments). The forward takes an exact softmax per
// row of the panel (max, exp, sum) and one P.V product; the backward recomputes the panel's
// probabilities from the stored log-sum-exp (P = exp(scale q.k - lse)), forms dS = P * (do.v - D)
// with D_i = do_i . o_i, and computes dq = dS k, dk += dS^T q and dv += P^T do, dk and dv summed
// over the query heads that share a kv head. So each query block costs 2 (forward) and 5
// (backward) GEMM calls with K or N up to S, instead of 2 and 5 per 64 x 128 tile as the earlier
// online-softmax tiles did (fewer, larger products: measured 48% -> 55% (forward) and 48% -> 59%
// (forward + backward) of the GEMM rate at S = 1024, D = 64; docs/kernels.md). Scratch memory is
// O(S * D) per (batch, kv head) plus the panels, O(kBr * S): O(S) per query row, never S x S.
//
// Storage f32, f64 and bf16; arithmetic in Acc<T> (f32 for f32/bf16, f64 for f64); lse is stored
// as Stat<T>. Operands are packed per head into contiguous Acc<T> buffers (converting bf16 once),
// the query pre-multiplied by the scale. The panel products run through oneDNN's sgemm for f32 (and
// bf16), kept on the calling thread, and through register-tiled loops for f64. exp in f32 is a
// polynomial that vectorises (max error ~1.5 ulp); f64 uses std::exp. Every reduction has a fixed
// order, so results are bitwise reproducible from run to run.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Philox.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/Dispatch.h"

#include "dnnl.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#endif

// OpenMP's thread-count controls, referenced weakly: null unless an OpenMP runtime is loaded (as it
// is when oneDNN was built with OpenMP threading, as Debian's is).
extern "C" int omp_get_max_threads() __attribute__((weak));
extern "C" void omp_set_num_threads(int) __attribute__((weak));

#include "runtime/cpu/FastMath.h"

namespace trainc::rt::cpu {
namespace {

// Query rows per panel (f32 at S = 1024, D = 64: 128 rows measured within noise of 64, with
// twice the work wasted above the causal diagonal and twice the scratch). kBc: the key blocks
// that segments skip whole (the first key of a panel is a multiple of kBc) and the chunk of
// dropout draws.
constexpr int kBr = 64;
constexpr int kBc = 128;

/// Attention dropout (attention_dropout kernels): the key and the keep scale. Probability
/// (b, h, i, j) of the microbatch is kept when u(g) >= p, g = ((( first + b) * NH + h) * S + i) * S
/// + j its index over the global batch, u the dropout kernel's Philox uniform (docs/kernels.md).
struct AttnDropout {
  bool on = false;
  double p = 0;
  uint64_t seed = 0, first = 0;
  /// Under tensor parallelism: the first head of this rank's shard and the global head count
  /// (head_start, num_heads attributes; the local count when num_heads is 0), so that the mask
  /// is the single-rank plan's.
  uint64_t headStart = 0, heads = 0;
  uint32_t opId = 0, iteration = 0;
};

struct AttnShape {
  int64_t B, S, NH, NG, D;
  bool causal;
  double scale;
  AttnDropout drop;
  /// doc_start [B, S] (i32) of the segment kernels, else null.
  const int32_t *docStart = nullptr;
};

/// u[j] = the dropout kernel's uniform (Philox.h philoxUniform4) of global index g0 + j, j < n <=
/// kBc: the blocks' counters in separate arrays, so the ten rounds vectorise across blocks.
TRAINC_AVX512_CLONE void dropoutUniforms(const AttnDropout &d, uint64_t g0, int n, float *u) {
  constexpr int kMaxBlocks = kBc / 4 + 2;
  const uint64_t b0 = g0 / 4;
  const int nb = int((g0 + uint64_t(n) - 1) / 4 - b0) + 1;
  uint32_t c0[kMaxBlocks], c1[kMaxBlocks], c2[kMaxBlocks], c3[kMaxBlocks];
  for (int k = 0; k < nb; ++k) {
    uint64_t blk = b0 + uint64_t(k);
    c0[k] = uint32_t(blk);
    c1[k] = uint32_t(blk >> 32);
    c2[k] = d.opId;
    c3[k] = d.iteration;
  }
  uint32_t key0 = uint32_t(d.seed), key1 = uint32_t(d.seed >> 32);
  for (int r = 0; r < 10; ++r) {
    for (int k = 0; k < nb; ++k) {
      uint64_t p0 = uint64_t(0xD2511F53u) * c0[k], p1 = uint64_t(0xCD9E8D57u) * c2[k];
      uint32_t n0 = uint32_t(p1 >> 32) ^ c1[k] ^ key0, n2 = uint32_t(p0 >> 32) ^ c3[k] ^ key1;
      c0[k] = n0;
      c1[k] = uint32_t(p1);
      c2[k] = n2;
      c3[k] = uint32_t(p0);
    }
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  uint32_t out[4 * kMaxBlocks];
  for (int k = 0; k < nb; ++k) {
    out[4 * k] = c0[k];
    out[4 * k + 1] = c1[k];
    out[4 * k + 2] = c2[k];
    out[4 * k + 3] = c3[k];
  }
  const int off = int(g0 - 4 * b0);
  for (int j = 0; j < n; ++j)
    u[j] = float(out[off + j] >> 8) * (1.0f / 16777216.0f);
}

/// ks[j] = 1/(1-p) where probability g0 + j is kept, else 0, for j < n <= kBc.
template <typename A> void dropoutRow(const AttnDropout &d, uint64_t g0, int n, A *ks) {
  if (n <= 0)
    return;
  const A inv = A(1.0 / (1.0 - d.p));
  float u[kBc];
  dropoutUniforms(d, g0, n, u);
  for (int j = 0; j < n; ++j)
    ks[j] = double(u[j]) >= d.p ? inv : A(0);
}

/// Global index of probability (b, h, i, j0) of the microbatch.
inline uint64_t dropIndex(const AttnShape &s, int64_t b, int64_t h, int64_t i, int64_t j0) {
  return ((uint64_t(s.drop.first) + uint64_t(b)) * s.drop.heads + s.drop.headStart + uint64_t(h)) *
             uint64_t(s.S) *
             uint64_t(s.S) +
         uint64_t(i) * uint64_t(s.S) + uint64_t(j0);
}

AttnShape attnShape(const KernelCtx &c) {
  const TensorView &q = c.in[0], &k = c.in[1];
  AttnShape s;
  s.B = q.dims[0];
  s.S = q.dims[1];
  s.NH = q.dims[2];
  s.NG = k.dims[2];
  s.D = q.dims[3];
  s.causal = c.attrs->i(0) != 0;
  s.scale = c.attrs->f(1);
  if (s.scale == 0)
    s.scale = s.D > 0 ? 1.0 / std::sqrt(double(s.D)) : 1.0;
  return s;
}

/// The segment kernels: doc_start is input `docInput`.
AttnShape withSegments(AttnShape s, const KernelCtx &c, int docInput) {
  s.docStart = c.in[docInput].as<int32_t>();
  return s;
}

/// attention_dropout / attention_dropout_backward: attrs (causal, scale, p, op_id, head_start,
/// num_heads), the rng key
/// (seed, iteration, first sample[, op id offset]) is input `rngInput`.
AttnShape attnDropoutShape(const KernelCtx &c, int rngInput) {
  AttnShape s = attnShape(c);
  const TensorView &key = c.in[rngInput];
  const int64_t *rng = key.as<int64_t>();
  s.drop.p = c.attrs->f(2);
  s.drop.on = s.drop.p > 0;
  s.drop.seed = uint64_t(rng[0]);
  s.drop.iteration = uint32_t(rng[1]);
  s.drop.first = uint64_t(rng[2]);
  s.drop.opId = uint32_t(c.attrs->i(3) + (key.numel == 4 ? rng[3] : 0));
  s.drop.headStart = uint64_t(c.attrs->i(4));
  s.drop.heads = c.attrs->i(5) > 0 ? uint64_t(c.attrs->i(5)) : uint64_t(s.NH);
  return s;
}

//===----------------------------------------------------------------------===//
// Tile GEMM: C[M x N] = op(A) . op(B) (+ C when accumulating), row-major with leading dimensions;
// op(X) = X^T when the flag is set (A is then K x M, B is N x K).
//===----------------------------------------------------------------------===//

/// Scratch for the loop GEMM's transposed operands (panels of at most kBr x S).
template <typename A> struct GemmScratch {
  std::vector<A> a, b;
};

template <typename A> struct TileShape {
  static constexpr int MR = 4;
  static constexpr int NR = std::is_same_v<A, float> ? 8 : 4; // 8 (f32) / 4 (f64) xmm accumulators
};

/// One MR x NR tile (or a smaller edge tile of mr x nr) of C = A . B, accumulated over K in
/// registers; A is M x K and B is K x N.
template <typename A, int MR, int NR, bool Full>
inline void gemmTile(int mr, int nr, int K, const A *__restrict a, int lda,
                     const A *__restrict b, int ldb, A *__restrict c, int ldc, bool accumulate) {
  A t[MR][NR] = {};
  if constexpr (Full) {
    for (int k = 0; k < K; ++k) {
      const A *bk = b + int64_t(k) * ldb;
      for (int i = 0; i < MR; ++i) {
        A ai = a[int64_t(i) * lda + k];
        for (int j = 0; j < NR; ++j)
          t[i][j] += ai * bk[j];
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j)
        c[int64_t(i) * ldc + j] = accumulate ? c[int64_t(i) * ldc + j] + t[i][j] : t[i][j];
  } else {
    for (int k = 0; k < K; ++k) {
      const A *bk = b + int64_t(k) * ldb;
      for (int i = 0; i < mr; ++i) {
        A ai = a[int64_t(i) * lda + k];
        for (int j = 0; j < nr; ++j)
          t[i][j] += ai * bk[j];
      }
    }
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < nr; ++j)
        c[int64_t(i) * ldc + j] = accumulate ? c[int64_t(i) * ldc + j] + t[i][j] : t[i][j];
  }
}

/// dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols.
template <typename A> void transpose(const A *src, int lds, int rows, int cols, A *dst, int ldd) {
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      dst[int64_t(j) * ldd + i] = src[int64_t(i) * lds + j];
}

/// Register-tiled loops (any A); transposed operands are first copied into scratch.
template <typename A>
void gemmLoops(bool ta, bool tb, int M, int N, int K, const A *a, int lda, const A *b, int ldb,
               A *c, int ldc, bool accumulate, GemmScratch<A> &scratch) {
  if (ta) {
    scratch.a.resize(size_t(M) * K);
    transpose(a, lda, K, M, scratch.a.data(), K);
    a = scratch.a.data();
    lda = K;
  }
  if (tb) {
    scratch.b.resize(size_t(K) * N);
    transpose(b, ldb, N, K, scratch.b.data(), N);
    b = scratch.b.data();
    ldb = N;
  }
  constexpr int MR = TileShape<A>::MR, NR = TileShape<A>::NR;
  for (int i = 0; i < M; i += MR) {
    int mr = std::min(MR, M - i);
    const A *ai = a + int64_t(i) * lda;
    A *ci = c + int64_t(i) * ldc;
    int j = 0;
    if (mr == MR)
      for (; j + NR <= N; j += NR)
        gemmTile<A, MR, NR, true>(MR, NR, K, ai, lda, b + j, ldb, ci + j, ldc, accumulate);
    for (; j < N; j += NR)
      gemmTile<A, MR, NR, false>(mr, std::min(NR, N - j), K, ai, lda, b + j, ldb, ci + j, ldc,
                                 accumulate);
  }
}

/// Keeps oneDNN's sgemm on the calling thread while alive. The kernels are single-threaded by
/// contract, and oneDNN would otherwise fork an OpenMP team for every tile product (slower for
/// tiles this small, busy-waiting workers, and a partition that depends on OMP_NUM_THREADS). The
/// calling thread's OpenMP thread-count setting is set to 1 and restored on destruction; other
/// threads are unaffected.
class SingleThreadedGemm {
public:
  SingleThreadedGemm() {
    if (omp_get_max_threads && omp_set_num_threads) {
      saved = omp_get_max_threads();
      if (saved != 1)
        omp_set_num_threads(1);
    }
  }
  ~SingleThreadedGemm() {
    if (saved > 1)
      omp_set_num_threads(saved);
  }
  SingleThreadedGemm(const SingleThreadedGemm &) = delete;
  SingleThreadedGemm &operator=(const SingleThreadedGemm &) = delete;

private:
  int saved = 0;
};

/// f64: loops (oneDNN has no f64 GEMM; f64 serves gradient checks, not speed).
void gemm(bool ta, bool tb, int M, int N, int K, const double *a, int lda, const double *b,
          int ldb, double *c, int ldc, bool accumulate, GemmScratch<double> &scratch) {
  gemmLoops(ta, tb, M, N, K, a, lda, b, ldb, c, ldc, accumulate, scratch);
}

/// f32 (and bf16 storage, packed to f32): oneDNN's sgemm, which is several times faster than
/// SSE2 loops on these tiles; the loops remain as a fallback should it report an error.
void gemm(bool ta, bool tb, int M, int N, int K, const float *a, int lda, const float *b,
          int ldb, float *c, int ldc, bool accumulate, GemmScratch<float> &scratch) {
  if (M == 0 || N == 0)
    return;
  if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, a, lda, b, ldb,
                 accumulate ? 1.0f : 0.0f, c, ldc) == dnnl_success)
    return;
  gemmLoops(ta, tb, M, N, K, a, lda, b, ldb, c, ldc, accumulate, scratch);
}

//===----------------------------------------------------------------------===//
// Row helpers
//===----------------------------------------------------------------------===//


/// Max of x[0, n), n > 0. For f32 the maximum is taken over the floats' bit patterns mapped to
/// order-preserving integers (negative floats' magnitude bits flipped): an integer max reduction,
/// which GCC vectorises, unlike a float compare-and-select under -ftrapping-math. A positive NaN
/// wins (and propagates to the outputs).
TRAINC_AVX512_CLONE float rowMax(const float *x, int n) {
  int32_t mk = std::numeric_limits<int32_t>::min();
  for (int j = 0; j < n; ++j) {
    int32_t b;
    std::memcpy(&b, &x[j], 4);
    b ^= (b >> 31) & 0x7fffffff;
    mk = b > mk ? b : mk;
  }
  mk ^= (mk >> 31) & 0x7fffffff;
  float r;
  std::memcpy(&r, &mk, 4);
  return r;
}

inline double rowMax(const double *x, int n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < n; ++j)
    m = x[j] > m || std::isnan(x[j]) ? x[j] : m;
  return m;
}

/// Sum and dot product with 8 independent partial results (vectorisable, fixed order).
template <typename A> A rowSum(const A *x, int n) {
  constexpr int U = 8;
  A s[U] = {};
  int j = 0;
  for (; j + U <= n; j += U)
    for (int u = 0; u < U; ++u)
      s[u] += x[j + u];
  for (int u = 0; j < n; ++j, ++u)
    s[u] += x[j];
  A r = 0;
  for (int u = 0; u < U; ++u)
    r += s[u];
  return r;
}

/// dot(x, y) over n elements of storage T, each converted to A as it is read (the same
/// arithmetic as packing both rows to A first: no copies for the backward's D_i = do_i . o_i).
template <typename A, typename T> A dot(const T *x, const T *y, int n) {
  constexpr int U = 8;
  A s[U] = {};
  int j = 0;
  for (; j + U <= n; j += U)
    for (int u = 0; u < U; ++u)
      s[u] += A(x[j + u]) * A(y[j + u]);
  for (int u = 0; j < n; ++j, ++u)
    s[u] += A(x[j]) * A(y[j]);
  A r = 0;
  for (int u = 0; u < U; ++u)
    r += s[u];
  return r;
}

/// dst[r * D + d] = mul * src[r * stride + d] for r < rows (storage T -> Acc A).
template <typename T, typename A>
void packRows(const T *src, int64_t stride, int rows, int D, A *dst, A mul) {
  for (int r = 0; r < rows; ++r) {
    const T *s = src + r * stride;
    A *o = dst + int64_t(r) * D;
    if (mul == A(1))
      for (int d = 0; d < D; ++d)
        o[d] = A(s[d]);
    else
      for (int d = 0; d < D; ++d)
        o[d] = mul * A(s[d]);
  }
}

/// Keys [lo, hi) of block [j0, j0 + bc) (offsets in the block) that query row i may attend:
/// j <= i under causal masking, j >= doc_start[i] with segments (`ds` is sample b's row of
/// doc_start, or null). hi >= lo.
struct KeyRange {
  int lo, hi;
};
inline int64_t docStartOf(const int32_t *ds, int64_t i) {
  return ds ? std::clamp<int64_t>(ds[i], 0, i) : 0;
}
inline KeyRange keyRange(bool causal, const int32_t *ds, int64_t i, int64_t j0, int bc) {
  int hi = causal ? int(std::clamp<int64_t>(i - j0 + 1, 0, bc)) : bc;
  int lo = ds ? int(std::clamp<int64_t>(docStartOf(ds, i) - j0, 0, bc)) : 0;
  return {lo, std::max(lo, hi)};
}
/// The first key of the panel of query rows [i0, i0 + mr): the last multiple of kBc at or
/// before every row's document start (0 without segments).
inline int64_t firstKeyBlock(const int32_t *ds, int64_t i0, int mr) {
  if (!ds)
    return 0;
  int64_t m = i0;
  for (int r = 0; r < mr; ++r)
    m = std::min(m, docStartOf(ds, i0 + r));
  return m / kBc * kBc;
}

//===----------------------------------------------------------------------===//
// Fused f32 tiles (f32 and bf16 storage, no dropout): AttentionTiles.inc, compiled once per
// instruction set. Each inclusion sees V, a logical vector of kL = 16 floats, with:
//   vzero, vset1(x), viota() (lanes 0..15), vload / vstore (unaligned), vbcast(p) (= vset1(*p)),
//   vadd, vsub, vmul, vfma(a, b, c) = a * b + c rounded once, vmax(a, b) = a > b ? a : b,
//   vmin(a, b) = a < b ? a : b (the x86 rules: a NaN in a gives b), vround (to nearest even),
//   vscale2(p, n) = p * 2^n for integral n in [-126, 127] (exact when the result is normal),
//   vzeroBelow(t, c, r) = t < c ? 0 : r, vselectRange(i, lo, hi, x, fill) = lo <= i < hi ? x :
//   fill, vgtSelect(a, b, x, y) = a > b ? x : y.
// AVX-512F uses one zmm register per V, AVX2 (with FMA) two ymm registers, and the default build
// 16 floats with std::fma: every lane gets the same IEEE operations, so all three give the same
// bits (AttentionKernelsTest `FusedTilesGiveTheSameBitsOnEveryInstructionSet`).
//===----------------------------------------------------------------------===//

constexpr int kL = 16;
/// Forward query block (rows in lanes) and softmax tile: they fix where the online softmax
/// rescales, so they are shared by every instruction set. Backward query block (keys in lanes).
constexpr int kFwdRows = 32;
constexpr int kTile = 64;
constexpr int kBwdBlockRows = 48;

/// One forward query block: the allowed keys of row r are [lo[r], hi[r]) (floats holding exact
/// integers; lo = hi = 0 for the padding rows past the sequence); minLo .. maxHi are over the
/// block's real rows, j0 the first key tile (a multiple of kTile), kEnd = maxHi.
struct FwdBlock {
  int D, mr, ldo;     // head dim, the block's real rows, ldo = D rounded up to kL
  const float *k;     // the (batch, kv head)'s keys [Sp, D] (zero rows past S)
  const float *v;     // its values [Sp, ldo] (zero past S and past D)
  const float *qt;    // [D, kFwdRows]: the block's queries * scale * log2(e), transposed
  const float *lo, *hi;
  int64_t j0, kEnd, minLo, maxLo, minHi, maxHi;
  float *pt; // [kTile, kFwdRows] scratch: scores, then probabilities
  float *o;  // [mr, ldo] output: O, not divided by l
  float *m, *l; // [kFwdRows] outputs: the final max (log2 units) and normaliser
};

/// One backward query block of mr <= kBwdBlockRows rows starting at row i0.
struct BwdBlock {
  int D, mr;
  bool causal;
  int64_t S, i0, j0, kEnd;
  const float *qs, *dos;      // [mr, D]: scale * q and do of the block's rows
  // Keys and values transposed per tile of kTile keys: element (j, d) at t0 * D + d * kTile +
  // j - t0 for the tile t0 <= j < t0 + kTile, so each tile is contiguous (zero past S). A plain
  // [D, S] layout put a tile's D rows 4 KB apart at S = 1024, in the same L1 sets (measured
  // slower).
  const float *kt, *vt;
  const float *kp;            // [Sp, ldq]: keys, head dim padded to ldq = D rounded up to kL
  int ldq;
  const float *lse2, *rowD;   // [mr]: lse * log2(e) and D_i = do_i . o_i
  const float *lo, *hi;       // [mr]: allowed keys [lo, hi)
  float *p, *ds;              // [kBwdBlockRows, kTile] scratch: P and dS of the tile
  float *dkt, *dvt;           // accumulators dK^T, dV^T, laid out as kt
  float *dq;                  // [mr, ldq] accumulator: dS K (not yet scaled)
};

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRAINC_ATTN_X86 1
#pragma GCC push_options
#pragma GCC target("avx512f")
// GCC 12's avx512fintrin.h fills the unused merge operand of max, cmp, roundscale and scalef
// with an intentionally uninitialised vector, which -Wuninitialized reports.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace avx512 {
using V = __m512;
inline V vzero() { return _mm512_setzero_ps(); }
inline V vset1(float x) { return _mm512_set1_ps(x); }
inline V viota() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
inline V vload(const float *p) { return _mm512_loadu_ps(p); }
inline void vstore(float *p, V x) { _mm512_storeu_ps(p, x); }
inline V vbcast(const float *p) { return _mm512_set1_ps(*p); }
inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
inline V vsub(V a, V b) { return _mm512_sub_ps(a, b); }
inline V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V vmax(V a, V b) { return _mm512_max_ps(a, b); }
inline V vmin(V a, V b) { return _mm512_min_ps(a, b); }
inline V vround(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline V vscale2(V p, V n) { return _mm512_scalef_ps(p, n); }
inline V vzeroBelow(V t, float c, V r) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(t, _mm512_set1_ps(c), _CMP_NLT_UQ), r);
}
inline V vselectRange(V i, V lo, V hi, V x, V fill) {
  __mmask16 k = _mm512_cmp_ps_mask(i, lo, _CMP_GE_OQ);
  k = _mm512_mask_cmp_ps_mask(k, i, hi, _CMP_LT_OQ);
  return _mm512_mask_blend_ps(k, fill, x);
}
inline V vgtSelect(V a, V b, V x, V y) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), y, x);
}
constexpr int kFwdKeys = 8, kFwdPvRows = 4, kFwdPvVecs = 4; // 16 accumulators each
constexpr int kBwdRows = 6, kBwdVecs = 4, kBwdDims = 6;    // 24
constexpr int kBwdQRows = 6, kBwdQVecs = 4;                // 24
#include "runtime/cpu/AttentionTiles.inc"
void fwd(const FwdBlock &b) { flashFwdBlock(b); }
void bwd(const BwdBlock &b) { flashBwdBlock(b); }
} // namespace avx512
#pragma GCC diagnostic pop
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
struct V {
  __m256 a, b;
};
inline V vzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V vset1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline V viota() {
  return {_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), _mm256_setr_ps(8, 9, 10, 11, 12, 13, 14, 15)};
}
inline V vload(const float *p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline void vstore(float *p, V x) {
  _mm256_storeu_ps(p, x.a);
  _mm256_storeu_ps(p + 8, x.b);
}
inline V vbcast(const float *p) { return vset1(*p); }
inline V vadd(V x, V y) { return {_mm256_add_ps(x.a, y.a), _mm256_add_ps(x.b, y.b)}; }
inline V vsub(V x, V y) { return {_mm256_sub_ps(x.a, y.a), _mm256_sub_ps(x.b, y.b)}; }
inline V vmul(V x, V y) { return {_mm256_mul_ps(x.a, y.a), _mm256_mul_ps(x.b, y.b)}; }
inline V vfma(V x, V y, V z) {
  return {_mm256_fmadd_ps(x.a, y.a, z.a), _mm256_fmadd_ps(x.b, y.b, z.b)};
}
inline V vmax(V x, V y) { return {_mm256_max_ps(x.a, y.a), _mm256_max_ps(x.b, y.b)}; }
inline V vmin(V x, V y) { return {_mm256_min_ps(x.a, y.a), _mm256_min_ps(x.b, y.b)}; }
inline V vround(V x) {
  constexpr int m = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  return {_mm256_round_ps(x.a, m), _mm256_round_ps(x.b, m)};
}
inline __m256 pow2(__m256 n) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline V vscale2(V p, V n) { return {_mm256_mul_ps(p.a, pow2(n.a)), _mm256_mul_ps(p.b, pow2(n.b))}; }
inline V vzeroBelow(V t, float c, V r) {
  const __m256 cv = _mm256_set1_ps(c);
  return {_mm256_and_ps(_mm256_cmp_ps(t.a, cv, _CMP_NLT_UQ), r.a),
          _mm256_and_ps(_mm256_cmp_ps(t.b, cv, _CMP_NLT_UQ), r.b)};
}
inline __m256 inRange(__m256 i, __m256 lo, __m256 hi) {
  return _mm256_and_ps(_mm256_cmp_ps(i, lo, _CMP_GE_OQ), _mm256_cmp_ps(i, hi, _CMP_LT_OQ));
}
inline V vselectRange(V i, V lo, V hi, V x, V fill) {
  return {_mm256_blendv_ps(fill.a, x.a, inRange(i.a, lo.a, hi.a)),
          _mm256_blendv_ps(fill.b, x.b, inRange(i.b, lo.b, hi.b))};
}
inline V vgtSelect(V a, V b, V x, V y) {
  return {_mm256_blendv_ps(y.a, x.a, _mm256_cmp_ps(a.a, b.a, _CMP_GT_OQ)),
          _mm256_blendv_ps(y.b, x.b, _mm256_cmp_ps(a.b, b.b, _CMP_GT_OQ))};
}
constexpr int kFwdKeys = 4, kFwdPvRows = 2, kFwdPvVecs = 2; // 8 V = 16 ymm accumulators
constexpr int kBwdRows = 3, kBwdVecs = 2, kBwdDims = 3;    // 6 V
constexpr int kBwdQRows = 3, kBwdQVecs = 2;
#include "runtime/cpu/AttentionTiles.inc"
void fwd(const FwdBlock &b) { flashFwdBlock(b); }
void bwd(const BwdBlock &b) { flashBwdBlock(b); }
} // namespace avx2
#pragma GCC pop_options
#endif

/// Any CPU: 16 floats per V, std::fma (correctly rounded, as the FMA instructions).
namespace portable {
struct V {
  float x[16];
};
template <typename F> inline V map(F f) {
  V r;
  for (int i = 0; i < 16; ++i)
    r.x[i] = f(i);
  return r;
}
inline V vzero() { return map([](int) { return 0.0f; }); }
inline V vset1(float x) { return map([&](int) { return x; }); }
inline V viota() { return map([](int i) { return float(i); }); }
inline V vload(const float *p) { return map([&](int i) { return p[i]; }); }
inline void vstore(float *p, V x) { std::memcpy(p, x.x, sizeof(x.x)); }
inline V vbcast(const float *p) { return vset1(*p); }
inline V vadd(V a, V b) { return map([&](int i) { return a.x[i] + b.x[i]; }); }
inline V vsub(V a, V b) { return map([&](int i) { return a.x[i] - b.x[i]; }); }
inline V vmul(V a, V b) { return map([&](int i) { return a.x[i] * b.x[i]; }); }
inline V vfma(V a, V b, V c) { return map([&](int i) { return std::fma(a.x[i], b.x[i], c.x[i]); }); }
inline V vmax(V a, V b) { return map([&](int i) { return a.x[i] > b.x[i] ? a.x[i] : b.x[i]; }); }
inline V vmin(V a, V b) { return map([&](int i) { return a.x[i] < b.x[i] ? a.x[i] : b.x[i]; }); }
inline V vround(V a) { return map([&](int i) { return std::nearbyint(a.x[i]); }); }
inline V vscale2(V p, V n) {
  return map([&](int i) {
    const uint32_t bits = uint32_t(int32_t(n.x[i]) + 127) << 23;
    float s;
    std::memcpy(&s, &bits, 4);
    return p.x[i] * s;
  });
}
inline V vzeroBelow(V t, float c, V r) {
  return map([&](int i) { return t.x[i] < c ? 0.0f : r.x[i]; });
}
inline V vselectRange(V i, V lo, V hi, V x, V fill) {
  return map([&](int l) { return i.x[l] >= lo.x[l] && i.x[l] < hi.x[l] ? x.x[l] : fill.x[l]; });
}
inline V vgtSelect(V a, V b, V x, V y) {
  return map([&](int i) { return a.x[i] > b.x[i] ? x.x[i] : y.x[i]; });
}
constexpr int kFwdKeys = 4, kFwdPvRows = 2, kFwdPvVecs = 2;
constexpr int kBwdRows = 3, kBwdVecs = 2, kBwdDims = 3;
constexpr int kBwdQRows = 3, kBwdQVecs = 2;
#include "runtime/cpu/AttentionTiles.inc"
void fwd(const FwdBlock &b) { flashFwdBlock(b); }
void bwd(const BwdBlock &b) { flashBwdBlock(b); }
} // namespace portable

/// The instruction set of the fused tiles: 2 AVX-512F, 1 AVX2 with FMA, 0 portable; the best the
/// CPU has unless lowered by setAttentionIsaForTesting.
int cpuAttentionIsa() {
#ifdef TRAINC_ATTN_X86
  if (__builtin_cpu_supports("avx512f"))
    return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return 1;
#endif
  return 0;
}
/// The f32 path: an instruction set of the fused tiles as above, or -1 for the panel path
/// (setAttentionPathForTesting). The default, -2, is the CPU's best instruction set, chosen on
/// first use (docs/kernels.md, "Fused tiles": the earlier single-rank vs 2-stage difference of
/// trainrun-pipeline.test did not recur).
std::atomic<int> gAttentionPath{-2};

int attentionPath() {
  int path = gAttentionPath.load(std::memory_order_relaxed);
  if (path == -2) {
    path = cpuAttentionIsa();
    gAttentionPath.store(path, std::memory_order_relaxed);
  }
  return path;
}

void flashFwd(const FwdBlock &b) {
  switch (attentionPath()) {
#ifdef TRAINC_ATTN_X86
  case 2:
    return avx512::fwd(b);
  case 1:
    return avx2::fwd(b);
#endif
  default:
    return portable::fwd(b);
  }
}

void flashBwd(const BwdBlock &b) {
  switch (attentionPath()) {
#ifdef TRAINC_ATTN_X86
  case 2:
    return avx512::bwd(b);
  case 1:
    return avx2::bwd(b);
#endif
  default:
    return portable::bwd(b);
  }
}

//===----------------------------------------------------------------------===//
// Fused f32 drivers: packing per (batch, kv head), one query block at a time
//===----------------------------------------------------------------------===//

constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2 = 0.69314718055994530942;

inline int64_t roundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }


/// Rows [i0, i0 + mr) of a block: allowed keys [lo, hi) per row (as floats), padded with
/// lo = hi = 0 to `rows`; returns {minLo, maxLo, minHi, maxHi} over the real rows.
struct BlockKeys {
  int64_t minLo, maxLo, minHi, maxHi;
};
BlockKeys blockKeys(const AttnShape &s, const int32_t *docs, int64_t i0, int mr, int rows,
                    float *lo, float *hi) {
  BlockKeys r{s.S, 0, s.S, 0};
  for (int x = 0; x < rows; ++x) {
    int64_t l = 0, h = 0;
    if (x < mr) {
      const int64_t i = i0 + x;
      l = docStartOf(docs, i);
      h = s.causal ? i + 1 : s.S;
      r.minLo = std::min(r.minLo, l);
      r.maxLo = std::max(r.maxLo, l);
      r.minHi = std::min(r.minHi, h);
      r.maxHi = std::max(r.maxHi, h);
    }
    lo[x] = float(l);
    hi[x] = float(h);
  }
  return r;
}

/// Per-thread scratch of the fused kernels, kept between calls: fresh buffers cost a page fault
/// per 4 KB and their zeroing on every call (about 1.3 MB per thread for the backward at S = 1024,
/// D = 64). Not initialised; `take` hands out 64-byte aligned slices.
class ThreadScratch {
public:
  /// Room for slices of the given sizes (floats).
  explicit ThreadScratch(std::initializer_list<size_t> sizes) {
    size_t total = 16;
    for (size_t n : sizes)
      total += round16(n);
    thread_local std::vector<float> buf;
    if (buf.size() < total)
      buf.resize(total);
    const size_t mis = reinterpret_cast<uintptr_t>(buf.data()) % 64 / sizeof(float);
    next = buf.data() + (mis ? 16 - mis : 0);
  }
  float *take(size_t n) {
    float *p = next;
    next += round16(n);
    return p;
  }

private:
  static size_t round16(size_t n) { return (n + 15) / 16 * 16; }
  float *next;
};

/// Prefetches `rows` rows of `bytes` bytes, `stride` elements apart, into the caches: the
/// next query block's rows of q, do and the outputs while the current block computes (the
/// operands' rows of one head are NH * D elements apart, so the hardware prefetchers see a
/// short stream per row; without this the drivers' packing and stores waited on memory for a
/// quarter of the forward's time, bench_attention under perf).
template <typename T> void prefetchRows(const T *base, int64_t stride, int64_t rows, int bytes) {
  for (int64_t r = 0; r < rows; ++r)
    for (int off = 0; off < bytes; off += 64)
      __builtin_prefetch(reinterpret_cast<const char *>(base + r * stride) + off);
}

/// Packs rows [0, S) of a (batch, kv head) operand as [S, ld] floats (columns past D untouched).
template <typename T>
void packKv(const T *src, int64_t stride, int64_t S, int D, float *dst, int64_t ld) {
  for (int64_t j = 0; j < S; ++j) {
    if (j + 8 < S)
      prefetchRows(src + (j + 8) * stride, 0, 1, int(D * sizeof(T)));
    for (int d = 0; d < D; ++d)
      dst[j * ld + d] = float(src[j * stride + d]);
  }
}

template <typename T>
void flashForward(const AttnShape &s, const T *q, const T *k, const T *v, T *o, float *lse) {
  const int64_t S = s.S, NH = s.NH, NG = s.NG;
  const int D = int(s.D);
  const int64_t qStride = NH * D, kvStride = NG * D, headsPerGroup = NH / NG;
  const int64_t Sp = roundUp(S, kTile);
  const float qmul = float(s.scale * kLog2e); // scores in log2 units
  const int ldo = int(roundUp(D, kL));
#pragma omp parallel if (s.B * NG > 1 && S * S * D * headsPerGroup > (1 << 16))
  {
    const size_t nkv = size_t(Sp * D), nvp = size_t(Sp * ldo), nq = size_t(D) * kFwdRows;
    const size_t no = size_t(ldo) * kFwdRows, nr = kFwdRows;
    ThreadScratch scratch({nkv, nvp, nq, size_t(kTile) * kFwdRows, no, nr, nr, nr, nr});
    float *kn = scratch.take(nkv), *vn = scratch.take(nvp), *qt = scratch.take(nq);
    float *pt = scratch.take(size_t(kTile) * kFwdRows), *ob = scratch.take(no);
    float *lo = scratch.take(nr), *hi = scratch.take(nr), *m = scratch.take(nr),
          *l = scratch.take(nr);
    // Keys past S (read by the last tile's microkernels, then masked) are zero.
    std::fill(kn + S * D, kn + nkv, 0.0f);
    std::fill(vn, vn + nvp, 0.0f);
#pragma omp for schedule(dynamic)
    for (int64_t bg = 0; bg < s.B * NG; ++bg) {
      const int64_t b = bg / NG, g = bg % NG;
      const int32_t *docs = s.docStart ? s.docStart + b * S : nullptr;
      packKv(k + b * S * kvStride + g * D, kvStride, S, D, kn, D);
      packKv(v + b * S * kvStride + g * D, kvStride, S, D, vn, ldo);
      for (int64_t h = g * headsPerGroup; h < (g + 1) * headsPerGroup; ++h) {
        const T *qh = q + b * S * qStride + h * D;
        T *oh = o + b * S * qStride + h * D;
        float *lseh = lse + (b * NH + h) * S;
        for (int64_t i0 = 0; i0 < S; i0 += kFwdRows) {
          const int mr = int(std::min<int64_t>(kFwdRows, S - i0));
          for (int r = 0; r < kFwdRows; ++r) {
            const T *qr = qh + (i0 + r) * qStride;
            float *qtr = qt + r;
            if (r < mr)
              for (int d = 0; d < D; ++d)
                qtr[d * kFwdRows] = qmul * float(qr[d]);
            else
              for (int d = 0; d < D; ++d)
                qtr[d * kFwdRows] = 0;
          }
          if (i0 + kFwdRows < S) {
            const int64_t next = std::min<int64_t>(kFwdRows, S - i0 - kFwdRows);
            prefetchRows(qh + (i0 + kFwdRows) * qStride, qStride, next, int(D * sizeof(T)));
            prefetchRows(oh + (i0 + kFwdRows) * qStride, qStride, next, int(D * sizeof(T)));
          }
          const BlockKeys bk = blockKeys(s, docs, i0, mr, kFwdRows, lo, hi);
          FwdBlock blk{D,  mr,  ldo, kn, vn, qt, lo, hi,
                       bk.minLo / kTile * kTile, bk.maxHi, bk.minLo, bk.maxLo, bk.minHi,
                       bk.maxHi, pt, ob, m, l};
          flashFwd(blk);
          for (int r = 0; r < mr; ++r) {
            const float inv = 1.0f / l[r];
            T *out = oh + (i0 + r) * qStride;
            for (int d = 0; d < D; ++d)
              out[d] = T(ob[size_t(r) * ldo + d] * inv);
            lseh[i0 + r] = float(kLn2 * (double(m[r]) + std::log2(double(l[r]))));
          }
        }
      }
    }
  }
}

template <typename T>
void flashBackward(const AttnShape &s, const T *q, const T *k, const T *v, const T *o,
                   const float *lse, const T *dout, T *dq, T *dk, T *dv) {
  const int64_t S = s.S, NH = s.NH, NG = s.NG;
  const int D = int(s.D);
  const int64_t qStride = NH * D, kvStride = NG * D, headsPerGroup = NH / NG;
  const int64_t Sp = roundUp(S, kTile);
  const int ldq = int(roundUp(D, kL));
  const float scale = float(s.scale);
  constexpr int Br = kBwdBlockRows;
#pragma omp parallel if (s.B * NG > 1 && S * S * D * headsPerGroup > (1 << 16))
  {
    const size_t nkv = size_t(D * Sp), nkp = size_t(Sp * ldq), nS = size_t(S);
    const size_t nb = size_t(Br) * D, nbq = size_t(Br) * ldq, nt = size_t(Br) * kTile;
    ThreadScratch scratch({nkv, nkv, nkp, nkv, nkv, nS, nS, nb, nb, nbq, nt, nt, Br, Br});
    float *kt = scratch.take(nkv), *vt = scratch.take(nkv), *kp = scratch.take(nkp);
    float *dkt = scratch.take(nkv), *dvt = scratch.take(nkv);
    float *rowD = scratch.take(nS), *lse2 = scratch.take(nS);
    float *qs = scratch.take(nb), *dos = scratch.take(nb), *dqa = scratch.take(nbq);
    float *p = scratch.take(nt), *ds = scratch.take(nt), *lo = scratch.take(Br),
          *hi = scratch.take(Br);
    // Zero padding: keys past S in the last tile of kt and vt, and kp's columns past D and rows
    // past S (read by the microkernels; their products are masked or never stored).
    std::fill(kp, kp + nkp, 0.0f);
    if (S % kTile)
      for (int d = 0; d < D; ++d) {
        const int64_t t0 = S / kTile * kTile;
        std::fill(kt + t0 * D + d * kTile + (S - t0), kt + t0 * D + (d + 1) * kTile, 0.0f);
        std::fill(vt + t0 * D + d * kTile + (S - t0), vt + t0 * D + (d + 1) * kTile, 0.0f);
      }
#pragma omp for schedule(dynamic)
    for (int64_t bg = 0; bg < s.B * NG; ++bg) {
      const int64_t b = bg / NG, g = bg % NG;
      const int32_t *docs = s.docStart ? s.docStart + b * S : nullptr;
      const T *kg = k + b * S * kvStride + g * D, *vg = v + b * S * kvStride + g * D;
      for (int64_t t0 = 0; t0 < S; t0 += kTile)
        for (int64_t j = t0; j < std::min(S, t0 + kTile); ++j) {
          if (j + 8 < S) {
            prefetchRows(kg + (j + 8) * kvStride, 0, 1, int(D * sizeof(T)));
            prefetchRows(vg + (j + 8) * kvStride, 0, 1, int(D * sizeof(T)));
          }
          float *ktj = kt + t0 * D + (j - t0), *vtj = vt + t0 * D + (j - t0);
          float *kpj = kp + j * ldq;
          for (int d = 0; d < D; ++d) {
            const float x = float(kg[j * kvStride + d]);
            ktj[d * kTile] = x;
            kpj[d] = x;
            vtj[d * kTile] = float(vg[j * kvStride + d]);
          }
        }
      std::fill(dkt, dkt + nkv, 0.0f);
      std::fill(dvt, dvt + nkv, 0.0f);
      for (int64_t h = g * headsPerGroup; h < (g + 1) * headsPerGroup; ++h) {
        const int64_t hOff = b * S * qStride + h * D;
        const float *lseh = lse + (b * NH + h) * S;
        for (int64_t i = 0; i < S; ++i) {
          if (i + 8 < S) {
            prefetchRows(dout + hOff + (i + 8) * qStride, 0, 1, int(D * sizeof(T)));
            prefetchRows(o + hOff + (i + 8) * qStride, 0, 1, int(D * sizeof(T)));
          }
          rowD[i] = dot<float>(dout + hOff + i * qStride, o + hOff + i * qStride, D);
          lse2[i] = float(double(lseh[i]) * kLog2e);
        }
        for (int64_t i0 = 0; i0 < S; i0 += Br) {
          const int mr = int(std::min<int64_t>(Br, S - i0));
          packRows(q + hOff + i0 * qStride, qStride, mr, D, qs, scale);
          packRows(dout + hOff + i0 * qStride, qStride, mr, D, dos, 1.0f);
          std::fill(dqa, dqa + nbq, 0.0f);
          if (i0 + Br < S) {
            const int64_t next = std::min<int64_t>(Br, S - i0 - Br), bytes = D * sizeof(T);
            prefetchRows(q + hOff + (i0 + Br) * qStride, qStride, next, int(bytes));
            prefetchRows(dout + hOff + (i0 + Br) * qStride, qStride, next, int(bytes));
            prefetchRows(dq + hOff + (i0 + Br) * qStride, qStride, next, int(bytes));
          }
          const BlockKeys bk = blockKeys(s, docs, i0, mr, mr, lo, hi);
          BwdBlock blk{D,         mr,        s.causal,   S,         i0,
                       bk.minLo / kTile * kTile, bk.maxHi, qs, dos, kt,
                       vt, kp,  ldq,       lse2 + i0,
                       rowD + i0, lo, hi, p, ds,
                       dkt, dvt, dqa};
          flashBwd(blk);
          for (int r = 0; r < mr; ++r) {
            T *out = dq + hOff + (i0 + r) * qStride;
            for (int d = 0; d < D; ++d)
              out[d] = T(scale * dqa[size_t(r) * ldq + d]);
          }
        }
      }
      T *dkg = dk + b * S * kvStride + g * D, *dvg = dv + b * S * kvStride + g * D;
      for (int64_t t0 = 0; t0 < S; t0 += kTile)
        for (int64_t j = t0; j < std::min(S, t0 + kTile); ++j) {
          if (j + 8 < S) {
            prefetchRows(dkg + (j + 8) * kvStride, 0, 1, int(D * sizeof(T)));
            prefetchRows(dvg + (j + 8) * kvStride, 0, 1, int(D * sizeof(T)));
          }
          const float *dkj = dkt + t0 * D + (j - t0);
          const float *dvj = dvt + t0 * D + (j - t0);
          for (int d = 0; d < D; ++d) {
            dkg[j * kvStride + d] = T(dkj[d * kTile]);
            dvg[j * kvStride + d] = T(dvj[d * kTile]);
          }
        }
    }
  }
}

/// The fused tiles serve f32 and bf16 storage without dropout (key indices are compared as
/// floats, exact below 2^24).
template <typename T> bool useFlash(const AttnShape &s) {
  return !std::is_same_v<T, double> && !s.drop.on && s.S < (int64_t(1) << 24) &&
         attentionPath() >= 0;
}

//===----------------------------------------------------------------------===//
// attention
//===----------------------------------------------------------------------===//

/// Leading dimension of a row panel of scores: S rounded up to 16 elements (64 bytes in f32).
inline int64_t panelStride(int64_t S) { return (S + 15) / 16 * 16; }

/// ks[c] (c in [lo, hi)) *= the keep scale of probability (b, h, i, j0 + c), in chunks of kBc
/// (dropoutRow's limit).
template <typename A>
void applyDropout(const AttnShape &s, int64_t b, int64_t h, int64_t i, int64_t j0, int lo, int hi,
                  A *p, A *keep) {
  for (int c = lo; c < hi; c += kBc) {
    const int n = std::min(kBc, hi - c);
    dropoutRow(s.drop, dropIndex(s, b, h, i, j0 + c), n, keep);
    for (int j = 0; j < n; ++j)
      p[c + j] *= keep[j];
  }
}

template <typename T>
void attentionForward(const AttnShape &s, const T *q, const T *k, const T *v, T *o,
                      Stat<T> *lse) {
  using A = Acc<T>;
  const int64_t S = s.S, NH = s.NH, NG = s.NG;
  const int D = int(s.D);
  const int64_t qStride = NH * D, kvStride = NG * D;
  const int64_t headsPerGroup = NH / NG;
  const int64_t ldp = panelStride(S);
  const A scale = A(s.scale);

  // (batch, kv head) pairs are independent: they are split over the OpenMP threads, each pair
  // computed entirely by one thread, so the result does not depend on the thread count.
#pragma omp parallel if (s.B * NG > 1 && S * S * D * headsPerGroup > (1 << 16))
  {
  SingleThreadedGemm singleThreaded;
  std::vector<A> kn(size_t(S * D)), vn(size_t(S * D));
  std::vector<A> qs(size_t(kBr) * D), oacc(size_t(kBr) * D), sc(size_t(kBr * ldp));
  std::vector<A> rowM(kBr), rowL(kBr), keep(kBc);
  GemmScratch<A> scratch;

#pragma omp for schedule(dynamic)
  for (int64_t bg = 0; bg < s.B * NG; ++bg) {
      const int64_t b = bg / NG, g = bg % NG;
      const T *kg = k + b * S * kvStride + g * D;
      const T *vg = v + b * S * kvStride + g * D;
      const int32_t *docs = s.docStart ? s.docStart + b * S : nullptr;
      packRows(kg, kvStride, int(S), D, kn.data(), A(1));
      packRows(vg, kvStride, int(S), D, vn.data(), A(1));
      for (int64_t h = g * headsPerGroup; h < (g + 1) * headsPerGroup; ++h) {
        const T *qh = q + b * S * qStride + h * D;
        T *oh = o + b * S * qStride + h * D;
        Stat<T> *lseh = lse + (b * NH + h) * S;
        for (int64_t i0 = 0; i0 < S; i0 += kBr) {
          const int mr = int(std::min<int64_t>(kBr, S - i0));
          packRows(qh + i0 * qStride, qStride, mr, D, qs.data(), scale);
          // The row panel: keys [j0, kEnd) of rows [i0, i0 + mr), all at once.
          const int64_t j0 = firstKeyBlock(docs, i0, mr);
          const int64_t kEnd = s.causal ? std::min<int64_t>(S, i0 + mr) : S;
          const int n = int(kEnd - j0);
          gemm(false, true, mr, n, D, qs.data(), D, kn.data() + j0 * D, D, sc.data(), int(ldp),
               false, scratch);
          // Exact softmax per row over its keys [lo, hi) (the scale is in qs).
          for (int r = 0; r < mr; ++r) {
            A *p = sc.data() + r * ldp;
            const KeyRange kr = keyRange(s.causal, docs, i0 + r, j0, n);
            const int valid = kr.hi - kr.lo;
            rowM[r] = -std::numeric_limits<A>::infinity();
            rowL[r] = A(0);
            if (valid > 0) {
              A *pv = p + kr.lo;
              rowM[r] = rowMax(pv, valid);
              expInPlace(pv, valid, rowM[r]);
              rowL[r] = rowSum(pv, valid);
              // Dropout after the normaliser's sum: P V uses the kept probabilities / (1-p).
              if (s.drop.on)
                applyDropout(s, b, h, i0 + r, j0, kr.lo, kr.hi, p, keep.data());
            }
            std::fill(p, p + kr.lo, A(0));
            std::fill(p + kr.hi, p + n, A(0));
          }
          gemm(false, false, mr, D, n, sc.data(), int(ldp), vn.data() + j0 * D, D, oacc.data(),
               D, false, scratch);
          for (int r = 0; r < mr; ++r) {
            A inv = A(1) / rowL[r];
            const A *orow = oacc.data() + int64_t(r) * D;
            T *out = oh + (i0 + r) * qStride;
            for (int d = 0; d < D; ++d)
              st(out, d, orow[d] * inv);
            lseh[i0 + r] = Stat<T>(rowM[r] + std::log(rowL[r]));
          }
        }
      }
    }
  }
}

void runAttention(const KernelCtx &c, const AttnShape &s) {
  if (s.B == 0 || s.S == 0 || s.NH == 0)
    return;
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>)
      if (useFlash<T>(s))
        return flashForward<T>(s, c.in[0].as<T>(), c.in[1].as<T>(), c.in[2].as<T>(),
                               c.out[0].as<T>(), c.out[1].as<float>());
    attentionForward<T>(s, c.in[0].as<T>(), c.in[1].as<T>(), c.in[2].as<T>(), c.out[0].as<T>(),
                        c.out[1].as<Stat<T>>());
  });
}

//===----------------------------------------------------------------------===//
// attention_backward
//===----------------------------------------------------------------------===//

template <typename T>
void attentionBackward(const AttnShape &s, const T *q, const T *k, const T *v, const T *o,
                       const Stat<T> *lse, const T *dout, T *dq, T *dk, T *dv) {
  using A = Acc<T>;
  const int64_t S = s.S, NH = s.NH, NG = s.NG;
  const int D = int(s.D);
  const int64_t qStride = NH * D, kvStride = NG * D;
  const int64_t headsPerGroup = NH / NG;
  const int64_t ldp = panelStride(S);
  const A scale = A(s.scale);

  // Per (batch, kv head): packed K and V, dK and dV accumulators.
#pragma omp parallel if (s.B * NG > 1 && S * S * D * headsPerGroup > (1 << 16))
  {
  SingleThreadedGemm singleThreaded;
  std::vector<A> kn(size_t(S * D)), vn(size_t(S * D));
  std::vector<A> dkAcc(size_t(S * D)), dvAcc(size_t(S * D));
  // Per query head: D_i = do_i . o_i; per query block: packed q (scaled), do, dq accumulator.
  std::vector<A> rowD(static_cast<size_t>(S));
  std::vector<A> qs(size_t(kBr) * D), dos(size_t(kBr) * D), dqAcc(size_t(kBr) * D);
  // Row panels: probabilities and dP / dS.
  std::vector<A> pt(size_t(kBr * ldp)), ds(size_t(kBr * ldp)), keep(kBc);
  GemmScratch<A> scratch;

#pragma omp for schedule(dynamic)
  for (int64_t bg = 0; bg < s.B * NG; ++bg) {
      const int64_t b = bg / NG, g = bg % NG;
      const T *kg = k + b * S * kvStride + g * D;
      const T *vg = v + b * S * kvStride + g * D;
      const int32_t *docs = s.docStart ? s.docStart + b * S : nullptr;
      packRows(kg, kvStride, int(S), D, kn.data(), A(1));
      packRows(vg, kvStride, int(S), D, vn.data(), A(1));
      std::fill(dkAcc.begin(), dkAcc.end(), A(0));
      std::fill(dvAcc.begin(), dvAcc.end(), A(0));

      for (int64_t h = g * headsPerGroup; h < (g + 1) * headsPerGroup; ++h) {
        const int64_t hOff = b * S * qStride + h * D;
        const Stat<T> *lseh = lse + (b * NH + h) * S;
        for (int64_t i = 0; i < S; ++i)
          rowD[i] = dot<A>(dout + hOff + i * qStride, o + hOff + i * qStride, D);
        for (int64_t i0 = 0; i0 < S; i0 += kBr) {
          const int mr = int(std::min<int64_t>(kBr, S - i0));
          packRows(q + hOff + i0 * qStride, qStride, mr, D, qs.data(), scale);
          packRows(dout + hOff + i0 * qStride, qStride, mr, D, dos.data(), A(1));
          const int64_t j0 = firstKeyBlock(docs, i0, mr);
          const int64_t kEnd = s.causal ? std::min<int64_t>(S, i0 + mr) : S;
          const int n = int(kEnd - j0);
          // P = exp(q . k * scale - lse), masked entries exactly 0.
          gemm(false, true, mr, n, D, qs.data(), D, kn.data() + j0 * D, D, pt.data(), int(ldp),
               false, scratch);
          // dP = do . v^T.
          gemm(false, true, mr, n, D, dos.data(), D, vn.data() + j0 * D, D, ds.data(), int(ldp),
               false, scratch);
          // dS = P * (dP - D_i). With dropout (keep scale m): dP = m * (do . v^T), where
          // D_i = do_i . o_i is still sum_j P_ij dP_ij, and dv takes the dropped P m.
          for (int r = 0; r < mr; ++r) {
            A *p = pt.data() + r * ldp;
            A *d = ds.data() + r * ldp;
            const KeyRange kr = keyRange(s.causal, docs, i0 + r, j0, n);
            const A di = rowD[i0 + r];
            expInPlace(p + kr.lo, kr.hi - kr.lo, A(lseh[i0 + r]));
            if (s.drop.on) {
              for (int c = kr.lo; c < kr.hi; c += kBc) {
                const int cnt = std::min(kBc, kr.hi - c);
                dropoutRow(s.drop, dropIndex(s, b, h, i0 + r, j0 + c), cnt, keep.data());
                for (int j = 0; j < cnt; ++j) {
                  d[c + j] = p[c + j] * (keep[j] * d[c + j] - di);
                  p[c + j] *= keep[j];
                }
              }
            } else {
              for (int j = kr.lo; j < kr.hi; ++j)
                d[j] = p[j] * (d[j] - di);
            }
            std::fill(p, p + kr.lo, A(0));
            std::fill(p + kr.hi, p + n, A(0));
            std::fill(d, d + kr.lo, A(0));
            std::fill(d + kr.hi, d + n, A(0));
          }
          // dq = dS . k (scaled at the end); dk += dS^T . (scale q); dv += P^T . do.
          gemm(false, false, mr, D, n, ds.data(), int(ldp), kn.data() + j0 * D, D, dqAcc.data(),
               D, false, scratch);
          gemm(true, false, n, D, mr, ds.data(), int(ldp), qs.data(), D, dkAcc.data() + j0 * D,
               D, true, scratch);
          gemm(true, false, n, D, mr, pt.data(), int(ldp), dos.data(), D, dvAcc.data() + j0 * D,
               D, true, scratch);
          for (int r = 0; r < mr; ++r) {
            const A *src = dqAcc.data() + int64_t(r) * D;
            T *out = dq + hOff + (i0 + r) * qStride;
            for (int d = 0; d < D; ++d)
              st(out, d, scale * src[d]);
          }
        }
      }

      T *dkg = dk + b * S * kvStride + g * D;
      T *dvg = dv + b * S * kvStride + g * D;
      for (int64_t j = 0; j < S; ++j)
        for (int d = 0; d < D; ++d) {
          st(dkg + j * kvStride, d, dkAcc[j * D + d]);
          st(dvg + j * kvStride, d, dvAcc[j * D + d]);
        }
    }
  }
}

void runAttentionBackward(const KernelCtx &c, const AttnShape &s) {
  // With no query heads dk and dv are still written (as zeros) by the loop below.
  if (s.B == 0 || s.S == 0)
    return;
  dispatchFloat(c.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>)
      if (useFlash<T>(s))
        return flashBackward<T>(s, c.in[0].as<T>(), c.in[1].as<T>(), c.in[2].as<T>(),
                                c.in[3].as<T>(), c.in[4].as<float>(), c.in[5].as<T>(),
                                c.out[0].as<T>(), c.out[1].as<T>(), c.out[2].as<T>());
    attentionBackward<T>(s, c.in[0].as<T>(), c.in[1].as<T>(), c.in[2].as<T>(), c.in[3].as<T>(),
                         c.in[4].as<Stat<T>>(), c.in[5].as<T>(), c.out[0].as<T>(),
                         c.out[1].as<T>(), c.out[2].as<T>());
  });
}

void attentionKernel(const KernelCtx &c) { runAttention(c, attnShape(c)); }
void attentionBackwardKernel(const KernelCtx &c) { runAttentionBackward(c, attnShape(c)); }
// Inputs q, k, v, rng and q, k, v, o, lse, do, rng.
void attentionDropoutKernel(const KernelCtx &c) { runAttention(c, attnDropoutShape(c, 3)); }
void attentionDropoutBackwardKernel(const KernelCtx &c) {
  runAttentionBackward(c, attnDropoutShape(c, 6));
}
// The segment kernels: the same inputs and then doc_start.
void attentionSegmentsKernel(const KernelCtx &c) {
  runAttention(c, withSegments(attnShape(c), c, 3));
}
void attentionSegmentsBackwardKernel(const KernelCtx &c) {
  runAttentionBackward(c, withSegments(attnShape(c), c, 6));
}
void attentionDropoutSegmentsKernel(const KernelCtx &c) {
  runAttention(c, withSegments(attnDropoutShape(c, 3), c, 4));
}
void attentionDropoutSegmentsBackwardKernel(const KernelCtx &c) {
  runAttentionBackward(c, withSegments(attnDropoutShape(c, 6), c, 7));
}

} // namespace

int setAttentionPathForTesting(int path) {
  const int previous = attentionPath();
  gAttentionPath.store(std::clamp(path, -1, cpuAttentionIsa()), std::memory_order_relaxed);
  return previous;
}

void registerAttentionKernels(KernelTable &t) {
  t["attention"] = attentionKernel;
  t["attention_backward"] = attentionBackwardKernel;
  t["attention_dropout"] = attentionDropoutKernel;
  t["attention_dropout_backward"] = attentionDropoutBackwardKernel;
  t["attention_segments"] = attentionSegmentsKernel;
  t["attention_segments_backward"] = attentionSegmentsBackwardKernel;
  t["attention_dropout_segments"] = attentionDropoutSegmentsKernel;
  t["attention_dropout_segments_backward"] = attentionDropoutSegmentsBackwardKernel;
}

} // namespace trainc::rt::cpu
