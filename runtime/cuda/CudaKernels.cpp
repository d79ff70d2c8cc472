//===- CudaKernels.cpp - KernelFns of the CUDA backend (host side) --------===//
//
// One KernelFn per kernel of Kernel.h's table: it maps the KernelCtx (views, attributes) to the
// launch of the device kernels in CudaKernels.cu, or to cuBLASLt for matmul, on the stream of the
// KernelData it receives. Nothing here synchronises the host except scratch growth.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaInternal.h"
#include "runtime/cuda/LtLayout.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>

namespace trainc::rt::cuda {
namespace {

const KernelData &KD(const KernelCtx &c) { return *static_cast<const KernelData *>(c.backendData); }

/// "<base>_f32" / "_f64" / "_bf16".
std::string kname(const char *base, DType t) {
  const char *suf = t == DType::F64 ? "_f64" : t == DType::BF16 ? "_bf16" : "_f32";
  return std::string(base) + suf;
}
/// Statistics kernels (INST2): f64 or f32.
std::string sname(const char *base, DType t) {
  return std::string(base) + (t == DType::F64 ? "_f64" : "_f32");
}
size_t accSize(DType t) { return t == DType::F64 ? 8 : 4; }

bool overlaps(const TensorView &a, const TensorView &b) {
  auto pa = static_cast<const char *>(a.data), pb = static_cast<const char *>(b.data);
  return pa < pb + b.bytes() && pb < pa + a.bytes();
}

/// `in` itself, or a copy of it in stream scratch (offset `off` bytes) when `out` overlaps it.
const void *stageIfOverlap(const KernelData &kd, const TensorView &in, const TensorView &out,
                           size_t off = 0) {
  if (!overlaps(in, out))
    return in.data;
  char *s = static_cast<char *>(kd.scratch->get(*kd.api, kd.stream, off + in.bytes())) + off;
  check(*kd.api,
        kd.api->cudaMemcpyAsync(s, in.data, in.bytes(), cudaMemcpyDeviceToDevice, kd.stream),
        "cudaMemcpyAsync (staging)");
  return s;
}

const dim3 kRowBlock(256);

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

void fillKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  const TensorView &y = c.out[0];
  double v = c.attrs->f(0);
  int64_t n = y.numel;
  const char *name = nullptr;
  switch (y.dtype) {
  case DType::I32:
    name = "fill_i32";
    break;
  case DType::I64:
    name = "fill_i64";
    break;
  case DType::U8:
    name = "fill_u8";
    break;
  default:
    break;
  }
  std::string fn = name ? std::string(name) : kname("fill", y.dtype);
  if (n)
    launch(kd, fn.c_str(), gridFor(kd, n), dim3(256), 0, y.data, n, v);
}

void copyKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  if (c.out[0].data != c.in[0].data && c.in[0].bytes())
    check(*kd.api,
          kd.api->cudaMemcpyAsync(c.out[0].data, c.in[0].data, c.in[0].bytes(),
                                  cudaMemcpyDeviceToDevice, kd.stream),
          "cudaMemcpyAsync (copy)");
}

void castKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t n = c.in[0].numel;
  if (n)
    launch(kd, "cast_any", gridFor(kd, n), dim3(256), 0, c.in[0].data, int(c.in[0].dtype),
           c.out[0].data, int(c.out[0].dtype), n);
}

void addKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t n = c.in[0].numel;
  if (n)
    launch(kd, kname("add", c.in[0].dtype).c_str(), gridFor(kd, n), dim3(256), 0, c.in[0].data,
           c.in[1].data, c.out[0].data, n, c.attrs->f(0));
}

void scaleKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t n = c.in[0].numel;
  if (n)
    launch(kd, kname("scale", c.in[0].dtype).c_str(), gridFor(kd, n), dim3(256), 0, c.in[0].data,
           c.out[0].data, n, c.attrs->f(0));
}

void scaleByKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t n = c.in[0].numel;
  if (n)
    launch(kd, kname("scale_by", c.in[0].dtype).c_str(), gridFor(kd, n), dim3(256), 0,
           c.in[0].data, c.in[1].data, int(c.in[1].dtype), c.out[0].data, n);
}

void reciprocalKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  launch(kd, kname("reciprocal", c.in[0].dtype).c_str(), dim3(1), dim3(32), 0, c.in[0].data,
         c.out[0].data);
}

void addBiasKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t n = c.in[0].dim(-1), rows = c.in[0].rows();
  if (n * rows != 0)
    launch(kd, kname("add_bias", c.in[0].dtype).c_str(), gridFor(kd, n * rows), dim3(256), 0,
           c.in[0].data, c.in[1].data, c.out[0].data, rows, n);
}

void sumRowsKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t n = c.in[0].dim(-1), rows = c.in[0].rows();
  int acc = c.attrs->f(0) != 0;
  // An f32 y of bf16 x (mixed precision): the _f32w kernel.
  std::string name = kname("sum_rows", c.in[0].dtype) +
                     (c.out[0].dtype != c.in[0].dtype ? "_f32w" : "");
  if (n)
    launch(kd, name.c_str(), gridFor(kd, n), dim3(256), 0, c.in[0].data,
           c.out[0].data, rows, n, acc);
}

void geluKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t n = c.in[0].numel;
  if (n)
    launch(kd, kname("gelu", c.in[0].dtype).c_str(), gridFor(kd, n), dim3(256), 0, c.in[0].data,
           c.out[0].data, n, int(c.attrs->i(0) != 0));
}

void geluBackwardKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t n = c.in[1].numel;
  if (n)
    launch(kd, kname("gelu_backward", c.in[1].dtype).c_str(), gridFor(kd, n), dim3(256), 0,
           c.in[0].data, c.in[1].data, c.out[0].data, n, int(c.attrs->i(0) != 0));
}

void swigluKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t f = c.in[0].dim(-1) / 2, rows = c.in[0].rows();
  if (f * rows == 0)
    return;
  const void *x = stageIfOverlap(kd, c.in[0], c.out[0]);
  launch(kd, kname("swiglu", c.in[0].dtype).c_str(), gridFor(kd, f * rows), dim3(256), 0, x,
         c.out[0].data, rows, f);
}

void swigluBackwardKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t f = c.in[1].dim(-1) / 2, rows = c.in[1].rows();
  if (f * rows == 0)
    return;
  // dx[r] straddles dy rows 2r and 2r + 1: stage dy (and x unless dx is exactly x, which each
  // thread reads before it writes the same elements).
  // Size the scratch for both stagings first: growing it between them would drop the first.
  const size_t xOff = (c.in[0].bytes() + 255) / 256 * 256;
  if (overlaps(c.in[0], c.out[0]) || overlaps(c.in[1], c.out[0]))
    kd.scratch->get(*kd.api, kd.stream, xOff + c.in[1].bytes());
  const void *dy = stageIfOverlap(kd, c.in[0], c.out[0]);
  const void *x = c.in[1].data == c.out[0].data ? c.in[1].data
                                                : stageIfOverlap(kd, c.in[1], c.out[0], xOff);
  launch(kd, kname("swiglu_backward", c.in[1].dtype).c_str(), gridFor(kd, f * rows), dim3(256), 0,
         dy, x, c.out[0].data, rows, f);
}

void dropoutKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  const TensorView &x = c.in[0];
  const int64_t n = x.numel, samples = x.rank > 0 && x.dim(0) > 0 ? x.dim(0) : 1;
  // A sequence shard (seq_length > 0): the whole tensor's element index (docs/kernels.md).
  const int64_t perSample = n / samples, seqStart = c.attrs->i(2), seqLength = c.attrs->i(3);
  const int64_t rest = seqLength > 0 && x.dim(1) > 0 ? perSample / x.dim(1) : 0;
  const int64_t globalPer = seqLength > 0 ? seqLength * rest : perSample;
  const int64_t shift = seqStart * rest;
  if (n)
    launch(kd, kname("dropout", x.dtype).c_str(), gridFor(kd, n), dim3(256), 0, x.data,
           c.in[1].data, c.in[1].numel, c.out[0].data, n, perSample, globalPer, shift,
           c.attrs->f(0), c.attrs->i(1));
}

void rngOffsetKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  launch(kd, "rng_offset", dim3(1), dim3(32), 0, c.in[0].data, c.in[0].numel, c.out[0].data,
         c.attrs->i(0));
}

//===----------------------------------------------------------------------===//
// Norms, rope, embedding
//===----------------------------------------------------------------------===//

void layerNormKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t H = c.in[0].dim(-1), R = c.in[0].rows();
  if (H == 0 || R == 0)
    return;
  launch(kd, kname("layer_norm", c.in[0].dtype).c_str(), dim3(unsigned(R)), kRowBlock, 0,
         c.in[0].data, c.in[1].data, c.in[2].data, c.out[0].data, c.out[1].data, c.out[2].data, H,
         c.attrs->f(0));
}

void layerNormBackwardKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  DType t = c.in[1].dtype;
  int64_t H = c.in[1].dim(-1), R = c.in[1].rows();
  if (H == 0)
    return;
  // dgamma/dbeta first: dx may alias dy.
  // An f32 dgamma of bf16 x (mixed precision): the _f32w kernel.
  std::string params =
      kname("layer_norm_bwd_params", t) + (c.out[1].dtype != t ? "_f32w" : "");
  launch(kd, params.c_str(), gridFor(kd, H), dim3(256), 0, c.in[0].data,
         c.in[1].data, c.in[3].data, c.in[4].data, c.out[1].data, c.out[2].data,
         R, H);
  if (R)
    launch(kd, kname("layer_norm_bwd_dx", t).c_str(), dim3(unsigned(R)), kRowBlock, 0,
           c.in[0].data, c.in[1].data, c.in[2].data, c.in[3].data, c.in[4].data, c.out[0].data,
           H);
}

void rmsNormKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t H = c.in[0].dim(-1), R = c.in[0].rows();
  if (H == 0 || R == 0)
    return;
  launch(kd, kname("rms_norm", c.in[0].dtype).c_str(), dim3(unsigned(R)), kRowBlock, 0,
         c.in[0].data, c.in[1].data, c.out[0].data, c.out[1].data, H, c.attrs->f(0));
}

void rmsNormBackwardKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  DType t = c.in[1].dtype;
  int64_t H = c.in[1].dim(-1), R = c.in[1].rows();
  if (H == 0)
    return;
  std::string params =
      kname("rms_norm_bwd_params", t) + (c.out[1].dtype != t ? "_f32w" : "");
  launch(kd, params.c_str(), gridFor(kd, H), dim3(256), 0, c.in[0].data,
         c.in[1].data, c.in[3].data, c.out[1].data, R, H);
  if (R)
    launch(kd, kname("rms_norm_bwd_dx", t).c_str(), dim3(unsigned(R)), kRowBlock, 0,
           c.in[0].data, c.in[1].data, c.in[2].data, c.in[3].data, c.out[0].data, H);
}

void ropeApply(const KernelCtx &c, double sign) {
  const KernelData &kd = KD(c);
  const TensorView &x = c.in[0];
  int64_t rows = x.dims[0] * x.dims[1] * x.dims[2], N = x.dims[2], D = x.dims[3];
  int64_t rd = c.attrs->i(1) == 0 ? D : c.attrs->i(1);
  if (rows == 0)
    return;
  launch(kd, kname("rope", x.dtype).c_str(), dim3(unsigned(rows)), dim3(64), 0, x.data,
         c.in[1].data, c.out[0].data, N, D, rd, c.attrs->f(0), sign);
}
void ropeKernel(const KernelCtx &c) { ropeApply(c, 1.0); }
void ropeBackwardKernel(const KernelCtx &c) { ropeApply(c, -1.0); }

void embeddingKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  const TensorView &table = c.in[0];
  int64_t V = table.dims[0], H = table.dims[1], n = c.in[1].numel;
  if (n * H != 0)
    launch(kd, kname("embedding", table.dtype).c_str(), gridFor(kd, n * H), dim3(256), 0,
           table.data, c.in[1].data, c.out[0].data, n, V, H, c.attrs->i(0));
}

// atomicAdd into f32 (f32 and bf16 tables; bf16 accumulates in f32 scratch and is rounded once)
// or f64: the sum order over tokens is not fixed (docs/cuda.md).
void embeddingBackwardKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  const TensorView &dt = c.out[0];
  int64_t V = dt.dims[0], H = dt.dims[1], n = c.in[0].numel;
  bool accumulate = c.attrs->f(1) != 0;
  void *acc = dt.data;
  if (dt.dtype == DType::BF16) {
    acc = kd.scratch->get(*kd.api, kd.stream, size_t(V * H) * 4);
    if (accumulate)
      launch(kd, "cast_any", gridFor(kd, V * H), dim3(256), 0, static_cast<const void *>(dt.data),
             int(DType::BF16), acc, int(DType::F32), V * H);
  }
  if (!accumulate)
    check(*kd.api, kd.api->cudaMemsetAsync(acc, 0, size_t(V * H) * accSize(dt.dtype), kd.stream),
          "cudaMemsetAsync");
  if (n * H != 0)
    launch(kd, dt.dtype == DType::F64 ? "embedding_bwd_accum_f64" : "embedding_bwd_accum_f32",
           gridFor(kd, n * H), dim3(256), 0, c.in[0].data, c.in[1].data, int(c.in[1].dtype), acc,
           n, V, H, c.attrs->i(0));
  if (dt.dtype == DType::BF16 && V * H != 0)
    launch(kd, "cast_any", gridFor(kd, V * H), dim3(256), 0, static_cast<const void *>(acc),
           int(DType::F32), dt.data, int(DType::BF16), V * H);
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

constexpr int kAttnThreads = 64, kAttnTile = 16, kAttnMaxD = 256; // as CudaKernels.cu

struct Attn {
  int64_t B, S, NH, NG, D;
  int causal;
  double scale;
};
Attn attnShape(const KernelCtx &c) {
  const TensorView &q = c.in[0], &k = c.in[1];
  Attn a{q.dims[0], q.dims[1], q.dims[2], k.dims[2], q.dims[3], int(c.attrs->i(0) != 0), 0};
  a.scale = c.attrs->f(1) == 0 ? 1.0 / std::sqrt(double(a.D)) : c.attrs->f(1);
  return a;
}
void checkAttn(const Attn &a, DType t, size_t shmem) {
  if (a.D > kAttnMaxD || shmem > 48 * 1024)
    throw std::runtime_error("CUDA attention: head dim " + std::to_string(a.D) + " (" +
                             dtypeName(t) + ") exceeds this kernel's limit (head dim <= " +
                             std::to_string(kAttnMaxD) + ", f64 <= 192)");
}

void attentionKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  Attn a = attnShape(c);
  DType t = c.in[0].dtype;
  size_t shmem = 2 * kAttnTile * size_t(a.D) * accSize(t);
  checkAttn(a, t, shmem);
  if (a.B * a.S * a.NH == 0)
    return;
  dim3 grid(unsigned((a.S + kAttnThreads - 1) / kAttnThreads), unsigned(a.NH), unsigned(a.B));
  launch(kd, kname("attn_fwd", t).c_str(), grid, dim3(kAttnThreads), shmem, c.in[0].data,
         c.in[1].data, c.in[2].data, c.out[0].data, c.out[1].data, a.S, a.NH, a.NG, a.D, a.causal,
         a.scale);
}

/// attention_dropout(_backward): not implemented by the CUDA kernels (the CPU backend has them);
/// the program is refused at its first launch rather than run without the mask.
void attentionDropoutRefused(const KernelCtx &c) {
  throw std::runtime_error("CUDA attention: attention dropout (p = " +
                           std::to_string(c.attrs->f(2)) +
                           ") is not implemented on the CUDA backend; compile with "
                           "--attention-dropout 0.0 or run with --backend cpu");
}

/// attention_segments, attention_dropout_segments and their backward (--reset-attention-mask):
/// not implemented by the CUDA kernels either; refused at the first launch, before touching
/// the device, rather than run without the document mask.
void attentionSegmentsRefused(const KernelCtx &) {
  throw std::runtime_error("CUDA attention: --reset-attention-mask (the attention_segments "
                           "kernels, no attention across documents) is not implemented on the "
                           "CUDA backend; compile without --reset-attention-mask or run with "
                           "--backend cpu");
}

// q, k, v, o, lse, do -> dq, dk, dv
void attentionBackwardKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  Attn a = attnShape(c);
  DType t = c.in[0].dtype;
  size_t shmem = 2 * kAttnTile * size_t(a.D) * accSize(t);
  size_t shmemKV = shmem + 2 * kAttnTile * accSize(t);
  checkAttn(a, t, shmemKV);
  if (a.B * a.S * a.NH == 0)
    return;
  void *Di = kd.scratch->get(*kd.api, kd.stream, size_t(a.B * a.NH * a.S) * accSize(t));
  launch(kd, kname("attn_bwd_dot", t).c_str(), gridFor(kd, a.B * a.S * a.NH), dim3(256), 0,
         c.in[3].data, c.in[5].data, Di, a.B, a.S, a.NH, a.D);
  const void *lse = c.in[4].data;
  const void *Dic = Di;
  unsigned tiles = unsigned((a.S + kAttnThreads - 1) / kAttnThreads);
  launch(kd, kname("attn_bwd_dq", t).c_str(), dim3(tiles, unsigned(a.NH), unsigned(a.B)),
         dim3(kAttnThreads), shmem, c.in[0].data, c.in[1].data, c.in[2].data, c.in[5].data, lse,
         Dic, c.out[0].data, a.S, a.NH, a.NG, a.D, a.causal, a.scale);
  launch(kd, kname("attn_bwd_dkdv", t).c_str(), dim3(tiles, unsigned(a.NG), unsigned(a.B)),
         dim3(kAttnThreads), shmemKV, c.in[0].data, c.in[1].data, c.in[2].data, c.in[5].data, lse,
         Dic, c.out[1].data, c.out[2].data, a.S, a.NH, a.NG, a.D, a.causal, a.scale);
}

//===----------------------------------------------------------------------===//
// Cross-entropy (VocabShard of the CPU backend)
//===----------------------------------------------------------------------===//

struct Shard {
  int64_t vs, lo, hi;
};
Shard shardOf(const KernelCtx &c, int64_t V) {
  Shard s;
  s.vs = c.attrs->i(0);
  int64_t valid = c.attrs->i(1);
  s.lo = std::clamp<int64_t>(-s.vs, 0, V);
  s.hi = valid < 0 ? V : std::clamp<int64_t>(valid - s.vs, 0, V);
  s.hi = std::max(s.hi, s.lo);
  return s;
}

void crossEntropyKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  DType t = c.in[0].dtype;
  int64_t N = c.in[0].dims[0], V = c.in[0].dims[1];
  Shard s = shardOf(c, V);
  double *rowLoss =
      static_cast<double *>(kd.scratch->get(*kd.api, kd.stream, size_t(std::max<int64_t>(N, 1)) * 8));
  if (N)
    launch(kd, kname("ce_rows", t).c_str(), dim3(unsigned(N)), kRowBlock, 0, c.in[0].data,
           c.in[1].data, c.in[2].data, c.out[2].data, rowLoss, V, s.vs, s.lo, s.hi);
  const void *null = nullptr;
  void *nullOut = nullptr;
  launch(kd, sname("ce_reduce", t).c_str(), dim3(1), dim3(256), 0, c.in[2].data,
         static_cast<const double *>(rowLoss), null, null, null, nullOut, N, c.out[0].data,
         c.out[1].data);
}

void crossEntropyBackwardKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  DType t = c.in[0].dtype;
  int64_t N = c.in[0].dims[0], V = c.in[0].dims[1];
  Shard s = shardOf(c, V);
  if (N * V != 0)
    launch(kd, kname("ce_backward", t).c_str(), gridFor(kd, N * V), dim3(256), 0, c.in[0].data,
           c.in[1].data, c.in[2].data, c.in[3].data, c.in[4].data, c.out[0].data, N, V, s.vs,
           s.lo, s.hi);
}

void ceLocalMaxKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t N = c.in[0].dims[0], V = c.in[0].dims[1];
  Shard s = shardOf(c, V);
  if (N)
    launch(kd, kname("ce_local_max", c.in[0].dtype).c_str(), dim3(unsigned(N)), kRowBlock, 0,
           c.in[0].data, c.out[0].data, V, s.lo, s.hi);
}

void ceLocalSumExpKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t N = c.in[0].dims[0], V = c.in[0].dims[1];
  Shard s = shardOf(c, V);
  if (N)
    launch(kd, kname("ce_local_sumexp", c.in[0].dtype).c_str(), dim3(unsigned(N)), kRowBlock, 0,
           c.in[0].data, c.in[1].data, c.out[0].data, V, s.lo, s.hi);
}

void ceTargetLogitKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t N = c.in[0].dims[0], V = c.in[0].dims[1];
  Shard s = shardOf(c, V);
  if (N)
    launch(kd, kname("ce_target_logit", c.in[0].dtype).c_str(), gridFor(kd, N), dim3(256), 0,
           c.in[0].data, c.in[1].data, c.out[0].data, N, V, s.vs, s.lo, s.hi);
}

void ceCombineKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  int64_t N = c.in[0].numel;
  const double *noRows = nullptr;
  launch(kd, sname("ce_reduce", c.in[0].dtype).c_str(), dim3(1), dim3(256), 0, c.in[3].data,
         noRows, c.in[0].data, c.in[1].data, c.in[2].data, c.out[2].data, N, c.out[0].data,
         c.out[1].data);
}

//===----------------------------------------------------------------------===//
// Optimizer pieces
//===----------------------------------------------------------------------===//

void adamwKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  const Attrs &a = *c.attrs;
  DType t = c.in[0].dtype;
  int64_t n = c.in[0].numel;
  size_t bytes = c.in[0].bytes();
  // Outputs not in place start as copies (the update flag is on the device; skipped steps and
  // elements outside the segments keep the input values).
  for (auto [src, dst] : {std::pair{0, 0}, std::pair{2, 1}, std::pair{3, 2}})
    if (c.in[src].data != c.out[dst].data && bytes)
      check(*kd.api,
            kd.api->cudaMemcpyAsync(c.out[dst].data, c.in[src].data, bytes,
                                    cudaMemcpyDeviceToDevice, kd.stream),
            "cudaMemcpyAsync (adamw)");
  auto run = [&](int64_t begin, int64_t end, int decay) {
    if (end <= begin)
      return;
    launch(kd, sname("adamw", t).c_str(), gridFor(kd, end - begin), dim3(256), 0, c.in[0].data,
           c.in[1].data, c.in[2].data, c.in[3].data, c.in[4].data, c.in[5].data, c.in[6].data,
           c.in[7].data, c.in[8].data, c.out[0].data, c.out[1].data, c.out[2].data, begin, end,
           decay, a.f(0), a.f(1), a.f(2));
  };
  const std::vector<int64_t> &seg = a.ints(4);
  if (seg.empty())
    run(0, n, int(a.i(3) != 0));
  else
    for (size_t s = 0; s + 2 < seg.size(); s += 3)
      run(seg[s], seg[s + 1], int(seg[s + 2] != 0));
}

/// adamw on the f32 master weights (outputs 0..2), then param (output 3) = bf16(master), rounded to
/// nearest even by cast_any, over every element (as the CPU kernel).
void adamwMasterKernel(const KernelCtx &c) {
  adamwKernel(c);
  KernelCtx copy = c;
  copy.in = &c.out[0];
  copy.numIn = 1;
  copy.out = &c.out[3];
  copy.numOut = 1;
  castKernel(copy);
}

void lossScaleUpdateKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  const Attrs &a = *c.attrs;
  launch(kd, "loss_scale_update", dim3(1), dim3(32), 0, c.in[0].data, c.in[1].data, c.in[2].data,
         c.in[3].data, c.out[0].data, c.out[1].data, c.out[2].data, a.f(0), a.f(1), a.i(2), a.i(3),
         a.f(4));
}

constexpr int kSumSqBlocks = 256; // as CudaKernels.cu

void sumSquaresKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  DType t = c.in[0].dtype;
  double *partials = static_cast<double *>(kd.scratch->get(*kd.api, kd.stream, kSumSqBlocks * 8));
  // With segments (CPU kernel's semantics): one pass per flagged range, accumulating after the
  // first. (Not run on a GPU yet.)
  const std::vector<int64_t> &seg = c.attrs->ints(1);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  if (seg.empty())
    ranges.push_back({0, c.in[0].numel});
  for (size_t s = 0; s + 2 < seg.size(); s += 3)
    if (seg[s + 2] != 0 && seg[s + 1] > seg[s])
      ranges.push_back({seg[s], seg[s + 1]});
  if (ranges.empty())
    ranges.push_back({0, 0}); // writes 0 (or keeps out with beta = 1)
  for (size_t r = 0; r < ranges.size(); ++r) {
    const char *base = static_cast<const char *>(c.in[0].data) + ranges[r].first * dtypeSize(t);
    launch(kd, kname("sumsq_partial", t).c_str(), dim3(kSumSqBlocks), dim3(256), 0,
           static_cast<const void *>(base), ranges[r].second - ranges[r].first, partials);
    launch(kd, sname("sumsq_final", t).c_str(), dim3(1), dim3(32), 0,
           static_cast<const double *>(partials), int(kSumSqBlocks), c.out[0].data,
           int(r > 0 || c.attrs->f(0) != 0));
  }
}

void gradNormFinalizeKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  launch(kd, sname("grad_norm_finalize", c.in[0].dtype).c_str(), dim3(1), dim3(32), 0,
         c.in[0].data, c.out[0].data, c.out[1].data, c.out[2].data, c.attrs->f(0));
}

//===----------------------------------------------------------------------===//
// matmul through cuBLASLt (row-major operands as column-major transposes: C^T = op(B)^T op(A)^T)
//===----------------------------------------------------------------------===//

struct LtPlan {
  const CudaApi *api = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool haveAlgo = false;
  ~LtPlan() {
    if (!api)
      return;
    if (desc)
      api->cublasLtMatmulDescDestroy(desc);
    for (auto l : {a, b, c})
      if (l)
        api->cublasLtMatrixLayoutDestroy(l);
  }
};

void ltCheck(const CudaApi &api, cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt: ") + what + " failed: " +
                             api.cublasLtGetStatusString(s));
}

using PlanKey = std::tuple<const void *, int, int64_t, int64_t, int64_t, int64_t, bool, bool, bool>;
std::mutex gPlanMu;
std::map<PlanKey, std::unique_ptr<LtPlan>> gPlans;

cublasLtMatrixLayout_t layout(const CudaApi &api, cudaDataType_t t, int64_t rows, int64_t cols,
                              int64_t ld, int32_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  ltCheck(api, api.cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), ld),
          "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    ltCheck(api,
            api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                 sizeof(batch)),
            "cublasLtMatrixLayoutSetAttribute");
    ltCheck(api,
            api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                 &stride, sizeof(stride)),
            "cublasLtMatrixLayoutSetAttribute");
  }
  return l;
}

} // namespace

/// c[..., M, N] = alpha op(a) op(b) + beta c with cuBLASLt; exposed for bench/ (same plan cache).
void cublasLtMatmulRowMajor(const KernelData &kd, DType t, int64_t batch, int64_t M, int64_t N,
                            int64_t K, bool ta, bool tb, bool bBatched, const void *a,
                            const void *b, void *c, double alpha, double beta) {
  const CudaApi &api = *kd.api;
  if (ta && !bBatched && batch > 1) {
    // A transposed a against a shared weight: one GEMM per batch (no zero-stride batching).
    const size_t e = dtypeSize(t);
    for (int64_t bi = 0; bi < batch; ++bi)
      cublasLtMatmulRowMajor(kd, t, 1, M, N, K, ta, tb, false,
                             static_cast<const char *>(a) + size_t(bi * M * K) * e, b,
                             static_cast<char *>(c) + size_t(bi * M * N) * e, alpha, beta);
    return;
  }
  const LtGemm g = ltGemmFor(batch, M, N, K, ta, tb, bBatched);
  PlanKey key{kd.lt, int(t), g.batch, g.n, N, K, ta, tb, g.a.stride != 0};
  LtPlan *plan;
  {
    std::lock_guard<std::mutex> lock(gPlanMu);
    std::unique_ptr<LtPlan> &p = gPlans[key];
    if (!p) {
      auto np = std::make_unique<LtPlan>();
      np->api = &api;
      cudaDataType_t dt = t == DType::F64 ? CUDA_R_64F : t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
      cublasComputeType_t ct = t == DType::F64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
      cudaDataType_t st = t == DType::F64 ? CUDA_R_64F : CUDA_R_32F;
      ltCheck(api, api.cublasLtMatmulDescCreate(&np->desc, ct, st), "cublasLtMatmulDescCreate");
      cublasOperation_t opA = g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
      cublasOperation_t opB = g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
      ltCheck(api,
              api.cublasLtMatmulDescSetAttribute(np->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA,
                                                 sizeof(opA)),
              "cublasLtMatmulDescSetAttribute");
      ltCheck(api,
              api.cublasLtMatmulDescSetAttribute(np->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB,
                                                 sizeof(opB)),
              "cublasLtMatmulDescSetAttribute");
      int32_t bc = int32_t(g.batch);
      np->a = layout(api, dt, g.a.rows, g.a.cols, g.a.ld, bc, g.a.stride);
      np->b = layout(api, dt, g.b.rows, g.b.cols, g.b.ld, bc, g.b.stride);
      np->c = layout(api, dt, g.c.rows, g.c.cols, g.c.ld, bc, g.c.stride);
      cublasLtMatmulPreference_t pref = nullptr;
      ltCheck(api, api.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
      uint64_t ws = kd.workspaceBytes;
      api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                               sizeof(ws));
      cublasLtMatmulHeuristicResult_t res{};
      int returned = 0;
      cublasStatus_t s = api.cublasLtMatmulAlgoGetHeuristic(kd.lt, np->desc, np->a, np->b, np->c,
                                                            np->c, pref, 1, &res, &returned);
      api.cublasLtMatmulPreferenceDestroy(pref);
      if (s != CUBLAS_STATUS_SUCCESS || returned == 0)
        throw std::runtime_error("cuBLASLt: no algorithm for matmul " + std::string(dtypeName(t)) +
                                 " batch " + std::to_string(g.batch) + " M " + std::to_string(g.n) +
                                 " N " + std::to_string(N) + " K " + std::to_string(K));
      np->algo = res.algo;
      np->haveAlgo = true;
      p = std::move(np);
    }
    plan = p.get();
  }
  double a64 = alpha, b64 = beta;
  float a32 = float(alpha), b32 = float(beta);
  const void *pa = t == DType::F64 ? static_cast<const void *>(&a64) : &a32;
  const void *pb = t == DType::F64 ? static_cast<const void *>(&b64) : &b32;
  ltCheck(api,
          api.cublasLtMatmul(kd.lt, plan->desc, pa, b, plan->a, a, plan->b, pb, c, plan->c, c,
                             plan->c, &plan->algo, kd.workspace, kd.workspaceBytes, kd.stream),
          "cublasLtMatmul");
}

namespace {

void matmulKernel(const KernelCtx &c) {
  const KernelData &kd = KD(c);
  const TensorView &a = c.in[0], &b = c.in[1], &o = c.out[0];
  bool ta = c.attrs->i(0) != 0, tb = c.attrs->i(1) != 0;
  int64_t M = ta ? a.dim(-1) : a.dim(-2), K = ta ? a.dim(-2) : a.dim(-1);
  int64_t N = tb ? b.dim(-2) : b.dim(-1);
  int64_t batch = 1;
  for (int d = 0; d + 2 < a.rank; ++d)
    batch *= a.dims[d];
  double alpha = c.attrs->f(2), beta = c.attrs->f(3);
  if (o.dtype != a.dtype) // bf16 x bf16 -> f32 (docs/kernels.md): CPU backend only so far
    throw std::runtime_error("CUDA matmul: output dtype " + std::string(dtypeName(o.dtype)) +
                             " differs from the inputs' " + dtypeName(a.dtype) +
                             " (mixed-precision matmul is implemented on the CPU backend only)");
  if (M == 0 || N == 0 || batch == 0)
    return;
  if (K == 0) {
    if (beta == 0)
      check(*kd.api, kd.api->cudaMemsetAsync(o.data, 0, o.bytes(), kd.stream), "cudaMemsetAsync");
    return;
  }
  cublasLtMatmulRowMajor(kd, a.dtype, batch, M, N, K, ta, tb, b.rank > 2, a.data, b.data, o.data,
                         alpha, beta);
}

} // namespace

const KernelTable &cudaKernelTable() {
  static const KernelTable table = {
      {"fill", fillKernel},
      {"copy", copyKernel},
      {"cast", castKernel},
      {"add", addKernel},
      {"scale", scaleKernel},
      {"scale_by", scaleByKernel},
      {"reciprocal", reciprocalKernel},
      {"matmul", matmulKernel},
      {"add_bias", addBiasKernel},
      {"sum_rows", sumRowsKernel},
      {"embedding", embeddingKernel},
      {"embedding_backward", embeddingBackwardKernel},
      {"layer_norm", layerNormKernel},
      {"layer_norm_backward", layerNormBackwardKernel},
      {"rms_norm", rmsNormKernel},
      {"rms_norm_backward", rmsNormBackwardKernel},
      {"rope", ropeKernel},
      {"rope_backward", ropeBackwardKernel},
      {"attention", attentionKernel},
      {"attention_backward", attentionBackwardKernel},
      {"attention_dropout", attentionDropoutRefused},
      {"attention_dropout_backward", attentionDropoutRefused},
      {"attention_segments", attentionSegmentsRefused},
      {"attention_segments_backward", attentionSegmentsRefused},
      {"attention_dropout_segments", attentionSegmentsRefused},
      {"attention_dropout_segments_backward", attentionSegmentsRefused},
      {"gelu", geluKernel},
      {"gelu_backward", geluBackwardKernel},
      {"swiglu", swigluKernel},
      {"swiglu_backward", swigluBackwardKernel},
      {"dropout", dropoutKernel},
      {"dropout_backward", dropoutKernel},
      {"rng_offset", rngOffsetKernel},
      {"cross_entropy", crossEntropyKernel},
      {"cross_entropy_backward", crossEntropyBackwardKernel},
      {"ce_local_max", ceLocalMaxKernel},
      {"ce_local_sumexp", ceLocalSumExpKernel},
      {"ce_target_logit", ceTargetLogitKernel},
      {"ce_combine", ceCombineKernel},
      {"adamw", adamwKernel},
      {"sum_squares", sumSquaresKernel},
      {"grad_norm_finalize", gradNormFinalizeKernel},
      {"adamw_master", adamwMasterKernel},
      {"loss_scale_update", lossScaleUpdateKernel},
  };
  return table;
}

} // namespace trainc::rt::cuda
