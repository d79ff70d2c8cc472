//===- AttentionKernelsTest.cpp - attention and attention_backward --------===//
//
// Forward against a naive f64 reference (full softmax over the allowed keys) for causal and
// non-causal, GQA and MHA, odd sizes and sizes that span several key/query blocks; backward against
// central finite differences of L = <w, o> in f64 (norm-wise relative error <= 1e-6; the lse output
// has no cotangent input in attention_backward, so <w, o> is the objective); f32 and bf16 against
// f64; bitwise determinism; the verifier's message for NH not divisible by NG.
//
// Tolerances (norm-wise relative error, relError in KernelTestUtil.h; "measured" is the largest
// value seen over all cases here):
//  - f64 forward vs reference: 1e-12 (both f64, differing in summation order only; measured 7e-16).
//  - f64 backward vs finite differences: 1e-6 (truncation error of the h = 1e-5 central
//    difference, O(h^2), plus cancellation ~1e-16 / h ~ 1e-11; measured 5e-9; matches the other
//    kernel tests).
//  - f32 vs f64 on the same (f32-representable) inputs: 2e-6 for o, lse and dq, dk, dv. f32 unit
//    roundoff is 6e-8; the error grows with the number of accumulated terms (D and S) and includes
//    the polynomial exp (~1.5 ulp); measured 4e-7 at S = 300, D = 64, so a 5x margin for other
//    CPUs' GEMM kernels (oneDNN picks AVX2 or AVX-512 code at run time). Scores of magnitude ~100
//    (LargeScoresAreStable) amplify the rounding of the scores; there 1e-5 (measured 9e-7).
//  - bf16 vs f64 on the same (bf16-representable) inputs: 1e-2 for o and 2e-2 for dq, dk, dv
//    (measured 1.7e-3 and 2.7e-3). Arithmetic is f32; the error is dominated by rounding the
//    outputs (and, in the backward, the stored o that enters D_i = do . o) to bf16's 8-bit
//    mantissa (2^-9 ~ 2e-3 relative). lse is f32 for bf16 and held to the f32 tolerance.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include <cmath>
#include <limits>

// Weak references to OpenMP's thread-count controls (null when no OpenMP runtime is loaded).
extern "C" int omp_get_max_threads() __attribute__((weak));
extern "C" void omp_set_num_threads(int) __attribute__((weak));

using namespace trainc::rt;
using namespace trainc::rt::test;

namespace {

constexpr double kFdTol = 1e-6;
constexpr double kF32Tol = 2e-6;
constexpr double kBf16FwdTol = 1e-2;
constexpr double kBf16BwdTol = 2e-2;

struct AttnDims {
  int64_t B, S, NH, NG, D;
};

std::vector<AttrArg> attnAttrs(bool causal, double scale) {
  return {AttrArg("causal", int(causal)), AttrArg("scale", scale)};
}

/// Naive f64 reference: o[b, i, h, :] = sum_j softmax_j(scale q_i . k_j) v_j over allowed keys,
/// lse[b, h, i] = log sum_j exp(scale q_i . k_j).
void attentionRef(const AttnDims &p, bool causal, double scale, const HostTensor &q,
                  const HostTensor &k, const HostTensor &v, HostTensor &o, HostTensor &lse) {
  if (scale == 0)
    scale = 1 / std::sqrt(double(p.D));
  o = HostTensor(DType::F64, {p.B, p.S, p.NH, p.D});
  lse = HostTensor(DType::F64, {p.B, p.NH, p.S});
  auto qi = [&](int64_t b, int64_t s, int64_t h, int64_t d) {
    return ((b * p.S + s) * p.NH + h) * p.D + d;
  };
  auto ki = [&](int64_t b, int64_t s, int64_t g, int64_t d) {
    return ((b * p.S + s) * p.NG + g) * p.D + d;
  };
  std::vector<double> sc(size_t(p.S));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.NH; ++h) {
      int64_t g = h / (p.NH / p.NG);
      for (int64_t i = 0; i < p.S; ++i) {
        int64_t n = causal ? i + 1 : p.S;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t d = 0; d < p.D; ++d)
            s += q.get(qi(b, i, h, d)) * k.get(ki(b, j, g, d));
          sc[j] = scale * s;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < n; ++j)
          sum += std::exp(sc[j] - mx);
        for (int64_t d = 0; d < p.D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j)
            acc += std::exp(sc[j] - mx) / sum * v.get(ki(b, j, g, d));
          o.set(qi(b, i, h, d), acc);
        }
        lse.set((b * p.NH + h) * p.S + i, mx + std::log(sum));
      }
    }
}

struct AttnInputs {
  HostTensor q, k, v;
};

AttnInputs randomInputs(const AttnDims &p, DType t, uint32_t seed, double range = 1) {
  return {randomTensor(t, {p.B, p.S, p.NH, p.D}, seed, -range, range),
          randomTensor(t, {p.B, p.S, p.NG, p.D}, seed + 1, -range, range),
          randomTensor(t, {p.B, p.S, p.NG, p.D}, seed + 2, -range, range)};
}

/// Runs the forward kernel in dtype t; returns {o, lse}.
std::vector<HostTensor> runForward(const AttnDims &p, bool causal, double scale, HostTensor &q,
                                   HostTensor &k, HostTensor &v) {
  DType t = q.dtype;
  HostTensor o(t, {p.B, p.S, p.NH, p.D}), lse(statsDType(t), {p.B, p.NH, p.S});
  runKernel("attention", {&q, &k, &v}, {&o, &lse}, attnAttrs(causal, scale));
  return {o, lse};
}

/// Runs forward then backward with upstream gradient w; returns {dq, dk, dv}. The gradient
/// outputs start as NaN to check that they are overwritten.
std::vector<HostTensor> runBackward(const AttnDims &p, bool causal, double scale, HostTensor &q,
                                    HostTensor &k, HostTensor &v, HostTensor &w) {
  std::vector<HostTensor> f = runForward(p, causal, scale, q, k, v);
  HostTensor dq(q.dtype, q.shape), dk(k.dtype, k.shape), dv(v.dtype, v.shape);
  for (HostTensor *t : {&dq, &dk, &dv})
    for (int64_t i = 0; i < t->numel(); ++i)
      t->set(i, std::numeric_limits<double>::quiet_NaN());
  runKernel("attention_backward", {&q, &k, &v, &f[0], &f[1], &w}, {&dq, &dk, &dv},
            attnAttrs(causal, scale));
  return {dq, dk, dv};
}

struct AttnCase {
  AttnDims dims;
  bool causal;
  double scale;
};

std::string caseName(const ::testing::TestParamInfo<AttnCase> &info) {
  const AttnCase &c = info.param;
  std::string n = "B" + std::to_string(c.dims.B) + "S" + std::to_string(c.dims.S) + "H" +
                  std::to_string(c.dims.NH) + "G" + std::to_string(c.dims.NG) + "D" +
                  std::to_string(c.dims.D) + (c.causal ? "Causal" : "Full");
  if (c.scale != 0)
    n += "Scaled";
  return n;
}

class AttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionTest, ForwardMatchesReference) {
  AttnCase c = GetParam();
  AttnInputs in = randomInputs(c.dims, DType::F64, 11, 2.0);
  std::vector<HostTensor> f = runForward(c.dims, c.causal, c.scale, in.q, in.k, in.v);
  HostTensor oRef, lseRef;
  attentionRef(c.dims, c.causal, c.scale, in.q, in.k, in.v, oRef, lseRef);
  EXPECT_LT(relError(f[0], oRef), 1e-12);
  EXPECT_LT(relError(f[1], lseRef), 1e-12);
}

TEST_P(AttentionTest, BackwardMatchesFiniteDifferences) {
  AttnCase c = GetParam();
  AttnInputs in = randomInputs(c.dims, DType::F64, 21, 2.0);
  HostTensor w = randomTensor(DType::F64, in.q.shape, 24);
  std::vector<HostTensor> g = runBackward(c.dims, c.causal, c.scale, in.q, in.k, in.v, w);
  ForwardFn fwd = [&](std::vector<HostTensor> &x) {
    std::vector<HostTensor> f = runForward(c.dims, c.causal, c.scale, x[0], x[1], x[2]);
    return std::vector<HostTensor>{f[0]};
  };
  for (int which = 0; which < 3; ++which) {
    HostTensor fd = finiteDifference(fwd, {in.q, in.k, in.v}, {w}, which);
    EXPECT_LT(relError(g[which], fd), kFdTol) << "gradient " << which;
  }
}

TEST_P(AttentionTest, F32AndBf16AgreeWithF64) {
  AttnCase c = GetParam();
  // Inputs representable in bf16, so every dtype sees the same values.
  AttnInputs in = randomInputs(c.dims, DType::BF16, 31, 2.0);
  HostTensor w16 = randomTensor(DType::BF16, in.q.shape, 34);
  HostTensor q = in.q.as(DType::F64), k = in.k.as(DType::F64), v = in.v.as(DType::F64),
             w = w16.as(DType::F64);
  std::vector<HostTensor> f64 = runForward(c.dims, c.causal, c.scale, q, k, v);
  std::vector<HostTensor> g64 = runBackward(c.dims, c.causal, c.scale, q, k, v, w);

  HostTensor q32 = q.as(DType::F32), k32 = k.as(DType::F32), v32 = v.as(DType::F32),
             w32 = w.as(DType::F32);
  std::vector<HostTensor> f32 = runForward(c.dims, c.causal, c.scale, q32, k32, v32);
  ASSERT_EQ(f32[1].dtype, DType::F32);
  EXPECT_LT(relError(f32[0], f64[0]), kF32Tol);
  EXPECT_LT(relError(f32[1], f64[1]), kF32Tol);
  std::vector<HostTensor> g32 = runBackward(c.dims, c.causal, c.scale, q32, k32, v32, w32);
  for (int i = 0; i < 3; ++i)
    EXPECT_LT(relError(g32[i], g64[i]), kF32Tol) << "gradient " << i;

  std::vector<HostTensor> f16 = runForward(c.dims, c.causal, c.scale, in.q, in.k, in.v);
  ASSERT_EQ(f16[1].dtype, DType::F32);
  EXPECT_LT(relError(f16[0], f64[0]), kBf16FwdTol);
  EXPECT_LT(relError(f16[1], f64[1]), kF32Tol); // lse is computed and stored in f32
  std::vector<HostTensor> g16 = runBackward(c.dims, c.causal, c.scale, in.q, in.k, in.v, w16);
  for (int i = 0; i < 3; ++i)
    EXPECT_LT(relError(g16[i], g64[i]), kBf16BwdTol) << "gradient " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Values(
        // Odd sizes: sequence 7, head dim 12, two batches; GQA (4 heads in 2 or 1 groups), MHA.
        AttnCase{{2, 7, 4, 2, 12}, true, 0}, AttnCase{{2, 7, 4, 2, 12}, false, 0},
        AttnCase{{2, 7, 4, 1, 12}, true, 0}, AttnCase{{2, 7, 4, 1, 12}, false, 0},
        AttnCase{{2, 7, 3, 3, 12}, true, 0}, AttnCase{{2, 7, 3, 3, 12}, false, 0},
        AttnCase{{2, 7, 4, 2, 12}, true, 0.3},
        // Several query and key blocks (64 each) with a partial last block.
        AttnCase{{1, 130, 2, 1, 5}, true, 0}, AttnCase{{1, 130, 2, 1, 5}, false, 0},
        AttnCase{{1, 1, 2, 2, 3}, true, 0}));

TEST(Attention, LongSequenceF32AgreesWithF64) {
  // Head dim 64 and a sequence spanning several blocks, as in the benchmark (smaller).
  AttnDims p{1, 300, 4, 2, 64};
  AttnInputs in = randomInputs(p, DType::F32, 41, 1.5);
  HostTensor w = randomTensor(DType::F32, in.q.shape, 44);
  HostTensor q = in.q.as(DType::F64), k = in.k.as(DType::F64), v = in.v.as(DType::F64),
             w64 = w.as(DType::F64);
  for (bool causal : {true, false}) {
    std::vector<HostTensor> f = runForward(p, causal, 0, in.q, in.k, in.v);
    HostTensor oRef, lseRef;
    attentionRef(p, causal, 0, q, k, v, oRef, lseRef);
    EXPECT_LT(relError(f[0], oRef), kF32Tol);
    EXPECT_LT(relError(f[1], lseRef), kF32Tol);
    std::vector<HostTensor> g32 = runBackward(p, causal, 0, in.q, in.k, in.v, w);
    std::vector<HostTensor> g64 = runBackward(p, causal, 0, q, k, v, w64);
    for (int i = 0; i < 3; ++i)
      EXPECT_LT(relError(g32[i], g64[i]), kF32Tol) << "gradient " << i << " causal " << causal;
  }
}

TEST(Attention, CausalFirstRowCopiesFirstValue) {
  AttnDims p{1, 5, 2, 1, 4};
  AttnInputs in = randomInputs(p, DType::F64, 51);
  std::vector<HostTensor> f = runForward(p, true, 0, in.q, in.k, in.v);
  for (int64_t h = 0; h < p.NH; ++h) {
    for (int64_t d = 0; d < p.D; ++d)
      EXPECT_DOUBLE_EQ(f[0].get(h * p.D + d), in.v.get(d));
    double s = 0;
    for (int64_t d = 0; d < p.D; ++d)
      s += in.q.get(h * p.D + d) * in.k.get(d);
    EXPECT_NEAR(f[1].get(h * p.S), s / 2, 1e-15); // lse of one key: scale * q0 . k0
  }
}

TEST(Attention, LargeScoresAreStable) {
  // Scores of magnitude ~100: the online softmax must not overflow.
  AttnDims p{1, 80, 2, 2, 8};
  AttnInputs in = randomInputs(p, DType::F64, 61, 6.0);
  for (bool causal : {true, false}) {
    std::vector<HostTensor> f = runForward(p, causal, 1.0, in.q, in.k, in.v);
    HostTensor oRef, lseRef;
    attentionRef(p, causal, 1.0, in.q, in.k, in.v, oRef, lseRef);
    EXPECT_LT(relError(f[0], oRef), 1e-12);
    EXPECT_LT(relError(f[1], lseRef), 1e-12);
    HostTensor q = in.q.as(DType::F32), k = in.k.as(DType::F32), v = in.v.as(DType::F32);
    std::vector<HostTensor> f32 = runForward(p, causal, 1.0, q, k, v);
    EXPECT_LT(relError(f32[0], oRef), 1e-5);
    EXPECT_LT(relError(f32[1], lseRef), 1e-5);
  }
}

TEST(Attention, Deterministic) {
  AttnDims p{2, 150, 4, 2, 16};
  for (DType t : {DType::F32, DType::BF16, DType::F64}) {
    AttnInputs in = randomInputs(p, t, 71);
    HostTensor w = randomTensor(t, in.q.shape, 74);
    std::vector<HostTensor> a = runForward(p, true, 0, in.q, in.k, in.v);
    std::vector<HostTensor> b = runForward(p, true, 0, in.q, in.k, in.v);
    std::vector<HostTensor> ga = runBackward(p, true, 0, in.q, in.k, in.v, w);
    std::vector<HostTensor> gb = runBackward(p, true, 0, in.q, in.k, in.v, w);
    for (int i = 0; i < 2; ++i)
      EXPECT_EQ(a[i].bytes, b[i].bytes) << dtypeName(t);
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(ga[i].bytes, gb[i].bytes) << dtypeName(t);
  }
}

TEST(Attention, EmptyHeadDimAndNoQueryHeads) {
  // D = 0: all scores are 0, so lse is the log of the number of allowed keys.
  AttnDims p{1, 5, 2, 1, 0};
  for (DType t : {DType::F32, DType::F64}) {
    HostTensor q(t, {1, 5, 2, 0}), k(t, {1, 5, 1, 0}), v(t, {1, 5, 1, 0});
    std::vector<HostTensor> f = runForward(p, true, 0, q, k, v);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 5; ++i)
        EXPECT_NEAR(f[1].get(h * 5 + i), std::log(double(i + 1)), 1e-6) << dtypeName(t);
  }
  // NH = 0: dk and dv are still overwritten, with zeros.
  AttnDims z{1, 4, 0, 1, 3};
  AttnInputs in = randomInputs(z, DType::F64, 81);
  HostTensor w(DType::F64, in.q.shape);
  std::vector<HostTensor> g = runBackward(z, true, 0, in.q, in.k, in.v, w);
  for (int i = 1; i < 3; ++i)
    for (int64_t j = 0; j < g[i].numel(); ++j)
      EXPECT_EQ(g[i].get(j), 0.0);
}

TEST(Attention, LeavesTheCallersOpenMPThreadCountAlone) {
  // The kernels run oneDNN's sgemm on the calling thread by setting this thread's OpenMP thread
  // count to 1 for their duration; the setting must be restored afterwards.
  if (!omp_get_max_threads || !omp_set_num_threads)
    GTEST_SKIP() << "no OpenMP runtime loaded";
  int before = omp_get_max_threads();
  omp_set_num_threads(3);
  AttnDims p{1, 70, 2, 1, 8};
  AttnInputs in = randomInputs(p, DType::F32, 91);
  HostTensor w = randomTensor(DType::F32, in.q.shape, 94);
  runBackward(p, true, 0, in.q, in.k, in.v, w);
  EXPECT_EQ(omp_get_max_threads(), 3);
  omp_set_num_threads(before);
}

TEST(Attention, VerifierRejectsHeadsNotDivisibleByGroups) {
  HostTensor q(DType::F32, {1, 5, 4, 8}), k(DType::F32, {1, 5, 3, 8}), v(DType::F32, {1, 5, 3, 8});
  HostTensor o(DType::F32, {1, 5, 4, 8}), lse(DType::F32, {1, 4, 5});
  const std::string msg = "input 1: 3 key/value heads (query groups) do not divide 4 query heads";
  EXPECT_EQ(verifyKernel("attention", {&q, &k, &v}, {&o, &lse}), msg);
  HostTensor dq(q.dtype, q.shape), dk(k.dtype, k.shape), dv(v.dtype, v.shape), d(q.dtype, q.shape);
  EXPECT_EQ(verifyKernel("attention_backward", {&q, &k, &v, &o, &lse, &d}, {&dq, &dk, &dv}), msg);
  // A well-formed GQA call passes.
  HostTensor k2(DType::F32, {1, 5, 2, 8}), v2(DType::F32, {1, 5, 2, 8});
  EXPECT_EQ(verifyKernel("attention", {&q, &k2, &v2}, {&o, &lse}), "");
}

} // namespace
