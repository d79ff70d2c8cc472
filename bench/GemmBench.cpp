//===- GemmBench.cpp - GEMM through the runtime vs oneDNN called directly ===//
//
// Prints GFLOP/s of an f32 matmul run as a one-instruction program by the executor and of the same
// oneDNN matmul primitive executed directly, and their ratio (target >= 0.95), for 1024^3 and
// M x K x N = 4096 x 1024 x 4096. Best of several repetitions, measured in one run.
// Then bf16 against f32 through the runtime (issue 12): bf16 inputs with a bf16 output, and with
// an f32 output accumulated with beta = 1 (the weight-gradient GEMM into an fp32 main grad), each
// with its ratio to f32 (AVX512-BF16 / AMX make bf16 faster on CPUs that have them).
// With arguments `MxKxN[:trans_a][:trans_b][:beta1][:cold] ...`, only those f32 sizes
// (see benchSizes). With `--peak`, the machine's f32 FMA peak instead (see benchPeak): the rate
// no f32 GEMM, and no f32 plan's iteration FLOP rate, can exceed on this machine.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Communicator.h"
#include "runtime/core/Executor.h"
#include "runtime/core/ProgramBuilder.h"

#include "absl/strings/str_format.h"
#include "dnnl.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <tuple>
#include <vector>

using namespace trainc::rt;
namespace schema = trainc::schema;

namespace {

/// Set by a size's ":cold": every repetition first writes kColdBytes elsewhere (untimed), so the
/// operands come from memory, not the caches, as they do inside an iteration.
bool gCold = false;
constexpr size_t kColdBytes = size_t(128) << 20; // 4x the largest L3 of the bench machines

/// The mean over the repetitions of the last bestSeconds (the best is what it returns).
double gLastMeanSeconds = 0;

template <typename F> double bestSeconds(int reps, F &&f) {
  f(); // warm-up (primitive creation, page faults)
  double best = 1e30, sum = 0;
  static std::vector<char> evict;
  for (int r = 0; r < reps; ++r) {
    if (gCold) {
      evict.resize(kColdBytes);
      for (size_t i = 0; i < evict.size(); i += 64)
        evict[i] = char(evict[i] + 1);
    }
    auto t0 = std::chrono::steady_clock::now();
    f();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, t);
    sum += t;
  }
  gLastMeanSeconds = sum / reps;
  return best;
}

void bench(int64_t M, int64_t K, int64_t N, int reps) {
  double flops = 2.0 * double(M) * double(N) * double(K);
  // Through the runtime.
  ProgramBuilder b;
  int a = b.addBuffer("a", schema::ACTIVATION, DType::F32, {M, K});
  int w = b.addBuffer("b", schema::PARAMETER, DType::F32, {K, N});
  int c = b.addBuffer("c", schema::ACTIVATION, DType::F32, {M, N});
  int fn = b.addFunction("main");
  b.kernel(fn, "matmul", {ProgramBuilder::buf(a), ProgramBuilder::buf(w)}, {ProgramBuilder::buf(c)});
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  auto ex = Executor::create(b.finish(), *backend, *comm);
  if (!ex.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ex.status().message()).c_str());
    return;
  }
  std::vector<float> av(size_t(M * K), 0.5f), bv(size_t(K * N), 0.25f);
  (void)(*ex)->writeBuffer(a, av.data(), av.size() * 4);
  (void)(*ex)->writeBuffer(w, bv.data(), bv.size() * 4);
  double tRuntime = bestSeconds(reps, [&] { (void)(*ex)->run(); });

  // oneDNN directly, same descriptors (row-major, no transposes).
  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream st(eng);
  memory::desc ad({M, K}, memory::data_type::f32, memory::format_tag::ab);
  memory::desc bd({K, N}, memory::data_type::f32, memory::format_tag::ab);
  memory::desc cd({M, N}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::matmul prim(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), eng));
  std::vector<float> cv(size_t(M * N));
  memory am(ad, eng, av.data()), bm(bd, eng, bv.data()), cm(cd, eng, cv.data());
  double tDirect = bestSeconds(reps, [&] {
    prim.execute(st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    st.wait();
  });
  double gRuntime = flops / tRuntime * 1e-9, gDirect = flops / tDirect * 1e-9;
  std::printf("gemm f32 M=%lld K=%lld N=%lld: runtime %.1f GFLOP/s, oneDNN direct %.1f GFLOP/s, "
              "ratio %.3f (target >= 0.95)\n",
              (long long)M, (long long)K, (long long)N, gRuntime, gDirect, gRuntime / gDirect);
}

/// GFLOP/s of one matmul program with inputs of dtype `in`, output `out`, `beta` and the
/// transposes (a is [K, M] with transA, b [N, K] with transB).
double runtimeGflops(int64_t M, int64_t K, int64_t N, int reps, DType in, DType out, double beta,
                     bool transA = false, bool transB = false) {
  ProgramBuilder b;
  int a = b.addBuffer("a", schema::ACTIVATION, in, transA ? std::vector<int64_t>{K, M}
                                                          : std::vector<int64_t>{M, K});
  int w = b.addBuffer("b", schema::PARAMETER, in, transB ? std::vector<int64_t>{N, K}
                                                         : std::vector<int64_t>{K, N});
  int c = b.addBuffer("c", schema::ACTIVATION, out, {M, N});
  int fn = b.addFunction("main");
  b.kernel(fn, "matmul", {ProgramBuilder::buf(a), ProgramBuilder::buf(w)}, {ProgramBuilder::buf(c)},
           {AttrArg("beta", beta), AttrArg("trans_a", int(transA)),
            AttrArg("trans_b", int(transB))});
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  auto ex = Executor::create(b.finish(), *backend, *comm);
  if (!ex.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ex.status().message()).c_str());
    return 0;
  }
  // Parameters are initialised by the executor; activations start as zeros: fine for timing.
  if (absl::Status s = (*ex)->run(); !s.ok()) { // a failing run would time as instantaneous
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 0;
  }
  double t = bestSeconds(reps, [&] { (void)(*ex)->run(); });
  return 2.0 * double(M) * double(N) * double(K) / t * 1e-9;
}

void benchBf16(int64_t M, int64_t K, int64_t N, int reps) {
  double f32 = runtimeGflops(M, K, N, reps, DType::F32, DType::F32, 0);
  double bf = runtimeGflops(M, K, N, reps, DType::BF16, DType::BF16, 0);
  double acc = runtimeGflops(M, K, N, reps, DType::BF16, DType::F32, 1);
  std::printf("gemm M=%lld K=%lld N=%lld: f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s (ratio %.2f), "
              "bf16 -> f32 beta=1 %.1f GFLOP/s (ratio %.2f)\n",
              (long long)M, (long long)K, (long long)N, f32, bf, bf / f32, acc, acc / f32);
}

/// --fp16's GEMMs: f16 inputs through oneDNN's f16 matmul (f32 accumulation).
void benchF16(int64_t M, int64_t K, int64_t N, int reps) {
  double f32 = runtimeGflops(M, K, N, reps, DType::F32, DType::F32, 0);
  double h = runtimeGflops(M, K, N, reps, DType::F16, DType::F16, 0);
  double acc = runtimeGflops(M, K, N, reps, DType::F16, DType::F32, 1);
  std::printf("gemm M=%lld K=%lld N=%lld: f32 %.1f GFLOP/s, f16 %.1f GFLOP/s (ratio %.2f), "
              "f16 -> f32 beta=1 %.1f GFLOP/s (ratio %.2f)\n",
              (long long)M, (long long)K, (long long)N, f32, h, h / f32, acc, acc / f32);
}

/// `bench_gemm MxKxN[:trans_a][:trans_b][:beta1][:cold] ...`: each size's f32 rate through the
/// runtime (best and mean of the repetitions) and the best's ratio to 4096x1024x4096's (the
/// reference of bench/train_throughput.sh), e.g. the sizes of an iteration's trace ("gemm" args).
/// Returns false on a malformed size.
bool benchSizes(int argc, char **argv) {
  std::vector<std::tuple<int64_t, int64_t, int64_t, bool, bool, double, bool>> sizes;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    long long m = 0, k = 0, n = 0;
    int used = 0;
    if (std::sscanf(s.c_str(), "%lldx%lldx%lld%n", &m, &k, &n, &used) != 3 || m <= 0 || k <= 0 ||
        n <= 0) {
      std::fprintf(stderr,
                   "bench_gemm: '%s' is not a size MxKxN[:trans_a][:trans_b][:beta1][:cold]\n",
                   s.c_str());
      return false;
    }
    std::string rest = s.substr(size_t(used));
    bool ta = rest.find(":trans_a") != std::string::npos;
    bool tb = rest.find(":trans_b") != std::string::npos;
    double beta = rest.find(":beta1") != std::string::npos ? 1.0 : 0.0;
    sizes.emplace_back(m, k, n, ta, tb, beta, rest.find(":cold") != std::string::npos);
  }
  double ref = runtimeGflops(4096, 1024, 4096, 5, DType::F32, DType::F32, 0);
  std::printf("gemm f32 M=4096 K=1024 N=4096 (reference): %.1f GFLOP/s\n", ref);
  for (auto [m, k, n, ta, tb, beta, cold] : sizes) {
    int reps = 2.0 * m * k * n < 4e9 ? 20 : 5;
    gCold = cold;
    double g = runtimeGflops(m, k, n, reps, DType::F32, DType::F32, beta, ta, tb);
    double mean = 2.0 * double(m) * double(n) * double(k) / gLastMeanSeconds * 1e-9;
    gCold = false;
    std::printf("gemm f32 M=%lld K=%lld N=%lld%s%s%s%s: %.1f GFLOP/s, %.0f%% of the reference; "
                "mean of %d: %.1f GFLOP/s\n",
                (long long)m, (long long)k, (long long)n, ta ? " trans_a" : "",
                tb ? " trans_b" : "", beta != 0 ? " beta=1" : "", cold ? " cold" : "", g,
                100 * g / ref, reps, mean);
  }
  return true;
}

/// `iters` rounds of kChains independent fused multiply-adds on full vectors (each chain
/// x = x * a + b, a and b read at run time so nothing folds): enough chains to cover the FMA
/// latency times the number of FMA pipes on current x86 cores (4 cycles x 2 pipes). Returns a
/// value depending on every chain so the loop is not removed. FLOPs per call (one thread): iters *
/// kChains * lanes * 2.
constexpr int kChains = 12;
__attribute__((target("avx512f"))) float fmaChains512(int64_t iters, float a, float b) {
  __m512 x[kChains], va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  for (int j = 0; j < kChains; ++j)
    x[j] = _mm512_set1_ps(float(j));
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j)
      x[j] = _mm512_fmadd_ps(x[j], va, vb);
  __m512 s = x[0];
  for (int j = 1; j < kChains; ++j)
    s = _mm512_add_ps(s, x[j]);
  return _mm512_reduce_add_ps(s);
}
__attribute__((target("avx2,fma"))) float fmaChains256(int64_t iters, float a, float b) {
  __m256 x[kChains], va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  for (int j = 0; j < kChains; ++j)
    x[j] = _mm256_set1_ps(float(j));
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j)
      x[j] = _mm256_fmadd_ps(x[j], va, vb);
  __m256 s = x[0];
  for (int j = 1; j < kChains; ++j)
    s = _mm256_add_ps(s, x[j]);
  alignas(32) float v[8];
  _mm256_store_ps(v, s);
  return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

double threadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// GFLOP/s of `chains` (`lanes` floats per vector) on the OpenMP team, as benchPeak (below)
/// describes; sets `threads` to the team's size.
double fmaRate(int lanes, float (*chains)(int64_t, float, float), int &threads) {
  volatile float va = 0.999999f, vb = 1e-6f; // x converges to 1: no overflow, no denormals
  const int64_t iters = int64_t(1) << 26;
  const double flopsPerThread = double(iters) * kChains * lanes * 2;
  double best = 0;
  float sink = 0;
  for (int r = 0; r < 6; ++r) { // the first is warm-up (clock ramp, thread start)
    double sum = 0;
    int team = 0;
#pragma omp parallel reduction(+ : sink, sum, team)
    {
      team += 1;
      double t0 = threadCpuSeconds();
      sink += chains(iters, va, vb);
      sum += flopsPerThread / (threadCpuSeconds() - t0);
    }
    threads = team;
    if (r > 0)
      best = std::max(best, sum * 1e-9);
  }
  if (sink == 12345.f) // never: keeps the result alive
    std::printf("%f\n", double(sink));
  return best;
}

/// `bench_gemm --peak`: the f32 FMA peak of the OpenMP team (OMP_NUM_THREADS threads), in GFLOP/s,
/// for 256- and 512-bit vectors, and the larger of the two as "peak". Each thread times its own
/// CPU time (CLOCK_THREAD_CPUTIME_ID), so time lost to other processes on a loaded machine does not
/// lower the figure; the rate of a region is the sum of its threads' rates, the figure the best of
/// 5 regions (~0.1-0.3 s each) after a warm-up one. Every f32 GEMM is bounded by it (2 FLOPs per
/// FMA lane), and so is an f32 plan's iteration FLOP rate as bench/train_throughput.sh counts it
/// (the plan's flops_per_iteration: GEMM and attention FLOPs only, while the iteration also runs
/// kernels that are not FMAs). Not a bound for bf16 GEMMs on CPUs with AVX512-BF16 or AMX.
void benchPeak() {
  int threads = 0;
  double r256 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                    ? fmaRate(8, fmaChains256, threads)
                    : 0;
  double r512 = __builtin_cpu_supports("avx512f") ? fmaRate(16, fmaChains512, threads) : 0;
  if (r256 == 0 && r512 == 0) {
    std::printf("fma f32 peak: not measured (this CPU has neither AVX2 with FMA nor AVX-512F)\n");
    return;
  }
  auto shown = [](double r) { return r > 0 ? absl::StrFormat("%.1f GFLOP/s", r) : "n/a"; };
  std::printf("fma f32 peak, %d threads (CPU time): 256-bit %s, 512-bit %s; peak %.1f GFLOP/s\n",
              threads, shown(r256).c_str(), shown(r512).c_str(), std::max(r256, r512));
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 2 && std::string(argv[1]) == "--peak") {
    benchPeak();
    return 0;
  }
  if (argc > 1)
    return benchSizes(argc, argv) ? 0 : 2;
  bench(1024, 1024, 1024, 10);
  bench(4096, 1024, 4096, 5);
  benchBf16(1024, 1024, 1024, 10);
  benchBf16(4096, 1024, 4096, 5);
  benchF16(1024, 1024, 1024, 10);
  benchF16(4096, 1024, 4096, 5);
  return 0;
}
