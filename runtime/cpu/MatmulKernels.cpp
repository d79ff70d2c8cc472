//===- MatmulKernels.cpp - matmul through oneDNN -------------------------===//
//
// c[..., M, N] = alpha * op(a)[..., M, K] @ op(b)[..., K, N] + beta * c, with op = transpose when
// trans_a / trans_b is set and b either batched like a or a single [K, N] matrix shared by all
// batches (a linear layer's weight). f32, bf16 and f16 go through oneDNN's matmul primitive (cached per
// shape); f64, which oneDNN's CPU matmul does not support, uses a blocked loop (it serves gradient
// checks, not speed). bf16 inputs may write an f32 output (oneDNN accumulates bf16 products in
// f32 and, with beta = 1, adds the f32 output before one final rounding to f32): the weight
// gradient GEMM accumulating into an fp32 main grad.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/Dispatch.h"

#include "dnnl.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>
#include <tuple>

namespace trainc::rt::cpu {
namespace {

struct MatmulShape {
  int64_t batch, M, N, K;
  bool ta, tb, bBatched;
};

MatmulShape matmulShape(const KernelCtx &c) {
  const TensorView &a = c.in[0], &b = c.in[1];
  MatmulShape s;
  s.ta = c.attrs->i(0) != 0;
  s.tb = c.attrs->i(1) != 0;
  s.M = s.ta ? a.dim(-1) : a.dim(-2);
  s.K = s.ta ? a.dim(-2) : a.dim(-1);
  s.N = s.tb ? b.dim(-2) : b.dim(-1);
  s.batch = a.numel / (s.M * s.K == 0 ? 1 : s.M * s.K);
  if (s.M * s.K == 0) {
    s.batch = 1;
    for (int d = 0; d + 2 < a.rank; ++d)
      s.batch *= a.dims[d];
  }
  s.bBatched = b.rank > 2;
  return s;
}

/// f64 (and fallback) loop: c = alpha * op(a) @ op(b) + beta * c, computed in Acc<T>, stored as C.
template <typename T, typename C = T>
void matmulLoop(const MatmulShape &s, const T *a, const T *b, C *c, double alpha, double beta) {
  using A = Acc<T>;
  std::vector<A> row(size_t(s.N));
  for (int64_t bi = 0; bi < s.batch; ++bi) {
    const T *ab = a + bi * s.M * s.K;
    const T *bb = s.bBatched ? b + bi * s.K * s.N : b;
    C *cb = c + bi * s.M * s.N;
    for (int64_t i = 0; i < s.M; ++i) {
      std::fill(row.begin(), row.end(), A(0));
      for (int64_t k = 0; k < s.K; ++k) {
        A aik = ld(ab, s.ta ? k * s.M + i : i * s.K + k);
        if (aik == A(0))
          continue;
        if (!s.tb) {
          const T *brow = bb + k * s.N;
          for (int64_t j = 0; j < s.N; ++j)
            row[j] += aik * ld(brow, j);
        } else {
          for (int64_t j = 0; j < s.N; ++j)
            row[j] += aik * ld(bb, j * s.K + k);
        }
      }
      for (int64_t j = 0; j < s.N; ++j) {
        A v = A(alpha) * row[j];
        if (beta != 0)
          v += A(beta) * ld(cb, i * s.N + j);
        st(cb, i * s.N + j, v);
      }
    }
  }
}

/// oneDNN engine, stream and a primitive cache keyed by shape, dtype and attributes.
class Dnnl {
public:
  static Dnnl &get() {
    static Dnnl d;
    return d;
  }

  /// Runs the matmul; returns false if oneDNN cannot build a primitive for it.
  /// `dt` is a's and b's dtype, `ct` c's. An f32 output with a long contraction runs as
  /// kSplitK-element slices of K, each accumulated into c (splitK).
  bool run(const MatmulShape &s, dnnl::memory::data_type dt, dnnl::memory::data_type ct, void *a,
           void *b, void *c, double alpha, double beta) {
    int64_t slices = ct == dnnl::memory::data_type::f32 ? splitK(s) : 1;
    if (slices == 1)
      return runSlice(s, s.K, dt, ct, a, b, c, alpha, beta);
    size_t esz = dnnl::memory::data_type_size(dt);
    // Slices of equal size (the last one shorter), so at most two primitives are built.
    int64_t kc = (s.K + slices - 1) / slices;
    for (int64_t k0 = 0; k0 < s.K; k0 += kc) {
      MatmulShape part = s;
      part.K = std::min(kc, s.K - k0);
      // a's slice: columns k0.. of [M, K] or rows k0.. of [K, M]; b's: rows k0.. of [K, N] or
      // columns k0.. of [N, K]. Both keep the whole matrices' strides.
      char *ap = static_cast<char *>(a) + esz * size_t(s.ta ? k0 * s.M : k0);
      char *bp = static_cast<char *>(b) + esz * size_t(s.tb ? k0 : k0 * s.N);
      if (!runSlice(part, s.K, dt, ct, ap, bp, c, alpha, k0 == 0 ? beta : 1.0))
        return false;
    }
    return true;
  }

  /// Contraction slices per matmul: 1, or ceil(K / kSplitK) for a contraction longer than both
  /// kSplitK and 2 * max(M, N) (the LM head's input gradient: K = the vocabulary). oneDNN's f32
  /// brgemm matmul slows down on such shapes (M 1024, N 768 on AVX-512: 205 GFLOP/s at K 4096,
  /// 176 at K 8000, 152-161 at K 32000, bench_gemm; docs/kernels.md, "Seventh round"), while
  /// accumulating K slices into the [M, N] output costs one read and write of it per slice.
  /// The slices change the order of the f32 sums, not their determinism: the split depends on
  /// the shape only.
  static int64_t splitK(const MatmulShape &s) {
    if (s.K <= kSplitK || s.K < 2 * std::max(s.M, s.N))
      return 1;
    return (s.K + kSplitK - 1) / kSplitK;
  }
  static constexpr int64_t kSplitK = 4096;

private:
  /// One oneDNN matmul over s.K contraction elements of operands whose strides are those of a
  /// contraction of length `ldK` (= s.K unless a slice).
  bool runSlice(const MatmulShape &s, int64_t ldK, dnnl::memory::data_type dt,
                dnnl::memory::data_type ct, void *a, void *b, void *c, double alpha, double beta) {
    using dnnl::memory;
    Key key{int(dt) * 256 + int(ct), s.batch, s.M, s.N, s.K, ldK, s.ta, s.tb, s.bBatched, alpha,
            beta};
    std::shared_ptr<Entry> e;
    {
      std::lock_guard<std::mutex> l(mu);
      auto it = cache.find(key);
      if (it != cache.end())
        e = it->second;
    }
    if (!e) {
      e = std::make_shared<Entry>();
      try {
        memory::dims ad = {s.batch, s.M, s.K};
        memory::dims as = s.ta ? memory::dims{s.M * ldK, 1, s.M} : memory::dims{s.M * ldK, ldK, 1};
        memory::dims bd = {s.bBatched ? s.batch : 1, s.K, s.N};
        memory::dims bs = s.tb ? memory::dims{ldK * s.N, 1, ldK} : memory::dims{ldK * s.N, s.N, 1};
        memory::dims cd = {s.batch, s.M, s.N};
        memory::dims cs = {s.M * s.N, s.N, 1};
        e->a = memory::desc(ad, dt, as);
        e->b = memory::desc(bd, dt, bs);
        e->c = memory::desc(cd, ct, cs);
        dnnl::primitive_attr attr;
        // The caller owns the scratchpad: with oneDNN's default (library) mode, distinct
        // primitives share one scratchpad and must not run concurrently (oneDNN's
        // DNNL_ENABLE_CONCURRENT_EXEC note), which several ranks in one process, or a kernel on
        // the communication stream, would do.
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        if (alpha != 1.0)
          attr.set_output_scales(0, {float(alpha)});
        if (beta != 0.0) {
          dnnl::post_ops po;
          po.append_sum(float(beta));
          attr.set_post_ops(po);
        }
        dnnl::matmul::desc md(e->a, e->b, e->c);
        dnnl::matmul::primitive_desc pd(md, attr, engine);
        e->prim = dnnl::matmul(pd);
        e->scratch = pd.scratchpad_desc();
      } catch (const dnnl::error &) {
        return false;
      }
      std::lock_guard<std::mutex> l(mu);
      cache.emplace(key, e);
    }
    dnnl::memory am(e->a, engine, a), bm(e->b, engine, b), cm(e->c, engine, c);
    // One scratchpad per calling thread, grown on demand.
    thread_local std::vector<char> scratch;
    size_t need = e->scratch.get_size();
    if (scratch.size() < need)
      scratch.resize(need);
    dnnl::memory sm(e->scratch, engine, need ? scratch.data() : nullptr);
    dnnl::stream st(engine);
    e->prim.execute(st, {{DNNL_ARG_SRC, am},
                         {DNNL_ARG_WEIGHTS, bm},
                         {DNNL_ARG_DST, cm},
                         {DNNL_ARG_SCRATCHPAD, sm}});
    st.wait();
    return true;
  }

  Dnnl() : engine(dnnl::engine::kind::cpu, 0) {}
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool, double,
                         double>;
  struct Entry {
    dnnl::memory::desc a, b, c, scratch;
    dnnl::matmul prim;
  };
  dnnl::engine engine;
  std::mutex mu;
  std::map<Key, std::shared_ptr<Entry>> cache;
};

void matmulKernel(const KernelCtx &c) {
  MatmulShape s = matmulShape(c);
  double alpha = c.attrs->f(2), beta = c.attrs->f(3);
  if (s.M == 0 || s.N == 0)
    return;
  if (s.K == 0) {
    // Empty contraction: c = beta * c.
    dispatchFloat(c.out[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      T *cp = c.out[0].as<T>();
      for (int64_t i = 0; i < c.out[0].numel; ++i)
        st(cp, i, beta == 0 ? Acc<T>(0) : ld(cp, i));
    });
    return;
  }
  DType t = c.in[0].dtype;
  using dt = dnnl::memory::data_type;
  if (t == DType::F32 &&
      Dnnl::get().run(s, dt::f32, dt::f32, c.in[0].data, c.in[1].data, c.out[0].data, alpha, beta))
    return;
  if (t == DType::BF16 || t == DType::F16) {
    // 16-bit inputs: oneDNN accumulates in f32 and rounds a 16-bit output to nearest even.
    bool f32Out = c.out[0].dtype == DType::F32;
    const dt h = t == DType::BF16 ? dt::bf16 : dt::f16;
    if (Dnnl::get().run(s, h, f32Out ? dt::f32 : h, c.in[0].data, c.in[1].data, c.out[0].data,
                        alpha, beta))
      return;
    if (f32Out) {
      dispatchFloat(t, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
          matmulLoop<T, float>(s, c.in[0].as<T>(), c.in[1].as<T>(), c.out[0].as<float>(), alpha,
                               beta);
      });
      return;
    }
  }
  dispatchFloat(t, [&](auto tag) {
    using T = decltype(tag);
    matmulLoop<T>(s, c.in[0].as<T>(), c.in[1].as<T>(), c.out[0].as<T>(), alpha, beta);
  });
}

} // namespace

void registerMatmulKernels(KernelTable &t) { t["matmul"] = matmulKernel; }

} // namespace trainc::rt::cpu
