//===- CudaBackend.h - The CUDA backend and NCCL communicator (public) ----===//
//
// No CUDA header here: callers (trainrun, the trainer, tests) compile and link the same way on
// machines with and without CUDA. When nvcc was not found at configure time, the functions report
// that the binary was built without CUDA (runtime/cuda/CudaStub.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CUDA_CUDABACKEND_H
#define TRAINC_RUNTIME_CUDA_CUDABACKEND_H

#include "runtime/comm/Communicator.h"
#include "runtime/core/Backend.h"

#include "absl/status/statusor.h"

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trainc::rt {

/// True when this binary has the CUDA backend and a device and the CUDA libraries are present.
/// `why` (optional) receives the reason otherwise (see createCudaBackend).
bool cudaBackendAvailable(std::string *why = nullptr);

/// Resolves every CUDA runtime, cuBLASLt and NCCL entry point of the backend's symbol table in the
/// installed libraries, without a device: "" when all resolve, "missing library: ..." when one
/// cannot be loaded, else the first missing symbol ("built without CUDA" in a stub build).
std::string probeCudaLibraries();

/// The kernel names the CUDA backend implements (empty in a build without CUDA); usable without a
/// device, e.g. to check that every kernel of Kernel.h's table has a CUDA implementation.
std::vector<std::string> cudaKernelNames();

/// The CUDA backend's kernel `name`, or null (always null in a build without CUDA). Calling it
/// needs the backend's KernelData (ctx.kernelData) except for kernels that refuse their input
/// before touching the device, such as attention_dropout, which throws std::runtime_error.
KernelFn findCudaKernel(std::string_view name);

/// Creates the CUDA backend on device `device` (cudaSetDevice): the arena in device memory
/// (cudaMalloc, zero-filled), a compute, a communication and a p2p stream (non-blocking), events
/// without timing, cuBLASLt for matmul and the embedded kernels for everything else.
/// Errors (FailedPrecondition): the binary was built without CUDA; libcudart.so.13 or
/// libcublasLt.so.13 cannot be loaded (dlerror's text); no device (cudaGetDeviceCount's error);
/// `device` out of range; the kernel fatbin does not load (e.g. a GPU older than sm_90).
absl::StatusOr<std::unique_ptr<Backend>> createCudaBackend(int device = 0);

/// The key-value store NCCL's unique ids travel through (trainrun's TcpStore after rendezvous).
struct NcclStore {
  std::function<void(const std::string &key, const std::vector<char> &value)> set;
  std::function<std::vector<char>(const std::string &key)> get; // blocks until present
};

/// A Communicator over NCCL for a rank of `worldSize` whose device buffers belong to `backend`
/// (a CUDA backend). setupGroups creates one ncclComm_t per group (the group's first rank makes
/// the unique id and publishes it under "nccl/<job>/<setup count>/<group name>/<ranks>").
/// Collectives are enqueued on the backend's communication stream (send/recv on its p2p stream),
/// ordered by events, without host synchronisation; host pointers (the control plane's scalars)
/// are staged through device memory synchronously. A world of one rank loads no NCCL (its
/// collectives are device copies). Errors: not a CUDA backend, libnccl.so.2 missing (worldSize >
/// 1), ncclCommInitRank failing (NCCL's error string). Collective failures throw std::runtime_error naming the call.
absl::StatusOr<std::unique_ptr<Communicator>>
createNcclCommunicator(int64_t rank, int64_t worldSize, Backend &backend, NcclStore store,
                       std::string job = "job");

} // namespace trainc::rt

#endif
