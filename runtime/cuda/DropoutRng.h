//===- DropoutRng.h - dropout's Philox uniform, for device and host -------===//
//
// The CUDA dropout kernel's random number for global element g, written once for nvcc (device)
// and g++ (host) so that a host test checks it bit for bit against runtime/core/Philox.h, the CPU
// backend's (tests/unit/CudaKernelsTest.cpp, DropoutRngMatchesTheCpuPhilox). Same counter layout:
// key = seed, counter = (block low, block high, op_id, iteration), block = g / 4, output g % 4,
// 24-bit uniform in [0, 1).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CUDA_DROPOUTRNG_H
#define TRAINC_RUNTIME_CUDA_DROPOUTRNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define TRAINC_HD __host__ __device__ __forceinline__
#else
#define TRAINC_HD inline
#endif

namespace trainc::rt::cuda {

/// Philox4x32-10 (Salmon et al., SC'11), as runtime/core/Philox.h; ctr updated in place.
TRAINC_HD void philox4x32(uint32_t key0, uint32_t key1, uint32_t ctr[4]) {
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

/// The uniform in [0, 1) of global element g (dropout keeps it when u >= p).
TRAINC_HD float dropoutUniform(uint64_t seed, uint32_t opId, uint32_t iteration, uint64_t g) {
  uint64_t block = g / 4;
  uint32_t c[4] = {uint32_t(block), uint32_t(block >> 32), opId, iteration};
  philox4x32(uint32_t(seed), uint32_t(seed >> 32), c);
  return float(c[g % 4] >> 8) * (1.0f / 16777216.0f);
}

/// The global element index of local element i of a dropout operand whose samples hold
/// `localPer` elements each: (first sample + i / localPer) x globalPer + shift + i mod localPer.
/// Whole samples: globalPer = localPer, shift = 0. A sequence shard (docs/kernels.md "dropout"):
/// globalPer = seq_length x rest, shift = seq_start x rest.
TRAINC_HD uint64_t dropoutElement(int64_t i, uint64_t firstSample, int64_t localPer,
                                  uint64_t globalPer, uint64_t shift) {
  const uint64_t sample = localPer > 0 ? uint64_t(i / localPer) : 0;
  return (firstSample + sample) * globalPer + shift + (uint64_t(i) - sample * uint64_t(localPer));
}

} // namespace trainc::rt::cuda

#endif
