//===- NormKernelsTest.cpp - layer_norm, rms_norm, rope, embedding (+ bwd) ===//
//
// Forward kernels against naive f64 references written here; backward kernels against central
// finite differences of the f64 forward kernel (norm-wise relative error <= 1e-6); f32 against
// f64 and bf16 against f64 within the tolerances below (norm-wise relative errors, relError()).
//
// Tolerances:
//  - f64 forward vs the naive reference: 1e-13 (only summation order and rounding differ); 1e-11
//    for rope, whose angles reach ~1e4 rad.
//  - f32 vs f64: 1e-5. f32 has a unit roundoff of 6e-8; the kernels accumulate in f32 over rows of
//    up to ~1000 elements, and a correct kernel is 1e-7..1e-6 off. 1e-5 still catches an f32 rope
//    angle at the large positions used here (pos * 6e-8 rad ~ 5e-4) and a single-pass variance
//    (LayerNorm.F32VarianceIsStableForALargeMean).
//  - bf16 vs f64: 1e-2. bf16 storage has an 8-bit mantissa (unit roundoff 2^-9 = 2e-3); the
//    reference uses the bf16-rounded inputs, so the remaining error is one or two output roundings
//    (measured ~1.7e-3). embedding_backward in bf16 is held to 2.5e-3: one rounding per element.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include <algorithm>
#include <cmath>

using namespace trainc::rt;
using namespace trainc::rt::test;

namespace {

constexpr double kFdTol = 1e-6;
constexpr double kRefTol = 1e-13;
// rope angles reach ~1e4 rad, where one ulp of the angle is ~2e-12: the kernel's and the
// reference's angles (p * base^-e vs p / base^e) may differ by that much.
constexpr double kRopeRefTol = 1e-11;
constexpr double kF32Tol = 1e-5;
constexpr double kBf16Tol = 1e-2;

/// Shape of the per-row statistics of x[..., H].
std::vector<int64_t> rowsShape(const std::vector<int64_t> &shape) {
  return std::vector<int64_t>(shape.begin(), shape.end() - 1);
}

/// A tensor of the given dtype filled with a recognisable non-zero value (to check outputs are
/// overwritten, not accumulated into).
HostTensor garbage(DType t, std::vector<int64_t> shape) {
  HostTensor r(t, std::move(shape));
  for (int64_t i = 0; i < r.numel(); ++i)
    r.set(i, 123.25);
  return r;
}

//===----------------------------------------------------------------------===//
// layer_norm
//===----------------------------------------------------------------------===//

struct NormRef {
  HostTensor y, mean, rstd;
};

/// Naive f64 layer norm (biased variance), from the definition.
NormRef layerNormRef(const HostTensor &x, const HostTensor &gamma, const HostTensor &beta,
                     double eps) {
  int64_t H = x.shape.back(), R = x.numel() / H;
  NormRef r{HostTensor(DType::F64, x.shape), HostTensor(DType::F64, rowsShape(x.shape)),
            HostTensor(DType::F64, rowsShape(x.shape))};
  for (int64_t i = 0; i < R; ++i) {
    double m = 0;
    for (int64_t j = 0; j < H; ++j)
      m += x.get(i * H + j);
    m /= double(H);
    double v = 0;
    for (int64_t j = 0; j < H; ++j)
      v += (x.get(i * H + j) - m) * (x.get(i * H + j) - m);
    v /= double(H);
    double rs = 1 / std::sqrt(v + eps);
    for (int64_t j = 0; j < H; ++j)
      r.y.set(i * H + j, (x.get(i * H + j) - m) * rs * gamma.get(j) + beta.get(j));
    r.mean.set(i, m);
    r.rstd.set(i, rs);
  }
  return r;
}

struct LnOut {
  HostTensor y, mean, rstd;
};

LnOut runLayerNorm(HostTensor &x, HostTensor &gamma, HostTensor &beta, double eps) {
  DType s = statsDType(x.dtype);
  LnOut o{HostTensor(x.dtype, x.shape), HostTensor(s, rowsShape(x.shape)),
          HostTensor(s, rowsShape(x.shape))};
  runKernel("layer_norm", {&x, &gamma, &beta}, {&o.y, &o.mean, &o.rstd},
            {AttrArg("eps", eps)});
  return o;
}

struct LnGrads {
  HostTensor dx, dgamma, dbeta;
};

LnGrads runLayerNormBackward(HostTensor &dy, HostTensor &x, HostTensor &gamma, HostTensor &mean,
                             HostTensor &rstd) {
  LnGrads g{garbage(x.dtype, x.shape), garbage(x.dtype, gamma.shape),
            garbage(x.dtype, gamma.shape)};
  runKernel("layer_norm_backward", {&dy, &x, &gamma, &mean, &rstd}, {&g.dx, &g.dgamma, &g.dbeta});
  return g;
}

class LayerNormTest : public ::testing::TestWithParam<std::vector<int64_t>> {};

TEST_P(LayerNormTest, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  std::vector<int64_t> shape = GetParam();
  int64_t H = shape.back();
  const double eps = 1e-5;
  HostTensor x = randomTensor(DType::F64, shape, 1, -2, 2);
  HostTensor gamma = randomTensor(DType::F64, {H}, 2, 0.5, 1.5);
  HostTensor beta = randomTensor(DType::F64, {H}, 3);
  LnOut o = runLayerNorm(x, gamma, beta, eps);
  NormRef ref = layerNormRef(x, gamma, beta, eps);
  EXPECT_LT(relError(o.y, ref.y), kRefTol);
  EXPECT_LT(relError(o.mean, ref.mean), kRefTol);
  EXPECT_LT(relError(o.rstd, ref.rstd), kRefTol);

  // Gradients of L = <w, y> with respect to x, gamma and beta.
  HostTensor w = randomTensor(DType::F64, shape, 4);
  ForwardFn fwd = [&](std::vector<HostTensor> &in) {
    LnOut r = runLayerNorm(in[0], in[1], in[2], eps);
    return std::vector<HostTensor>{r.y};
  };
  std::vector<HostTensor> inputs = {x, gamma, beta};
  LnGrads g = runLayerNormBackward(w, x, gamma, o.mean, o.rstd);
  EXPECT_LT(relError(g.dx, finiteDifference(fwd, inputs, {w}, 0)), kFdTol);
  EXPECT_LT(relError(g.dgamma, finiteDifference(fwd, inputs, {w}, 1)), kFdTol);
  EXPECT_LT(relError(g.dbeta, finiteDifference(fwd, inputs, {w}, 2)), kFdTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormTest,
                         ::testing::Values(std::vector<int64_t>{13},
                                           std::vector<int64_t>{7, 13},
                                           std::vector<int64_t>{2, 7, 12},
                                           std::vector<int64_t>{3, 1, 19}));

TEST(LayerNorm, F32AndBf16AgreeWithF64) {
  // A large mean relative to the spread (x in [3, 5]) exercises the variance computation.
  std::vector<int64_t> shape = {5, 3, 1021};
  int64_t H = shape.back();
  HostTensor x = randomTensor(DType::F64, shape, 11, 3, 5);
  HostTensor gamma = randomTensor(DType::F64, {H}, 12, 0.5, 1.5);
  HostTensor beta = randomTensor(DType::F64, {H}, 13);
  HostTensor dy = randomTensor(DType::F64, shape, 14);
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    double tol = t == DType::F32 ? kF32Tol : kBf16Tol;
    // Reference: f64 on the same (rounded) values.
    HostTensor xt = x.as(t), gt = gamma.as(t), bt = beta.as(t), dyt = dy.as(t);
    HostTensor x64 = xt.as(DType::F64), g64 = gt.as(DType::F64), b64 = bt.as(DType::F64),
               dy64 = dyt.as(DType::F64);
    LnOut o64 = runLayerNorm(x64, g64, b64, 1e-5);
    LnGrads r64 = runLayerNormBackward(dy64, x64, g64, o64.mean, o64.rstd);

    LnOut o = runLayerNorm(xt, gt, bt, 1e-5);
    EXPECT_EQ(o.mean.dtype, DType::F32);
    EXPECT_LT(relError(o.y, o64.y), tol);
    EXPECT_LT(relError(o.mean, o64.mean), kF32Tol); // statistics are f32 for both
    EXPECT_LT(relError(o.rstd, o64.rstd), kF32Tol);
    LnGrads r = runLayerNormBackward(dyt, xt, gt, o.mean, o.rstd);
    EXPECT_LT(relError(r.dx, r64.dx), tol);
    EXPECT_LT(relError(r.dgamma, r64.dgamma), tol);
    EXPECT_LT(relError(r.dbeta, r64.dbeta), tol);
  }
}

TEST(LayerNorm, F32VarianceIsStableForALargeMean) {
  // Rows with mean ~100 and std ~0.3: E[x^2] - mean^2 would cancel ~5 digits of f32.
  std::vector<int64_t> shape = {6, 1021};
  HostTensor x = randomTensor(DType::F32, shape, 15, 100, 101);
  HostTensor gamma = randomTensor(DType::F32, {1021}, 16, 0.5, 1.5);
  HostTensor beta = randomTensor(DType::F32, {1021}, 17);
  HostTensor x64 = x.as(DType::F64), g64 = gamma.as(DType::F64), b64 = beta.as(DType::F64);
  NormRef ref = layerNormRef(x64, g64, b64, 1e-5);
  LnOut o = runLayerNorm(x, gamma, beta, 1e-5);
  // The two-pass variance keeps rstd to f32 accuracy (a single-pass one is ~1e-2 off here).
  EXPECT_LT(relError(o.rstd, ref.rstd), kF32Tol);
  EXPECT_LT(relError(o.mean, ref.mean), kF32Tol);
  // y inherits the f32 mean's absolute error (~1e-5 at magnitude 100) divided by the std (0.3),
  // which any f32-accumulating layer norm has: 1e-4 here.
  EXPECT_LT(relError(o.y, ref.y), 1e-4);
}

//===----------------------------------------------------------------------===//
// rms_norm
//===----------------------------------------------------------------------===//

NormRef rmsNormRef(const HostTensor &x, const HostTensor &gamma, double eps) {
  int64_t H = x.shape.back(), R = x.numel() / H;
  NormRef r{HostTensor(DType::F64, x.shape), HostTensor(), HostTensor(DType::F64, rowsShape(x.shape))};
  for (int64_t i = 0; i < R; ++i) {
    double ms = 0;
    for (int64_t j = 0; j < H; ++j)
      ms += x.get(i * H + j) * x.get(i * H + j);
    double rs = 1 / std::sqrt(ms / double(H) + eps);
    for (int64_t j = 0; j < H; ++j)
      r.y.set(i * H + j, x.get(i * H + j) * rs * gamma.get(j));
    r.rstd.set(i, rs);
  }
  return r;
}

struct RmsOut {
  HostTensor y, rstd;
};

RmsOut runRmsNorm(HostTensor &x, HostTensor &gamma, double eps) {
  RmsOut o{HostTensor(x.dtype, x.shape), HostTensor(statsDType(x.dtype), rowsShape(x.shape))};
  runKernel("rms_norm", {&x, &gamma}, {&o.y, &o.rstd}, {AttrArg("eps", eps)});
  return o;
}

struct RmsGrads {
  HostTensor dx, dgamma;
};

RmsGrads runRmsNormBackward(HostTensor &dy, HostTensor &x, HostTensor &gamma, HostTensor &rstd) {
  RmsGrads g{garbage(x.dtype, x.shape), garbage(x.dtype, gamma.shape)};
  runKernel("rms_norm_backward", {&dy, &x, &gamma, &rstd}, {&g.dx, &g.dgamma});
  return g;
}

class RmsNormTest : public ::testing::TestWithParam<std::vector<int64_t>> {};

TEST_P(RmsNormTest, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  std::vector<int64_t> shape = GetParam();
  int64_t H = shape.back();
  const double eps = 1e-6;
  HostTensor x = randomTensor(DType::F64, shape, 21, -2, 2);
  HostTensor gamma = randomTensor(DType::F64, {H}, 22, 0.5, 1.5);
  RmsOut o = runRmsNorm(x, gamma, eps);
  NormRef ref = rmsNormRef(x, gamma, eps);
  EXPECT_LT(relError(o.y, ref.y), kRefTol);
  EXPECT_LT(relError(o.rstd, ref.rstd), kRefTol);

  HostTensor w = randomTensor(DType::F64, shape, 23);
  ForwardFn fwd = [&](std::vector<HostTensor> &in) {
    return std::vector<HostTensor>{runRmsNorm(in[0], in[1], eps).y};
  };
  std::vector<HostTensor> inputs = {x, gamma};
  RmsGrads g = runRmsNormBackward(w, x, gamma, o.rstd);
  EXPECT_LT(relError(g.dx, finiteDifference(fwd, inputs, {w}, 0)), kFdTol);
  EXPECT_LT(relError(g.dgamma, finiteDifference(fwd, inputs, {w}, 1)), kFdTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Values(std::vector<int64_t>{13},
                                           std::vector<int64_t>{7, 13},
                                           std::vector<int64_t>{2, 7, 12},
                                           std::vector<int64_t>{3, 1, 19}));

TEST(RmsNorm, F32AndBf16AgreeWithF64) {
  std::vector<int64_t> shape = {4, 7, 1021};
  int64_t H = shape.back();
  HostTensor x = randomTensor(DType::F64, shape, 31, -3, 3);
  HostTensor gamma = randomTensor(DType::F64, {H}, 32, 0.5, 1.5);
  HostTensor dy = randomTensor(DType::F64, shape, 33);
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    double tol = t == DType::F32 ? kF32Tol : kBf16Tol;
    HostTensor xt = x.as(t), gt = gamma.as(t), dyt = dy.as(t);
    HostTensor x64 = xt.as(DType::F64), g64 = gt.as(DType::F64), dy64 = dyt.as(DType::F64);
    RmsOut o64 = runRmsNorm(x64, g64, 1e-6);
    RmsGrads r64 = runRmsNormBackward(dy64, x64, g64, o64.rstd);
    RmsOut o = runRmsNorm(xt, gt, 1e-6);
    EXPECT_EQ(o.rstd.dtype, DType::F32);
    EXPECT_LT(relError(o.y, o64.y), tol);
    EXPECT_LT(relError(o.rstd, o64.rstd), kF32Tol);
    RmsGrads r = runRmsNormBackward(dyt, xt, gt, o.rstd);
    EXPECT_LT(relError(r.dx, r64.dx), tol);
    EXPECT_LT(relError(r.dgamma, r64.dgamma), tol);
  }
}

TEST(RmsNorm, BackwardInPlaceOfDy) {
  // dx may alias dy (the program declares it): the result must equal the out-of-place one.
  HostTensor x = randomTensor(DType::F32, {7, 13}, 41), gamma = randomTensor(DType::F32, {13}, 42);
  RmsOut o = runRmsNorm(x, gamma, 1e-5);
  HostTensor dy = randomTensor(DType::F32, {7, 13}, 43);
  RmsGrads ref = runRmsNormBackward(dy, x, gamma, o.rstd);
  HostTensor dg(DType::F32, {13});
  runKernel("rms_norm_backward", {&dy, &x, &gamma, &o.rstd}, {&dy, &dg});
  EXPECT_EQ(relError(dy, ref.dx), 0.0);
  EXPECT_EQ(relError(dg, ref.dgamma), 0.0);
}

TEST(NormKernels, Bf16InputsWithAnF32ParamGradientWriteTheUnroundedSum) {
  // Mixed precision: with bf16 x, dy, gamma the norm weight / bias gradient
  // (and sum_rows, a linear bias's) may be f32: the fp32 sum over the rows, of
  // which the bf16 output is the rounding; dx is unchanged.
  std::vector<int64_t> shape = {3, 5, 37};
  HostTensor x = randomTensor(DType::F64, shape, 51, -3, 3).as(DType::BF16);
  HostTensor gamma =
      randomTensor(DType::F64, {37}, 52, 0.5, 1.5).as(DType::BF16);
  HostTensor beta = randomTensor(DType::F64, {37}, 53).as(DType::BF16);
  HostTensor dy = randomTensor(DType::F64, shape, 54).as(DType::BF16);
  auto roundsTo = [](const HostTensor &wide, const HostTensor &narrow) {
    EXPECT_EQ(wide.dtype, DType::F32);
    EXPECT_EQ(relError(wide.as(DType::BF16), narrow), 0.0);
    EXPECT_GT(relError(wide, narrow.as(DType::F32)),
              0.0); // not rounded to bf16
  };
  {
    RmsOut o = runRmsNorm(x, gamma, 1e-6);
    RmsGrads ref = runRmsNormBackward(dy, x, gamma, o.rstd);
    HostTensor dx = garbage(DType::BF16, shape), dg = garbage(DType::F32, {37});
    runKernel("rms_norm_backward", {&dy, &x, &gamma, &o.rstd}, {&dx, &dg});
    EXPECT_EQ(relError(dx, ref.dx), 0.0);
    roundsTo(dg, ref.dgamma);
  }
  {
    LnOut o = runLayerNorm(x, gamma, beta, 1e-5);
    LnGrads ref = runLayerNormBackward(dy, x, gamma, o.mean, o.rstd);
    HostTensor dx = garbage(DType::BF16, shape), dg = garbage(DType::F32, {37}),
               db = garbage(DType::F32, {37});
    runKernel("layer_norm_backward", {&dy, &x, &gamma, &o.mean, &o.rstd},
              {&dx, &dg, &db});
    EXPECT_EQ(relError(dx, ref.dx), 0.0);
    roundsTo(dg, ref.dgamma);
    roundsTo(db, ref.dbeta);
  }
  {
    // sum_rows (a linear bias's gradient), with beta = 1 accumulating into the
    // f32 y.
    HostTensor y16 = garbage(DType::BF16, {37}),
               y32 = garbage(DType::F32, {37});
    runKernel("sum_rows", {&dy}, {&y16});
    runKernel("sum_rows", {&dy}, {&y32});
    roundsTo(y32, y16);
    HostTensor twice = y32.as(DType::F64);
    runKernel("sum_rows", {&dy}, {&y32}, {AttrArg("beta", 1.0)});
    for (int64_t j = 0; j < 37; ++j)
      EXPECT_EQ(y32.get(j), float(float(twice.get(j)) + float(twice.get(j))));
  }
  // Only a 16-bit input may widen: f64 x with an f32 dgamma is refused.
  HostTensor x64(DType::F64, {7, 13}), g64(DType::F64, {13}),
      r64(DType::F64, {7});
  HostTensor dx64(DType::F64, {7, 13}), dg32(DType::F32, {13});
  EXPECT_EQ(verifyKernel("rms_norm_backward", {&x64, &x64, &g64, &r64},
                         {&dx64, &dg32}),
            "output 1: dtype f32, expected f64 (as input 1)");
}

//===----------------------------------------------------------------------===//
// rope
//===----------------------------------------------------------------------===//

/// Naive f64 rotate-half rope on x[B, S, N, D] (sign = -1 rotates backwards).
HostTensor ropeRef(const HostTensor &x, const HostTensor &pos, double base, int64_t rd,
                   double sign = 1) {
  int64_t B = x.shape[0], S = x.shape[1], N = x.shape[2], D = x.shape[3];
  if (rd == 0)
    rd = D;
  int64_t half = rd / 2;
  HostTensor y = x.as(DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t n = 0; n < N; ++n) {
        int64_t o = ((b * S + s) * N + n) * D;
        for (int64_t i = 0; i < half; ++i) {
          double th = sign * pos.get(b * S + s) / std::pow(base, double(2 * i) / double(rd));
          double a = x.get(o + i), c = x.get(o + i + half);
          y.set(o + i, a * std::cos(th) - c * std::sin(th));
          y.set(o + i + half, c * std::cos(th) + a * std::sin(th));
        }
      }
  return y;
}

struct RopeCase {
  std::vector<int64_t> shape; // [B, S, N, D]
  int64_t rotaryDim;
  double base;
};

class RopeTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeTest, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  RopeCase p = GetParam();
  HostTensor x = randomTensor(DType::F64, p.shape, 51);
  HostTensor pos = randomInts(DType::I32, {p.shape[0], p.shape[1]}, 52, 0, 9000);
  pos.set(0, 0); // the identity rotation
  std::vector<AttrArg> attrs = {AttrArg("base", p.base), AttrArg("rotary_dim", p.rotaryDim)};
  HostTensor y(DType::F64, p.shape);
  runKernel("rope", {&x, &pos}, {&y}, attrs);
  HostTensor ref = ropeRef(x, pos, p.base, p.rotaryDim);
  EXPECT_LT(relError(y, ref), kRopeRefTol);
  int64_t D = p.shape[3], rd = p.rotaryDim ? p.rotaryDim : D;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (i % D >= rd) // pass-through channels are copied exactly
      ASSERT_EQ(y.get(i), x.get(i)) << i;

  HostTensor w = randomTensor(DType::F64, p.shape, 53);
  ForwardFn fwd = [&](std::vector<HostTensor> &in) {
    HostTensor out(DType::F64, p.shape);
    runKernel("rope", {&in[0], &in[1]}, {&out}, attrs);
    return std::vector<HostTensor>{out};
  };
  HostTensor fd = finiteDifference(fwd, {x, pos}, {w}, 0);
  HostTensor dx = garbage(DType::F64, p.shape);
  runKernel("rope_backward", {&w, &pos}, {&dx}, attrs);
  EXPECT_LT(relError(dx, fd), kFdTol);
  EXPECT_LT(relError(dx, ropeRef(w, pos, p.base, p.rotaryDim, -1)), kRopeRefTol);

  // The rotation is orthogonal: rope_backward undoes rope (in place, y aliasing x).
  runKernel("rope_backward", {&y, &pos}, {&y}, attrs);
  EXPECT_LT(relError(y, x), kRefTol);

  // f32 and bf16 against f64 on the same rounded inputs.
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    HostTensor xt = x.as(t), yt(t, p.shape);
    runKernel("rope", {&xt, &pos}, {&yt}, attrs);
    HostTensor x64 = xt.as(DType::F64);
    EXPECT_LT(relError(yt, ropeRef(x64, pos, p.base, p.rotaryDim)),
              t == DType::F32 ? kF32Tol : kBf16Tol);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RopeTest,
    ::testing::Values(RopeCase{{2, 7, 3, 12}, 0, 10000}, RopeCase{{2, 7, 3, 12}, 8, 10000},
                      RopeCase{{1, 5, 2, 16}, 4, 500000}, RopeCase{{3, 7, 1, 2}, 0, 10000},
                      RopeCase{{1, 9, 4, 64}, 32, 1000000}));

// Positions 0 .. S-1 in every sample (the common case): cos and sin are tabulated per distinct
// position. Against the naive reference, and bitwise against the per-token path (one outlier
// position widens the range past the token count: every other token must keep its bits), on 1 and
// 2 threads, forward and backward, with a shape above the 2^20-element threshold.
TEST(Rope, TabulatedPositionsEqualThePerTokenPathAndTheReference) {
  const int64_t B = 4, S = 128, N = 9, D = 128; // x: [B, S, 2N, D], 1179648 elements
  HostTensor x = randomTensor(DType::F32, {B, S, 2 * N, D}, 57);
  HostTensor pos(DType::I32, {B, S});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s2 = 0; s2 < S; ++s2)
      pos.set(b * S + s2, double(s2 + 3 * b)); // shifted per sample: range S + 9 <= B S
  HostTensor wide = pos;
  wide.set(B * S - 1, 100000.0);
  for (double sign : {1.0, -1.0}) {
    const char *kernel = sign > 0 ? "rope" : "rope_backward";
    SCOPED_TRACE(kernel);
    std::vector<AttrArg> attrs = {AttrArg("base", 10000.0), AttrArg("rotary_dim", 96)};
    HostTensor y1(DType::F32, x.shape), y2(DType::F32, x.shape), yw(DType::F32, x.shape);
    withOmpThreads(1, [&] { runKernel(kernel, {&x, &pos}, {&y1}, attrs); });
    withOmpThreads(2, [&] { runKernel(kernel, {&x, &pos}, {&y2}, attrs); });
    withOmpThreads(2, [&] { runKernel(kernel, {&x, &wide}, {&yw}, attrs); });
    EXPECT_EQ(y1.bytes, y2.bytes);
    const size_t lastToken = size_t(2 * N * D) * 4;
    EXPECT_TRUE(std::equal(y1.bytes.begin(), y1.bytes.end() - long(lastToken), yw.bytes.begin()));
    EXPECT_LT(relError(y1, ropeRef(x.as(DType::F64), pos, 10000.0, 96, sign)), kF32Tol);
  }
}

//===----------------------------------------------------------------------===//
// embedding
//===----------------------------------------------------------------------===//

constexpr int64_t kVocab = 257, kHidden = 13, kStart = 100;

/// Token ids of shape [3, 11] around the shard [kStart, kStart + kVocab): repeats and ids outside
/// on both sides, including the boundaries.
HostTensor embeddingIds() {
  HostTensor ids = randomInts(DType::I32, {3, 11}, 61, kStart - 40, kStart + kVocab + 40);
  const int32_t fixed[] = {kStart - 1, kStart, kStart + kVocab - 1, kStart + kVocab, -5, 0,
                           kStart + 7, kStart + 7, kStart + 7, kStart, kStart + kVocab - 1};
  for (int i = 0; i < 11; ++i)
    ids.set(11 + i, fixed[i]);
  ids.set(30, ids.get(2)); // another repeat, across rows
  return ids;
}

HostTensor embeddingRef(const HostTensor &table, const HostTensor &ids, int64_t start) {
  int64_t V = table.shape[0], H = table.shape[1];
  std::vector<int64_t> shape = ids.shape;
  shape.push_back(H);
  HostTensor y(DType::F64, shape);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    int64_t row = int64_t(ids.get(i)) - start;
    for (int64_t j = 0; j < H; ++j)
      y.set(i * H + j, row >= 0 && row < V ? table.get(row * H + j) : 0.0);
  }
  return y;
}

TEST(Embedding, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  HostTensor table = randomTensor(DType::F64, {kVocab, kHidden}, 62);
  HostTensor ids = embeddingIds();
  HostTensor y = garbage(DType::F64, {3, 11, kHidden});
  runKernel("embedding", {&table, &ids}, {&y}, {AttrArg("vocab_start", kStart)});
  EXPECT_EQ(relError(y, embeddingRef(table, ids, kStart)), 0.0);
  // Out-of-shard ids give zero rows.
  for (int64_t j = 0; j < kHidden; ++j) {
    EXPECT_EQ(y.get(11 * kHidden + j), 0.0);      // kStart - 1
    EXPECT_EQ(y.get(14 * kHidden + j), 0.0);      // kStart + kVocab
    EXPECT_EQ(y.get(12 * kHidden + j), table.get(j)); // kStart -> row 0
  }

  // dtable of L = <w, embedding(table)>: a scatter-add with repeated and skipped ids.
  HostTensor w = randomTensor(DType::F64, y.shape, 63);
  ForwardFn fwd = [&](std::vector<HostTensor> &in) {
    HostTensor out(DType::F64, {3, 11, kHidden});
    runKernel("embedding", {&in[0], &in[1]}, {&out}, {AttrArg("vocab_start", kStart)});
    return std::vector<HostTensor>{out};
  };
  HostTensor fd = finiteDifference(fwd, {table, ids}, {w}, 0);
  HostTensor dtable = garbage(DType::F64, {kVocab, kHidden});
  runKernel("embedding_backward", {&ids, &w}, {&dtable}, {AttrArg("vocab_start", kStart)});
  EXPECT_LT(relError(dtable, fd), kFdTol);

  // Naive scatter-add reference, and beta = 1 accumulating into an existing dtable.
  HostTensor ref(DType::F64, {kVocab, kHidden});
  for (int64_t i = 0; i < ids.numel(); ++i) {
    int64_t row = int64_t(ids.get(i)) - kStart;
    if (row >= 0 && row < kVocab)
      for (int64_t j = 0; j < kHidden; ++j)
        ref.set(row * kHidden + j, ref.get(row * kHidden + j) + w.get(i * kHidden + j));
  }
  EXPECT_LT(relError(dtable, ref), 1e-15);
  HostTensor prior = randomTensor(DType::F64, {kVocab, kHidden}, 64), acc = prior;
  runKernel("embedding_backward", {&ids, &w}, {&acc},
            {AttrArg("vocab_start", kStart), AttrArg("beta", 1.0)});
  for (int64_t i = 0; i < acc.numel(); ++i)
    ASSERT_NEAR(acc.get(i), prior.get(i) + ref.get(i), 1e-14) << i;
}

TEST(Embedding, F32AndBf16AgreeWithF64AndAreDeterministic) {
  HostTensor table = randomTensor(DType::F64, {kVocab, kHidden}, 71);
  // Many repeats of few ids: 2000 tokens over 30 ids (~65 per id), a third outside the shard.
  HostTensor ids = randomInts(DType::I32, {40, 50}, 72, kStart - 10, kStart + 20);
  HostTensor dy = randomTensor(DType::F64, {40, 50, kHidden}, 73);
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    // bf16: the sums are accumulated in f32 and rounded to bf16 once, so each element is within
    // 2^-9 (relative) of the f64 sum; a kernel that rounds after every add drifts further.
    double tol = t == DType::F32 ? kF32Tol : 2.5e-3;
    HostTensor tt = table.as(t), dyt = dy.as(t);
    HostTensor t64 = tt.as(DType::F64), dy64 = dyt.as(DType::F64);
    HostTensor y(t, {40, 50, kHidden});
    runKernel("embedding", {&tt, &ids}, {&y}, {AttrArg("vocab_start", kStart)});
    EXPECT_EQ(relError(y, embeddingRef(t64, ids, kStart)), 0.0); // a copy: exact
    HostTensor d64(DType::F64, {kVocab, kHidden});
    runKernel("embedding_backward", {&ids, &dy64}, {&d64}, {AttrArg("vocab_start", kStart)});
    HostTensor d1 = garbage(t, {kVocab, kHidden}), d2 = garbage(t, {kVocab, kHidden});
    runKernel("embedding_backward", {&ids, &dyt}, {&d1}, {AttrArg("vocab_start", kStart)});
    runKernel("embedding_backward", {&ids, &dyt}, {&d2}, {AttrArg("vocab_start", kStart)});
    EXPECT_LT(relError(d1, d64), tol);
    EXPECT_EQ(d1.bytes, d2.bytes); // bitwise reproducible
  }
}

//===----------------------------------------------------------------------===//
// Threaded paths (operands above the kernels' 32768-element threshold)
//===----------------------------------------------------------------------===//

/// Naive f64 backward of layer_norm (rms = false) or rms_norm (rms = true) from the formulas in
/// NormKernels.cpp, with the statistics recomputed from x: dx, dgamma, dbeta (dbeta empty for rms).
std::vector<HostTensor> normBackwardRef(const HostTensor &dy, const HostTensor &x,
                                        const HostTensor &gamma, double eps, bool rms) {
  int64_t H = x.shape.back(), R = x.numel() / H;
  HostTensor dx(DType::F64, x.shape), dg(DType::F64, gamma.shape), db(DType::F64, gamma.shape);
  for (int64_t i = 0; i < R; ++i) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < H; ++j)
      m += x.get(i * H + j);
    m = rms ? 0.0 : m / double(H);
    for (int64_t j = 0; j < H; ++j)
      v += (x.get(i * H + j) - m) * (x.get(i * H + j) - m);
    double rs = 1 / std::sqrt(v / double(H) + eps), sg = 0, sgx = 0;
    for (int64_t j = 0; j < H; ++j) {
      double g = dy.get(i * H + j) * gamma.get(j), xh = (x.get(i * H + j) - m) * rs;
      sg += g;
      sgx += g * xh;
      dg.set(j, dg.get(j) + dy.get(i * H + j) * xh);
      db.set(j, db.get(j) + dy.get(i * H + j));
    }
    sg = rms ? 0.0 : sg / double(H);
    sgx /= double(H);
    for (int64_t j = 0; j < H; ++j) {
      double xh = (x.get(i * H + j) - m) * rs;
      dx.set(i * H + j, rs * (dy.get(i * H + j) * gamma.get(j) - sg - xh * sgx));
    }
  }
  return {dx, dg, db};
}

// 4372 rows of 240 (1049280 elements, above the kernels' 2^20 threshold; two column ranges on 2
// threads): the norms and their backward split rows and column ranges over the threads. f64 against the naive references, f32 and bf16 against f64, and
// the same bits on 1 and 2 threads.
TEST(NormKernels, ThreadedNormsMatchTheReferenceAndDoNotDependOnTheThreadCount) {
  const double eps = 1e-5;
  HostTensor x = randomTensor(DType::F64, {4, 1093, 240}, 81, -2, 3);
  HostTensor gamma = randomTensor(DType::F64, {240}, 82, 0.5, 1.5);
  HostTensor beta = randomTensor(DType::F64, {240}, 83);
  HostTensor dy = randomTensor(DType::F64, x.shape, 84);
  std::vector<HostTensor> lnRef = normBackwardRef(dy, x, gamma, eps, false);
  std::vector<HostTensor> rmsRef = normBackwardRef(dy, x, gamma, eps, true);
  NormRef lnF = layerNormRef(x, gamma, beta, eps), rmsF = rmsNormRef(x, gamma, eps);
  for (DType t : {DType::F64, DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    double tol = t == DType::F64 ? kRefTol : t == DType::F32 ? kF32Tol : kBf16Tol;
    HostTensor xt = x.as(t), gt = gamma.as(t), bt = beta.as(t), dyt = dy.as(t);
    // The references on the rounded inputs, so only the kernels' arithmetic is measured.
    HostTensor x64 = xt.as(DType::F64), g64 = gt.as(DType::F64), b64 = bt.as(DType::F64),
               dy64 = dyt.as(DType::F64);
    if (t != DType::F64) {
      lnRef = normBackwardRef(dy64, x64, g64, eps, false);
      rmsRef = normBackwardRef(dy64, x64, g64, eps, true);
      lnF = layerNormRef(x64, g64, b64, eps);
      rmsF = rmsNormRef(x64, g64, eps);
    }
    LnOut ln[2];
    LnGrads lg[2];
    RmsOut rm[2];
    RmsGrads rg[2];
    for (int th : {1, 2})
      withOmpThreads(th, [&] {
        ln[th - 1] = runLayerNorm(xt, gt, bt, eps);
        lg[th - 1] = runLayerNormBackward(dyt, xt, gt, ln[th - 1].mean, ln[th - 1].rstd);
        rm[th - 1] = runRmsNorm(xt, gt, eps);
        rg[th - 1] = runRmsNormBackward(dyt, xt, gt, rm[th - 1].rstd);
      });
    EXPECT_LT(relError(ln[0].y, lnF.y), tol);
    EXPECT_LT(relError(ln[0].rstd, lnF.rstd), t == DType::F64 ? kRefTol : kF32Tol);
    EXPECT_LT(relError(lg[0].dx, lnRef[0]), tol);
    EXPECT_LT(relError(lg[0].dgamma, lnRef[1]), tol);
    EXPECT_LT(relError(lg[0].dbeta, lnRef[2]), tol);
    EXPECT_LT(relError(rm[0].y, rmsF.y), tol);
    EXPECT_LT(relError(rg[0].dx, rmsRef[0]), tol);
    EXPECT_LT(relError(rg[0].dgamma, rmsRef[1]), tol);
    EXPECT_EQ(ln[0].y.bytes, ln[1].y.bytes);
    EXPECT_EQ(ln[0].mean.bytes, ln[1].mean.bytes);
    EXPECT_EQ(ln[0].rstd.bytes, ln[1].rstd.bytes);
    EXPECT_EQ(lg[0].dx.bytes, lg[1].dx.bytes);
    EXPECT_EQ(lg[0].dgamma.bytes, lg[1].dgamma.bytes);
    EXPECT_EQ(lg[0].dbeta.bytes, lg[1].dbeta.bytes);
    EXPECT_EQ(rm[0].y.bytes, rm[1].y.bytes);
    EXPECT_EQ(rg[0].dx.bytes, rg[1].dx.bytes);
    EXPECT_EQ(rg[0].dgamma.bytes, rg[1].dgamma.bytes);
    // In place of dy (dx = dy) on 2 threads: the column reductions read dy before dx is written.
    HostTensor inplace = dyt, dgi = garbage(t, gamma.shape), dbi = garbage(t, gamma.shape);
    withOmpThreads(2, [&] {
      runKernel("layer_norm_backward", {&inplace, &xt, &gt, &ln[0].mean, &ln[0].rstd},
                {&inplace, &dgi, &dbi});
    });
    EXPECT_EQ(inplace.bytes, lg[0].dx.bytes);
    EXPECT_EQ(dgi.bytes, lg[0].dgamma.bytes);
  }
}

// 6000 tokens of hidden 240 over 300 rows (repeats, a sixth outside the shard; ~1.2M elements
// summed, above the 2^20 threshold): the threaded
// embedding backward (column ranges, the table zeroed in pieces) against the naive scatter-add, and
// the same bits on 1 and 2 threads, with beta 0 and 1.
TEST(Embedding, ThreadedBackwardMatchesTheReferenceAndDoesNotDependOnTheThreadCount) {
  const int64_t V = 300, H = 240, start = 1000;
  HostTensor ids = randomInts(DType::I32, {20, 300}, 91, start - 60, start + V);
  HostTensor dy = randomTensor(DType::F64, {20, 300, H}, 92);
  HostTensor ref(DType::F64, {V, H});
  for (int64_t i = 0; i < ids.numel(); ++i) {
    int64_t row = int64_t(ids.get(i)) - start;
    if (row >= 0 && row < V)
      for (int64_t j = 0; j < H; ++j)
        ref.set(row * H + j, ref.get(row * H + j) + dy.get(i * H + j));
  }
  for (DType t : {DType::F64, DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    HostTensor dyt = dy.as(t), ref64 = ref;
    if (t != DType::F64) {
      HostTensor dy64 = dyt.as(DType::F64);
      ref64 = HostTensor(DType::F64, {V, H});
      for (int64_t i = 0; i < ids.numel(); ++i) {
        int64_t row = int64_t(ids.get(i)) - start;
        if (row >= 0 && row < V)
          for (int64_t j = 0; j < H; ++j)
            ref64.set(row * H + j, ref64.get(row * H + j) + dy64.get(i * H + j));
      }
    }
    double tol = t == DType::F64 ? 1e-15 : t == DType::F32 ? kF32Tol : 2.5e-3;
    HostTensor d[2] = {garbage(t, {V, H}), garbage(t, {V, H})};
    HostTensor prior = randomTensor(t, {V, H}, 93), acc[2] = {prior, prior};
    for (int th : {1, 2})
      withOmpThreads(th, [&] {
        runKernel("embedding_backward", {&ids, &dyt}, {&d[th - 1]},
                  {AttrArg("vocab_start", start)});
        runKernel("embedding_backward", {&ids, &dyt}, {&acc[th - 1]},
                  {AttrArg("vocab_start", start), AttrArg("beta", 1.0)});
      });
    EXPECT_LT(relError(d[0], ref64), tol);
    EXPECT_EQ(d[0].bytes, d[1].bytes);
    EXPECT_EQ(acc[0].bytes, acc[1].bytes);
    HostTensor sum(DType::F64, {V, H});
    for (int64_t i = 0; i < sum.numel(); ++i)
      sum.set(i, prior.get(i) + ref64.get(i));
    EXPECT_LT(relError(acc[0], sum), tol);
  }
}

//===----------------------------------------------------------------------===//
// Signature errors
//===----------------------------------------------------------------------===//

TEST(NormKernels, SignatureErrorsNameTheOperand) {
  HostTensor x(DType::BF16, {4, 13}), g(DType::BF16, {13}), b(DType::BF16, {13});
  HostTensor y(DType::BF16, {4, 13}), mean(DType::BF16, {4}), rstd(DType::F32, {4});
  EXPECT_EQ(verifyKernel("layer_norm", {&x, &g, &b}, {&y, &mean, &rstd}),
            "output 1: dtype bf16, expected f32");

  HostTensor x32(DType::F32, {7, 13}), g12(DType::F32, {12}), r32(DType::F32, {7});
  HostTensor dx(DType::F32, {7, 13}), dg(DType::F32, {13});
  EXPECT_EQ(verifyKernel("rms_norm_backward", {&x32, &x32, &g12, &r32}, {&dx, &dg}),
            "input 2: shape [12], expected dim 0 = 13 (hidden size)");

  HostTensor q(DType::F32, {1, 7, 2, 12}), pos(DType::I32, {1, 7}), qo(DType::F32, {1, 7, 2, 12});
  EXPECT_EQ(verifyKernel("rope", {&q, &pos}, {&qo}, {AttrArg("rotary_dim", 5)}),
            "attribute rotary_dim = 5, expected an even value <= head dim 12");
  HostTensor pos8(DType::I32, {1, 8});
  EXPECT_EQ(verifyKernel("rope_backward", {&q, &pos8}, {&qo}),
            "input 1: shape [1, 8], expected dim 1 = 7 (sequence)");

  HostTensor table(DType::F32, {257, 13}), fids(DType::F32, {3, 7}), ids(DType::I32, {3, 7});
  HostTensor emb(DType::F32, {3, 7, 13});
  EXPECT_EQ(verifyKernel("embedding", {&table, &fids}, {&emb}),
            "input 1: dtype f32, expected i32");
  EXPECT_EQ(verifyKernel("embedding_backward", {&ids, &emb}, {&table}, {AttrArg("beta", 2.0)}),
            "attribute beta: expected 0 or 1");
}

} // namespace
