//===- Backend.h - The device interface the executor runs on -------------===//
//
// A backend owns device memory (the arena), streams and events, kernel implementations and graph
// capture. The CPU backend (runtime/cpu) implements it with host memory, an inline compute stream and
// a communication thread; a CUDA backend implements the same interface with cudaStream_t,
// cudaEvent_t, cuBLASLt and cudaStreamBeginCapture (see docs/runtime.md).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CORE_BACKEND_H
#define TRAINC_RUNTIME_CORE_BACKEND_H

#include "runtime/core/Kernel.h"

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace trainc::rt {

/// Stream ids used by programs: 0 runs compute, 1 runs communication.
enum StreamId : unsigned { kComputeStream = 0, kCommStream = 1, kNumStreams = 2 };

/// Device interface. All byte counts are in bytes; all pointers returned are device pointers.
class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  /// Allocates the per-rank arena of `bytes` bytes, 64-byte aligned and zero-filled.
  /// Returns null on failure.
  virtual void *allocateArena(size_t bytes) = 0;
  virtual void freeArena(void *p) = 0;

  /// Whether the arena is host memory that the control plane may write in place (the CPU
  /// backend), so that it can skip staging copies (initializeParameters).
  virtual bool hostAddressable() const { return false; }

  /// Host <-> device copies used by the control plane at HostIO points (synchronous).
  virtual void copyToDevice(void *dst, const void *src, size_t bytes) = 0;
  virtual void copyToHost(void *dst, const void *src, size_t bytes) = 0;

  /// The implementation of kernel `name`, or null if this backend lacks it.
  virtual KernelFn findKernel(std::string_view name) const = 0;
  /// Data passed to every kernel as KernelCtx::backendData (stream handles, workspace).
  virtual void *kernelData(unsigned stream) = 0;

  /// Runs `fn` on `stream`, ordered after the work already enqueued on it. On the CPU backend the
  /// compute stream runs `fn` inline and the communication stream runs it on its own thread.
  virtual void enqueue(unsigned stream, std::function<void()> fn) = 0;
  /// Blocks the host until every task on `stream` enqueued so far has completed.
  virtual void synchronize(unsigned stream) = 0;

  /// Events: `record` marks the current end of `stream`; `streamWait` makes later work on `stream`
  /// wait for the event; `hostWait` blocks the host until it completes.
  virtual void recordEvent(unsigned event, unsigned stream) = 0;
  virtual void streamWaitEvent(unsigned stream, unsigned event) = 0;
  virtual void hostWaitEvent(unsigned event) = 0;
  virtual void resizeEvents(unsigned count) = 0;

  /// Graph capture of the work between begin and end (CUDA graphs). The CPU backend checks nesting
  /// only. Replaying a captured graph is `replayGraph`, which returns false if none was captured.
  /// On a backend whose capturesGraphs() is true, work enqueued between begin and end is
  /// recorded, not run: the caller replays the graph to run it (the executor does this after
  /// Program.cuda_graph_warmup_steps eager runs of a region). On the others (CPU) the executor
  /// calls begin/end around every eager run of a region and never replays.
  virtual void beginCapture(std::string_view region) = 0;
  virtual void endCapture(std::string_view region) = 0;
  virtual bool replayGraph(std::string_view region) { return false; }
  virtual bool capturesGraphs() const { return false; }
};

/// Creates the CPU backend (oneDNN GEMMs, own loops, a communication thread).
std::unique_ptr<Backend> createCpuBackend();

} // namespace trainc::rt

#endif
