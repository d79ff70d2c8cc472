//===- FastMath.h - Vectorisable exp for the CPU kernels -----------------===//
#ifndef TRAINC_RUNTIME_CPU_FASTMATH_H
#define TRAINC_RUNTIME_CPU_FASTMATH_H

#include <cmath>
#include <cstdint>
#include <cstring>

// The f32 exp loop is the largest cost after the GEMMs. With no -march flags GCC vectorises it for
// SSE2 (4 lanes); an AVX2 clone (8 lanes, chosen at load time when the CPU has AVX2) doubles its
// speed. AVX2 alone does not enable FMA contraction, so both clones compute bitwise identical
// results.
// TRAINC_AVX512_CLONE adds an AVX-512F clone (16 lanes) for the attention kernels' row loops.
// AVX-512F does have FMA instructions (GCC defines __FP_FAST_FMA for it, though not __FMA__), and
// under GCC's default -ffp-contract=fast its clone contracted expInPlace's polynomial into FMAs;
// the files that include this header are compiled with -ffp-contract=off (runtime/CMakeLists.txt),
// so all three clones give the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRAINC_AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#define TRAINC_AVX512_CLONE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRAINC_AVX2_CLONE
#define TRAINC_AVX512_CLONE
#endif

namespace trainc::rt::cpu {

/// x[i] = exp(x[i] - bias). The f32 version is Cephes' expf (range reduction by ln 2 in two parts,
/// degree-6 polynomial, 2^n built from the exponent bits; max error ~1.5 ulp) written so that GCC
/// vectorises it under the default -ftrapping-math: the clamp of x - bias to [-87, 88] selects with
/// integer masks rather than branches. Below -87 it returns ~exp(-87) = 1.6e-38 instead of a
/// smaller number or 0 (callers zero masked entries explicitly); NaN stays NaN.
TRAINC_AVX512_CLONE static void expInPlace(float *x, int n, float bias) {
  const int32_t loBits = int32_t(0xc2ae0000u); // -87.0f
  const int32_t hiBits = int32_t(0x42b00000u); // 88.0f
  for (int i = 0; i < n; ++i) {
    float v = x[i] - bias;
    int32_t lo = -int32_t(v < -87.0f), hi = -int32_t(v > 88.0f), vb;
    std::memcpy(&vb, &v, 4);
    vb = (vb & ~(lo | hi)) | (loBits & lo) | (hiBits & hi);
    std::memcpy(&v, &vb, 4);
    float kf = v * 1.44269504088896341f + 12582912.0f; // round to nearest via 1.5 * 2^23
    kf -= 12582912.0f;
    float r = v - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    uint32_t bits = uint32_t(int32_t(kf) + 127) << 23; // kf in [-126, 127]
    float pow2;
    std::memcpy(&pow2, &bits, 4);
    x[i] = p * pow2;
  }
}


/// f64: the library exp (f64 serves gradient checks, not speed).
inline void expInPlace(double *x, int n, double bias) {
  for (int i = 0; i < n; ++i)
    x[i] = std::exp(x[i] - bias);
}

} // namespace trainc::rt::cpu

#endif
