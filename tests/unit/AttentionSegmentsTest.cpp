//===- AttentionSegmentsTest.cpp - attention with document masks -----------===//
//
// The segment kernels of --reset-attention-mask (attention_segments, attention_dropout_segments
// and their backward): query i of sample b attends keys doc_start[b, i] <= j <= i.
//
// Independent checks:
//  - The mask the reference uses is built as Megatron's get_ltor_masks_and_position_ids builds it
//    (a lower-triangular [S, S] mask, then attention_mask[(e + 1):, :(e + 1)] = 0 for every EOD
//    position e of the sample), not from doc_start; doc_start comes from the tokens separately
//    (one past the last EOD before each token), as the data loader derives it.
//  - Forward against a naive f64 reference that applies that explicit mask (1e-12; with dropout,
//    the documented Philox mask computed here, as AttentionKernelsTest does).
//  - Backward against central finite differences of L = <w, o> in f64 (1e-6), with and without
//    dropout (the dropout mask fixed by the key).
//  - A document's rows equal plain causal attention run on that document alone (a closed form
//    of "no attention across documents"), bitwise in f64 up to summation order (1e-12).
//  - doc_start = 0 everywhere equals attention (and attention_dropout) bitwise.
//  - f32 against f64 (2e-6, AttentionKernelsTest's tolerance and reasons); the same bits on 1 and
//    2 OpenMP threads; the verifier's messages for doc_start's dtype and shape and causal = 0.
// Documents are placed so that some start inside a key block, some span a 64-row query block or
// a 128-key block boundary, and some query blocks skip whole key blocks.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include "runtime/core/Philox.h"

#include <cmath>
#include <limits>

extern "C" int omp_get_max_threads() __attribute__((weak));
extern "C" void omp_set_num_threads(int) __attribute__((weak));

using namespace trainc::rt;
using namespace trainc::rt::test;

namespace {

constexpr double kFdTol = 1e-6;
constexpr double kF32Tol = 2e-6;

struct Dims {
  int64_t B, S, NH, NG, D;
};

/// EOD positions of each sample (the tokens' EODs; the kernel never sees tokens).
using Eods = std::vector<std::vector<int64_t>>;

/// doc_start [B, S] from the EOD positions: one past the last EOD before each token.
HostTensor docStartOf(const Dims &p, const Eods &eods) {
  HostTensor t(DType::I32, {p.B, p.S});
  for (int64_t b = 0; b < p.B; ++b) {
    std::vector<bool> isEod(size_t(p.S), false);
    for (int64_t e : eods[size_t(b)])
      isEod[size_t(e)] = true;
    int64_t start = 0;
    for (int64_t i = 0; i < p.S; ++i) {
      t.set(b * p.S + i, double(start));
      if (isEod[size_t(i)])
        start = i + 1;
    }
  }
  return t;
}

/// Megatron's mask: allowed[(b * S + i) * S + j], tril, then rows e+1.. lose columns ..e.
std::vector<char> megatronMask(const Dims &p, const Eods &eods) {
  std::vector<char> m(size_t(p.B * p.S * p.S), 0);
  for (int64_t b = 0; b < p.B; ++b) {
    char *mb = m.data() + b * p.S * p.S;
    for (int64_t i = 0; i < p.S; ++i)
      for (int64_t j = 0; j <= i; ++j)
        mb[i * p.S + j] = 1;
    for (int64_t e : eods[size_t(b)])
      for (int64_t i = e + 1; i < p.S; ++i)
        for (int64_t j = 0; j <= e; ++j)
          mb[i * p.S + j] = 0;
  }
  return m;
}

struct Drop {
  bool on = false;
  double p = 0;
  int64_t seed = 99, iteration = 2, first = 1, opId = 3;
};

HostTensor keyTensor(const Drop &d) {
  HostTensor rng(DType::I64, {3});
  rng.set(0, double(d.seed));
  rng.set(1, double(d.iteration));
  rng.set(2, double(d.first));
  return rng;
}

/// docs/kernels.md's dropout mask: 1/(1-p) if probability (b, h, i, j) is kept, else 0.
double keepScale(const Dims &p, const Drop &d, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (!d.on)
    return 1;
  uint64_t g = ((uint64_t(d.first + b) * uint64_t(p.NH) + uint64_t(h)) * uint64_t(p.S) +
                uint64_t(i)) * uint64_t(p.S) + uint64_t(j);
  float u[4];
  philoxUniform4(uint64_t(d.seed), uint32_t(d.opId), uint32_t(d.iteration), g / 4, u);
  return double(u[g % 4]) >= d.p ? 1.0 / (1.0 - d.p) : 0.0;
}

/// Naive f64 reference with an explicit mask: o_i = sum_j softmax_j(s_ij) keep_ij v_j over the
/// allowed j; lse_i = log sum_j exp(s_ij) over the allowed j (undropped).
void maskedRef(const Dims &p, const std::vector<char> &mask, const Drop &d, const HostTensor &q,
               const HostTensor &k, const HostTensor &v, HostTensor &o, HostTensor &lse) {
  const double scale = 1 / std::sqrt(double(p.D));
  o = HostTensor(DType::F64, {p.B, p.S, p.NH, p.D});
  lse = HostTensor(DType::F64, {p.B, p.NH, p.S});
  std::vector<double> sc(size_t(p.S));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.NH; ++h) {
      int64_t g = h / (p.NH / p.NG);
      for (int64_t i = 0; i < p.S; ++i) {
        const char *allowed = mask.data() + (b * p.S + i) * p.S;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < p.S; ++j) {
          if (!allowed[j])
            continue;
          double s = 0;
          for (int64_t e = 0; e < p.D; ++e)
            s += q.get(((b * p.S + i) * p.NH + h) * p.D + e) *
                 k.get(((b * p.S + j) * p.NG + g) * p.D + e);
          sc[size_t(j)] = scale * s;
          mx = std::max(mx, sc[size_t(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j < p.S; ++j)
          if (allowed[j])
            sum += std::exp(sc[size_t(j)] - mx);
        for (int64_t e = 0; e < p.D; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < p.S; ++j)
            if (allowed[j])
              acc += std::exp(sc[size_t(j)] - mx) / sum * keepScale(p, d, b, h, i, j) *
                     v.get(((b * p.S + j) * p.NG + g) * p.D + e);
          o.set(((b * p.S + i) * p.NH + h) * p.D + e, acc);
        }
        lse.set((b * p.NH + h) * p.S + i, mx + std::log(sum));
      }
    }
}

std::vector<AttrArg> attrs(const Drop &d, int causal = 1) {
  std::vector<AttrArg> a = {AttrArg("causal", causal), AttrArg("scale", 0.0)};
  if (d.on) {
    a.push_back(AttrArg("p", d.p));
    a.push_back(AttrArg("op_id", d.opId));
  }
  return a;
}

/// The segment forward; {o, lse}.
std::vector<HostTensor> forward(const Dims &p, const Drop &d, HostTensor &q, HostTensor &k,
                                HostTensor &v, HostTensor &docStart) {
  HostTensor o(q.dtype, {p.B, p.S, p.NH, p.D}), lse(statsDType(q.dtype), {p.B, p.NH, p.S});
  if (d.on) {
    HostTensor rng = keyTensor(d);
    runKernel("attention_dropout_segments", {&q, &k, &v, &rng, &docStart}, {&o, &lse}, attrs(d));
  } else {
    runKernel("attention_segments", {&q, &k, &v, &docStart}, {&o, &lse}, attrs(d));
  }
  return {o, lse};
}

/// The segment backward after the forward; {dq, dk, dv} (outputs start as NaN).
std::vector<HostTensor> backward(const Dims &p, const Drop &d, HostTensor &q, HostTensor &k,
                                 HostTensor &v, HostTensor &docStart, HostTensor &w) {
  std::vector<HostTensor> f = forward(p, d, q, k, v, docStart);
  HostTensor dq(q.dtype, q.shape), dk(k.dtype, k.shape), dv(v.dtype, v.shape);
  for (HostTensor *t : {&dq, &dk, &dv})
    for (int64_t i = 0; i < t->numel(); ++i)
      t->set(i, std::numeric_limits<double>::quiet_NaN());
  if (d.on) {
    HostTensor rng = keyTensor(d);
    runKernel("attention_dropout_segments_backward",
              {&q, &k, &v, &f[0], &f[1], &w, &rng, &docStart}, {&dq, &dk, &dv}, attrs(d));
  } else {
    runKernel("attention_segments_backward", {&q, &k, &v, &f[0], &f[1], &w, &docStart},
              {&dq, &dk, &dv}, attrs(d));
  }
  return {dq, dk, dv};
}

struct Case {
  Dims dims;
  Eods eods;
  double p; // attention dropout, 0 = off
};

Drop dropOf(const Case &c) {
  Drop d;
  d.on = c.p > 0;
  d.p = c.p;
  return d;
}

struct Inputs {
  HostTensor q, k, v;
};
Inputs randomInputs(const Dims &p, DType t, uint32_t seed) {
  return {randomTensor(t, {p.B, p.S, p.NH, p.D}, seed, -2, 2),
          randomTensor(t, {p.B, p.S, p.NG, p.D}, seed + 1, -2, 2),
          randomTensor(t, {p.B, p.S, p.NG, p.D}, seed + 2, -2, 2)};
}

class AttentionSegmentsTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionSegmentsTest, ForwardMatchesMegatronMaskReference) {
  const Case &c = GetParam();
  Inputs in = randomInputs(c.dims, DType::F64, 11);
  HostTensor ds = docStartOf(c.dims, c.eods);
  std::vector<HostTensor> f = forward(c.dims, dropOf(c), in.q, in.k, in.v, ds);
  HostTensor oRef, lseRef;
  maskedRef(c.dims, megatronMask(c.dims, c.eods), dropOf(c), in.q, in.k, in.v, oRef, lseRef);
  EXPECT_LT(relError(f[0], oRef), 1e-12);
  EXPECT_LT(relError(f[1], lseRef), 1e-12);
  // The document mask matters: plain causal attention differs.
  HostTensor o2, lse2;
  Eods none(size_t(c.dims.B));
  maskedRef(c.dims, megatronMask(c.dims, none), dropOf(c), in.q, in.k, in.v, o2, lse2);
  EXPECT_GT(relError(f[0], o2), 1e-3);
}

TEST_P(AttentionSegmentsTest, BackwardMatchesFiniteDifferences) {
  const Case &c = GetParam();
  Inputs in = randomInputs(c.dims, DType::F64, 21);
  HostTensor ds = docStartOf(c.dims, c.eods);
  HostTensor w = randomTensor(DType::F64, in.q.shape, 24);
  std::vector<HostTensor> g = backward(c.dims, dropOf(c), in.q, in.k, in.v, ds, w);
  ForwardFn fwd = [&](std::vector<HostTensor> &x) {
    return std::vector<HostTensor>{forward(c.dims, dropOf(c), x[0], x[1], x[2], ds)[0]};
  };
  for (int which = 0; which < 3; ++which) {
    HostTensor fd = finiteDifference(fwd, {in.q, in.k, in.v}, {w}, which);
    EXPECT_LT(relError(g[which], fd), kFdTol) << "gradient " << which;
  }
}

TEST_P(AttentionSegmentsTest, F32AgreesWithF64AndIsThreadCountIndependent) {
  const Case &c = GetParam();
  Inputs in = randomInputs(c.dims, DType::F32, 31);
  HostTensor ds = docStartOf(c.dims, c.eods);
  HostTensor w = randomTensor(DType::F32, in.q.shape, 34);
  HostTensor q = in.q.as(DType::F64), k = in.k.as(DType::F64), v = in.v.as(DType::F64),
             w64 = w.as(DType::F64);
  std::vector<HostTensor> f64 = forward(c.dims, dropOf(c), q, k, v, ds);
  std::vector<HostTensor> g64 = backward(c.dims, dropOf(c), q, k, v, ds, w64);
  std::vector<HostTensor> f1, g1, f2, g2;
  withOmpThreads(1, [&] {
    f1 = forward(c.dims, dropOf(c), in.q, in.k, in.v, ds);
    g1 = backward(c.dims, dropOf(c), in.q, in.k, in.v, ds, w);
  });
  withOmpThreads(2, [&] {
    f2 = forward(c.dims, dropOf(c), in.q, in.k, in.v, ds);
    g2 = backward(c.dims, dropOf(c), in.q, in.k, in.v, ds, w);
  });
  for (int i = 0; i < 2; ++i) {
    EXPECT_LT(relError(f1[size_t(i)], f64[size_t(i)]), kF32Tol) << "output " << i;
    EXPECT_EQ(f1[size_t(i)].bytes, f2[size_t(i)].bytes) << "output " << i;
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_LT(relError(g1[size_t(i)], g64[size_t(i)]), kF32Tol) << "gradient " << i;
    EXPECT_EQ(g1[size_t(i)].bytes, g2[size_t(i)].bytes) << "gradient " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Documents, AttentionSegmentsTest,
    ::testing::Values(
        // Two samples with different documents (EOD at the last position too), GQA.
        Case{{2, 9, 4, 2, 6}, {{2, 5}, {0, 8}}, 0},
        Case{{2, 9, 4, 2, 6}, {{2, 5}, {3}}, 0.3},
        // MHA, many one-token documents.
        Case{{1, 7, 3, 3, 4}, {{0, 1, 2, 4}}, 0},
        // Several query (64) and key (128) blocks: documents crossing both block edges, one
        // starting past key block 0 for a whole query block (the skip), a last partial block.
        Case{{1, 300, 2, 1, 5}, {{40, 100, 140, 200}}, 0},
        Case{{1, 300, 2, 1, 5}, {{40, 100, 140, 200}}, 0.2},
        Case{{2, 140, 2, 2, 3}, {{127, 128}, {63, 64, 70}}, 0}),
    [](const ::testing::TestParamInfo<Case> &info) {
      return "Case" + std::to_string(info.index);
    });

TEST(AttentionSegments, ADocumentEqualsAttentionOnItsOwn) {
  // Sample of three documents [0, 50], [51, 170], [171, 199]: the rows of each equal causal
  // attention run on that document's q, k, v alone (its keys only, positions from 0).
  const Dims p{1, 200, 2, 1, 8};
  const Eods eods = {{50, 170}};
  Inputs in = randomInputs(p, DType::F64, 41);
  HostTensor ds = docStartOf(p, eods);
  std::vector<HostTensor> f = forward(p, Drop{}, in.q, in.k, in.v, ds);
  const int64_t starts[] = {0, 51, 171, 200};
  for (int doc = 0; doc < 3; ++doc) {
    const int64_t a = starts[doc], n = starts[doc + 1] - a;
    auto rows = [&](const HostTensor &t, int64_t heads) {
      HostTensor r(DType::F64, {1, n, heads, p.D});
      for (int64_t i = 0; i < r.numel(); ++i)
        r.set(i, t.get(a * heads * p.D + i));
      return r;
    };
    HostTensor q = rows(in.q, p.NH), k = rows(in.k, p.NG), v = rows(in.v, p.NG);
    HostTensor o(DType::F64, {1, n, p.NH, p.D}), lse(DType::F64, {1, p.NH, n});
    runKernel("attention", {&q, &k, &v}, {&o, &lse}, {AttrArg("causal", 1), AttrArg("scale", 0.0)});
    EXPECT_LT(relError(rows(f[0], p.NH), o), 1e-12) << "document " << doc;
    for (int64_t h = 0; h < p.NH; ++h)
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(f[1].get(h * p.S + a + i), lse.get(h * n + i), 1e-12)
            << "document " << doc << " head " << h << " row " << i;
  }
}

TEST(AttentionSegments, ZeroStartsEqualAttentionBitwise) {
  const Dims p{2, 150, 4, 2, 16};
  Inputs in = randomInputs(p, DType::F32, 51);
  HostTensor w = randomTensor(DType::F32, in.q.shape, 54);
  HostTensor ds(DType::I32, {p.B, p.S}); // all 0: one document per sample
  for (double dropP : {0.0, 0.25}) {
    Drop d;
    d.on = dropP > 0;
    d.p = dropP;
    std::vector<HostTensor> seg = forward(p, d, in.q, in.k, in.v, ds);
    std::vector<HostTensor> gseg = backward(p, d, in.q, in.k, in.v, ds, w);
    HostTensor o(DType::F32, in.q.shape), lse(DType::F32, {p.B, p.NH, p.S});
    HostTensor dq(DType::F32, in.q.shape), dk(DType::F32, in.k.shape), dv(DType::F32, in.v.shape);
    HostTensor rng = keyTensor(d);
    if (d.on) {
      runKernel("attention_dropout", {&in.q, &in.k, &in.v, &rng}, {&o, &lse}, attrs(d));
      runKernel("attention_dropout_backward", {&in.q, &in.k, &in.v, &o, &lse, &w, &rng},
                {&dq, &dk, &dv}, attrs(d));
    } else {
      runKernel("attention", {&in.q, &in.k, &in.v}, {&o, &lse}, attrs(d));
      runKernel("attention_backward", {&in.q, &in.k, &in.v, &o, &lse, &w}, {&dq, &dk, &dv},
                attrs(d));
    }
    EXPECT_EQ(seg[0].bytes, o.bytes) << "p " << dropP;
    EXPECT_EQ(seg[1].bytes, lse.bytes) << "p " << dropP;
    EXPECT_EQ(gseg[0].bytes, dq.bytes) << "p " << dropP;
    EXPECT_EQ(gseg[1].bytes, dk.bytes) << "p " << dropP;
    EXPECT_EQ(gseg[2].bytes, dv.bytes) << "p " << dropP;
  }
}

TEST(AttentionSegments, VerifierChecksDocStartAndCausal) {
  HostTensor q(DType::F32, {2, 5, 2, 8}), k(DType::F32, {2, 5, 1, 8}), v(DType::F32, {2, 5, 1, 8});
  HostTensor o(DType::F32, {2, 5, 2, 8}), lse(DType::F32, {2, 2, 5});
  HostTensor ds(DType::I32, {2, 5}), dsF(DType::F32, {2, 5}), dsShort(DType::I32, {2, 4}),
      ds1(DType::I32, {10});
  EXPECT_EQ(verifyKernel("attention_segments", {&q, &k, &v, &ds}, {&o, &lse}, attrs(Drop{})), "");
  EXPECT_EQ(verifyKernel("attention_segments", {&q, &k, &v, &dsF}, {&o, &lse}, attrs(Drop{})),
            "input 3: dtype f32, expected i32");
  EXPECT_EQ(verifyKernel("attention_segments", {&q, &k, &v, &dsShort}, {&o, &lse}, attrs(Drop{})),
            "input 3: shape [2, 4], expected dim 1 = 5 (sequence)");
  EXPECT_EQ(verifyKernel("attention_segments", {&q, &k, &v, &ds1}, {&o, &lse}, attrs(Drop{})),
            "input 3: rank 1 (shape [10]), expected rank 2");
  EXPECT_EQ(verifyKernel("attention_segments", {&q, &k, &v, &ds}, {&o, &lse}, attrs(Drop{}, 0)),
            "attribute causal = 0, expected 1 (doc_start segments are causal)");
  HostTensor dq(q.dtype, q.shape), dk(k.dtype, k.shape), dv(v.dtype, v.shape), dd(q.dtype, q.shape);
  EXPECT_EQ(verifyKernel("attention_segments_backward", {&q, &k, &v, &o, &lse, &dd, &dsF},
                         {&dq, &dk, &dv}, attrs(Drop{})),
            "input 6: dtype f32, expected i32");
  Drop d;
  d.on = true;
  d.p = 0.1;
  HostTensor rng = keyTensor(d);
  EXPECT_EQ(verifyKernel("attention_dropout_segments", {&q, &k, &v, &rng, &dsF}, {&o, &lse},
                         attrs(d)),
            "input 4: dtype f32, expected i32");
  EXPECT_EQ(verifyKernel("attention_dropout_segments_backward",
                         {&q, &k, &v, &o, &lse, &dd, &rng, &dsF}, {&dq, &dk, &dv}, attrs(d)),
            "input 7: dtype f32, expected i32");
}

} // namespace
