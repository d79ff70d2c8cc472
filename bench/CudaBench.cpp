//===- CudaBench.cpp - CUDA backend: GEMM vs cuBLASLt direct, attention ---===//
//
// Runs only with a GPU (prints SKIP and exits 77 otherwise; it always builds).
//  1. GEMM through the runtime (a one-instruction program run by the Executor on the CUDA
//     backend: dispatch, plan-cache lookup, cuBLASLt) vs cuBLASLt called directly with its own
//     descriptors and the top heuristic algorithm; TFLOP/s and the ratio (target >= 0.95), f32
//     and bf16, Llama-3.2-1B-like shapes (tokens x hidden x ffn).
//  2. Causal GQA attention forward + backward through the backend's kernels, TFLOP/s counted as
//     FlashAttention does (causal: half the S x S products; backward = 2.5 x forward).
//  3. Dispatch overhead per kernel, eager vs a captured CUDA graph replayed.
// Times are CUDA events around `reps` back-to-back launches after a warm-up, best of 3.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Communicator.h"
#include "runtime/core/Executor.h"
#include "runtime/core/ProgramBuilder.h"
#include "runtime/core/Resolve.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaInternal.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

using namespace trainc::rt;
namespace schema = trainc::schema;

namespace {

const cuda::CudaApi *api = nullptr;

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s: %s\n", #x, api->cudaGetErrorString(e_));                           \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)
#define LK(x)                                                                                      \
  do {                                                                                             \
    cublasStatus_t s_ = (x);                                                                       \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      std::fprintf(stderr, "%s: %s\n", #x, api->cublasLtGetStatusString(s_));                      \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

/// Milliseconds per call of f (reps back-to-back calls on `stream`), best of 3 after a warm-up.
double msPerCall(cudaStream_t stream, int reps, const std::function<void()> &f) {
  cudaEvent_t a, b;
  CK(api->cudaEventCreateWithFlags(&a, cudaEventDefault));
  CK(api->cudaEventCreateWithFlags(&b, cudaEventDefault));
  f();
  CK(api->cudaStreamSynchronize(stream));
  double best = 1e30;
  for (int t = 0; t < 3; ++t) {
    CK(api->cudaEventRecord(a, stream));
    for (int r = 0; r < reps; ++r)
      f();
    CK(api->cudaEventRecord(b, stream));
    CK(api->cudaEventSynchronize(b));
    float ms = 0;
    CK(api->cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, double(ms) / reps);
  }
  api->cudaEventDestroy(a);
  api->cudaEventDestroy(b);
  return best;
}

void gemm(Backend &backend, DType t, int64_t M, int64_t K, int64_t N, int reps) {
  const cuda::CudaStreams &st = *cuda::cudaStreamsOf(backend);
  double flops = 2.0 * double(M) * double(N) * double(K);
  // Through the runtime: c[M, N] = a[M, K] @ w[K, N].
  ProgramBuilder b;
  int a = b.addBuffer("a", schema::ACTIVATION, t, {M, K});
  int w = b.addBuffer("w", schema::PARAMETER, t, {K, N});
  int c = b.addBuffer("c", schema::ACTIVATION, t, {M, N});
  int fn = b.addFunction("main");
  b.kernel(fn, "matmul", {ProgramBuilder::buf(a), ProgramBuilder::buf(w)}, {ProgramBuilder::buf(c)});
  auto comm = createLocalCommunicator();
  auto ex = Executor::create(b.finish(), backend, *comm);
  if (!ex.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ex.status().message()).c_str());
    std::exit(1);
  }
  double tRuntime = msPerCall(st.compute, reps, [&] { (void)(*ex)->run(); });

  // cuBLASLt directly (row-major c = a w as column-major c^T = w^T a^T).
  cudaDataType_t dt = t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasLtHandle_t lt;
  LK(api->cublasLtCreate(&lt));
  cublasLtMatmulDesc_t desc;
  LK(api->cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t la, lb, lc;
  LK(api->cublasLtMatrixLayoutCreate(&la, dt, N, K, N));
  LK(api->cublasLtMatrixLayoutCreate(&lb, dt, K, M, K));
  LK(api->cublasLtMatrixLayoutCreate(&lc, dt, N, M, N));
  size_t wsBytes = size_t(32) << 20;
  void *ws, *da, *dw, *dc;
  CK(api->cudaMalloc(&ws, wsBytes));
  CK(api->cudaMalloc(&da, size_t(M * K) * dtypeSize(t)));
  CK(api->cudaMalloc(&dw, size_t(K * N) * dtypeSize(t)));
  CK(api->cudaMalloc(&dc, size_t(M * N) * dtypeSize(t)));
  CK(api->cudaMemsetAsync(da, 0, size_t(M * K) * dtypeSize(t), st.compute));
  CK(api->cudaMemsetAsync(dw, 0, size_t(K * N) * dtypeSize(t), st.compute));
  cublasLtMatmulPreference_t pref;
  LK(api->cublasLtMatmulPreferenceCreate(&pref));
  uint64_t wsl = wsBytes;
  LK(api->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsl,
                                               sizeof(wsl)));
  cublasLtMatmulHeuristicResult_t res{};
  int n = 0;
  LK(api->cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &res, &n));
  float alpha = 1, beta = 0;
  double tDirect = msPerCall(st.compute, reps, [&] {
    LK(api->cublasLtMatmul(lt, desc, &alpha, dw, la, da, lb, &beta, dc, lc, dc, lc, &res.algo, ws,
                           wsBytes, st.compute));
  });
  double tfRuntime = flops / tRuntime * 1e-9, tfDirect = flops / tDirect * 1e-9;
  std::printf("gemm %-4s M=%-6lld K=%-6lld N=%-6lld runtime %7.1f TFLOP/s  cuBLASLt direct %7.1f "
              "TFLOP/s  ratio %.3f (target >= 0.95)\n",
              dtypeName(t), (long long)M, (long long)K, (long long)N, tfRuntime, tfDirect,
              tfRuntime / tfDirect);
  api->cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : {la, lb, lc})
    api->cublasLtMatrixLayoutDestroy(l);
  api->cublasLtMatmulDescDestroy(desc);
  api->cublasLtDestroy(lt);
  for (void *p : {ws, da, dw, dc})
    api->cudaFree(p);
}

void attention(Backend &backend, DType t, int64_t B, int64_t S, int64_t NH, int64_t NG, int64_t D,
               int reps) {
  const cuda::CudaStreams &st = *cuda::cudaStreamsOf(backend);
  const KernelSignature *fsig = findKernelSignature("attention");
  const KernelSignature *bsig = findKernelSignature("attention_backward");
  google::protobuf::RepeatedPtrField<schema::Attr> none;
  Attrs fa, ba;
  decodeAttrs(*fsig, none, fa);
  decodeAttrs(*bsig, none, ba);
  auto alloc = [&](DType dt, std::initializer_list<int64_t> dims) {
    TensorView v = makeView(dt, dims);
    v.data = backend.allocateArena(v.bytes());
    return v;
  };
  TensorView q = alloc(t, {B, S, NH, D}), k = alloc(t, {B, S, NG, D}), v = alloc(t, {B, S, NG, D});
  TensorView o = alloc(t, {B, S, NH, D}), lse = alloc(statsDType(t), {B, NH, S});
  TensorView dout = alloc(t, {B, S, NH, D}), dq = alloc(t, {B, S, NH, D});
  TensorView dk = alloc(t, {B, S, NG, D}), dv = alloc(t, {B, S, NG, D});
  TensorView fin[3] = {q, k, v}, fout[2] = {o, lse};
  TensorView bin[6] = {q, k, v, o, lse, dout}, bout[3] = {dq, dk, dv};
  KernelCtx fc{fin, 3, fout, 2, &fa, backend.kernelData(kComputeStream)};
  KernelCtx bc{bin, 6, bout, 3, &ba, backend.kernelData(kComputeStream)};
  KernelFn ff = backend.findKernel("attention"), bf = backend.findKernel("attention_backward");
  double flopsF = 4.0 * double(B) * double(NH) * double(S) * double(S) * double(D) / 2;
  double tf = msPerCall(st.compute, reps, [&] { ff(fc); });
  double tb = msPerCall(st.compute, reps, [&] { bf(bc); });
  std::printf("attention %-4s B=%lld S=%lld NH=%lld NG=%lld D=%lld causal: fwd %.2f ms %.1f TFLOP/s, "
              "bwd %.2f ms %.1f TFLOP/s, fwd+bwd %.1f TFLOP/s (own kernel; reference: H200 dense "
              "bf16 peak 989)\n",
              dtypeName(t), (long long)B, (long long)S, (long long)NH, (long long)NG, (long long)D,
              tf, flopsF / tf * 1e-9, tb, 2.5 * flopsF / tb * 1e-9,
              3.5 * flopsF / (tf + tb) * 1e-9);
  for (TensorView *x : {&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv})
    backend.freeArena(x->data);
}

/// Host dispatch per kernel: `n` dependent `scale` launches on 1024 floats, eager (the backend's
/// KernelFn each time) vs one captured CUDA graph replayed (Backend::beginCapture/endCapture/
/// replayGraph); also checks the replay's result is bitwise the
/// eager one.
void dispatch(Backend &backend, int n, int reps) {
  const cuda::CudaStreams &st = *cuda::cudaStreamsOf(backend);
  const KernelSignature *sig = findKernelSignature("scale");
  google::protobuf::RepeatedPtrField<schema::Attr> pa;
  schema::Attr *a = pa.Add();
  a->set_name("alpha");
  a->mutable_value()->set_f(1.0001);
  Attrs at;
  decodeAttrs(*sig, pa, at);
  TensorView x = makeView(DType::F32, {1024});
  x.data = backend.allocateArena(x.bytes());
  std::vector<float> init(1024, 1.0f), eager(1024), graph(1024);
  KernelCtx c{&x, 1, &x, 1, &at, backend.kernelData(kComputeStream)};
  KernelFn fn = backend.findKernel("scale");
  auto chain = [&] {
    for (int i = 0; i < n; ++i)
      fn(c);
  };
  backend.copyToDevice(x.data, init.data(), x.bytes());
  chain();
  backend.copyToHost(eager.data(), x.data, x.bytes());
  double tEager = msPerCall(st.compute, reps, chain) / n;
  backend.beginCapture("bench");
  chain();
  backend.endCapture("bench");
  backend.copyToDevice(x.data, init.data(), x.bytes());
  backend.replayGraph("bench");
  backend.copyToHost(graph.data(), x.data, x.bytes());
  double tGraph = msPerCall(st.compute, reps, [&] { backend.replayGraph("bench"); }) / n;
  bool same = eager == graph;
  std::printf("dispatch: %d dependent kernels: eager %.2f us/kernel, graph replay %.2f us/kernel, "
              "speed-up %.1fx; replay result bitwise equal to eager: %s\n",
              n, tEager * 1e3, tGraph * 1e3, tEager / tGraph, same ? "yes" : "NO");
  backend.freeArena(x.data);
}

} // namespace

int main(int argc, char **argv) {
  std::string why;
  api = cuda::loadCudaApi(&why);
  auto backend = createCudaBackend(0);
  if (!api || !backend.ok()) {
    std::printf("SKIP: %s\n", api ? std::string(backend.status().message()).c_str() : why.c_str());
    return 77;
  }
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  // Llama-3.2-1B-like: 8192 tokens (micro-batch 4 x 2048), hidden 2048, ffn 8192, vocab 128256.
  for (DType t : {DType::F32, DType::BF16}) {
    gemm(**backend, t, 4096, 4096, 4096, quick ? 5 : 20);
    gemm(**backend, t, 8192, 2048, 2048, quick ? 5 : 20);
    gemm(**backend, t, 8192, 2048, 8192, quick ? 5 : 20);
    gemm(**backend, t, 8192, 8192, 2048, quick ? 5 : 20);
  }
  dispatch(**backend, 500, quick ? 3 : 10);
  for (DType t : {DType::F32, DType::BF16}) {
    attention(**backend, t, 1, 2048, 32, 8, 64, quick ? 2 : 5);
    if (!quick)
      attention(**backend, t, 1, 4096, 32, 8, 64, 3);
  }
  return 0;
}
