//===- GemmBench.cpp - GEMM through the runtime vs oneDNN called directly ===//
//
// Prints GFLOP/s of an f32 matmul run as a one-instruction program by the executor and of the same
// oneDNN matmul primitive executed directly, and their ratio (target >= 0.95), for 1024^3 and
// M x K x N = 4096 x 1024 x 4096. Best of several repetitions, measured in one run.
// Then bf16 against f32 through the runtime (issue 12): bf16 inputs with a bf16 output, and with
// an f32 output accumulated with beta = 1 (the weight-gradient GEMM into an fp32 main grad), each
// with its ratio to f32 (AVX512-BF16 / AMX make bf16 faster on CPUs that have them).
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Communicator.h"
#include "runtime/core/Executor.h"
#include "runtime/core/ProgramBuilder.h"

#include "dnnl.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

using namespace trainc::rt;
namespace schema = trainc::schema;

namespace {

template <typename F> double bestSeconds(int reps, F &&f) {
  f(); // warm-up (primitive creation, page faults)
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
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

/// GFLOP/s of one matmul program with inputs of dtype `in`, output `out` and `beta`.
double runtimeGflops(int64_t M, int64_t K, int64_t N, int reps, DType in, DType out, double beta) {
  ProgramBuilder b;
  int a = b.addBuffer("a", schema::ACTIVATION, in, {M, K});
  int w = b.addBuffer("b", schema::PARAMETER, in, {K, N});
  int c = b.addBuffer("c", schema::ACTIVATION, out, {M, N});
  int fn = b.addFunction("main");
  b.kernel(fn, "matmul", {ProgramBuilder::buf(a), ProgramBuilder::buf(w)}, {ProgramBuilder::buf(c)},
           {AttrArg("beta", beta)});
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

} // namespace

int main() {
  bench(1024, 1024, 1024, 10);
  bench(4096, 1024, 4096, 5);
  benchBf16(1024, 1024, 1024, 10);
  benchBf16(4096, 1024, 4096, 5);
  benchF16(1024, 1024, 1024, 10);
  benchF16(4096, 1024, 4096, 5);
  return 0;
}
