//===- CudaInternal.h - Shared pieces of the CUDA backend's host side -----===//
#ifndef TRAINC_RUNTIME_CUDA_CUDAINTERNAL_H
#define TRAINC_RUNTIME_CUDA_CUDAINTERNAL_H

#include "runtime/core/Backend.h"
#include "runtime/cuda/CudaApi.h"

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

namespace trainc::rt::cuda {

/// Throws std::runtime_error("<what>: cudaErrorX (...)") unless e == cudaSuccess.
void check(const CudaApi &api, cudaError_t e, const char *what);

/// The embedded fatbin loaded with cudaLibraryLoadData; kernels looked up by name and cached.
class KernelModule {
public:
  /// Loads the fatbin; "" or the error.
  std::string load(const CudaApi &api);
  ~KernelModule();
  /// The kernel called `name` (throws std::runtime_error if the fatbin lacks it).
  cudaKernel_t get(const char *name);

private:
  const CudaApi *api_ = nullptr;
  cudaLibrary_t lib_ = nullptr;
  std::mutex mu_;
  std::map<std::string, cudaKernel_t, std::less<>> kernels_;
};

/// Device scratch memory of one stream, grown on demand (the stream is synchronised before the
/// old block is freed). Not capture-safe while growing; the first iteration sizes it.
class Scratch {
public:
  void *get(const CudaApi &api, cudaStream_t s, size_t bytes);
  void release(const CudaApi &api);

private:
  void *p_ = nullptr;
  size_t bytes_ = 0;
};

/// What every CUDA kernel receives as KernelCtx::backendData (one per stream).
struct KernelData {
  const CudaApi *api = nullptr;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void *workspace = nullptr; // cuBLASLt workspace
  size_t workspaceBytes = 0;
  KernelModule *module = nullptr;
  Scratch *scratch = nullptr;
  int smCount = 0;
};

/// Launches kernel `name` with the given arguments (each passed by address as cudaLaunchKernel
/// requires; argument types must match the kernel's parameters exactly).
template <typename... Args>
void launch(const KernelData &kd, const char *name, dim3 grid, dim3 block, size_t shmem,
            Args... args) {
  void *ptrs[] = {static_cast<void *>(&args)...};
  cudaKernel_t k = kd.module->get(name);
  check(*kd.api, kd.api->cudaLaunchKernel(reinterpret_cast<const void *>(k), grid, block, ptrs,
                                          shmem, kd.stream),
        name);
}

/// Grid-stride launch size for n elements: 256 threads, at most 32 blocks per SM.
inline dim3 gridFor(const KernelData &kd, int64_t n) {
  int64_t blocks = (n + 255) / 256;
  int64_t cap = int64_t(kd.smCount > 0 ? kd.smCount : 132) * 32;
  return dim3(unsigned(blocks < 1 ? 1 : blocks > cap ? cap : blocks));
}

/// c[..., M, N] = alpha op(a)[..., M, K] op(b)[..., K, N] + beta c (row-major, b shared by all
/// batches unless bBatched) through cuBLASLt on kd's stream; plans are cached per shape. fp32
/// computes in fp32 (CUBLAS_COMPUTE_32F: no TF32), bf16 in fp32, f64 in f64. Throws on a cuBLASLt
/// error. Used by matmul and by bench/.
void cublasLtMatmulRowMajor(const KernelData &kd, DType t, int64_t batch, int64_t M, int64_t N,
                            int64_t K, bool ta, bool tb, bool bBatched, const void *a,
                            const void *b, void *c, double alpha, double beta);

using KernelTable = std::map<std::string, KernelFn, std::less<>>;
/// Every kernel of Kernel.h's table (CudaKernels.cpp).
const KernelTable &cudaKernelTable();

/// The backend's streams, for the NCCL communicator.
struct CudaStreams {
  const CudaApi *api;
  cudaStream_t compute, comm, p2p;
  int device;
};
/// The streams of `b` if it is a CUDA backend, else null.
const CudaStreams *cudaStreamsOf(Backend &b);

} // namespace trainc::rt::cuda

#endif
