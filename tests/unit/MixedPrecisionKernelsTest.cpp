//===- MixedPrecisionKernelsTest.cpp - bf16 x bf16 -> f32 matmul, cast, adamw_master ===//
//
// The kernels of bf16 training with fp32 main grads and master weights (issue 12), against f64
// references and the bit patterns of round-to-nearest-even.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include <cstring>

using namespace trainc::rt;
using namespace trainc::rt::test;

namespace {

HostTensor scalarF32(double v) {
  HostTensor t(DType::F32, {});
  t.set(0, v);
  return t;
}

uint16_t bitsAt(const HostTensor &t, int64_t i) {
  uint16_t b;
  std::memcpy(&b, t.bytes.data() + 2 * i, 2);
  return b;
}

float f32At(const HostTensor &t, int64_t i) {
  float f;
  std::memcpy(&f, t.bytes.data() + 4 * i, 4);
  return f;
}

/// Round to nearest even of an f32 to bf16 bits, written independently of DType.h: the value is
/// rounded in double to 8 significant bits (exact: f32 has 24) and truncated.
uint16_t rneBits(float f) {
  if (std::isnan(f))
    return 0x7fc0;
  int e;
  double m = std::frexp(double(f), &e); // f = m * 2^e, 0.5 <= |m| < 1
  double r = std::nearbyint(std::ldexp(m, 8)); // default rounding mode: ties to even
  float back = float(std::ldexp(r, e - 8));    // may overflow to inf: correct bf16 rounding
  uint32_t u;
  std::memcpy(&u, &back, 4);
  return uint16_t(u >> 16);
}

// f64 reference of c = op(a) @ op(b) (+ c0), a [M, K], b [N, K] with trans_b.
HostTensor reference(const HostTensor &a, const HostTensor &b, const HostTensor *c0, int64_t M,
                     int64_t N, int64_t K) {
  HostTensor r(DType::F64, {M, N});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = c0 ? c0->get(i * N + j) : 0.0;
      for (int64_t k = 0; k < K; ++k)
        s += a.get(i * K + k) * b.get(j * K + k);
      r.set(i * N + j, s);
    }
  return r;
}

TEST(MixedMatmul, Bf16InputsF32OutputAccumulatesInF32) {
  const int64_t M = 37, N = 29, K = 300;
  HostTensor a = randomTensor(DType::BF16, {M, K}, 7), b = randomTensor(DType::BF16, {N, K}, 8);
  HostTensor c(DType::F32, {M, N});
  runKernel("matmul", {&a, &b}, {&c}, {AttrArg("trans_b", 1)});
  HostTensor ref = reference(a, b, nullptr, M, N, K); // the bf16 values, exactly, in f64
  // f32 accumulation of K = 300 products: far tighter than a bf16 output (2^-8 relative).
  EXPECT_LT(relError(c, ref), 1e-5);
  HostTensor c16(DType::BF16, {M, N});
  runKernel("matmul", {&a, &b}, {&c16}, {AttrArg("trans_b", 1)});
  EXPECT_GT(relError(c16, ref), 10 * relError(c, ref)); // the f32 output keeps the low bits
}

// Gradient-accumulation fusion: beta = 1 adds the bf16 GEMM to an f32 main grad that holds
// values a bf16 temporary could not represent (1 + 2^-12 ...).
TEST(MixedMatmul, BetaOneAccumulatesIntoF32MainGrad) {
  const int64_t M = 16, N = 24, K = 64;
  HostTensor x = randomTensor(DType::BF16, {K, M}, 11), dy = randomTensor(DType::BF16, {K, N}, 12);
  HostTensor mainGrad(DType::F32, {M, N});
  for (int64_t i = 0; i < M * N; ++i)
    mainGrad.set(i, 1.0 + std::ldexp(double(i % 7), -12));
  HostTensor c0 = mainGrad.as(DType::F64);
  // dW[M, N] = x^T @ dy (trans_a), accumulated twice (two microbatches).
  std::vector<AttrArg> attrs = {AttrArg("trans_a", 1), AttrArg("beta", 1.0)};
  runKernel("matmul", {&x, &dy}, {&mainGrad}, attrs);
  runKernel("matmul", {&x, &dy}, {&mainGrad}, attrs);
  HostTensor xt(DType::F64, {M, K}), dyt(DType::F64, {N, K});
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t i = 0; i < M; ++i)
      xt.set(i * K + k, x.get(k * M + i));
    for (int64_t j = 0; j < N; ++j)
      dyt.set(j * K + k, dy.get(k * N + j));
  }
  HostTensor once = reference(xt, dyt, &c0, M, N, K);
  HostTensor twice = reference(xt, dyt, &once, M, N, K);
  EXPECT_LT(relError(mainGrad, twice), 1e-6);
}

TEST(MixedMatmul, OtherOutputDtypesAreRefused) {
  HostTensor a(DType::F32, {4, 4}), b(DType::F32, {4, 4}), c16(DType::BF16, {4, 4});
  EXPECT_EQ(verifyKernel("matmul", {&a, &b}, {&c16}),
            "output 0: dtype bf16, expected f32 (as input 0)");
  HostTensor a16(DType::BF16, {4, 4}), b16(DType::BF16, {4, 4}), c64(DType::F64, {4, 4});
  EXPECT_EQ(verifyKernel("matmul", {&a16, &b16}, {&c64}),
            "output 0: dtype f64, expected bf16 (as input 0) or f32 (fp32 accumulation)");
}

TEST(Cast, F32ToBf16RoundsToNearestEvenBitwise) {
  std::vector<float> v = {1.0f, -2.5f, 1e-30f, 3.4e38f, 0.0f, -0.0f,
                          std::numeric_limits<float>::infinity(), std::nanf("")};
  // Ties: 1 + 2^-8 (halfway between 1 and 1 + 2^-7) rounds down to even, 1 + 3 * 2^-8 up.
  v.push_back(1.0f + std::ldexp(1.0f, -8));
  v.push_back(1.0f + 3 * std::ldexp(1.0f, -8));
  v.push_back(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)); // above the tie: up
  HostTensor r = randomTensor(DType::F32, {4096}, 3, -1e3, 1e3);
  for (int64_t i = 0; i < r.numel(); ++i)
    v.push_back(f32At(r, i));
  HostTensor x(DType::F32, {int64_t(v.size())}), y(DType::BF16, {int64_t(v.size())});
  std::memcpy(x.bytes.data(), v.data(), 4 * v.size());
  runKernel("cast", {&x}, {&y});
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i]))
      EXPECT_TRUE(std::isnan(y.get(int64_t(i))));
    else
      ASSERT_EQ(bitsAt(y, int64_t(i)), rneBits(v[i])) << "element " << i << " = " << v[i];
  }
  EXPECT_EQ(bitsAt(y, int64_t(v.size() - 4097 - 2)), 0x3f80);  // 1 + 2^-8 -> 1.0
  EXPECT_EQ(bitsAt(y, int64_t(v.size() - 4097 - 1)), 0x3f82);  // 1 + 3 * 2^-8 -> 1 + 2^-6
}

// adamw_master = adamw on the f32 master weights (bitwise), then param = bf16(master) bitwise;
// the master weights track an f64 AdamW reference; a skipped step changes nothing.
TEST(AdamWMaster, MasterIsAdamWAndParamIsItsBf16Rounding) {
  const int64_t n = 70001; // more than one thread block, not a multiple of the vector width
  std::vector<AttrArg> attrs = {AttrArg("beta1", 0.9), AttrArg("beta2", 0.95),
                                AttrArg("eps", 1e-8), AttrArg("decay", 1)};
  HostTensor master = randomTensor(DType::F32, {n}, 21).as(DType::BF16).as(DType::F32);
  HostTensor param = master.as(DType::BF16), m(DType::F32, {n}), v(DType::F32, {n});
  HostTensor master2 = master, m2 = m, v2 = v; // plain adamw on the same state
  HostTensor ref = master.as(DType::F64), refM(DType::F64, {n}), refV(DType::F64, {n});
  for (int step = 1; step <= 3; ++step) {
    HostTensor g = randomTensor(DType::F32, {n}, 30 + step);
    HostTensor lr = scalarF32(1e-3), wd = scalarF32(0.1), st = scalarF32(step),
               gs = scalarF32(0.5), upd = scalarF32(1);
    runKernel("adamw_master", {&master, &g, &m, &v, &lr, &wd, &st, &gs, &upd},
              {&master, &m, &v, &param}, attrs);
    runKernel("adamw", {&master2, &g, &m2, &v2, &lr, &wd, &st, &gs, &upd}, {&master2, &m2, &v2},
              attrs);
    ASSERT_EQ(master.bytes, master2.bytes) << "step " << step;
    ASSERT_EQ(m.bytes, m2.bytes);
    ASSERT_EQ(v.bytes, v2.bytes);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(bitsAt(param, i), rneBits(f32At(master, i))) << "step " << step << " i " << i;
    // f64 AdamW (torch's formula).
    double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.95, step);
    for (int64_t i = 0; i < n; ++i) {
      double gi = g.get(i) * 0.5, p = ref.get(i) * (1 - double(float(1e-3)) * double(float(0.1)));
      double mi = 0.9 * refM.get(i) + 0.1 * gi, vi = 0.95 * refV.get(i) + 0.05 * gi * gi;
      p -= double(float(1e-3)) * (mi / bc1) / (std::sqrt(vi / bc2) + 1e-8);
      ref.set(i, p);
      refM.set(i, mi);
      refV.set(i, vi);
    }
    EXPECT_LT(relError(master, ref), 1e-6) << "step " << step;
  }
  // A skipped step (update = 0): master, states and param bitwise unchanged.
  HostTensor before = master, beforeM = m, beforeV = v, beforeP = param;
  HostTensor g = randomTensor(DType::F32, {n}, 99);
  HostTensor lr = scalarF32(1e-3), wd = scalarF32(0.1), st = scalarF32(4), gs = scalarF32(1),
             zero = scalarF32(0);
  runKernel("adamw_master", {&master, &g, &m, &v, &lr, &wd, &st, &gs, &zero},
            {&master, &m, &v, &param}, attrs);
  EXPECT_EQ(master.bytes, before.bytes);
  EXPECT_EQ(m.bytes, beforeM.bytes);
  EXPECT_EQ(v.bytes, beforeV.bytes);
  EXPECT_EQ(param.bytes, beforeP.bytes);
}

TEST(AdamWMaster, SignatureNamesTheOperand) {
  HostTensor p(DType::F32, {8}), s(DType::F32, {}), w16(DType::BF16, {8}), w32(DType::F32, {8});
  HostTensor short16(DType::BF16, {7});
  EXPECT_EQ(verifyKernel("adamw_master", {&p, &p, &p, &p, &s, &s, &s, &s, &s}, {&p, &p, &p, &w32}),
            "output 3: dtype f32, expected bf16 or f16 (the model parameter of the f32 master "
            "weights)");
  EXPECT_EQ(verifyKernel("adamw_master", {&p, &p, &p, &p, &s, &s, &s, &s, &s},
                         {&p, &p, &p, &short16}),
            "output 3: 7 elements, expected 8 (as input 0)");
  EXPECT_EQ(verifyKernel("adamw_master", {&w16, &w16, &w16, &w16, &s, &s, &s, &s, &s},
                         {&w16, &w16, &w16, &w16}),
            "input 0: dtype bf16, expected f32 or f64 (master weights)");
  EXPECT_EQ(verifyKernel("adamw_master", {&p, &p, &p, &p, &s, &s, &s, &s, &s}, {&p, &p, &p, &w16}),
            "");
}

//===----------------------------------------------------------------------===//
// f16 (--fp16): IEEE binary16 storage, round to nearest even, overflow to inf
//===----------------------------------------------------------------------===//

/// f32 -> f16 bits by double arithmetic, independently of DType.h: rounds |f| to 11 significant
/// bits (or to a multiple of 2^-24 below 2^-14) with nearbyint (ties to even), inf from 65520 on.
uint16_t f16RneBits(float f) {
  if (std::isnan(f))
    return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (a >= 65520.0)
    return sign | 0x7c00;
  if (a < std::ldexp(1.0, -14))
    return sign | uint16_t(std::nearbyint(std::ldexp(a, 24))); // 1024 = the smallest normal
  int e;
  double m = std::frexp(a, &e);
  double back = std::ldexp(std::nearbyint(std::ldexp(m, 11)), e - 11);
  if (back >= 65520.0)
    return sign | 0x7c00;
  double m2 = std::frexp(back, &e);
  return sign | uint16_t((e - 1 + 15) << 10) | uint16_t(std::ldexp(m2, 11) - 1024);
}

/// The value of f16 bits by the definition (sign, exponent bias 15, subnormals), in double.
double f16Value(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? std::ldexp(double(m), -24)
             : e == 31 ? (m ? std::nan("") : std::numeric_limits<double>::infinity())
                       : std::ldexp(1.0 + m / 1024.0, e - 15);
  return (h & 0x8000) ? -v : v;
}

TEST(F16, EveryBitPatternConvertsToItsValueAndBack) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16::toFloat(uint16_t(h));
    const double want = f16Value(uint16_t(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(std::isnan(float(f16(f)))) << std::hex << h; // NaN stays NaN
      continue;
    }
    ASSERT_EQ(double(f), want) << std::hex << h;
    ASSERT_EQ(f16::fromFloat(f), uint16_t(h)) << std::hex << h; // exact values round-trip
  }
}

TEST(F16, F32ToF16RoundsToNearestEvenAndOverflowsToInf) {
  std::vector<float> v = {65504.0f, 65519.996f, 65520.0f, 70000.0f, 3.4e38f,
                          std::numeric_limits<float>::infinity(), std::ldexp(1.0f, -24),
                          std::ldexp(1.0f, -25), std::ldexp(1.0f, -25) * (1 + 0x1p-23f),
                          std::ldexp(3.0f, -25), std::ldexp(1.0f, -14) * (1 - 0x1p-24f),
                          1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-20f,
                          0.0f, -0.0f, 1e-30f, -65520.0f};
  for (float x : std::vector<float>(v))
    v.push_back(-x);
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) { // ~1M patterns over every exponent
    float f;
    uint32_t w = uint32_t(u);
    std::memcpy(&f, &w, 4);
    v.push_back(f);
  }
  for (float x : v) {
    if (std::isnan(x))
      continue;
    ASSERT_EQ(f16::fromFloat(x), f16RneBits(x)) << x;
  }
  EXPECT_EQ(f16::fromFloat(65504.0f), 0x7bff);
  EXPECT_EQ(f16::fromFloat(65519.996f), 0x7bff);
  EXPECT_EQ(f16::fromFloat(65520.0f), 0x7c00);  // the midpoint above the largest finite: inf
  EXPECT_EQ(f16::fromFloat(-1e6f), 0xfc00);
  EXPECT_EQ(f16::fromFloat(std::ldexp(1.0f, -25)), 0x0000); // tie to even: zero
  EXPECT_EQ(f16::fromFloat(std::ldexp(3.0f, -25)), 0x0002); // tie to even: 2 * 2^-24
  EXPECT_EQ(f16::fromFloat(1.0f + 0x1p-11f), 0x3c00);       // tie to even: 1
  EXPECT_EQ(f16::fromFloat(1.0f + 3 * 0x1p-11f), 0x3c02);   // tie to even: 1 + 2^-9
#if defined(__FLT16_MAX__)
  // And the compiler's own conversion (libgcc / the ISA), where it has _Float16.
  for (float x : v) {
    if (std::isnan(x))
      continue;
    _Float16 c = _Float16(x);
    uint16_t b;
    std::memcpy(&b, &c, 2);
    ASSERT_EQ(f16::fromFloat(x), b) << x;
  }
#endif
}

TEST(F16, CastKernelMatchesTheConversionBitwise) {
  std::vector<float> v = {1.0f, -2.5f, 65504.0f, 65520.0f, -1e5f, 1e-30f, 6e-8f,
                          std::numeric_limits<float>::infinity()};
  HostTensor r = randomTensor(DType::F32, {4096}, 5, -7e4, 7e4);
  for (int64_t i = 0; i < r.numel(); ++i)
    v.push_back(f32At(r, i));
  HostTensor x(DType::F32, {int64_t(v.size())}), y(DType::F16, {int64_t(v.size())});
  std::memcpy(x.bytes.data(), v.data(), 4 * v.size());
  runKernel("cast", {&x}, {&y});
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(bitsAt(y, int64_t(i)), f16RneBits(v[i])) << "element " << i << " = " << v[i];
  EXPECT_EQ(bitsAt(y, 3), 0x7c00);
  EXPECT_EQ(bitsAt(y, 4), 0xfc00);
  // And back: f16 -> f32 is exact.
  HostTensor z(DType::F32, {int64_t(v.size())});
  runKernel("cast", {&y}, {&z});
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(double(f32At(z, int64_t(i))), f16Value(bitsAt(y, int64_t(i))));
}

TEST(F16, MatmulAccumulatesInF32) {
  const int64_t M = 37, N = 29, K = 300;
  HostTensor a = randomTensor(DType::F16, {M, K}, 17), b = randomTensor(DType::F16, {N, K}, 18);
  HostTensor ref = reference(a, b, nullptr, M, N, K);
  HostTensor c(DType::F32, {M, N});
  runKernel("matmul", {&a, &b}, {&c}, {AttrArg("trans_b", 1)});
  EXPECT_LT(relError(c, ref), 1e-5);
  HostTensor c16(DType::F16, {M, N});
  runKernel("matmul", {&a, &b}, {&c16}, {AttrArg("trans_b", 1)});
  EXPECT_LT(relError(c16, ref), 1e-3);                   // one f16 rounding: 2^-11 relative
  EXPECT_GT(relError(c16, ref), 10 * relError(c, ref)); // and f32 keeps the low bits
  // Overflow of the f16 output is inf, not a saturation.
  HostTensor big(DType::F16, {1, 2}), big2(DType::F16, {1, 2}), out(DType::F16, {1, 1});
  for (int64_t i = 0; i < 2; ++i) {
    big.set(i, 300.0);
    big2.set(i, 300.0);
  }
  runKernel("matmul", {&big, &big2}, {&out}, {AttrArg("trans_b", 1)});
  EXPECT_EQ(bitsAt(out, 0), 0x7c00); // 180000 > 65504
}

TEST(F16, AdamWMasterWritesTheF16RoundingOfTheMaster) {
  const int64_t n = 70001;
  std::vector<AttrArg> attrs = {AttrArg("beta1", 0.9), AttrArg("beta2", 0.95),
                                AttrArg("eps", 1e-8), AttrArg("decay", 1)};
  HostTensor master = randomTensor(DType::F32, {n}, 41).as(DType::F16).as(DType::F32);
  HostTensor param = master.as(DType::F16), m(DType::F32, {n}), v(DType::F32, {n});
  HostTensor master2 = master, m2 = m, v2 = v;
  HostTensor g = randomTensor(DType::F32, {n}, 42);
  HostTensor lr = scalarF32(1e-3), wd = scalarF32(0.1), st = scalarF32(1), gs = scalarF32(1),
             upd = scalarF32(1);
  runKernel("adamw_master", {&master, &g, &m, &v, &lr, &wd, &st, &gs, &upd},
            {&master, &m, &v, &param}, attrs);
  runKernel("adamw", {&master2, &g, &m2, &v2, &lr, &wd, &st, &gs, &upd}, {&master2, &m2, &v2},
            attrs);
  ASSERT_EQ(master.bytes, master2.bytes);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(bitsAt(param, i), f16RneBits(f32At(master, i))) << i;
  HostTensor p(DType::F32, {8}), s(DType::F32, {}), w16(DType::F16, {8});
  EXPECT_EQ(verifyKernel("adamw_master", {&p, &p, &p, &p, &s, &s, &s, &s, &s}, {&p, &p, &p, &w16}),
            "");
}

} // namespace

namespace {

// Megatron's DynamicGradScaler on device scalars, driven by an injected sequence of steps with
// inf gradients (update = 0), against hand-derived values: growth after `growth_interval`
// finite steps, backoff only once `hysteresis` infs have been seen, and the min scale floor.
struct Scaler {
  HostTensor scale = scalarF32(0), growth = scalarF32(0), hyst = scalarF32(0);
  std::vector<AttrArg> attrs;
  Scaler(double s0, int64_t interval, int64_t hysteresis, double minScale) {
    scale.set(0, s0);
    hyst.set(0, double(hysteresis));
    attrs = {AttrArg("growth_interval", interval), AttrArg("hysteresis", hysteresis),
             AttrArg("min_scale", minScale)};
  }
  void step(bool inf) {
    HostTensor upd = scalarF32(inf ? 0 : 1);
    runKernel("loss_scale_update", {&upd, &scale, &growth, &hyst}, {&scale, &growth, &hyst}, attrs);
  }
};

TEST(LossScaleUpdate, GrowthBackoffHysteresisAndMinScale) {
  Scaler s(65536, 3, 2, 1);
  const bool infs[] = {false, false, false, true, true, true, false, false, false};
  const double want[] = {65536, 65536, 131072, 131072, 65536, 32768, 32768, 32768, 65536};
  const double wantGrowth[] = {1, 2, 0, 0, 0, 0, 1, 2, 0};
  const double wantHyst[] = {2, 2, 2, 1, 0, -1, -1, -1, 2};
  for (int i = 0; i < 9; ++i) {
    s.step(infs[i]);
    EXPECT_EQ(s.scale.get(0), want[i]) << "step " << i + 1;
    EXPECT_EQ(s.growth.get(0), wantGrowth[i]) << "step " << i + 1;
    EXPECT_EQ(s.hyst.get(0), wantHyst[i]) << "step " << i + 1;
  }
  // Only finite steps: scale = s0 * 2^floor(n / interval).
  Scaler g(1024, 4, 2, 1);
  for (int n = 1; n <= 21; ++n) {
    g.step(false);
    EXPECT_EQ(g.scale.get(0), 1024.0 * std::ldexp(1.0, n / 4)) << n;
  }
  // The floor: hysteresis 1 backs off at every inf, never below min_scale.
  Scaler m(4096, 1000, 1, 1024);
  const double floorWant[] = {2048, 1024, 1024, 1024};
  for (double w : floorWant) {
    m.step(true);
    EXPECT_EQ(m.scale.get(0), w);
  }
}

TEST(LossScaleUpdate, BadAttributesAreNamed) {
  HostTensor s = scalarF32(1);
  auto err = [&](std::vector<AttrArg> a) {
    return verifyKernel("loss_scale_update", {&s, &s, &s, &s}, {&s, &s, &s}, a);
  };
  EXPECT_EQ(err({AttrArg("min_scale", 0.0)}), "attribute min_scale = 0.000000, expected > 0");
  EXPECT_EQ(err({AttrArg("hysteresis", int64_t(0))}), "attribute hysteresis = 0, expected > 0");
  EXPECT_EQ(err({AttrArg("growth_interval", int64_t(-1))}),
            "attribute growth_interval = -1, expected > 0");
  EXPECT_EQ(err({AttrArg("backoff_factor", 1.0)}),
            "attribute backoff_factor = 1.000000, expected 0 < backoff_factor < 1");
  EXPECT_EQ(err({}), "");
}

} // namespace
