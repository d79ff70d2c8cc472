//===- CudaStub.cpp - The CUDA entry points of a build without nvcc -------===//

#include "runtime/cuda/CudaBackend.h"

namespace trainc::rt {

namespace {
constexpr const char *kNoCuda =
    "this binary was built without CUDA (nvcc was not found when CMake configured it, or "
    "TRAINC_ENABLE_CUDA=OFF); rebuild with the CUDA toolkit installed";
}

bool cudaBackendAvailable(std::string *why) {
  if (why)
    *why = kNoCuda;
  return false;
}

std::vector<std::string> cudaKernelNames() { return {}; }

KernelFn findCudaKernel(std::string_view) { return nullptr; }

std::string probeCudaLibraries() { return kNoCuda; }

absl::StatusOr<std::unique_ptr<Backend>> createCudaBackend(int) {
  return absl::FailedPreconditionError(std::string("--backend cuda: ") + kNoCuda);
}

absl::StatusOr<std::unique_ptr<Communicator>> createNcclCommunicator(int64_t, int64_t, Backend &,
                                                                     NcclStore, std::string) {
  return absl::FailedPreconditionError(std::string("NCCL: ") + kNoCuda);
}

} // namespace trainc::rt
