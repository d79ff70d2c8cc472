//===- Init.cpp - Parameter initialisation --------------------------------===//

#include "runtime/core/Init.h"

#include "runtime/core/Philox.h"
#include "runtime/core/Resolve.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define TRAINC_INIT_HAVE_AVX512_PHILOX 1
#endif

namespace trainc::rt {

uint64_t parameterKey(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) {
    h ^= uint8_t(c);
    h *= 1099511628211ull;
  }
  return h;
}

namespace initmath {

namespace {
inline double asDouble(uint64_t b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}
inline uint64_t bitsOf(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}
/// Exactly x as a double for |x| < 2^51 (the "1.5 * 2^52" magic number: integer ops and one
/// subtraction, so the loops vectorise without AVX-512DQ's int64 -> double conversion).
inline double smallIntToDouble(int64_t x) {
  return asDouble(uint64_t(x + int64_t(0x4338000000000000ll))) - 6755399441055744.0;
}
/// Exactly x as a double for a 32-bit unsigned x.
inline double u32ToDouble(uint32_t x) {
  return asDouble(uint64_t(x) | 0x4330000000000000ull) - 4503599627370496.0;
}
} // namespace

// Both functions are written for this file's -ffp-contract=off (runtime/CMakeLists.txt): every
// multiply and add is rounded separately, so the scalar calls (initialValue) and the AVX-512 /
// AVX2 / SSE2 clones of the batch loop give the same bits.

inline __attribute__((always_inline)) double logUnitImpl(double u) {
  // u = m * 2^e with m in [sqrt(1/2), sqrt(2)): m - 1 is exact there (Sterbenz).
  uint64_t b = bitsOf(u);
  int64_t e = int64_t(b >> 52) - 1023;
  double m = asDouble((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
  // Branch-free (every clone vectorises): m *= 0.5 and e += 1 where m > sqrt(2).
  uint64_t big = uint64_t(m > 1.4142135623730951);
  m = m * asDouble(0x3ff0000000000000ull - (big << 52));
  e += int64_t(big);
  // log m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m - 1)/(m + 1), |s| <= 0.1716,
  // s^2 <= 0.0295: the terms after s^23/23 are below 1e-19 of the sum.
  double s = (m - 1.0) / (m + 1.0);
  double w = s * s;
  double p = 1.0 / 23.0;
  p = p * w + 1.0 / 21.0;
  p = p * w + 1.0 / 19.0;
  p = p * w + 1.0 / 17.0;
  p = p * w + 1.0 / 15.0;
  p = p * w + 1.0 / 13.0;
  p = p * w + 1.0 / 11.0;
  p = p * w + 1.0 / 9.0;
  p = p * w + 1.0 / 7.0;
  p = p * w + 1.0 / 5.0;
  p = p * w + 1.0 / 3.0;
  double s2 = 2.0 * s;
  double logM = s2 + s2 * (w * p);
  // e <= 0 here; for e <= -1, |e ln 2| >= 0.69 > |log m| (<= 0.347): no cancellation.
  return smallIntToDouble(e) * 0.6931471805599453 + logM;
}

inline __attribute__((always_inline)) void sinCosTurnsImpl(uint64_t x, double *sinOut,
                                                         double *cosOut) {
  // The nearest quarter turn q (0..4) and the exact remainder f = x - q 2^51 in [-2^50, 2^50]:
  // the angle is q pi/2 + t, t = 2 pi f 2^-53 in [-pi/4, pi/4] (one rounding).
  uint64_t q = (x + (1ull << 50)) >> 51;
  int64_t f = int64_t(x) - int64_t(q << 51);
  double t = smallIntToDouble(f) * (6.283185307179586 / 9007199254740992.0);
  double z = t * t;
  // Taylor series: on |t| <= pi/4 the first omitted terms (t^19/19!, t^20/20!) are below 1e-19.
  double sp = 1.0 / 355687428096000.0;     // 1/17!
  sp = sp * z - 1.0 / 1307674368000.0;     // 1/15!
  sp = sp * z + 1.0 / 6227020800.0;        // 1/13!
  sp = sp * z - 1.0 / 39916800.0;          // 1/11!
  sp = sp * z + 1.0 / 362880.0;            // 1/9!
  sp = sp * z - 1.0 / 5040.0;              // 1/7!
  sp = sp * z + 1.0 / 120.0;               // 1/5!
  sp = sp * z - 1.0 / 6.0;                 // 1/3!
  double sinT = t + t * (z * sp);
  double cp = -1.0 / 6402373705728000.0;   // 1/18!
  cp = cp * z + 1.0 / 20922789888000.0;    // 1/16!
  cp = cp * z - 1.0 / 87178291200.0;       // 1/14!
  cp = cp * z + 1.0 / 479001600.0;         // 1/12!
  cp = cp * z - 1.0 / 3628800.0;           // 1/10!
  cp = cp * z + 1.0 / 40320.0;             // 1/8!
  cp = cp * z - 1.0 / 720.0;               // 1/6!
  cp = cp * z + 1.0 / 24.0;                // 1/4!
  double cosT = (1.0 - 0.5 * z) + (z * z) * cp;
  // sin(q pi/2 + t), cos(q pi/2 + t): swap on odd q, negate sin for q = 2, 3 and cos for q = 1, 2.
  // Bit masks rather than branches, so that every clone vectorises.
  uint64_t odd = 0 - (q & 1), negS = (q & 2) << 62, negC = ((q + 1) & 2) << 62;
  uint64_t sb = bitsOf(sinT), cb = bitsOf(cosT);
  *sinOut = asDouble(((sb & ~odd) | (cb & odd)) ^ negS);
  *cosOut = asDouble(((cb & ~odd) | (sb & odd)) ^ negC);
}

double logUnit(double u) { return logUnitImpl(u); }
void sinCosTurns(uint64_t x, double *sinOut, double *cosOut) { sinCosTurnsImpl(x, sinOut, cosOut); }

} // namespace initmath

namespace {

/// The Box-Muller pair of Philox outputs (c0, c1, c2, c3): u1 = ((c0 << 21 | c1 >> 11) + 1) 2^-53
/// in (0, 1], the angle 2 pi ((c2 << 21 | c3 >> 11) 2^-53) turns; z0 = r cos, z1 = r sin with
/// r = sqrt(-2 log u1) (initmath's log and sincos, IEEE sqrt).
inline __attribute__((always_inline)) void boxMuller(uint32_t c0, uint32_t c1, uint32_t c2,
                                                      uint32_t c3, double *z0, double *z1) {
  // c0 2^21 + (c1 >> 11) + 1 <= 2^53: both parts and their sum are exact in double.
  double u1 = (initmath::u32ToDouble(c0) * 2097152.0 + initmath::u32ToDouble((c1 >> 11) + 1u)) *
              (1.0 / 9007199254740992.0);
  uint64_t x2 = (uint64_t(c2) << 21) | (c3 >> 11);
  double s, c;
  initmath::sinCosTurnsImpl(x2, &s, &c);
  double r = __builtin_sqrt(-2.0 * initmath::logUnitImpl(u1));
  *z0 = r * c;
  *z1 = r * s;
}

} // namespace

void initNormalPair(uint64_t seed, uint64_t key, uint64_t pair, double out[2]) {
  uint32_t c[4] = {uint32_t(pair), uint32_t(pair >> 32), uint32_t(key), uint32_t(key >> 32)};
  philox4x32(uint32_t(seed), uint32_t(seed >> 32), c);
  boxMuller(c[0], c[1], c[2], c[3], &out[0], &out[1]);
}

double initialValue(const schema::Parameter &p, uint64_t seed, uint64_t globalIndex) {
  if (p.init() == "ones")
    return 1.0;
  if (p.init() == "zeros" || p.init().empty())
    return 0.0;
  double z[2];
  initNormalPair(seed, parameterKey(p.name()), globalIndex / 2, z);
  return p.init_std() * z[globalIndex % 2];
}

namespace {

/// Stores v as dtype t at dst.
inline void storeValue(char *dst, DType t, double v) {
  if (t == DType::F64) {
    std::memcpy(dst, &v, 8);
  } else if (t == DType::F32) {
    float f = float(v);
    std::memcpy(dst, &f, 4);
  } else if (t == DType::F16) {
    f16 h = f16(float(v));
    std::memcpy(dst, &h, 2);
  } else {
    bf16 h = bf16(float(v));
    std::memcpy(dst, &h, 2);
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// AVX-512 and AVX2 clones of the integer Philox loop, chosen at load time by what the CPU has
// (16 or 8 lanes of 32-bit state). Integer arithmetic only: every clone gives the same bits.
#define TRAINC_INIT_AVX2_CLONE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRAINC_INIT_AVX2_CLONE
#endif

/// Pairs per batch: the Philox state of a batch (4 x 32-bit words per pair) stays in L1.
constexpr int kPairBatch = 128;

/// Philox4x32-10 (runtime/core/Philox.h's philox4x32, the same rounds and constants) on `n` <=
/// kPairBatch counters at once, structure-of-arrays so the loops vectorise: counter j is
/// (lo32(firstPair + j), hi32(firstPair + j), lo32(ctrHi), hi32(ctrHi)) under key (k0, k1), and
/// its outputs replace c0..c3[j].
TRAINC_INIT_AVX2_CLONE void philoxBatch(uint32_t k0, uint32_t k1, uint64_t firstPair,
                                        uint64_t ctrHi, int n, uint32_t *__restrict c0,
                                        uint32_t *__restrict c1, uint32_t *__restrict c2,
                                        uint32_t *__restrict c3) {
  for (int j = 0; j < n; ++j) {
    uint64_t ctr = firstPair + uint64_t(j);
    c0[j] = uint32_t(ctr);
    c1[j] = uint32_t(ctr >> 32);
    c2[j] = uint32_t(ctrHi);
    c3[j] = uint32_t(ctrHi >> 32);
  }
  philox4x32Batch(k0, k1, n, c0, c1, c2, c3);
}

#ifdef TRAINC_INIT_HAVE_AVX512_PHILOX
// GCC 12's avx512fintrin.h shift intrinsics start from _mm512_undefined_epi32(), which
// -Wmaybe-uninitialized reports as a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/// philoxBatch with AVX-512F intrinsics, 16 counters per vector, all ten rounds in registers:
/// the 32 x 32 -> 64-bit products of even and odd lanes by two vpmuludq, their halves recombined
/// by lane blends (GCC's vectorisation of the portable loop shuffles through memory instead).
/// Computes ceil(n / 16) * 16 <= kPairBatch counters (the extra ones are never read).
__attribute__((target("avx512f"))) void philoxBatchAvx512(uint32_t k0, uint32_t k1,
                                                          uint64_t firstPair, uint64_t ctrHi,
                                                          int n, uint32_t *c0, uint32_t *c1,
                                                          uint32_t *c2, uint32_t *c3) {
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53ll), m1 = _mm512_set1_epi64(0xCD9E8D57ll);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __mmask16 odd = 0xAAAA;
  for (int j = 0; j < n; j += 16) {
    // Counter words: lo32 and hi32 of firstPair + j + lane (the carry out of the low word when
    // it wraps inside the vector: lo < the start's lo).
    uint64_t base = firstPair + uint64_t(j);
    __m512i lo = _mm512_add_epi32(_mm512_set1_epi32(int(uint32_t(base))), lane);
    __mmask16 carry = _mm512_cmplt_epu32_mask(lo, _mm512_set1_epi32(int(uint32_t(base))));
    __m512i hi = _mm512_mask_add_epi32(_mm512_set1_epi32(int(uint32_t(base >> 32))), carry,
                                       _mm512_set1_epi32(int(uint32_t(base >> 32))),
                                       _mm512_set1_epi32(1));
    __m512i x0 = lo, x1 = hi, x2 = _mm512_set1_epi32(int(uint32_t(ctrHi))),
            x3 = _mm512_set1_epi32(int(uint32_t(ctrHi >> 32)));
    uint32_t key0 = k0, key1 = k1;
    for (int r = 0; r < 10; ++r) {
      __m512i p0e = _mm512_mul_epu32(x0, m0), p0o = _mm512_mul_epu32(_mm512_srli_epi64(x0, 32), m0);
      __m512i p1e = _mm512_mul_epu32(x2, m1), p1o = _mm512_mul_epu32(_mm512_srli_epi64(x2, 32), m1);
      __m512i hi0 = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(p0e, 32), p0o);
      __m512i lo0 = _mm512_mask_blend_epi32(odd, p0e, _mm512_slli_epi64(p0o, 32));
      __m512i hi1 = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(p1e, 32), p1o);
      __m512i lo1 = _mm512_mask_blend_epi32(odd, p1e, _mm512_slli_epi64(p1o, 32));
      // 0x96: a ^ b ^ c.
      x0 = _mm512_ternarylogic_epi32(hi1, x1, _mm512_set1_epi32(int(key0)), 0x96);
      x2 = _mm512_ternarylogic_epi32(hi0, x3, _mm512_set1_epi32(int(key1)), 0x96);
      x1 = lo1;
      x3 = lo0;
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    _mm512_storeu_si512(c0 + j, x0);
    _mm512_storeu_si512(c1 + j, x1);
    _mm512_storeu_si512(c2 + j, x2);
    _mm512_storeu_si512(c3 + j, x3);
  }
}

/// philoxBatchAvx512's scheme with AVX2 intrinsics, 8 counters per vector: the products of even
/// and odd lanes by two vpmuludq recombined by vpblendd; the low word's carry by a signed compare
/// of sign-flipped words (AVX2 has no unsigned compare). Computes ceil(n / 8) * 8 <= kPairBatch
/// counters (the extra ones are never read). GCC's vectorisation of the portable loop for AVX2
/// shuffles through memory: on a 2-core AVX2 machine (AMD EPYC) initialisation took 0.62 s per
/// 100M parameters with it.
__attribute__((target("avx2"))) void philoxBatchAvx2(uint32_t k0, uint32_t k1,
                                                     uint64_t firstPair, uint64_t ctrHi, int n,
                                                     uint32_t *c0, uint32_t *c1, uint32_t *c2,
                                                     uint32_t *c3) {
  const __m256i m0 = _mm256_set1_epi64x(0xD2511F53ll), m1 = _mm256_set1_epi64x(0xCD9E8D57ll);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i sign = _mm256_set1_epi32(int(0x80000000u));
  for (int j = 0; j < n; j += 8) {
    uint64_t base = firstPair + uint64_t(j);
    const __m256i b0 = _mm256_set1_epi32(int(uint32_t(base)));
    __m256i lo = _mm256_add_epi32(b0, lane);
    // carry = -1 where lo < b0 (unsigned): the low word wrapped inside the vector.
    __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(b0, sign), _mm256_xor_si256(lo, sign));
    __m256i hi = _mm256_sub_epi32(_mm256_set1_epi32(int(uint32_t(base >> 32))), carry);
    __m256i x0 = lo, x1 = hi, x2 = _mm256_set1_epi32(int(uint32_t(ctrHi))),
            x3 = _mm256_set1_epi32(int(uint32_t(ctrHi >> 32)));
    uint32_t key0 = k0, key1 = k1;
    for (int r = 0; r < 10; ++r) {
      __m256i p0e = _mm256_mul_epu32(x0, m0), p0o = _mm256_mul_epu32(_mm256_srli_epi64(x0, 32), m0);
      __m256i p1e = _mm256_mul_epu32(x2, m1), p1o = _mm256_mul_epu32(_mm256_srli_epi64(x2, 32), m1);
      __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(p0e, 32), p0o, 0xAA);
      __m256i lo0 = _mm256_blend_epi32(p0e, _mm256_slli_epi64(p0o, 32), 0xAA);
      __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(p1e, 32), p1o, 0xAA);
      __m256i lo1 = _mm256_blend_epi32(p1e, _mm256_slli_epi64(p1o, 32), 0xAA);
      x0 = _mm256_xor_si256(_mm256_xor_si256(hi1, x1), _mm256_set1_epi32(int(key0)));
      x2 = _mm256_xor_si256(_mm256_xor_si256(hi0, x3), _mm256_set1_epi32(int(key1)));
      x1 = lo1;
      x3 = lo0;
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(c0 + j), x0);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(c1 + j), x1);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(c2 + j), x2);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(c3 + j), x3);
  }
}

#pragma GCC diagnostic pop

/// The best Philox batch the CPU has: 2 AVX-512F, 1 AVX2, 0 the portable loop (checked once;
/// tests may lower it).
int cpuPhiloxIsa() {
  if (__builtin_cpu_supports("avx512f"))
    return 2;
  return __builtin_cpu_supports("avx2") ? 1 : 0;
}
std::atomic<int> philoxIsa{cpuPhiloxIsa()};
void philoxBatchBest(uint32_t k0, uint32_t k1, uint64_t firstPair, uint64_t ctrHi, int n,
                     uint32_t *c0, uint32_t *c1, uint32_t *c2, uint32_t *c3) {
  switch (philoxIsa.load(std::memory_order_relaxed)) {
  case 2:
    return philoxBatchAvx512(k0, k1, firstPair, ctrHi, n, c0, c1, c2, c3);
  case 1:
    return philoxBatchAvx2(k0, k1, firstPair, ctrHi, n, c0, c1, c2, c3);
  default:
    return philoxBatch(k0, k1, firstPair, ctrHi, n, c0, c1, c2, c3);
  }
}
#else
int cpuPhiloxIsa() { return 0; }
std::atomic<int> philoxIsa{0};
void philoxBatchBest(uint32_t k0, uint32_t k1, uint64_t firstPair, uint64_t ctrHi, int n,
                     uint32_t *c0, uint32_t *c1, uint32_t *c2, uint32_t *c3) {
  philoxBatch(k0, k1, firstPair, ctrHi, n, c0, c1, c2, c3);
}
#endif

template <typename T> inline void storeAs(T *dst, double v) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
    *dst = T(float(v)); // f64 -> f32 -> 16 bits, as torch's normal_ on a half tensor
  else
    *dst = T(v);
}

/// Box-Muller (boxMuller) on n <= kPairBatch Philox outputs: pair j's values into z[2j], z[2j + 1].
/// One loop, vectorised in every clone (log, sincos and sqrt are inline arithmetic).
TRAINC_INIT_AVX2_CLONE void boxMullerBatch(int n, const uint32_t *__restrict c0,
                                           const uint32_t *__restrict c1,
                                           const uint32_t *__restrict c2,
                                           const uint32_t *__restrict c3, double *__restrict z) {
  alignas(64) double zc[kPairBatch], zs[kPairBatch];
  for (int j = 0; j < n; ++j)
    boxMuller(c0[j], c1[j], c2[j], c3[j], zc + j, zs + j);
  for (int j = 0; j < n; ++j) {
    z[2 * j] = zc[j];
    z[2 * j + 1] = zs[j];
  }
}

/// Writes `len` consecutive elements starting at global index `g` of a normal parameter (std
/// `stdDev`, Philox key `seed`, counter high half `key`) to dst[0..len). Bit for bit the values of
/// initialValue: Philox runs in batches (philoxBatch), then boxMullerBatch (the expressions of
/// initNormalPair) gives both elements of each pair into a staging array, from which the run's
/// part is stored as T.
template <typename T>
void normalRun(uint64_t seed, uint64_t key, double stdDev, uint64_t g, int64_t len, T *dst) {
  alignas(64) uint32_t c0[kPairBatch], c1[kPairBatch], c2[kPairBatch], c3[kPairBatch];
  alignas(64) double z[2 * kPairBatch];
  uint64_t end = g + uint64_t(len);
  while (g < end) {
    uint64_t firstPair = g / 2;
    uint64_t lastPair = (end - 1) / 2; // inclusive
    int n = int(std::min<uint64_t>(lastPair - firstPair + 1, kPairBatch));
    philoxBatchBest(uint32_t(seed), uint32_t(seed >> 32), firstPair, key, n, c0, c1, c2, c3);
    boxMullerBatch(n, c0, c1, c2, c3, z);
    // Elements [g, stop) of this batch: z[g - 2 firstPair] onwards.
    uint64_t stop = std::min(end, (firstPair + uint64_t(n)) * 2);
    const double *src = z + (g - 2 * firstPair);
    int64_t count = int64_t(stop - g);
    for (int64_t e = 0; e < count; ++e)
      storeAs(dst + e, stdDev * src[e]);
    dst += count;
    g = stop;
  }
}

/// Writes the local elements [begin, end) of parameter p (row-major over its slice) into `base`
/// (the parameter's first element) as dtype t. Element values are initialValue's, bit for bit:
/// the rule and the key are taken once per tensor, and the slice is walked in runs along its last
/// dimension (consecutive global indices), each generated by normalRun.
void initRange(const schema::Parameter &p, DType t, uint64_t seed, uint64_t key, int64_t begin,
               int64_t end, char *base) {
  size_t es = dtypeSize(t);
  int rank = p.global_shape_size();
  bool normal = p.init() == "normal";
  if (!normal) {
    double v = p.init() == "ones" ? 1.0 : 0.0;
    for (int64_t local = begin; local < end; ++local)
      storeValue(base + uint64_t(local) * es, t, v);
    return;
  }
  double stdDev = p.init_std();
  // A rank-0 parameter is one element at global index 0.
  int64_t rowLen = rank > 0 ? p.slice_size(rank - 1) : 1;
  if (rowLen <= 0 || end <= begin)
    return;
  for (int64_t local = begin; local < end;) {
    int64_t row = local / rowLen, col = local % rowLen;
    int64_t len = std::min(end - local, rowLen - col);
    // Global index of (row, col): the row's multi-index over dims [0, rank - 1), then the column.
    uint64_t g = 0;
    if (rank > 0) {
      std::vector<int64_t> idx(size_t(rank), 0);
      for (int64_t d = rank - 2, r = row; d >= 0; --d) {
        idx[size_t(d)] = r % p.slice_size(int(d));
        r /= p.slice_size(int(d));
      }
      idx[size_t(rank - 1)] = col;
      for (int d = 0; d < rank; ++d)
        g = g * uint64_t(p.global_shape(d)) + uint64_t(p.slice_start(d) + idx[size_t(d)]);
    }
    char *dst = base + uint64_t(local) * es;
    if (t == DType::F64)
      normalRun(seed, key, stdDev, g, len, reinterpret_cast<double *>(dst));
    else if (t == DType::F32)
      normalRun(seed, key, stdDev, g, len, reinterpret_cast<float *>(dst));
    else if (t == DType::F16)
      normalRun(seed, key, stdDev, g, len, reinterpret_cast<f16 *>(dst));
    else
      normalRun(seed, key, stdDev, g, len, reinterpret_cast<bf16 *>(dst));
    local += len;
  }
}

} // namespace

namespace {
std::atomic<bool> forceStaging{false};
} // namespace

bool setInitStagingForTesting(bool on) { return forceStaging.exchange(on); }

int setPhiloxIsaForTesting(int isa) {
  return philoxIsa.exchange(std::clamp(isa, 0, cpuPhiloxIsa()));
}

absl::Status initializeParameters(Executor &ex, uint64_t seed) {
  const schema::Program &prog = ex.program();
  // The buffer of the parameters being initialised. Where the backend's memory is host memory
  // (CPU) the values are written in place (no second host copy of the whole buffer; it did not
  // measurably change the time, docs/kernels.md "Fifth round"). Otherwise
  // they are staged on the host and written back when the next parameter lives in another
  // buffer (or at the end, or before an error is returned); the staging copy is read from the
  // buffer only when the run of consecutive parameters in it does not cover every byte
  // (coveredByRun), else it is left uninitialised and its pages are first touched by the
  // threads that generate the values.
  int current = -1;
  std::unique_ptr<char[]> staging;
  char *target = nullptr; // staging.get() or the buffer itself
  size_t stagingSize = 0;
  auto flush = [&]() -> absl::Status {
    if (current < 0)
      return absl::OkStatus();
    absl::Status s = staging ? ex.writeBuffer(current, staging.get(), stagingSize)
                             : absl::OkStatus();
    current = -1;
    return s;
  };
  // Whether parameters first, first + 1, ... that live in buffer `b` (the run up to the first
  // parameter of another buffer) together cover its bytes [0, byteSize).
  auto coveredByRun = [&](int first, int b, uint64_t byteSize) {
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (int j = first; j < prog.parameters_size() && int(prog.parameters(j).buffer()) == b; ++j) {
      const schema::Parameter &q = prog.parameters(j);
      uint64_t n = 1;
      for (int d = 0; d < q.slice_size_size(); ++d)
        n *= uint64_t(q.slice_size(d));
      uint64_t es = dtypeSize(DType(int(prog.buffers(b).dtype())));
      spans.push_back({q.buffer_offset() * es, (q.buffer_offset() + n) * es});
    }
    std::sort(spans.begin(), spans.end());
    uint64_t reached = 0;
    for (const auto &[lo, hi] : spans) {
      if (lo > reached)
        return false;
      reached = std::max(reached, hi);
    }
    return reached >= byteSize;
  };
  for (int pi = 0; pi < prog.parameters_size(); ++pi) {
    const schema::Parameter &p = prog.parameters(pi);
    if (p.init() != "normal" && p.init() != "ones" && p.init() != "zeros" && !p.init().empty()) {
      (void)flush();
      return absl::InvalidArgumentError(absl::StrCat("parameter '", p.name(), "': init rule '",
                                                     p.init(),
                                                     "' is not one of normal, ones, zeros"));
    }
    const schema::Buffer &buf = prog.buffers(int(p.buffer()));
    DType t = DType(int(buf.dtype()));
    if (!isFloat(t)) {
      (void)flush();
      return absl::InvalidArgumentError(absl::StrCat("parameter '", p.name(), "': buffer '",
                                                     buf.name(), "' is not a float buffer"));
    }
    if (current != int(p.buffer())) {
      if (absl::Status s = flush(); !s.ok())
        return s;
      stagingSize = size_t(buf.byte_size());
      staging.reset();
      target = forceStaging.load(std::memory_order_relaxed)
                   ? nullptr
                   : static_cast<char *>(ex.hostWritableBuffer(int(p.buffer())));
      if (!target) {
        staging.reset(new char[stagingSize]); // not value-initialised
        target = staging.get();
        if (!coveredByRun(pi, int(p.buffer()), buf.byte_size()))
          if (absl::Status s = ex.readBuffer(int(p.buffer()), target, stagingSize); !s.ok())
            return s;
      }
      current = int(p.buffer());
    }
    int rank = p.global_shape_size();
    int64_t n = 1;
    for (int d = 0; d < rank; ++d)
      n *= p.slice_size(d);
    uint64_t key = parameterKey(p.name());
    char *base = target + p.buffer_offset() * dtypeSize(t);
    // Every element is a pure function of (seed, parameter, global index): any split of the
    // local range over the threads gives the same bytes. Chunks start at even local indices, so
    // a chunk boundary rarely splits a Box-Muller pair (which would only cost one extra call).
    constexpr int64_t kChunk = 1 << 14;
    int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t ch = 0; ch < chunks; ++ch)
      initRange(p, t, seed, key, ch * kChunk, std::min(n, (ch + 1) * kChunk), base);
  }
  if (absl::Status s = flush(); !s.ok())
    return s;
  return initializeMasterWeights(ex);
}

absl::Status initializeMasterWeights(Executor &ex) {
  const schema::Program &prog = ex.program();
  for (const schema::Function &fn : prog.functions())
    for (int k = 0; k < fn.body_size(); ++k) {
      const schema::Instruction &ins = fn.body(k);
      if (ins.op_case() != schema::Instruction::kKernel ||
          ins.kernel().kernel() != "adamw_master")
        continue;
      const schema::KernelCall &kc = ins.kernel();
      std::string where = absl::StrCat("function '", fn.name(), "' instruction ", k,
                                       " (adamw_master)");
      ResolvedOperand master, param;
      if (kc.inputs_size() < 1 || kc.outputs_size() < 4)
        return absl::InvalidArgumentError(where + ": expected 9 inputs and 4 outputs");
      std::string e = resolveOperand(prog, fn, kc.inputs(0), master);
      if (e.empty())
        e = resolveOperand(prog, fn, kc.outputs(3), param);
      if (e.empty() && (master.isArg || param.isArg))
        e = "the master weights and the parameter must be buffers, not function arguments";
      const DType pt = param.view.dtype;
      if (e.empty() && (master.view.dtype != DType::F32 ||
                        (pt != DType::BF16 && pt != DType::F16) ||
                        master.view.numel != param.view.numel))
        e = "expected f32 master weights and a bf16 or f16 parameter of as many elements";
      if (!e.empty())
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", e));
      const schema::Buffer &mb = prog.buffers(int(master.base)), &pb = prog.buffers(int(param.base));
      std::vector<char> mbytes(mb.byte_size()), pbytes(pb.byte_size());
      if (absl::Status s = ex.readBuffer(int(master.base), mbytes.data(), mbytes.size()); !s.ok())
        return s;
      if (absl::Status s = ex.readBuffer(int(param.base), pbytes.data(), pbytes.size()); !s.ok())
        return s;
      float *m = reinterpret_cast<float *>(mbytes.data()) + master.elemOffset;
      const char *pp = pbytes.data() + param.elemOffset * 2;
      for (int64_t i = 0; i < master.view.numel; ++i) {
        uint16_t h;
        std::memcpy(&h, pp + 2 * i, 2);
        bf16 b;
        b.bits = h;
        m[i] = pt == DType::F16 ? f16::toFloat(h) : float(b);
      }
      if (absl::Status s = ex.writeBuffer(int(master.base), mbytes.data(), mbytes.size()); !s.ok())
        return s;
    }
  return absl::OkStatus();
}

} // namespace trainc::rt
