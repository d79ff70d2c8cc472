//===- KernelSignatures.cpp - The table of kernels and their checks ------===//
//
// One entry per kernel: operand counts, attributes and a verifier of dtypes and shapes.
// Conventions (docs/kernels.md): T is a float dtype (f32, f64, bf16, f16); S = statsDType(T).
// Activations are row-major; attention tensors are [batch, seq, heads, head_dim] ("bshd").
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Kernel.h"

#include <cmath>
#include <sstream>

namespace trainc::rt {
namespace {

/// Records the first failed check as a message.
class Check {
public:
  explicit Check(const KernelCtx &c) : c(c) {}
  const TensorView &in(int i) const { return c.in[i]; }
  const TensorView &out(int i) const { return c.out[i]; }
  double attr(int k) const { return c.attrs->scalars[k]; }

  bool ok() const { return err.empty(); }
  std::string result() const { return err; }

  void fail(const std::string &m) {
    if (err.empty())
      err = m;
  }
  static std::string name(bool isOut, int i) {
    return (isOut ? "output " : "input ") + std::to_string(i);
  }
  const TensorView &v(bool isOut, int i) const { return isOut ? out(i) : in(i); }

  void floatT(bool isOut, int i) {
    DType t = v(isOut, i).dtype;
    if (t != DType::F32 && t != DType::F64 && t != DType::BF16 && t != DType::F16)
      fail(name(isOut, i) + ": dtype " + std::string(dtypeName(t)) +
           ", expected f32, f64, bf16 or f16");
  }
  void dtype(bool isOut, int i, DType want) {
    DType t = v(isOut, i).dtype;
    if (t != want)
      fail(name(isOut, i) + ": dtype " + std::string(dtypeName(t)) + ", expected " +
           std::string(dtypeName(want)));
  }
  void rank(bool isOut, int i, int r) {
    if (v(isOut, i).rank != r)
      fail(name(isOut, i) + ": rank " + std::to_string(v(isOut, i).rank) + " (shape " +
           v(isOut, i).shapeString() + "), expected rank " + std::to_string(r));
  }
  void minRank(bool isOut, int i, int r) {
    if (v(isOut, i).rank < r)
      fail(name(isOut, i) + ": rank " + std::to_string(v(isOut, i).rank) + " (shape " +
           v(isOut, i).shapeString() + "), expected rank >= " + std::to_string(r));
  }
  void scalar(bool isOut, int i) {
    if (v(isOut, i).numel != 1)
      fail(name(isOut, i) + ": shape " + v(isOut, i).shapeString() +
           ", expected a scalar (one element)");
  }
  void sameShape(bool aOut, int a, bool bOut, int b) {
    const TensorView &x = v(aOut, a), &y = v(bOut, b);
    bool same = x.rank == y.rank;
    for (int d = 0; same && d < x.rank; ++d)
      same = x.dims[d] == y.dims[d];
    if (!same)
      fail(name(bOut, b) + ": shape " + y.shapeString() + ", expected " + x.shapeString() +
           " (the shape of " + name(aOut, a) + ")");
  }
  void sameNumel(bool aOut, int a, bool bOut, int b) {
    if (v(aOut, a).numel != v(bOut, b).numel)
      fail(name(bOut, b) + ": " + std::to_string(v(bOut, b).numel) + " elements, expected " +
           std::to_string(v(aOut, a).numel) + " (as " + name(aOut, a) + ")");
  }
  void sameDType(bool aOut, int a, bool bOut, int b) {
    if (v(aOut, a).dtype != v(bOut, b).dtype)
      fail(name(bOut, b) + ": dtype " + std::string(dtypeName(v(bOut, b).dtype)) +
           ", expected " + std::string(dtypeName(v(aOut, a).dtype)) + " (as " +
           name(aOut, a) + ")");
  }
  void dimEq(bool isOut, int i, int d, int64_t want, const char *what) {
    const TensorView &x = v(isOut, i);
    int dd = d < 0 ? x.rank + d : d;
    if (dd < 0 || dd >= x.rank || x.dims[dd] != want)
      fail(name(isOut, i) + ": shape " + x.shapeString() + ", expected dim " +
           std::to_string(dd) + " = " + std::to_string(want) + " (" + what + ")");
  }
  void numelEq(bool isOut, int i, int64_t want, const char *what) {
    if (v(isOut, i).numel != want)
      fail(name(isOut, i) + ": shape " + v(isOut, i).shapeString() + " has " +
           std::to_string(v(isOut, i).numel) + " elements, expected " + std::to_string(want) +
           " (" + what + ")");
  }
  void attrCond(bool cond, const std::string &m) {
    if (!cond)
      fail("attribute " + m);
  }

private:
  const KernelCtx &c;
  std::string err;
};

constexpr bool I = false; // input
constexpr bool O = true;  // output

std::string verifyFill(const KernelCtx &c) {
  Check k(c);
  if (c.out[0].dtype == DType::Invalid)
    k.fail("output 0: invalid dtype");
  return k.result();
}

std::string verifyUnarySame(const KernelCtx &c) {
  Check k(c);
  k.floatT(I, 0);
  k.sameDType(I, 0, O, 0);
  k.sameNumel(I, 0, O, 0);
  return k.result();
}

std::string verifyCopy(const KernelCtx &c) {
  Check k(c);
  k.sameDType(I, 0, O, 0);
  k.sameNumel(I, 0, O, 0);
  return k.result();
}

std::string verifyCast(const KernelCtx &c) {
  Check k(c);
  k.floatT(I, 0);
  k.floatT(O, 0);
  k.sameNumel(I, 0, O, 0);
  return k.result();
}

std::string verifyAdd(const KernelCtx &c) {
  Check k(c);
  k.floatT(I, 0);
  k.sameDType(I, 0, I, 1);
  k.sameDType(I, 0, O, 0);
  k.sameNumel(I, 0, I, 1);
  k.sameNumel(I, 0, O, 0);
  return k.result();
}

std::string verifyScaleBy(const KernelCtx &c) {
  Check k(c);
  k.floatT(I, 0);
  k.floatT(I, 1);
  k.scalar(I, 1);
  k.sameDType(I, 0, O, 0);
  k.sameNumel(I, 0, O, 0);
  return k.result();
}

std::string verifyScalarUnary(const KernelCtx &c) {
  Check k(c);
  k.floatT(I, 0);
  k.scalar(I, 0);
  k.sameDType(I, 0, O, 0);
  k.scalar(O, 0);
  return k.result();
}

// matmul: c[..., M, N] = alpha * op(a)[..., M, K] @ op(b)[..., K, N] + beta * c. c has a's dtype,
// or f32 when a and b are bf16 or f16 (fp32 accumulation into an fp32 output: with beta = 1 the weight
// gradient GEMM accumulates into an fp32 main grad, Megatron's gradient-accumulation fusion).
std::string verifyMatmul(const KernelCtx &c) {
  Check k(c);
  k.floatT(I, 0);
  k.sameDType(I, 0, I, 1);
  const bool half = c.in[0].dtype == DType::BF16 || c.in[0].dtype == DType::F16;
  if (!(half && c.out[0].dtype == DType::F32) && c.out[0].dtype != c.in[0].dtype)
    k.fail("output 0: dtype " + std::string(dtypeName(c.out[0].dtype)) + ", expected " +
           dtypeName(c.in[0].dtype) + " (as input 0)" +
           (half ? " or f32 (fp32 accumulation)" : ""));
  k.minRank(I, 0, 2);
  k.minRank(I, 1, 2);
  k.minRank(O, 0, 2);
  if (!k.ok())
    return k.result();
  const TensorView &a = c.in[0], &b = c.in[1], &o = c.out[0];
  bool ta = c.attrs->scalars[0] != 0, tb = c.attrs->scalars[1] != 0;
  int64_t M = ta ? a.dim(-1) : a.dim(-2), K = ta ? a.dim(-2) : a.dim(-1);
  int64_t Kb = tb ? b.dim(-1) : b.dim(-2), N = tb ? b.dim(-2) : b.dim(-1);
  if (K != Kb)
    k.fail("input 1: shape " + b.shapeString() + ", expected contraction dim " +
           std::to_string(K) + " (from input 0 shape " + a.shapeString() + ")");
  if (o.rank != a.rank)
    k.fail("output 0: rank " + std::to_string(o.rank) + ", expected " + std::to_string(a.rank) +
           " (the rank of input 0)");
  for (int d = 0; k.ok() && d + 2 < a.rank; ++d)
    if (o.dims[d] != a.dims[d])
      k.fail("output 0: shape " + o.shapeString() + ", expected batch dim " +
             std::to_string(d) + " = " + std::to_string(a.dims[d]));
  if (b.rank != 2) {
    if (b.rank != a.rank)
      k.fail("input 1: rank " + std::to_string(b.rank) + ", expected 2 or " +
             std::to_string(a.rank) + " (the rank of input 0)");
    for (int d = 0; k.ok() && d + 2 < a.rank; ++d)
      if (b.dims[d] != a.dims[d])
        k.fail("input 1: shape " + b.shapeString() + ", expected batch dim " +
               std::to_string(d) + " = " + std::to_string(a.dims[d]));
  }
  if (k.ok()) {
    k.dimEq(O, 0, -2, M, "rows of op(input 0)");
    k.dimEq(O, 0, -1, N, "columns of op(input 1)");
  }
  k.attrCond(c.attrs->scalars[3] == 0 || c.attrs->scalars[3] == 1,
             "beta = " + std::to_string(c.attrs->scalars[3]) + ", expected 0 or 1");
  return k.result();
}

std::string verifyAddBias(const KernelCtx &c) {
  Check k(c);
  k.floatT(I, 0);
  k.sameDType(I, 0, I, 1);
  k.sameDType(I, 0, O, 0);
  k.minRank(I, 0, 1);
  k.rank(I, 1, 1);
  if (k.ok())
    k.dimEq(I, 1, 0, c.in[0].dim(-1), "last dim of input 0");
  k.sameShape(I, 0, O, 0);
  return k.result();
}

std::string verifySumRows(const KernelCtx &c) {
  Check k(c);
  k.floatT(I, 0);
  // y: x's dtype, or f32 for bf16/fp16 x (mixed precision: a bias gradient's
  // fp32 sum).
  if (!((c.in[0].dtype == DType::BF16 || c.in[0].dtype == DType::F16) &&
        c.out[0].dtype == DType::F32))
    k.sameDType(I, 0, O, 0);
  k.minRank(I, 0, 1);
  k.rank(O, 0, 1);
  if (k.ok())
    k.dimEq(O, 0, 0, c.in[0].dim(-1), "last dim of input 0");
  k.attrCond(c.attrs->scalars[0] == 0 || c.attrs->scalars[0] == 1, "beta: expected 0 or 1");
  return k.result();
}

std::string verifyEmbedding(const KernelCtx &c) {
  // table[V, H], ids[...] i32 -> y[..., H]
  Check k(c);
  k.floatT(I, 0);
  k.rank(I, 0, 2);
  k.dtype(I, 1, DType::I32);
  k.sameDType(I, 0, O, 0);
  if (k.ok()) {
    k.numelEq(O, 0, c.in[1].numel * c.in[0].dim(1), "ids count x hidden");
    k.dimEq(O, 0, -1, c.in[0].dim(1), "hidden size of the table");
  }
  return k.result();
}

std::string verifyEmbeddingBackward(const KernelCtx &c) {
  // ids[...] i32, dy[..., H] -> dtable[V, H]
  Check k(c);
  k.dtype(I, 0, DType::I32);
  k.floatT(I, 1);
  k.sameDType(I, 1, O, 0);
  k.rank(O, 0, 2);
  if (k.ok()) {
    k.dimEq(I, 1, -1, c.out[0].dim(1), "hidden size of the table");
    k.numelEq(I, 1, c.in[0].numel * c.out[0].dim(1), "ids count x hidden");
  }
  k.attrCond(c.attrs->scalars[1] == 0 || c.attrs->scalars[1] == 1, "beta: expected 0 or 1");
  return k.result();
}

void checkRowStats(Check &k, const KernelCtx &c, bool isOut, int i, int64_t rows) {
  k.dtype(isOut, i, statsDType(c.in[0].dtype));
  k.numelEq(isOut, i, rows, "one per row");
}

std::string verifyLayerNorm(const KernelCtx &c) {
  // x[..., H], gamma[H], beta[H] -> y, mean[R], rstd[R]
  Check k(c);
  k.floatT(I, 0);
  k.minRank(I, 0, 1);
  if (!k.ok())
    return k.result();
  int64_t H = c.in[0].dim(-1), R = c.in[0].rows();
  for (int i = 1; i <= 2; ++i) {
    k.sameDType(I, 0, I, i);
    k.rank(I, i, 1);
    k.dimEq(I, i, 0, H, "hidden size");
  }
  k.sameDType(I, 0, O, 0);
  k.sameShape(I, 0, O, 0);
  checkRowStats(k, c, O, 1, R);
  checkRowStats(k, c, O, 2, R);
  k.attrCond(c.attrs->scalars[0] > 0, "eps: expected > 0");
  return k.result();
}

/// A norm backward's weight (bias) gradient output `i`: x's dtype, or f32 for
/// bf16/fp16 x (mixed precision: an fp32 partial sum reduced over tp before
/// rounding).
void paramGradDType(Check &k, const KernelCtx &c, int i) {
  DType x = c.in[1].dtype;
  if ((x == DType::BF16 || x == DType::F16) && c.out[i].dtype == DType::F32)
    return;
  k.sameDType(I, 1, O, i);
}

std::string verifyLayerNormBackward(const KernelCtx &c) {
  // dy, x, gamma, mean, rstd -> dx, dgamma, dbeta
  Check k(c);
  k.floatT(I, 1);
  k.minRank(I, 1, 1);
  if (!k.ok())
    return k.result();
  int64_t H = c.in[1].dim(-1), R = c.in[1].rows();
  k.sameDType(I, 1, I, 0);
  k.sameShape(I, 1, I, 0);
  k.sameDType(I, 1, I, 2);
  k.rank(I, 2, 1);
  k.dimEq(I, 2, 0, H, "hidden size");
  k.dtype(I, 3, statsDType(c.in[1].dtype));
  k.numelEq(I, 3, R, "one per row");
  k.dtype(I, 4, statsDType(c.in[1].dtype));
  k.numelEq(I, 4, R, "one per row");
  k.sameDType(I, 1, O, 0);
  k.sameShape(I, 1, O, 0);
  for (int i = 1; i <= 2; ++i) {
    paramGradDType(k, c, i);
    k.rank(O, i, 1);
    k.dimEq(O, i, 0, H, "hidden size");
  }
  return k.result();
}

std::string verifyRmsNorm(const KernelCtx &c) {
  // x[..., H], gamma[H] -> y, rstd[R]
  Check k(c);
  k.floatT(I, 0);
  k.minRank(I, 0, 1);
  if (!k.ok())
    return k.result();
  int64_t H = c.in[0].dim(-1), R = c.in[0].rows();
  k.sameDType(I, 0, I, 1);
  k.rank(I, 1, 1);
  k.dimEq(I, 1, 0, H, "hidden size");
  k.sameDType(I, 0, O, 0);
  k.sameShape(I, 0, O, 0);
  checkRowStats(k, c, O, 1, R);
  k.attrCond(c.attrs->scalars[0] > 0, "eps: expected > 0");
  return k.result();
}

std::string verifyRmsNormBackward(const KernelCtx &c) {
  // dy, x, gamma, rstd -> dx, dgamma
  Check k(c);
  k.floatT(I, 1);
  k.minRank(I, 1, 1);
  if (!k.ok())
    return k.result();
  int64_t H = c.in[1].dim(-1), R = c.in[1].rows();
  k.sameDType(I, 1, I, 0);
  k.sameShape(I, 1, I, 0);
  k.sameDType(I, 1, I, 2);
  k.rank(I, 2, 1);
  k.dimEq(I, 2, 0, H, "hidden size");
  k.dtype(I, 3, statsDType(c.in[1].dtype));
  k.numelEq(I, 3, R, "one per row");
  k.sameDType(I, 1, O, 0);
  k.sameShape(I, 1, O, 0);
  paramGradDType(k, c, 1);
  k.rank(O, 1, 1);
  k.dimEq(O, 1, 0, H, "hidden size");
  return k.result();
}

std::string verifyRope(const KernelCtx &c) {
  // x[B, S, N, D], pos[B, S] i32 -> y[B, S, N, D]
  Check k(c);
  k.floatT(I, 0);
  k.rank(I, 0, 4);
  k.dtype(I, 1, DType::I32);
  k.rank(I, 1, 2);
  if (!k.ok())
    return k.result();
  k.dimEq(I, 1, 0, c.in[0].dims[0], "batch");
  k.dimEq(I, 1, 1, c.in[0].dims[1], "sequence");
  k.sameDType(I, 0, O, 0);
  k.sameShape(I, 0, O, 0);
  int64_t D = c.in[0].dims[3];
  int64_t rd = c.attrs->i(1) == 0 ? D : c.attrs->i(1);
  k.attrCond(rd > 0 && rd <= D && rd % 2 == 0,
             "rotary_dim = " + std::to_string(c.attrs->i(1)) +
                 (c.attrs->i(1) == 0 ? " (the head dim " + std::to_string(D) + ")" : "") +
                 ", expected an even value <= head dim " + std::to_string(D));
  k.attrCond(c.attrs->f(0) > 0, "base: expected > 0");
  return k.result();
}

std::string verifyAttention(const KernelCtx &c) {
  // q[B, S, NH, D], k[B, S, NG, D], v[B, S, NG, D] -> o[B, S, NH, D], lse[B, NH, S]
  Check k(c);
  k.floatT(I, 0);
  for (int i = 0; i < 3; ++i)
    k.rank(I, i, 4);
  if (!k.ok())
    return k.result();
  const TensorView &q = c.in[0];
  k.sameDType(I, 0, I, 1);
  k.sameDType(I, 0, I, 2);
  k.sameShape(I, 1, I, 2);
  k.dimEq(I, 1, 0, q.dims[0], "batch");
  k.dimEq(I, 1, 1, q.dims[1], "sequence");
  k.dimEq(I, 1, 3, q.dims[3], "head dim");
  if (k.ok() && (c.in[1].dims[2] <= 0 || q.dims[2] % c.in[1].dims[2] != 0))
    k.fail("input 1: " + std::to_string(c.in[1].dims[2]) +
           " key/value heads (query groups) do not divide " + std::to_string(q.dims[2]) +
           " query heads");
  k.sameDType(I, 0, O, 0);
  k.sameShape(I, 0, O, 0);
  k.dtype(O, 1, statsDType(q.dtype));
  k.rank(O, 1, 3);
  if (k.ok()) {
    k.dimEq(O, 1, 0, q.dims[0], "batch");
    k.dimEq(O, 1, 1, q.dims[2], "query heads");
    k.dimEq(O, 1, 2, q.dims[1], "sequence");
  }
  return k.result();
}

std::string verifyAttentionBackward(const KernelCtx &c) {
  // q, k, v, o, lse, do -> dq, dk, dv
  Check k(c);
  KernelCtx fwd = c;
  fwd.numIn = 3;
  TensorView outs[2] = {c.in[3], c.in[4]};
  fwd.out = outs;
  fwd.numOut = 2;
  std::string e = verifyAttention(fwd);
  if (!e.empty()) {
    // Renumber "output 0/1" of the forward check to inputs 3/4.
    if (e.rfind("output 0", 0) == 0)
      e = "input 3" + e.substr(8);
    else if (e.rfind("output 1", 0) == 0)
      e = "input 4" + e.substr(8);
    return e;
  }
  k.sameDType(I, 0, I, 5);
  k.sameShape(I, 0, I, 5);
  for (int i = 0; i < 3; ++i) {
    k.sameDType(I, i, O, i);
    k.sameShape(I, i, O, i);
  }
  return k.result();
}

/// attention_dropout(_backward): the attention checks, then the rng key at input `rngIn`
/// (i64 [3] or [4], as dropout's) and p in [0, 1) (attrs causal, scale, p, op_id).
std::string verifyAttentionDropoutKey(const KernelCtx &c, int rngIn) {
  Check k(c);
  k.dtype(I, rngIn, DType::I64);
  if (c.in[rngIn].numel != 4)
    k.numelEq(I, rngIn, 3, "seed, iteration and microbatch (and an op_id offset: 4)");
  k.attrCond(c.attrs->f(2) >= 0 && c.attrs->f(2) < 1,
             "p = " + std::to_string(c.attrs->f(2)) + ", expected 0 <= p < 1");
  return k.result();
}
std::string verifyAttentionDropout(const KernelCtx &c) {
  std::string e = verifyAttention(c);
  return e.empty() ? verifyAttentionDropoutKey(c, 3) : e;
}
std::string verifyAttentionDropoutBackward(const KernelCtx &c) {
  std::string e = verifyAttentionBackward(c);
  return e.empty() ? verifyAttentionDropoutKey(c, 6) : e;
}

/// The segment kernels (--reset-attention-mask): their base kernel's checks, then doc_start at
/// input `docIn`: i32 [B, S] of the query's batch and sequence, and causal = 1 (a document
/// start bounds the keys from below; the causal mask bounds them from above).
std::string verifyDocStart(const KernelCtx &c, int docIn) {
  Check k(c);
  k.dtype(I, docIn, DType::I32);
  k.rank(I, docIn, 2);
  if (k.ok()) {
    k.dimEq(I, docIn, 0, c.in[0].dims[0], "batch");
    k.dimEq(I, docIn, 1, c.in[0].dims[1], "sequence");
  }
  k.attrCond(c.attrs->i(0) == 1, "causal = " + std::to_string(c.attrs->i(0)) +
                                     ", expected 1 (doc_start segments are causal)");
  return k.result();
}
std::string verifyAttentionSegments(const KernelCtx &c) {
  std::string e = verifyAttention(c);
  return e.empty() ? verifyDocStart(c, 3) : e;
}
std::string verifyAttentionSegmentsBackward(const KernelCtx &c) {
  std::string e = verifyAttentionBackward(c);
  return e.empty() ? verifyDocStart(c, 6) : e;
}
std::string verifyAttentionDropoutSegments(const KernelCtx &c) {
  std::string e = verifyAttentionDropout(c);
  return e.empty() ? verifyDocStart(c, 4) : e;
}
std::string verifyAttentionDropoutSegmentsBackward(const KernelCtx &c) {
  std::string e = verifyAttentionDropoutBackward(c);
  return e.empty() ? verifyDocStart(c, 7) : e;
}

std::string verifyGeluBackward(const KernelCtx &c) {
  Check k(c);
  k.floatT(I, 1);
  k.sameDType(I, 1, I, 0);
  k.sameNumel(I, 1, I, 0);
  k.sameDType(I, 1, O, 0);
  k.sameNumel(I, 1, O, 0);
  return k.result();
}

std::string verifySwiglu(const KernelCtx &c) {
  // x[..., 2F] -> y[..., F]
  Check k(c);
  k.floatT(I, 0);
  k.minRank(I, 0, 1);
  k.sameDType(I, 0, O, 0);
  if (!k.ok())
    return k.result();
  if (c.in[0].dim(-1) % 2 != 0)
    k.fail("input 0: shape " + c.in[0].shapeString() + ", expected an even last dim");
  k.numelEq(O, 0, c.in[0].numel / 2, "half of input 0");
  if (k.ok())
    k.dimEq(O, 0, -1, c.in[0].dim(-1) / 2, "half the last dim of input 0");
  return k.result();
}

std::string verifySwigluBackward(const KernelCtx &c) {
  // dy[..., F], x[..., 2F] -> dx[..., 2F]
  Check k(c);
  k.floatT(I, 1);
  k.minRank(I, 1, 1);
  k.sameDType(I, 1, I, 0);
  k.sameDType(I, 1, O, 0);
  if (!k.ok())
    return k.result();
  if (c.in[1].dim(-1) % 2 != 0)
    k.fail("input 1: shape " + c.in[1].shapeString() + ", expected an even last dim");
  k.numelEq(I, 0, c.in[1].numel / 2, "half of input 1");
  k.sameShape(I, 1, O, 0);
  return k.result();
}

std::string verifyDropout(const KernelCtx &c) {
  // x, rng[3 or 4] i64 (seed, iteration, microbatch[, op_id offset]) -> y
  Check k(c);
  k.floatT(I, 0);
  k.dtype(I, 1, DType::I64);
  if (c.in[1].numel != 4)
    k.numelEq(I, 1, 3, "seed, iteration and microbatch (and an op_id offset: 4)");
  k.sameDType(I, 0, O, 0);
  k.sameNumel(I, 0, O, 0);
  k.attrCond(c.attrs->f(0) >= 0 && c.attrs->f(0) < 1,
             "p = " + std::to_string(c.attrs->f(0)) + ", expected 0 <= p < 1");
  // A sequence shard (seq_length > 0): x is [samples, local seq, ...], positions
  // seq_start .. seq_start + local seq of a sequence of seq_length.
  const int64_t start = c.attrs->i(2), seq = c.attrs->i(3);
  if (k.ok() && seq != 0) {
    const TensorView &x = c.in[0];
    const int64_t local = x.rank >= 2 ? x.dim(1) : -1;
    k.attrCond(seq > 0 && x.rank >= 2 && start >= 0 && start + local <= seq,
               "seq_start = " + std::to_string(start) + ", seq_length = " + std::to_string(seq) +
                   ": expected 0 <= seq_start and seq_start + dim 1 of input 0 (shape " +
                   x.shapeString() + ") <= seq_length");
  }
  return k.result();
}

std::string verifyRngOffset(const KernelCtx &c) {
  // rng[3 or 4] i64 -> rng[4] i64
  Check k(c);
  k.dtype(I, 0, DType::I64);
  if (c.in[0].numel != 4)
    k.numelEq(I, 0, 3, "seed, iteration and microbatch (or 4 with an op_id offset)");
  k.dtype(O, 0, DType::I64);
  k.numelEq(O, 0, 4, "seed, iteration, microbatch and op_id offset");
  return k.result();
}

void checkLogitsLabels(Check &k, const KernelCtx &c, int logits, int labels) {
  k.floatT(I, logits);
  k.rank(I, logits, 2);
  k.dtype(I, labels, DType::I32);
  if (k.ok())
    k.numelEq(I, labels, c.in[logits].dims[0], "one label per row of the logits");
}

std::string verifyCrossEntropy(const KernelCtx &c) {
  // logits[N, V], labels[N] i32, loss_mask[N] -> loss_sum[], num_tokens[], lse[N]
  Check k(c);
  checkLogitsLabels(k, c, 0, 1);
  if (!k.ok())
    return k.result();
  DType s = statsDType(c.in[0].dtype);
  int64_t N = c.in[0].dims[0];
  k.dtype(I, 2, s);
  k.numelEq(I, 2, N, "one mask value per row");
  k.dtype(O, 0, s);
  k.scalar(O, 0);
  k.dtype(O, 1, s);
  k.scalar(O, 1);
  k.dtype(O, 2, s);
  k.numelEq(O, 2, N, "one per row");
  return k.result();
}

std::string verifyCrossEntropyBackward(const KernelCtx &c) {
  // logits[N, V], labels[N], loss_mask[N], lse[N], dloss[] -> dlogits[N, V]
  Check k(c);
  checkLogitsLabels(k, c, 0, 1);
  if (!k.ok())
    return k.result();
  DType s = statsDType(c.in[0].dtype);
  int64_t N = c.in[0].dims[0];
  k.dtype(I, 2, s);
  k.numelEq(I, 2, N, "one mask value per row");
  k.dtype(I, 3, s);
  k.numelEq(I, 3, N, "one per row");
  k.dtype(I, 4, s);
  k.scalar(I, 4);
  k.sameDType(I, 0, O, 0);
  k.sameShape(I, 0, O, 0);
  return k.result();
}

std::string verifyCeLocalMax(const KernelCtx &c) {
  // logits[N, V] -> max[N]
  Check k(c);
  k.floatT(I, 0);
  k.rank(I, 0, 2);
  if (!k.ok())
    return k.result();
  k.dtype(O, 0, statsDType(c.in[0].dtype));
  k.numelEq(O, 0, c.in[0].dims[0], "one per row");
  return k.result();
}

std::string verifyCeLocalSumExp(const KernelCtx &c) {
  // logits[N, V], max[N] -> sumexp[N]
  Check k(c);
  k.floatT(I, 0);
  k.rank(I, 0, 2);
  if (!k.ok())
    return k.result();
  DType s = statsDType(c.in[0].dtype);
  k.dtype(I, 1, s);
  k.numelEq(I, 1, c.in[0].dims[0], "one per row");
  k.dtype(O, 0, s);
  k.numelEq(O, 0, c.in[0].dims[0], "one per row");
  return k.result();
}

std::string verifyCeTargetLogit(const KernelCtx &c) {
  // logits[N, V], labels[N] -> target[N]
  Check k(c);
  checkLogitsLabels(k, c, 0, 1);
  if (!k.ok())
    return k.result();
  k.dtype(O, 0, statsDType(c.in[0].dtype));
  k.numelEq(O, 0, c.in[0].dims[0], "one per row");
  return k.result();
}

std::string verifyCeCombine(const KernelCtx &c) {
  // max[N], sumexp[N], target[N], loss_mask[N] -> loss_sum[], num_tokens[], lse[N]
  Check k(c);
  DType s = c.in[0].dtype;
  if (s != DType::F32 && s != DType::F64)
    k.fail("input 0: dtype " + std::string(dtypeName(s)) + ", expected f32 or f64");
  int64_t N = c.in[0].numel;
  for (int i = 1; i < 4; ++i) {
    k.dtype(I, i, s);
    k.numelEq(I, i, N, "one per row");
  }
  k.dtype(O, 0, s);
  k.scalar(O, 0);
  k.dtype(O, 1, s);
  k.scalar(O, 1);
  k.dtype(O, 2, s);
  k.numelEq(O, 2, N, "one per row");
  return k.result();
}

/// `segments` of adamw and sum_squares: (begin, end, `flag`) triples, ascending and disjoint,
/// inside the n elements of the operands (empty: every element).
void checkSegments(Check &k, const std::vector<int64_t> &seg, int64_t n, const char *flag) {
  if (seg.empty())
    return;
  k.attrCond(seg.size() % 3 == 0, "segments: " + std::to_string(seg.size()) +
                                       " values, expected (begin, end, " + flag + ") triples");
  int64_t prev = 0;
  for (size_t s = 0; s + 2 < seg.size() && k.ok(); s += 3) {
    k.attrCond(seg[s] >= prev && seg[s] <= seg[s + 1] && seg[s + 1] <= n,
               "segments: segment " + std::to_string(s / 3) + " [" + std::to_string(seg[s]) +
                   ", " + std::to_string(seg[s + 1]) + ") is reversed, out of order or outside "
                   "the " + std::to_string(n) + " elements");
    prev = seg[s + 1];
  }
}

std::string verifyAdamW(const KernelCtx &c) {
  // param, grad, exp_avg, exp_avg_sq, lr[], weight_decay[], step[], grad_scale[], update[]
  //   -> param, exp_avg, exp_avg_sq (in place of inputs 0, 2, 3)
  Check k(c);
  DType t = c.in[0].dtype;
  if (t != DType::F32 && t != DType::F64)
    k.fail("input 0: dtype " + std::string(dtypeName(t)) + ", expected f32 or f64 (master weights)");
  for (int i = 1; i < 4; ++i) {
    k.dtype(I, i, t);
    k.sameNumel(I, 0, I, i);
  }
  for (int i = 4; i < 9; ++i) {
    k.dtype(I, i, t);
    k.scalar(I, i);
  }
  for (int o = 0; o < 3; ++o) {
    k.dtype(O, o, t);
    k.sameNumel(I, 0, O, o);
  }
  double b1 = c.attrs->f(0), b2 = c.attrs->f(1), eps = c.attrs->f(2);
  k.attrCond(b1 >= 0 && b1 < 1, "beta1 = " + std::to_string(b1) + ", expected 0 <= beta1 < 1");
  k.attrCond(b2 >= 0 && b2 < 1, "beta2 = " + std::to_string(b2) + ", expected 0 <= beta2 < 1");
  k.attrCond(eps > 0, "eps = " + std::to_string(eps) + ", expected > 0");
  // segments: (begin, end, decay) triples, ascending and disjoint, inside the operands; only those
  // elements are updated, each with its own weight-decay flag ((0, 0, 0) alone: none).
  checkSegments(k, c.attrs->ints(4), c.in[0].numel, "decay");
  return k.result();
}

std::string verifyAdamWMaster(const KernelCtx &c) {
  // adamw's nine inputs (input 0 the f32 master weights) -> master, exp_avg, exp_avg_sq, param
  KernelCtx base = c;
  base.numOut = 3;
  std::string e = verifyAdamW(base);
  if (!e.empty())
    return e;
  Check k(c);
  k.dtype(I, 0, DType::F32);
  if (c.out[3].dtype != DType::BF16 && c.out[3].dtype != DType::F16)
    k.fail("output 3: dtype " + std::string(dtypeName(c.out[3].dtype)) +
           ", expected bf16 or f16 (the model parameter of the f32 master weights)");
  k.sameNumel(I, 0, O, 3);
  return k.result();
}

std::string verifyLossScaleUpdate(const KernelCtx &c) {
  // update[], scale[], growth_tracker[], hysteresis_tracker[] (f32) -> scale, growth, hysteresis
  Check k(c);
  for (int i = 0; i < 4; ++i) {
    k.dtype(I, i, DType::F32);
    k.scalar(I, i);
  }
  for (int o = 0; o < 3; ++o) {
    k.dtype(O, o, DType::F32);
    k.scalar(O, o);
  }
  double growth = c.attrs->f(0), backoff = c.attrs->f(1), minScale = c.attrs->f(4);
  k.attrCond(growth > 1, "growth_factor = " + std::to_string(growth) + ", expected > 1");
  k.attrCond(backoff > 0 && backoff < 1,
             "backoff_factor = " + std::to_string(backoff) + ", expected 0 < backoff_factor < 1");
  k.attrCond(c.attrs->i(2) > 0,
             "growth_interval = " + std::to_string(c.attrs->i(2)) + ", expected > 0");
  k.attrCond(c.attrs->i(3) > 0, "hysteresis = " + std::to_string(c.attrs->i(3)) + ", expected > 0");
  k.attrCond(minScale > 0, "min_scale = " + std::to_string(minScale) + ", expected > 0");
  return k.result();
}

std::string verifySumSquares(const KernelCtx &c) {
  // x -> out[] (S); segments as adamw's (only the ranges with a non-zero flag are summed)
  Check k(c);
  k.floatT(I, 0);
  if (!k.ok())
    return k.result();
  k.dtype(O, 0, statsDType(c.in[0].dtype));
  k.scalar(O, 0);
  k.attrCond(c.attrs->f(0) == 0 || c.attrs->f(0) == 1, "beta: expected 0 or 1");
  checkSegments(k, c.attrs->ints(1), c.in[0].numel, "flag");
  return k.result();
}

std::string verifyGradNormFinalize(const KernelCtx &c) {
  // sumsq[] -> norm[], grad_scale[], update[]
  Check k(c);
  DType s = c.in[0].dtype;
  if (s != DType::F32 && s != DType::F64)
    k.fail("input 0: dtype " + std::string(dtypeName(s)) + ", expected f32 or f64");
  k.scalar(I, 0);
  for (int o = 0; o < 3; ++o) {
    k.dtype(O, o, s);
    k.scalar(O, o);
  }
  k.attrCond(c.attrs->f(0) >= 0, "max_norm: expected >= 0");
  return k.result();
}

using A = AttrSpec;
constexpr AttrType Int = AttrType::Int;
constexpr AttrType Flt = AttrType::Float;

std::vector<KernelSignature> buildTable() {
  return {
      {"fill", 0, 1, {A{"value", Flt, 0}}, verifyFill, "y = value"},
      {"copy", 1, 1, {}, verifyCopy, "y = x (same dtype, same element count)"},
      {"cast", 1, 1, {}, verifyCast, "y = convert(x) between float dtypes"},
      {"add", 2, 1, {A{"alpha", Flt, 1}}, verifyAdd, "c = a + alpha * b"},
      {"scale", 1, 1, {A{"alpha", Flt, 1}}, verifyUnarySame, "y = alpha * x"},
      {"scale_by", 2, 1, {}, verifyScaleBy, "y = x * s (s a device scalar)"},
      {"reciprocal", 1, 1, {}, verifyScalarUnary, "y = 1 / x, 0 where x == 0"},
      {"matmul",
       2,
       1,
       {A{"trans_a", Int, 0}, A{"trans_b", Int, 0}, A{"alpha", Flt, 1}, A{"beta", Flt, 0}},
       verifyMatmul,
       "c = alpha * op(a) @ op(b) + beta * c (batched over leading dims)",
       "beta"},
      {"add_bias", 2, 1, {}, verifyAddBias, "y[..., n] = x[..., n] + b[n]"},
      {"sum_rows", 1, 1, {A{"beta", Flt, 0}}, verifySumRows,
       "y[n] = sum over rows of x[..., n] (+ y when beta = 1)", "beta"},
      {"embedding", 2, 1, {A{"vocab_start", Int, 0}}, verifyEmbedding,
       "y[i, :] = table[ids[i] - vocab_start, :], zero outside the shard"},
      {"embedding_backward", 2, 1, {A{"vocab_start", Int, 0}, A{"beta", Flt, 0}},
       verifyEmbeddingBackward, "dtable[ids[i] - vocab_start, :] += dy[i, :]", "beta"},
      {"layer_norm", 3, 3, {A{"eps", Flt, 1e-5}}, verifyLayerNorm,
       "y = (x - mean) * rstd * gamma + beta; saves mean and rstd"},
      {"layer_norm_backward", 5, 3, {}, verifyLayerNormBackward,
       "dx, dgamma, dbeta of layer_norm"},
      {"rms_norm", 2, 2, {A{"eps", Flt, 1e-5}}, verifyRmsNorm,
       "y = x * rstd * gamma, rstd = 1/sqrt(mean(x^2) + eps); saves rstd"},
      {"rms_norm_backward", 4, 2, {}, verifyRmsNormBackward, "dx, dgamma of rms_norm"},
      {"rope", 2, 1, {A{"base", Flt, 10000}, A{"rotary_dim", Int, 0}}, verifyRope,
       "rotary position embedding (rotate-half form) at positions pos"},
      {"rope_backward", 2, 1, {A{"base", Flt, 10000}, A{"rotary_dim", Int, 0}}, verifyRope,
       "dx of rope: rotation by the negative angle"},
      {"attention", 3, 2, {A{"causal", Int, 1}, A{"scale", Flt, 0}}, verifyAttention,
       "fused core attention (GQA) returning out and log-sum-exp"},
      {"attention_backward", 6, 3, {A{"causal", Int, 1}, A{"scale", Flt, 0}},
       verifyAttentionBackward, "dq, dk, dv, recomputing probabilities from the log-sum-exp"},
      {"attention_dropout", 4, 2,
       {A{"causal", Int, 1}, A{"scale", Flt, 0}, A{"p", Flt, 0}, A{"op_id", Int, 0},
        A{"head_start", Int, 0}, A{"num_heads", Int, 0}},
       verifyAttentionDropout,
       "attention with dropout on the probabilities, mask from Philox(seed, op_id, iteration, "
       "global (b, head_start + h of num_heads, i, j))"},
      {"attention_dropout_backward", 7, 3,
       {A{"causal", Int, 1}, A{"scale", Flt, 0}, A{"p", Flt, 0}, A{"op_id", Int, 0},
        A{"head_start", Int, 0}, A{"num_heads", Int, 0}},
       verifyAttentionDropoutBackward, "dq, dk, dv of attention_dropout, regenerating the mask"},
      {"attention_segments", 4, 2, {A{"causal", Int, 1}, A{"scale", Flt, 0}},
       verifyAttentionSegments,
       "attention where query i attends keys doc_start[b, i] <= j <= i (--reset-attention-mask)"},
      {"attention_segments_backward", 7, 3, {A{"causal", Int, 1}, A{"scale", Flt, 0}},
       verifyAttentionSegmentsBackward, "dq, dk, dv of attention_segments"},
      {"attention_dropout_segments", 5, 2,
       {A{"causal", Int, 1}, A{"scale", Flt, 0}, A{"p", Flt, 0}, A{"op_id", Int, 0},
        A{"head_start", Int, 0}, A{"num_heads", Int, 0}},
       verifyAttentionDropoutSegments, "attention_dropout within documents (doc_start)"},
      {"attention_dropout_segments_backward", 8, 3,
       {A{"causal", Int, 1}, A{"scale", Flt, 0}, A{"p", Flt, 0}, A{"op_id", Int, 0},
        A{"head_start", Int, 0}, A{"num_heads", Int, 0}},
       verifyAttentionDropoutSegmentsBackward, "dq, dk, dv of attention_dropout_segments"},
      {"gelu", 1, 1, {A{"approximate", Int, 0}}, verifyUnarySame,
       "gelu (erf form; tanh form when approximate = 1)"},
      {"gelu_backward", 2, 1, {A{"approximate", Int, 0}}, verifyGeluBackward, "dx of gelu"},
      {"swiglu", 1, 1, {}, verifySwiglu, "y = silu(x[..., :F]) * x[..., F:]"},
      {"swiglu_backward", 2, 1, {}, verifySwigluBackward, "dx of swiglu"},
      {"dropout", 2, 1,
       {A{"p", Flt, 0}, A{"op_id", Int, 0}, A{"seq_start", Int, 0}, A{"seq_length", Int, 0}},
       verifyDropout, "y = x * mask / (1 - p), mask from Philox(seed, op_id, iteration, mb, i)"},
      {"rng_offset", 1, 1, {A{"offset", Int, 0}}, verifyRngOffset,
       "key = (seed, iteration, microbatch, offset + the input's offset, 0 for a [3] input)"},
      {"dropout_backward", 2, 1,
       {A{"p", Flt, 0}, A{"op_id", Int, 0}, A{"seq_start", Int, 0}, A{"seq_length", Int, 0}},
       verifyDropout, "dx = dy * the same mask / (1 - p)"},
      {"cross_entropy", 3, 3, {A{"vocab_start", Int, 0}, A{"valid_vocab", Int, -1}},
       verifyCrossEntropy, "masked token cross entropy: loss_sum, num_tokens, lse"},
      {"cross_entropy_backward", 5, 1, {A{"vocab_start", Int, 0}, A{"valid_vocab", Int, -1}},
       verifyCrossEntropyBackward, "dlogits = dloss * mask * (softmax - onehot)"},
      {"ce_local_max", 1, 1, {A{"vocab_start", Int, 0}, A{"valid_vocab", Int, -1}},
       verifyCeLocalMax, "row max over this vocab shard (padding excluded)"},
      {"ce_local_sumexp", 2, 1, {A{"vocab_start", Int, 0}, A{"valid_vocab", Int, -1}},
       verifyCeLocalSumExp, "row sum of exp(logit - max) over this vocab shard"},
      {"ce_target_logit", 2, 1, {A{"vocab_start", Int, 0}, A{"valid_vocab", Int, -1}},
       verifyCeTargetLogit, "logit of the label when it falls in this shard, else 0"},
      {"ce_combine", 4, 3, {}, verifyCeCombine,
       "loss_sum, num_tokens, lse from global max, sumexp and target logit"},
      {"adamw",
       9,
       3,
       {A{"beta1", Flt, 0.9}, A{"beta2", Flt, 0.999}, A{"eps", Flt, 1e-8},
        A{"decay", Int, 1}, A{"segments", AttrType::Ints}},
       verifyAdamW,
       "AdamW step with decoupled weight decay and bias correction, predicated on update; with "
       "segments only the (begin, end, decay) ranges"},
      {"adamw_master",
       9,
       4,
       {A{"beta1", Flt, 0.9}, A{"beta2", Flt, 0.999}, A{"eps", Flt, 1e-8},
        A{"decay", Int, 1}, A{"segments", AttrType::Ints}},
       verifyAdamWMaster,
       "adamw on f32 master weights (input 0), then param = bf16(master) or f16(master) (round to nearest even) "
       "over all elements, also on a skipped step"},
      {"loss_scale_update",
       4,
       3,
       {A{"growth_factor", Flt, 2.0}, A{"backoff_factor", Flt, 0.5},
        A{"growth_interval", Int, 1000}, A{"hysteresis", Int, 2}, A{"min_scale", Flt, 1.0}},
       verifyLossScaleUpdate,
       "Megatron's DynamicGradScaler.update(found_inf = update == 0) on device scalars"},
      {"sum_squares", 1, 1, {A{"beta", Flt, 0}, A{"segments", AttrType::Ints}}, verifySumSquares,
       "out = sum(x^2) (+ out when beta = 1); with segments only the (begin, end, flag != 0) "
       "ranges", "beta"},
      {"grad_norm_finalize", 1, 3, {A{"max_norm", Flt, 0}}, verifyGradNormFinalize,
       "norm = sqrt(sumsq); grad_scale = min(1, max_norm/(norm+1e-6)); update = isfinite(norm)"},
  };
}

} // namespace

const std::vector<KernelSignature> &allKernelSignatures() {
  static const std::vector<KernelSignature> table = buildTable();
  return table;
}

const KernelSignature *findKernelSignature(std::string_view name) {
  for (const KernelSignature &s : allKernelSignatures())
    if (name == s.name)
      return &s;
  return nullptr;
}

int attrIndex(const KernelSignature &sig, std::string_view name) {
  for (size_t i = 0; i < sig.attrs.size(); ++i)
    if (name == sig.attrs[i].name)
      return int(i);
  return -1;
}

std::string shapeString(const int64_t *dims, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i)
      s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

std::string TensorView::shapeString() const { return rt::shapeString(dims, rank); }

bool makeView(DType dtype, const int64_t *dims, int rank, TensorView &out) {
  if (rank < 0 || rank > kMaxRank)
    return false;
  out.dtype = dtype;
  out.rank = rank;
  out.numel = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] < 0 || (dims[i] > 0 && out.numel > (int64_t(1) << 50) / dims[i]))
      return false; // negative, or more than 2^50 elements
    out.dims[i] = dims[i];
    out.numel *= dims[i];
  }
  return true;
}

} // namespace trainc::rt
