//===- CudaApi.h - The one dynamic symbol table of the CUDA backend -------===//
//
// Every CUDA runtime, cuBLASLt and NCCL entry point the runtime calls is resolved here with
// dlopen/dlsym, so trainrun and the tests link no CUDA library and run on machines without one
// (docs/cuda.md, "One binary"). The headers give the types only (decltype of each declaration).
// The backend's own kernels are a fatbin embedded in the binary (CudaKernels.cu compiled by nvcc
// -fatbin) loaded with cudaLibraryLoadData and launched with cudaLaunchKernel from this table.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CUDA_CUDAAPI_H
#define TRAINC_RUNTIME_CUDA_CUDAAPI_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

namespace trainc::rt::cuda {

#define TRAINC_CUDART_FUNCS(X)                                                                     \
  X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaGetDevice) X(cudaDeviceGetAttribute)                \
  X(cudaGetErrorString) X(cudaGetErrorName) X(cudaGetLastError) X(cudaRuntimeGetVersion)           \
  X(cudaDriverGetVersion) X(cudaFree) X(cudaMemGetInfo) X(cudaMemsetAsync)           \
  X(cudaMemcpyAsync) X(cudaStreamCreateWithFlags) X(cudaStreamDestroy) X(cudaStreamSynchronize)    \
  X(cudaStreamWaitEvent) X(cudaEventCreateWithFlags) X(cudaEventDestroy) X(cudaEventRecord)        \
  X(cudaEventSynchronize) X(cudaEventElapsedTime) X(cudaLibraryLoadData) X(cudaLibraryUnload)     \
  X(cudaLibraryGetKernel) X(cudaPointerGetAttributes) X(cudaDeviceSynchronize) \
  X(cudaStreamBeginCapture) X(cudaStreamEndCapture) X(cudaGraphLaunch)     \
  X(cudaGraphExecDestroy) X(cudaGraphDestroy) X(cudaFreeHost)

// Entry points that cuda_runtime.h (included by cublasLt.h) overloads with C++ templates: their
// C signatures are spelled out below and they are resolved by this list.
#define TRAINC_CUDART_OVERLOADED(X) X(cudaMalloc) X(cudaMallocHost) X(cudaLaunchKernel) X(cudaGraphInstantiate)

#define TRAINC_CUBLASLT_FUNCS(X)                                                                   \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)    \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)   \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)                            \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                       \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul) X(cublasLtGetStatusString)

#define TRAINC_NCCL_FUNCS(X)                                                                       \
  X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclCommAbort) X(ncclAllReduce)      \
  X(ncclReduceScatter) X(ncclAllGather) X(ncclBroadcast) X(ncclSend) X(ncclRecv) X(ncclGroupStart) \
  X(ncclGroupEnd) X(ncclGetErrorString) X(ncclGetVersion)

/// The resolved entry points. Members are null until the owning library was loaded.
struct CudaApi {
#define TRAINC_DECLARE_PTR(f) decltype(&::f) f = nullptr;
  TRAINC_CUDART_FUNCS(TRAINC_DECLARE_PTR)
  TRAINC_CUBLASLT_FUNCS(TRAINC_DECLARE_PTR)
  TRAINC_NCCL_FUNCS(TRAINC_DECLARE_PTR)
#undef TRAINC_DECLARE_PTR
  cudaError_t (*cudaMalloc)(void **, size_t) = nullptr;
  cudaError_t (*cudaMallocHost)(void **, size_t) = nullptr;
  cudaError_t (*cudaLaunchKernel)(const void *, dim3, dim3, void **, size_t, cudaStream_t) = nullptr;
  cudaError_t (*cudaGraphInstantiate)(cudaGraphExec_t *, cudaGraph_t, unsigned long long) = nullptr;
  bool haveCublasLt = false;
  bool haveNccl = false;
};

/// Loads libcudart (and libcublasLt) once per process and checks that a device is present.
/// Returns the table, or sets `*error` to a message naming what is missing: the library file
/// (with dlerror's text), a symbol, or "no CUDA device" with cudaGetDeviceCount's error name
/// (cudaErrorInsufficientDriver where no driver is installed, cudaErrorNoDevice where a driver
/// sees no GPU). The library names are libcudart.so.13 and libcublasLt.so.13, or the paths in
/// TRAINC_CUDART_LIBRARY / TRAINC_CUBLASLT_LIBRARY when set.
const CudaApi *loadCudaApi(std::string *error);

/// Loads libnccl.so.2 (or TRAINC_NCCL_LIBRARY) into the table returned by loadCudaApi. Returns
/// "" or a message naming the library and dlerror's text.
std::string loadNccl();

/// Loads libcudart, libcublasLt and libnccl (as loadCudaApi and loadNccl name them) into a
/// scratch table and resolves every entry point, without needing a device. Returns "" when all
/// resolve, "missing library: <message>" when a library cannot be loaded, else the first symbol
/// not found. For tests: the table must match the installed CUDA 13 libraries.
std::string probeCudaLibraries();

/// True when loadCudaApi succeeds (a device and the libraries are present); never throws.
bool cudaDevicePresent();

/// "cudaErrorX (text)" for `e`.
std::string cudaErrorText(const CudaApi &api, cudaError_t e);

} // namespace trainc::rt::cuda

#endif
