//===- AttentionKernelsTest.cpp - attention and attention_backward --------===//
//
// Forward against a naive f64 reference (full softmax over the allowed keys) for causal and
// non-causal, GQA and MHA, odd sizes and sizes that span several key/query blocks; backward against
// central finite differences of L = <w, o> in f64 (norm-wise relative error <= 1e-6; the lse output
// has no cotangent input in attention_backward, so <w, o> is the objective); f32 and bf16 against
// f64; bitwise determinism; the verifier's message for NH not divisible by NG.
//
// attention_dropout: the forward against the naive reference with the mask computed here from the
// documented formula (docs/kernels.md: Philox4x32-10 at global index ((first + b) * NH + h) * S^2 +
// i * S + j, op id + key offset, kept when u >= p, scaled by 1/(1-p)), so the tiled kernel's mask
// and its use are checked independently of its own code (1e-12); the backward against finite
// differences with the mask fixed by the key (1e-6, as above); the kept fraction within 5 sigma of
// the binomial mean and kept values exactly 1/(n(1-p)) on uniform probabilities; a batch of two
// equals the two samples run as microbatches with first sample 0 and 1 (the DP-layout property);
// p = 0 equals attention bitwise; the verifier's messages for p and the key.
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

#include "runtime/core/Philox.h"
#include "runtime/cpu/CpuKernels.h"

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

// The fused f32 tiles are compiled for AVX-512F, AVX2 with FMA and portable C++ (std::fma):
// every instruction set the CPU has gives the same bits, forward and backward, causal and full,
// GQA, a head dim that is not a multiple of 16 and sequences past one 64-key tile and one query
// block, with partial last blocks; and 1 and 2 threads give the same bits. The panel path agrees
// within the f32 tolerance.
TEST(Attention, FusedTilesGiveTheSameBitsOnEveryInstructionSet) {
  const int saved = trainc::rt::cpu::setAttentionPathForTesting(2);
  const int best = trainc::rt::cpu::setAttentionPathForTesting(2); // the CPU's best
  AttnDims p{2, 150, 4, 2, 20};
  AttnInputs in = randomInputs(p, DType::F32, 101, 1.5);
  HostTensor w = randomTensor(DType::F32, in.q.shape, 104);
  for (bool causal : {true, false}) {
    std::vector<std::vector<HostTensor>> fwd, bwd;
    for (int isa = best; isa >= 0; --isa) {
      trainc::rt::cpu::setAttentionPathForTesting(isa);
      fwd.push_back(runForward(p, causal, 0, in.q, in.k, in.v));
      bwd.push_back(runBackward(p, causal, 0, in.q, in.k, in.v, w));
    }
    trainc::rt::cpu::setAttentionPathForTesting(best);
    withOmpThreads(1, [&] {
      fwd.push_back(runForward(p, causal, 0, in.q, in.k, in.v));
      bwd.push_back(runBackward(p, causal, 0, in.q, in.k, in.v, w));
    });
    withOmpThreads(2, [&] {
      fwd.push_back(runForward(p, causal, 0, in.q, in.k, in.v));
      bwd.push_back(runBackward(p, causal, 0, in.q, in.k, in.v, w));
    });
    for (size_t run = 1; run < fwd.size(); ++run) {
      for (int i = 0; i < 2; ++i)
        EXPECT_EQ(fwd[run][size_t(i)].bytes, fwd[0][size_t(i)].bytes)
            << "run " << run << " output " << i << " causal " << causal;
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(bwd[run][size_t(i)].bytes, bwd[0][size_t(i)].bytes)
            << "run " << run << " gradient " << i << " causal " << causal;
    }
  }
  // The row panels (oneDNN's sgemm, the path before the tiles) agree within the f32 tolerance.
  trainc::rt::cpu::setAttentionPathForTesting(-1);
  std::vector<HostTensor> f = runForward(p, true, 0, in.q, in.k, in.v);
  std::vector<HostTensor> g = runBackward(p, true, 0, in.q, in.k, in.v, w);
  trainc::rt::cpu::setAttentionPathForTesting(best);
  std::vector<HostTensor> f2 = runForward(p, true, 0, in.q, in.k, in.v);
  std::vector<HostTensor> g2 = runBackward(p, true, 0, in.q, in.k, in.v, w);
  for (int i = 0; i < 2; ++i)
    EXPECT_LT(relError(f[size_t(i)], f2[size_t(i)]), kF32Tol) << "output " << i;
  for (int i = 0; i < 3; ++i)
    EXPECT_LT(relError(g[size_t(i)], g2[size_t(i)]), kF32Tol) << "gradient " << i;
  trainc::rt::cpu::setAttentionPathForTesting(saved);
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


//===----------------------------------------------------------------------===//
// attention_dropout
//===----------------------------------------------------------------------===//

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

struct DropKey {
  int64_t seed = 1234, iteration = 3, first = 0, offset = -1; // offset < 0: a [3] key
  double p = 0.2;
  int64_t opId = 5;
};

HostTensor keyTensor(const DropKey &d) {
  HostTensor rng(DType::I64, {d.offset < 0 ? 3 : 4});
  rng.set(0, double(d.seed));
  rng.set(1, double(d.iteration));
  rng.set(2, double(d.first));
  if (d.offset >= 0)
    rng.set(3, double(d.offset));
  return rng;
}

std::vector<AttrArg> dropAttrs(bool causal, double scale, const DropKey &d) {
  return {AttrArg("causal", int(causal)), AttrArg("scale", scale), AttrArg("p", d.p),
          AttrArg("op_id", d.opId)};
}

/// The documented mask: 1/(1-p) if probability (b, h, i, j) of the microbatch is kept, else 0.
double keepScale(const AttnDims &p, const DropKey &d, int64_t b, int64_t h, int64_t i, int64_t j) {
  uint64_t g = ((uint64_t(d.first + b) * uint64_t(p.NH) + uint64_t(h)) * uint64_t(p.S) +
                uint64_t(i)) * uint64_t(p.S) + uint64_t(j);
  float u[4];
  uint32_t op = uint32_t(d.opId + std::max<int64_t>(d.offset, 0));
  trainc::rt::philoxUniform4(uint64_t(d.seed), op, uint32_t(d.iteration), g / 4, u);
  return double(u[g % 4]) >= d.p ? 1.0 / (1.0 - d.p) : 0.0;
}

/// Naive f64 reference with dropout: o = sum_j softmax_j * keep(b, h, i, j) * v_j; lse undropped.
void attentionDropoutRef(const AttnDims &p, bool causal, double scale, const DropKey &d,
                         const HostTensor &q, const HostTensor &k, const HostTensor &v,
                         HostTensor &o, HostTensor &lse) {
  attentionRef(p, causal, scale, q, k, v, o, lse);
  if (scale == 0)
    scale = 1 / std::sqrt(double(p.D));
  auto qi = [&](int64_t b, int64_t s, int64_t h, int64_t dd) {
    return ((b * p.S + s) * p.NH + h) * p.D + dd;
  };
  auto ki = [&](int64_t b, int64_t s, int64_t g, int64_t dd) {
    return ((b * p.S + s) * p.NG + g) * p.D + dd;
  };
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.NH; ++h) {
      int64_t g = h / (p.NH / p.NG);
      for (int64_t i = 0; i < p.S; ++i) {
        double l = lse.get((b * p.NH + h) * p.S + i);
        int64_t n = causal ? i + 1 : p.S;
        for (int64_t dd = 0; dd < p.D; ++dd) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t e = 0; e < p.D; ++e)
              s += q.get(qi(b, i, h, e)) * k.get(ki(b, j, g, e));
            acc += std::exp(scale * s - l) * keepScale(p, d, b, h, i, j) * v.get(ki(b, j, g, dd));
          }
          o.set(qi(b, i, h, dd), acc);
        }
      }
    }
}

std::vector<HostTensor> runDropForward(const AttnDims &p, bool causal, double scale,
                                       const DropKey &d, HostTensor &q, HostTensor &k,
                                       HostTensor &v) {
  DType t = q.dtype;
  HostTensor o(t, {p.B, p.S, p.NH, p.D}), lse(statsDType(t), {p.B, p.NH, p.S});
  HostTensor rng = keyTensor(d);
  runKernel("attention_dropout", {&q, &k, &v, &rng}, {&o, &lse}, dropAttrs(causal, scale, d));
  return {o, lse};
}

struct DropCase {
  AttnDims dims;
  bool causal;
  DropKey key;
};

class AttentionDropoutTest : public ::testing::TestWithParam<DropCase> {};

TEST_P(AttentionDropoutTest, ForwardMatchesReferenceWithTheDocumentedMask) {
  DropCase c = GetParam();
  AttnInputs in = randomInputs(c.dims, DType::F64, 41, 2.0);
  std::vector<HostTensor> f = runDropForward(c.dims, c.causal, 0, c.key, in.q, in.k, in.v);
  HostTensor oRef, lseRef;
  attentionDropoutRef(c.dims, c.causal, 0, c.key, in.q, in.k, in.v, oRef, lseRef);
  EXPECT_LT(relError(f[0], oRef), 1e-12);
  EXPECT_LT(relError(f[1], lseRef), 1e-12);
  // The mask matters: without dropout the output differs.
  std::vector<HostTensor> plain = runForward(c.dims, c.causal, 0, in.q, in.k, in.v);
  EXPECT_GT(relError(f[0], plain[0]), 1e-3);
}

TEST_P(AttentionDropoutTest, BackwardMatchesFiniteDifferencesWithAFixedMask) {
  DropCase c = GetParam();
  AttnInputs in = randomInputs(c.dims, DType::F64, 51, 2.0);
  HostTensor w = randomTensor(DType::F64, in.q.shape, 54);
  std::vector<HostTensor> f = runDropForward(c.dims, c.causal, 0, c.key, in.q, in.k, in.v);
  HostTensor dq(in.q.dtype, in.q.shape), dk(in.k.dtype, in.k.shape), dv(in.v.dtype, in.v.shape);
  for (HostTensor *t : {&dq, &dk, &dv})
    for (int64_t i = 0; i < t->numel(); ++i)
      t->set(i, std::numeric_limits<double>::quiet_NaN());
  HostTensor rng = keyTensor(c.key);
  runKernel("attention_dropout_backward", {&in.q, &in.k, &in.v, &f[0], &f[1], &w, &rng},
            {&dq, &dk, &dv}, dropAttrs(c.causal, 0, c.key));
  std::vector<HostTensor> g = {dq, dk, dv};
  ForwardFn fwd = [&](std::vector<HostTensor> &x) {
    return std::vector<HostTensor>{
        runDropForward(c.dims, c.causal, 0, c.key, x[0], x[1], x[2])[0]};
  };
  for (int which = 0; which < 3; ++which) {
    HostTensor fd = finiteDifference(fwd, {in.q, in.k, in.v}, {w}, which);
    EXPECT_LT(relError(g[which], fd), kFdTol) << "gradient " << which;
  }
}

DropKey withKey(double p, int64_t first, int64_t offset) {
  DropKey d;
  d.p = p;
  d.first = first;
  d.offset = offset;
  return d;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionDropoutTest,
    ::testing::Values(
        DropCase{{2, 7, 4, 2, 6}, true, withKey(0.2, 0, -1)},
        DropCase{{2, 7, 4, 2, 6}, false, withKey(0.5, 3, -1)},
        DropCase{{1, 9, 3, 3, 4}, true, withKey(0.1, 5, 7)},
        // Several query (64) and key (128) blocks.
        DropCase{{1, 130, 1, 1, 3}, true, withKey(0.3, 1, 2)},
        DropCase{{1, 130, 1, 1, 3}, false, withKey(0.3, 1, 2)}),
    [](const ::testing::TestParamInfo<DropCase> &info) {
      return "Case" + std::to_string(info.index);
    });

TEST(AttentionDropout, KeptFractionAndScale) {
  // q = 0 makes every probability 1/S (full mask); v one-hot (D = S, v[j, d] = [j == d]) makes
  // o[b, i, h, j] = P_ij * keep_ij / (1 - p): 0 or exactly 1/(S (1-p)).
  const AttnDims p{2, 128, 4, 1, 128};
  DropKey d = withKey(0.1, 0, -1);
  HostTensor q(DType::F64, {p.B, p.S, p.NH, p.D}), k = randomTensor(DType::F64, {p.B, p.S, 1, p.D}, 61);
  HostTensor v(DType::F64, {p.B, p.S, 1, p.D});
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t j = 0; j < p.S; ++j)
      v.set((b * p.S + j) * p.D + j, 1.0);
  std::vector<HostTensor> f = runDropForward(p, false, 0, d, q, k, v);
  const double kept = 1.0 / (double(p.S) * (1 - d.p));
  int64_t dropped = 0, bad = 0;
  for (int64_t i = 0; i < f[0].numel(); ++i) {
    double x = f[0].get(i);
    if (x == 0)
      ++dropped;
    else if (std::abs(x - kept) > 1e-15 * kept)
      ++bad;
  }
  const double n = double(f[0].numel()), mean = n * d.p, sigma = std::sqrt(n * d.p * (1 - d.p));
  EXPECT_EQ(bad, 0);
  EXPECT_LT(std::abs(double(dropped) - mean), 5 * sigma) << dropped << " of " << n;
}

TEST(AttentionDropout, MaskIsKeyedByTheGlobalSample) {
  // Samples 0 and 1 as one microbatch (first 0) equal them as two microbatches (first 0, 1).
  const AttnDims p2{2, 9, 2, 1, 4}, p1{1, 9, 2, 1, 4};
  AttnInputs in = randomInputs(p2, DType::F64, 71, 2.0);
  std::vector<HostTensor> both = runDropForward(p2, true, 0, withKey(0.4, 0, -1), in.q, in.k, in.v);
  for (int64_t s = 0; s < 2; ++s) {
    auto slice = [&](const HostTensor &t) {
      HostTensor r(t.dtype, {1, t.shape[1], t.shape[2], t.shape[3]});
      for (int64_t i = 0; i < r.numel(); ++i)
        r.set(i, t.get(s * r.numel() + i));
      return r;
    };
    HostTensor q = slice(in.q), k = slice(in.k), v = slice(in.v);
    std::vector<HostTensor> one = runDropForward(p1, true, 0, withKey(0.4, s, -1), q, k, v);
    HostTensor want = slice(both[0]);
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(one[0].get(i), want.get(i)) << "sample " << s << " element " << i;
  }
  // Another op id (or key offset) draws another mask.
  DropKey other = withKey(0.4, 0, 1);
  std::vector<HostTensor> o2 = runDropForward(p2, true, 0, other, in.q, in.k, in.v);
  EXPECT_GT(relError(o2[0], both[0]), 1e-3);
}

TEST(AttentionDropout, HeadShardDrawsTheGlobalMask) {
  // Tensor parallelism: the heads [2, 4) of 4 (with their kv group) as a shard with
  // head_start = 2 and num_heads = 4 give exactly those heads of the unsharded kernel.
  const AttnDims all{2, 9, 4, 2, 4}, shard{2, 9, 2, 1, 4};
  AttnInputs in = randomInputs(all, DType::F64, 73, 2.0);
  DropKey d = withKey(0.4, 3, -1);
  std::vector<HostTensor> full = runDropForward(all, true, 0, d, in.q, in.k, in.v);
  auto heads = [](const HostTensor &t, int64_t from, int64_t n) { // [B, S, H, D] -> heads
    HostTensor r(t.dtype, {t.shape[0], t.shape[1], n, t.shape[3]});
    for (int64_t b = 0; b < t.shape[0]; ++b)
      for (int64_t i = 0; i < t.shape[1]; ++i)
        for (int64_t h = 0; h < n; ++h)
          for (int64_t e = 0; e < t.shape[3]; ++e)
            r.set(((b * t.shape[1] + i) * n + h) * t.shape[3] + e,
                  t.get(((b * t.shape[1] + i) * t.shape[2] + from + h) * t.shape[3] + e));
    return r;
  };
  HostTensor q = heads(in.q, 2, 2), k = heads(in.k, 1, 1), v = heads(in.v, 1, 1);
  HostTensor o(DType::F64, {2, 9, 2, 4}), lse(DType::F64, {2, 2, 9}), rng = keyTensor(d);
  std::vector<AttrArg> attrs = dropAttrs(true, 0, d);
  attrs.push_back(AttrArg("head_start", 2));
  attrs.push_back(AttrArg("num_heads", 4));
  runKernel("attention_dropout", {&q, &k, &v, &rng}, {&o, &lse}, attrs);
  HostTensor want = heads(full[0], 2, 2);
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_EQ(o.get(i), want.get(i)) << "element " << i;
  // Without head_start the shard draws heads 0 and 1's mask: another output.
  HostTensor o0(DType::F64, {2, 9, 2, 4}), lse0(DType::F64, {2, 2, 9});
  runKernel("attention_dropout", {&q, &k, &v, &rng}, {&o0, &lse0}, dropAttrs(true, 0, d));
  EXPECT_GT(relError(o0, want), 1e-3);
  (void)shard;
}

TEST(AttentionDropout, ZeroProbabilityEqualsAttention) {
  const AttnDims p{2, 7, 4, 2, 12};
  AttnInputs in = randomInputs(p, DType::F32, 81, 2.0);
  std::vector<HostTensor> a = runForward(p, true, 0, in.q, in.k, in.v);
  std::vector<HostTensor> b = runDropForward(p, true, 0, withKey(0.0, 0, -1), in.q, in.k, in.v);
  for (int r = 0; r < 2; ++r)
    for (int64_t i = 0; i < a[r].numel(); ++i)
      ASSERT_EQ(a[r].get(i), b[r].get(i));
}

TEST(AttentionDropout, VerifierRejectsBadProbabilityAndKey) {
  HostTensor q(DType::F32, {1, 5, 2, 8}), k(DType::F32, {1, 5, 1, 8}), v(DType::F32, {1, 5, 1, 8});
  HostTensor o(DType::F32, {1, 5, 2, 8}), lse(DType::F32, {1, 2, 5});
  HostTensor rng(DType::I64, {3}), rng5(DType::I64, {5}), rngF(DType::F32, {3});
  EXPECT_EQ(verifyKernel("attention_dropout", {&q, &k, &v, &rng}, {&o, &lse},
                         dropAttrs(true, 0, withKey(0.1, 0, -1))),
            "");
  EXPECT_HAS(verifyKernel("attention_dropout", {&q, &k, &v, &rng}, {&o, &lse},
                               dropAttrs(true, 0, withKey(1.0, 0, -1))),
                  "p = 1.000000, expected 0 <= p < 1");
  EXPECT_HAS(verifyKernel("attention_dropout", {&q, &k, &v, &rng5}, {&o, &lse},
                               dropAttrs(true, 0, withKey(0.1, 0, -1))),
                  "input 3");
  EXPECT_HAS(verifyKernel("attention_dropout", {&q, &k, &v, &rngF}, {&o, &lse},
                               dropAttrs(true, 0, withKey(0.1, 0, -1))),
                  "input 3");
  HostTensor dq(q.dtype, q.shape), dk(k.dtype, k.shape), dv(v.dtype, v.shape), dd(q.dtype, q.shape);
  EXPECT_HAS(verifyKernel("attention_dropout_backward", {&q, &k, &v, &o, &lse, &dd, &rng5},
                               {&dq, &dk, &dv}, dropAttrs(true, 0, withKey(0.1, 0, -1))),
                  "input 6");
}

} // namespace
