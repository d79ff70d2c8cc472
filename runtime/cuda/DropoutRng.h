//===- DropoutRng.h - dropout's Philox uniform, for device and host -------===//
//
// The CUDA dropout kernel's random number for global element g, written once for nvcc (device)
// and g++ (host) on runtime/core/Philox.h's philox4x32 (host and device), so that a host test
// checks it bit for bit against the CPU backend's philoxUniform4 (tests/unit/CudaKernelsTest.cpp,
// DropoutRngMatchesTheCpuPhilox). Same counter layout:
// key = seed, counter = (block low, block high, op_id, iteration), block = g / 4, output g % 4,
// 24-bit uniform in [0, 1).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CUDA_DROPOUTRNG_H
#define TRAINC_RUNTIME_CUDA_DROPOUTRNG_H

#include "runtime/core/Philox.h"

#include <stdint.h>

#ifdef __CUDACC__
#define TRAINC_HD __host__ __device__ __forceinline__
#else
#define TRAINC_HD inline
#endif

namespace trainc::rt::cuda {

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
