//===- AttentionBench.cpp - attention forward and forward + backward ------===//
//
// Times the CPU backend's `attention` and `attention_backward` kernels, called directly (no
// executor), at B = 1, S = 1024, NH = NG = 8, D = 64, f32, causal: one warm-up, then the best of
// 5 repetitions. FLOPs: the causal half of 4 * B * H * S^2 * D for the forward, 2.5 times that for
// the backward (forward + backward = 3.5 times). Then the same with attention dropout p = 0.1
// (attention_dropout kernels: one Philox call per 4 probabilities, forward and backward).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Backend.h"
#include "runtime/core/Kernel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

using namespace trainc::rt;

namespace {

template <typename F> double bestSeconds(int reps, F &&f) {
  f(); // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
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

int main() {
  const int64_t B = 1, S = 1024, NH = 8, NG = 8, D = 64;
  const int reps = 5;
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

  bool ok = true;
  double tFwd = bestSeconds(reps, [&] { ok &= call(*backend, "attention", {qv, kv, vv}, {ov, lv}, attrs); });
  double tBoth = bestSeconds(reps, [&] {
    ok &= call(*backend, "attention", {qv, kv, vv}, {ov, lv}, attrs);
    ok &= call(*backend, "attention_backward", {qv, kv, vv, ov, lv, dov}, {dqv, dkv, dvv}, attrs);
  });
  if (!ok)
    return 1;

  // Attention dropout p = 0.1: attrs causal, scale, p, op_id; key (seed, iteration, first sample).
  int64_t key[3] = {1234, 1, 0};
  TensorView rv = makeView(DType::I64, {3}, key);
  Attrs dattrs;
  dattrs.scalars = {1, 0, 0.1, 3};
  dattrs.lists = {{}, {}, {}, {}};
  double tDropFwd = bestSeconds(
      reps, [&] { ok &= call(*backend, "attention_dropout", {qv, kv, vv, rv}, {ov, lv}, dattrs); });
  double tDropBoth = bestSeconds(reps, [&] {
    ok &= call(*backend, "attention_dropout", {qv, kv, vv, rv}, {ov, lv}, dattrs);
    ok &= call(*backend, "attention_dropout_backward", {qv, kv, vv, ov, lv, dov, rv},
               {dqv, dkv, dvv}, dattrs);
  });
  if (!ok)
    return 1;

  double fwdFlops = 0.5 * 4.0 * double(B) * double(NH) * double(S) * double(S) * double(D);
  double bothFlops = 3.5 * fwdFlops;
  std::printf("attention fwd  S=%lld H=%lld D=%lld: %.2f ms (%.1f GFLOP/s)\n", (long long)S,
              (long long)NH, (long long)D, tFwd * 1e3, fwdFlops / tFwd * 1e-9);
  std::printf("attention fwd+bwd S=%lld H=%lld D=%lld: %.2f ms (%.1f GFLOP/s)\n", (long long)S,
              (long long)NH, (long long)D, tBoth * 1e3, bothFlops / tBoth * 1e-9);
  std::printf("attention bwd (fwd+bwd - fwd) S=%lld H=%lld D=%lld: %.2f ms (%.1f GFLOP/s)\n",
              (long long)S, (long long)NH, (long long)D, (tBoth - tFwd) * 1e3,
              2.5 * fwdFlops / (tBoth - tFwd) * 1e-9);
  std::printf("attention_dropout p=0.1 fwd: %.2f ms (%.2fx attention), fwd+bwd: %.2f ms (%.2fx)\n",
              tDropFwd * 1e3, tDropFwd / tFwd, tDropBoth * 1e3, tDropBoth / tBoth);
  return 0;
}
