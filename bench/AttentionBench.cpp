//===- AttentionBench.cpp - attention forward and forward + backward ------===//
//
// Times the CPU backend's `attention` and `attention_backward` kernels, called directly (no
// executor), at B = 1, S = 1024, NH = NG = 8, D = 64, f32, causal, and in the same run the GEMM
// rate they are measured against: oneDNN's sgemm at M = N = K = 1024 with its default threads
// (the rate the runtime's matmul reaches, bench_gemm). The measurements are interleaved in
// rounds (GEMM, forward, forward + backward, ...) and each figure is the best over the rounds
// (argument 1, default 7), so that load from other processes on a shared machine affects all of
// them alike; TRAINC_BENCH_CPU_TIME=1 times CPU time instead of wall-clock time (use it with
// OMP_NUM_THREADS=1 on a loaded machine); TRAINC_BENCH_ATTENTION_SHAPE=B,S,NH,NG,D selects another
// shape. FLOPs: the causal half of 4 * B * H * S^2 * D for the forward, 2.5 times that for the
// backward (forward + backward = 3.5 times). Then the same with attention dropout p = 0.1
// (attention_dropout kernels: one Philox call per 4 probabilities, forward and backward).
// Argument 2 `products`: also the kernels' block products alone (their sgemm calls at the same
// shapes, no softmax), the ceiling oneDNN's sgemm puts on the kernels; `nodropout`: without the
// dropout timings; `compare`: without dropout, the fused tiles (the f32 path) and the row panels
// through oneDNN's sgemm (the path before them, setAttentionPathForTesting(-1)) timed in the same
// rounds, so that their ratio does not depend on the machine's load.
//
//===----------------------------------------------------------------------===//

#include "absl/strings/str_format.h"
#include "runtime/core/Backend.h"
#include "runtime/core/Kernel.h"
#include "runtime/cpu/CpuKernels.h"

#include "dnnl.h"
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

using namespace trainc::rt;

namespace {

/// Seconds of one call of f(): wall-clock, or with TRAINC_BENCH_CPU_TIME=1 the process's CPU
/// time (on a machine shared with other jobs, time spent descheduled does not count; meaningful
/// with OMP_NUM_THREADS=1, where no thread spins at a barrier).
template <typename F> double seconds(F &&f) {
  static const bool cpuTime = std::getenv("TRAINC_BENCH_CPU_TIME") &&
                              std::string(std::getenv("TRAINC_BENCH_CPU_TIME")) == "1";
  if (cpuTime) {
    timespec a, b;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
    f();
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
    return double(b.tv_sec - a.tv_sec) + 1e-9 * double(b.tv_nsec - a.tv_nsec);
  }
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Calls kernel `name` after checking its signature; returns false (with a message) on error.
bool call(const Backend &backend, const char *name, std::vector<TensorView> in,
          std::vector<TensorView> out, const Attrs &attrs) {
  const KernelSignature *sig = findKernelSignature(name);
  KernelFn fn = backend.findKernel(name);
  if (!sig || !fn) {
    std::fprintf(stderr, "kernel %s not found\n", name);
    return false;
  }
  KernelCtx ctx{in.data(), int(in.size()), out.data(), int(out.size()), &attrs, nullptr};
  std::string e = sig->verify(ctx);
  if (!e.empty()) {
    std::fprintf(stderr, "%s: %s\n", name, e.c_str());
    return false;
  }
  fn(ctx);
  return true;
}

} // namespace

int main(int argc, char **argv) {
  // TRAINC_BENCH_ATTENTION_SHAPE=B,S,NH,NG,D replaces the default shape (e.g. 4,256,6,2,64: the
  // llama-10m case of bench/train_throughput.sh).
  int64_t B = 1, S = 1024, NH = 8, NG = 8, D = 64;
  if (const char *shape = std::getenv("TRAINC_BENCH_ATTENTION_SHAPE")) {
    long long b = 0, s = 0, nh = 0, ng = 0, d = 0;
    int used = 0;
    if (std::sscanf(shape, "%lld,%lld,%lld,%lld,%lld%n", &b, &s, &nh, &ng, &d, &used) != 5 ||
        shape[used] != '\0' || b <= 0 || s <= 0 || nh <= 0 || ng <= 0 || d <= 0 || nh % ng != 0) {
      std::fprintf(stderr,
                   "TRAINC_BENCH_ATTENTION_SHAPE='%s' is not B,S,NH,NG,D (positive, NG divides "
                   "NH)\n",
                   shape);
      return 2;
    }
    B = b, S = s, NH = nh, NG = ng, D = d;
  }
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  std::unique_ptr<Backend> backend = createCpuBackend();

  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-1, 1);
  auto randomVec = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float &x : v)
      x = u(gen);
    return v;
  };
  std::vector<float> q = randomVec(B * S * NH * D), k = randomVec(B * S * NG * D),
                     v = randomVec(B * S * NG * D), dout = randomVec(B * S * NH * D);
  std::vector<float> o(q.size()), lse(size_t(B * NH * S)), dq(q.size()), dk(k.size()),
      dv(v.size());

  TensorView qv = makeView(DType::F32, {B, S, NH, D}, q.data());
  TensorView kv = makeView(DType::F32, {B, S, NG, D}, k.data());
  TensorView vv = makeView(DType::F32, {B, S, NG, D}, v.data());
  TensorView ov = makeView(DType::F32, {B, S, NH, D}, o.data());
  TensorView lv = makeView(DType::F32, {B, NH, S}, lse.data());
  TensorView dov = makeView(DType::F32, {B, S, NH, D}, dout.data());
  TensorView dqv = makeView(DType::F32, {B, S, NH, D}, dq.data());
  TensorView dkv = makeView(DType::F32, {B, S, NG, D}, dk.data());
  TensorView dvv = makeView(DType::F32, {B, S, NG, D}, dv.data());

  Attrs attrs;
  attrs.scalars = {1, 0}; // causal = 1, scale = 0 (1 / sqrt(D))
  attrs.lists = {{}, {}};

  // Attention dropout p = 0.1: attrs causal, scale, p, op_id; key (seed, iteration, first sample).
  int64_t key[3] = {1234, 1, 0};
  TensorView rv = makeView(DType::I64, {3}, key);
  Attrs dattrs;
  dattrs.scalars = {1, 0, 0.1, 3};
  dattrs.lists = {{}, {}, {}, {}};

  const int64_t G = 1024;
  std::vector<float> ga = randomVec(G * G), gb = randomVec(G * G), gc(size_t(G * G));
  bool ok = true;
  auto gemm = [&] {
    ok &= dnnl_sgemm('N', 'N', G, G, G, 1.0f, ga.data(), G, gb.data(), G, 0.0f, gc.data(), G) ==
          dnnl_success;
  };
  auto fwd = [&] { ok &= call(*backend, "attention", {qv, kv, vv}, {ov, lv}, attrs); };
  auto both = [&] {
    fwd();
    ok &= call(*backend, "attention_backward", {qv, kv, vv, ov, lv, dov}, {dqv, dkv, dvv}, attrs);
  };
  auto dropFwd = [&] {
    ok &= call(*backend, "attention_dropout", {qv, kv, vv, rv}, {ov, lv}, dattrs);
  };
  auto dropBoth = [&] {
    dropFwd();
    ok &= call(*backend, "attention_dropout_backward", {qv, kv, vv, ov, lv, dov, rv},
               {dqv, dkv, dvv}, dattrs);
  };
  // The block products alone, as the kernels call them (causal, 64-row query blocks, panels of
  // n = i0 + 64 keys, single-threaded sgemm per (batch, head) like the kernels): forward
  // Q K^T and P V; backward Q K^T, dO V^T, dS K, dS^T Q, P^T dO. No softmax, no packing: the
  // ceiling that oneDNN's sgemm puts on the kernels at these shapes.
  const int64_t Br = 64, ldp = (S + 15) / 16 * 16;
  std::vector<float> pq = randomVec(Br * D), pk = randomVec(S * D), pv = randomVec(S * D),
                     pdo = randomVec(Br * D), pp = randomVec(Br * ldp), pds = randomVec(Br * ldp),
                     po(size_t(Br * D)), pdk(size_t(S * D)), pdv(size_t(S * D));
  auto products = [&](bool backward) {
    for (int64_t h = 0; h < B * NH; ++h)
      for (int64_t i0 = 0; i0 < S; i0 += Br) {
        const int64_t n = std::min(S, i0 + Br);
        auto mm = [&](char ta, char tb, int64_t M, int64_t N, int64_t K, const float *a,
                      int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                      int64_t ldc) {
          ok &= dnnl_sgemm(ta, tb, M, N, K, 1.0f, a, lda, b, ldb, beta, c, ldc) == dnnl_success;
        };
        mm('N', 'T', Br, n, D, pq.data(), D, pk.data(), D, 0.0f, pp.data(), ldp);
        if (!backward) {
          mm('N', 'N', Br, D, n, pp.data(), ldp, pv.data(), D, 0.0f, po.data(), D);
          continue;
        }
        mm('N', 'T', Br, n, D, pdo.data(), D, pv.data(), D, 0.0f, pds.data(), ldp);
        mm('N', 'N', Br, D, n, pds.data(), ldp, pk.data(), D, 0.0f, po.data(), D);
        mm('T', 'N', n, D, Br, pds.data(), ldp, pq.data(), D, 1.0f, pdk.data(), D);
        mm('T', 'N', n, D, Br, pp.data(), ldp, pdo.data(), D, 1.0f, pdv.data(), D);
      }
  };
  // One OpenMP thread for the products' sgemm calls, as the kernels' SingleThreadedGemm.
  auto productsFwd = [&] {
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    products(false);
    omp_set_num_threads(saved);
  };
  auto productsBoth = [&] {
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    products(false);
    products(true);
    omp_set_num_threads(saved);
  };
  const bool withProducts = argc > 2 && std::string(argv[2]) == "products";
  const bool compare = argc > 2 && std::string(argv[2]) == "compare";
  // Argument 2 `nodropout`: skip the attention_dropout timings (for profiling the kernels).
  const bool withDropout = !(argc > 2 && (std::string(argv[2]) == "nodropout" || compare));
  // The fused tiles at the CPU's best instruction set (the kernels' default is the panel path,
  // AttentionKernels.cpp gAttentionPath).
  trainc::rt::cpu::setAttentionPathForTesting(2);
  const int fusedPath = trainc::rt::cpu::setAttentionPathForTesting(2);
  double tPanelFwd = 1e30, tPanelBoth = 1e30;
  auto panels = [&](auto &&f) {
    trainc::rt::cpu::setAttentionPathForTesting(-1);
    double t = seconds(f);
    trainc::rt::cpu::setAttentionPathForTesting(fusedPath);
    return t;
  };
  gemm(); // warm-up
  fwd();
  both();
  dropBoth();
  if (withProducts)
    productsBoth();
  double tProdFwd = 1e30, tProdBoth = 1e30;
  double tGemm = 1e30, tFwd = 1e30, tBoth = 1e30, tDropFwd = 1e30, tDropBoth = 1e30;
  for (int r = 0; r < rounds; ++r) {
    tGemm = std::min(tGemm, seconds(gemm));
    tFwd = std::min(tFwd, seconds(fwd));
    tBoth = std::min(tBoth, seconds(both));
    if (withDropout) {
      tDropFwd = std::min(tDropFwd, seconds(dropFwd));
      tDropBoth = std::min(tDropBoth, seconds(dropBoth));
    }
    if (compare) {
      tPanelFwd = std::min(tPanelFwd, panels(fwd));
      tPanelBoth = std::min(tPanelBoth, panels(both));
    }
    if (withProducts) {
      tProdFwd = std::min(tProdFwd, seconds(productsFwd));
      tProdBoth = std::min(tProdBoth, seconds(productsBoth));
    }
  }
  if (!ok)
    return 1;

  double fwdFlops = 0.5 * 4.0 * double(B) * double(NH) * double(S) * double(S) * double(D);
  double bothFlops = 3.5 * fwdFlops;
  const double gemmRate = 2.0 * double(G) * double(G) * double(G) / tGemm * 1e-9;
  std::printf("gemm f32 M=N=K=%lld (oneDNN sgemm, default threads): %.1f GFLOP/s (best of %d "
              "interleaved rounds)\n", (long long)G, gemmRate, rounds);
  // The shape as B=, S=, H= (query heads), G= (key/value heads), D=.
  auto shapeStr = absl::StrFormat("B=%d S=%d H=%d G=%d D=%d", B, S, NH, NG, D);
  std::printf("attention fwd  %s: %.2f ms (%.1f GFLOP/s, %.0f%% of the GEMM rate)\n",
              shapeStr.c_str(), tFwd * 1e3, fwdFlops / tFwd * 1e-9,
              100 * fwdFlops / tFwd * 1e-9 / gemmRate);
  std::printf("attention fwd+bwd %s: %.2f ms (%.1f GFLOP/s, %.0f%% of the GEMM rate)\n",
              shapeStr.c_str(), tBoth * 1e3, bothFlops / tBoth * 1e-9,
              100 * bothFlops / tBoth * 1e-9 / gemmRate);
  std::printf("attention bwd (fwd+bwd - fwd) %s: %.2f ms (%.1f GFLOP/s)\n", shapeStr.c_str(),
              (tBoth - tFwd) * 1e3, 2.5 * fwdFlops / (tBoth - tFwd) * 1e-9);
  if (withDropout)
    std::printf("attention_dropout p=0.1 fwd: %.2f ms (%.2fx attention), fwd+bwd: %.2f ms "
                "(%.2fx)\n",
                tDropFwd * 1e3, tDropFwd / tFwd, tDropBoth * 1e3, tDropBoth / tBoth);
  if (compare)
    std::printf("row panels (oneDNN sgemm, the path before the fused tiles): fwd %.2f ms (%.0f%% of "
                "the GEMM rate), fwd+bwd %.2f ms (%.0f%%); fused tiles / panels time: fwd %.2f, "
                "fwd+bwd %.2f\n",
                tPanelFwd * 1e3, 100 * fwdFlops / tPanelFwd * 1e-9 / gemmRate, tPanelBoth * 1e3,
                100 * bothFlops / tPanelBoth * 1e-9 / gemmRate, tFwd / tPanelFwd,
                tBoth / tPanelBoth);
  if (withProducts)
    std::printf("block products alone (single-threaded sgemm, kernels' shapes): fwd %.2f ms (%.0f%% "
                "of the GEMM rate), fwd+bwd %.2f ms (%.0f%%)\n",
                tProdFwd * 1e3, 100 * fwdFlops / tProdFwd * 1e-9 / gemmRate, tProdBoth * 1e3,
                100 * bothFlops / tProdBoth * 1e-9 / gemmRate);
  return 0;
}
