//===- Philox.h - Counter-based random numbers (Philox4x32-10) -----------===//
//
// Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11). One call maps a 64-bit key
// and a 128-bit counter to four independent 32-bit values; the same (key, counter) always gives the
// same values, on every backend and for every parallel plan, which is what makes dropout masks and
// initialisation independent of how a tensor is sharded.
//
// trainc's counter layout for dropout (philoxUniform4):
//   key     = seed (64 bits)
//   counter = (block low 32, block high 32, op_id, iteration)
// where block = global_index / 4 and element k of the block takes output k. global_index is the
// element's index in the whole global batch: first_sample x (elements per sample) + the index
// within the microbatch's tensor, so the mask of a sample does not depend on which rank or
// microbatch holds it (the same losses under every data-parallel layout).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CORE_PHILOX_H
#define TRAINC_RUNTIME_CORE_PHILOX_H

#include <cstdint>

// philox4x32 is also device code for the CUDA backend's dropout (runtime/cuda/DropoutRng.h).
#ifdef __CUDACC__
#define TRAINC_PHILOX_HD __host__ __device__ __forceinline__
#else
#define TRAINC_PHILOX_HD inline
#endif

namespace trainc::rt {

/// Philox4x32 with 10 rounds. `ctr` is updated in place to the four outputs.
TRAINC_PHILOX_HD void philox4x32(uint32_t key0, uint32_t key1, uint32_t ctr[4]) {
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(M0) * ctr[0], p1 = uint64_t(M1) * ctr[2];
    uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    uint32_t n0 = hi1 ^ ctr[1] ^ key0, n2 = hi0 ^ ctr[3] ^ key1;
    ctr[0] = n0;
    ctr[1] = lo1;
    ctr[2] = n2;
    ctr[3] = lo0;
    key0 += W0;
    key1 += W1;
  }
}

/// philox4x32 on `n` counters at once in structure-of-arrays form, so that the rounds vectorise in
/// the caller's target clones (inlined into each): counter j is (c0[j], c1[j], c2[j], c3[j]),
/// replaced by its four outputs, all under the key (key0, key1). Integer arithmetic only: every
/// clone gives philox4x32's bits.
[[gnu::always_inline]] inline void philox4x32Batch(uint32_t key0, uint32_t key1, int n,
                                                   uint32_t *__restrict c0,
                                                   uint32_t *__restrict c1,
                                                   uint32_t *__restrict c2,
                                                   uint32_t *__restrict c3) {
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    for (int j = 0; j < n; ++j) {
      uint64_t p0 = uint64_t(M0) * c0[j], p1 = uint64_t(M1) * c2[j];
      uint32_t n0 = uint32_t(p1 >> 32) ^ c1[j] ^ key0, n2 = uint32_t(p0 >> 32) ^ c3[j] ^ key1;
      c0[j] = n0;
      c1[j] = uint32_t(p1);
      c2[j] = n2;
      c3[j] = uint32_t(p0);
    }
    key0 += W0;
    key1 += W1;
  }
}

/// Four uniforms in [0, 1) (24-bit resolution) for dropout block `block`.
inline void philoxUniform4(uint64_t seed, uint32_t opId, uint32_t iteration, uint64_t block,
                           float out[4]) {
  uint32_t c[4] = {uint32_t(block), uint32_t(block >> 32), opId, iteration};
  philox4x32(uint32_t(seed), uint32_t(seed >> 32), c);
  for (int k = 0; k < 4; ++k)
    out[k] = float(c[k] >> 8) * (1.0f / 16777216.0f);
}

/// Two standard normals (Box-Muller with libm's log, cos and sin) from one Philox call on (key,
/// counter). The initialisation's definition before issue 17: initNormalPair (Init.h) uses the
/// same counters and uniforms with its own vectorisable log and sincos, and its tests compare it
/// with this function; runtime/testing's block programs draw their weights with it.
inline void philoxNormal2(uint64_t key, uint64_t counterHi, uint64_t counterLo, double out[2]) {
  uint32_t c[4] = {uint32_t(counterLo), uint32_t(counterLo >> 32), uint32_t(counterHi),
                   uint32_t(counterHi >> 32)};
  philox4x32(uint32_t(key), uint32_t(key >> 32), c);
  // 53-bit uniforms in (0, 1].
  double u1 = (double((uint64_t(c[0]) << 21) ^ (c[1] >> 11)) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = double((uint64_t(c[2]) << 21) ^ (c[3] >> 11)) * (1.0 / 9007199254740992.0);
  double r = __builtin_sqrt(-2.0 * __builtin_log(u1));
  out[0] = r * __builtin_cos(6.283185307179586 * u2);
  out[1] = r * __builtin_sin(6.283185307179586 * u2);
}

} // namespace trainc::rt

#endif
