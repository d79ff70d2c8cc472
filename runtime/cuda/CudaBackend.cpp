//===- CudaBackend.cpp - Device arena, streams, events, graph capture -----===//
//
// Streams: compute (0), communication (1) and p2p (the NCCL communicator's send/recv), all created
// non-blocking. Work "enqueued" on a stream is a host function that launches device work on that
// stream, so enqueue runs it inline; before a task on the communication stream the backend records
// an event on the compute stream and makes the communication stream wait on it, which gives the
// CPU backend's ordering (a collective sees everything compute has produced so far) without a host
// synchronisation. Events are cudaEvent_t without timing. See docs/cuda.md.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaInternal.h"

#include "absl/strings/str_cat.h"

#include <cstdlib>
#include <cstdio>
#include <map>
#include <vector>

// The kernels' fatbin, embedded by runtime/cuda/FatbinBlob.cpp (.incbin of nvcc's output).
extern "C" const unsigned char trainc_cuda_fatbin[];

namespace trainc::rt {
namespace cuda {

void check(const CudaApi &api, cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA: ") + what + " failed: " + cudaErrorText(api, e));
}

std::string KernelModule::load(const CudaApi &api) {
  api_ = &api;
  cudaError_t e = api.cudaLibraryLoadData(&lib_, trainc_cuda_fatbin, nullptr, nullptr, 0, nullptr,
                                          nullptr, 0);
  if (e != cudaSuccess)
    return "cannot load the CUDA kernels (built for sm_90) on this device: cudaLibraryLoadData "
           "failed with " +
           cudaErrorText(api, e);
  return "";
}

KernelModule::~KernelModule() {
  if (lib_)
    api_->cudaLibraryUnload(lib_);
}

cudaKernel_t KernelModule::get(const char *name) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = kernels_.find(std::string_view(name));
  if (it != kernels_.end())
    return it->second;
  cudaKernel_t k = nullptr;
  cudaError_t e = api_->cudaLibraryGetKernel(&k, lib_, name);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA: kernel ") + name +
                             " is not in the embedded fatbin: " + cudaErrorText(*api_, e));
  kernels_.emplace(name, k);
  return k;
}

void *Scratch::get(const CudaApi &api, cudaStream_t s, size_t bytes) {
  if (bytes <= bytes_)
    return p_;
  size_t want = std::max<size_t>(bytes, std::max<size_t>(2 * bytes_, size_t(16) << 20));
  if (p_) {
    check(api, api.cudaStreamSynchronize(s), "cudaStreamSynchronize (scratch growth)");
    api.cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  check(api, api.cudaMalloc(&p_, want), "cudaMalloc (kernel scratch)");
  bytes_ = want;
  return p_;
}

void Scratch::release(const CudaApi &api) {
  if (p_)
    api.cudaFree(p_);
  p_ = nullptr;
  bytes_ = 0;
}

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20; // cuBLASLt workspace per stream

class CudaBackend final : public Backend {
public:
  std::string init(const CudaApi &api, int device) {
    api_ = &api;
    int count = 0;
    api.cudaGetDeviceCount(&count);
    if (device < 0 || device >= count)
      return absl::StrCat("CUDA device ", device, " does not exist (", count,
                          " device(s); the device is LOCAL_RANK modulo the count)");
    if (cudaError_t e = api.cudaSetDevice(device); e != cudaSuccess)
      return "cudaSetDevice(" + std::to_string(device) + ") failed with " + cudaErrorText(api, e);
    streams_.api = &api;
    streams_.device = device;
    int sms = 0;
    api.cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    try {
      check(api, api.cudaStreamCreateWithFlags(&streams_.compute, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags");
      check(api, api.cudaStreamCreateWithFlags(&streams_.comm, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags");
      check(api, api.cudaStreamCreateWithFlags(&streams_.p2p, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags");
      check(api, api.cudaEventCreateWithFlags(&commOrder_, cudaEventDisableTiming),
            "cudaEventCreateWithFlags");
      check(api, api.cudaEventCreateWithFlags(&joinEvent_, cudaEventDisableTiming),
            "cudaEventCreateWithFlags");
    } catch (const std::exception &e) {
      return e.what();
    }
    if (std::string err = module_.load(api); !err.empty())
      return err;
    cudaStream_t ss[kNumStreams] = {streams_.compute, streams_.comm};
    for (unsigned s = 0; s < kNumStreams; ++s) {
      KernelData &kd = kdata_[s];
      kd.api = &api;
      kd.stream = ss[s];
      kd.module = &module_;
      kd.scratch = &scratch_[s];
      kd.smCount = sms;
      if (cublasStatus_t st = api.cublasLtCreate(&kd.lt); st != CUBLAS_STATUS_SUCCESS)
        return std::string("cublasLtCreate failed: ") + api.cublasLtGetStatusString(st);
      if (cudaError_t e = api.cudaMalloc(&kd.workspace, kWorkspaceBytes); e != cudaSuccess)
        return "cudaMalloc of the cuBLASLt workspace failed with " + cudaErrorText(api, e);
      kd.workspaceBytes = kWorkspaceBytes;
    }
    return "";
  }

  ~CudaBackend() override {
    if (!api_)
      return;
    const CudaApi &a = *api_;
    a.cudaDeviceSynchronize();
    for (auto &g : graphs_)
      a.cudaGraphExecDestroy(g.second);
    for (cudaEvent_t e : events_)
      a.cudaEventDestroy(e);
    for (KernelData &kd : kdata_) {
      if (kd.lt)
        a.cublasLtDestroy(kd.lt);
      if (kd.workspace)
        a.cudaFree(kd.workspace);
    }
    for (Scratch &s : scratch_)
      s.release(a);
    if (commOrder_)
      a.cudaEventDestroy(commOrder_);
    if (joinEvent_)
      a.cudaEventDestroy(joinEvent_);
    for (cudaStream_t s : {streams_.compute, streams_.comm, streams_.p2p})
      if (s)
        a.cudaStreamDestroy(s);
  }

  std::string_view name() const override { return "cuda"; }

  void *allocateArena(size_t bytes) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    void *p = nullptr;
    if (api_->cudaMalloc(&p, rounded == 0 ? 64 : rounded) != cudaSuccess)
      return nullptr;
    api_->cudaMemsetAsync(p, 0, rounded, streams_.compute);
    api_->cudaStreamSynchronize(streams_.compute);
    return p;
  }
  void freeArena(void *p) override {
    api_->cudaDeviceSynchronize();
    api_->cudaFree(p);
  }
  // The control plane may copy from another thread (e.g. a checkpoint writer): bind the device.
  void copyToDevice(void *dst, const void *src, size_t bytes) override {
    api_->cudaSetDevice(streams_.device);
    check(*api_, api_->cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, streams_.compute),
          "cudaMemcpyAsync (host to device)");
    check(*api_, api_->cudaStreamSynchronize(streams_.compute), "cudaStreamSynchronize");
  }
  void copyToHost(void *dst, const void *src, size_t bytes) override {
    api_->cudaSetDevice(streams_.device);
    check(*api_, api_->cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, streams_.compute),
          "cudaMemcpyAsync (device to host)");
    check(*api_, api_->cudaStreamSynchronize(streams_.compute), "cudaStreamSynchronize");
  }
  KernelFn findKernel(std::string_view name) const override {
    const cuda::KernelTable &t = cudaKernelTable();
    auto it = t.find(name);
    return it == t.end() ? nullptr : it->second;
  }
  void *kernelData(unsigned stream) override {
    return &kdata_[stream < kNumStreams ? stream : kComputeStream];
  }

  void enqueue(unsigned stream, std::function<void()> fn) override {
    if (stream != kComputeStream) {
      check(*api_, api_->cudaEventRecord(commOrder_, streams_.compute), "cudaEventRecord");
      check(*api_, api_->cudaStreamWaitEvent(streamOf(stream), commOrder_, 0),
            "cudaStreamWaitEvent");
    }
    fn();
  }
  void synchronize(unsigned stream) override {
    check(*api_, api_->cudaStreamSynchronize(streamOf(stream)), "cudaStreamSynchronize");
  }
  void recordEvent(unsigned event, unsigned stream) override {
    check(*api_, api_->cudaEventRecord(events_.at(event), streamOf(stream)), "cudaEventRecord");
  }
  void streamWaitEvent(unsigned stream, unsigned event) override {
    check(*api_, api_->cudaStreamWaitEvent(streamOf(stream), events_.at(event), 0),
          "cudaStreamWaitEvent");
  }
  void hostWaitEvent(unsigned event) override {
    check(*api_, api_->cudaEventSynchronize(events_.at(event)), "cudaEventSynchronize");
  }
  void resizeEvents(unsigned count) override {
    while (events_.size() < count) {
      cudaEvent_t e = nullptr;
      check(*api_, api_->cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
            "cudaEventCreateWithFlags");
      events_.push_back(e);
    }
  }

  // Graph capture. The executor captures a region after its warmup runs and replays it
  // afterwards (runtime/core/Executor.cpp): captured kernels do not run while captured, so the
  // executor launches the graph right after capturing it. The communication stream joins the
  // capture through the event that enqueue records, and is joined back into the compute stream
  // before the capture ends.
  void beginCapture(std::string_view region) override {
    if (capturing_)
      throw std::logic_error("nested graph capture");
    capturing_ = true;
    check(*api_, api_->cudaStreamBeginCapture(streams_.compute, cudaStreamCaptureModeThreadLocal),
          "cudaStreamBeginCapture");
  }
  void endCapture(std::string_view region) override {
    capturing_ = false;
    check(*api_, api_->cudaEventRecord(joinEvent_, streams_.comm), "cudaEventRecord");
    check(*api_, api_->cudaStreamWaitEvent(streams_.compute, joinEvent_, 0),
          "cudaStreamWaitEvent");
    cudaGraph_t graph = nullptr;
    check(*api_, api_->cudaStreamEndCapture(streams_.compute, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    cudaError_t e = api_->cudaGraphInstantiate(&exec, graph, 0);
    api_->cudaGraphDestroy(graph);
    check(*api_, e, "cudaGraphInstantiate");
    auto it = graphs_.find(std::string(region));
    if (it != graphs_.end()) {
      api_->cudaGraphExecDestroy(it->second);
      it->second = exec;
    } else {
      graphs_.emplace(std::string(region), exec);
      // Once per region (tests/e2e/cuda_vs_cpu.sh checks that the graph run captured).
      std::fprintf(stderr, "trainc cuda: captured graph-capture region '%.*s' on device %d\n",
                   int(region.size()), region.data(), streams_.device);
    }
  }
  bool replayGraph(std::string_view region) override {
    auto it = graphs_.find(std::string(region));
    if (it == graphs_.end())
      return false;
    check(*api_, api_->cudaGraphLaunch(it->second, streams_.compute), "cudaGraphLaunch");
    return true;
  }
  bool capturesGraphs() const override { return true; }

  const CudaStreams &streams() const { return streams_; }

private:
  cudaStream_t streamOf(unsigned s) const {
    return s == kCommStream ? streams_.comm : streams_.compute;
  }

  const CudaApi *api_ = nullptr;
  CudaStreams streams_{};
  KernelModule module_;
  Scratch scratch_[kNumStreams];
  KernelData kdata_[kNumStreams];
  std::vector<cudaEvent_t> events_;
  cudaEvent_t commOrder_ = nullptr, joinEvent_ = nullptr;
  std::map<std::string, cudaGraphExec_t> graphs_;
  bool capturing_ = false;
};

} // namespace

const CudaStreams *cudaStreamsOf(Backend &b) {
  auto *c = dynamic_cast<CudaBackend *>(&b);
  return c ? &c->streams() : nullptr;
}

} // namespace cuda

bool cudaBackendAvailable(std::string *why) {
  std::string err;
  bool ok = cuda::loadCudaApi(&err) != nullptr;
  if (why)
    *why = err;
  return ok;
}

std::string probeCudaLibraries() { return cuda::probeCudaLibraries(); }

std::vector<std::string> cudaKernelNames() {
  std::vector<std::string> r;
  for (const auto &k : cuda::cudaKernelTable())
    r.push_back(k.first);
  return r;
}

KernelFn findCudaKernel(std::string_view name) {
  auto it = cuda::cudaKernelTable().find(name);
  return it == cuda::cudaKernelTable().end() ? nullptr : it->second;
}

absl::StatusOr<std::unique_ptr<Backend>> createCudaBackend(int device) {
  std::string err;
  const cuda::CudaApi *api = cuda::loadCudaApi(&err);
  if (!api)
    return absl::FailedPreconditionError("--backend cuda: " + err);
  auto b = std::make_unique<cuda::CudaBackend>();
  if (std::string e = b->init(*api, device); !e.empty())
    return absl::FailedPreconditionError("--backend cuda: " + e);
  return std::unique_ptr<Backend>(std::move(b));
}

} // namespace trainc::rt
